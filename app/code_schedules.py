"""Schedules defined in code (:func:`app.schedules.schedule`), brought into the database when a worker
starts (:func:`sync_code_schedules`, called by its registration).

Each schedule is checked as an admin's is — cron, time zone, target, input, files, an owner who exists
and may start the target — and synced in a savepoint of its own. One that fails is not synced: the
worker logs an error naming it and every bad field, the admins get a notice from ``system``
(``schedule.invalid``), and a row of that name from an earlier version of the code is disabled rather than
left firing what the code no longer says. The worker starts all the same: a typo in one schedule must not
stop every worker of a deploy, and with it every other job and schedule.

A code schedule the starting worker's code does not declare is left as it is: workers of an old and a
new version run side by side during a rolling deploy, and a worker may load other modules than the
next, so a schedule missing from one worker's code may well be in another's. Switching it off there
would stop it for good (a disabled code schedule stays disabled). ``/admin/schedules`` marks a code
schedule the server's own code no longer declares; an admin disables it and may then delete it.

Concurrent starts are serialised by a transaction-level advisory lock, so workers starting at once
make one row per schedule and one notice per change.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.emails import email_key
from app.errors import AppError, BadInput, TooLarge
from app.jobs import outbox, queue
from app.jobs.queue import SystemPrincipal
from app.jobs.types import registry
from app.schedules import CODE_SCHEDULES, ScheduleSpec, create_schedule, owner_refusal
from app.settings import Settings

SYNC_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended('jobdesk.code_schedules', 0))")
DISABLE_CODE_ROW = text(
    "UPDATE schedules SET enabled = false, next_fire_at = NULL, updated_at = now()"
    " WHERE name = :name AND source = 'code' AND enabled RETURNING id"
)
CODE_ROW_ID = text("SELECT id FROM schedules WHERE name = :name AND source = 'code'")


def _problem(exc: AppError) -> str:
    errors = getattr(exc, "errors", None)
    return "; ".join(f"{k}: {v}" for k, v in errors.items()) if errors else exc.detail


async def _owner(conn: AsyncConnection, spec: ScheduleSpec) -> SystemPrincipal:
    """The schedule's owner, who must exist, be active and be allowed to start its target — the rule the
    sweep applies at each firing (:func:`app.schedules.owner_refusal`), checked here so that a schedule
    is refused with its name at the start rather than disabled at its first firing.

    Raises:
        BadInput: (``owner``) no such user, or one who may not start the target.
    """
    email = email_key(spec.owner_email)
    user = (
        (
            await conn.execute(
                text("SELECT id, email, is_admin, is_active FROM users WHERE email = :e"), {"e": email}
            )
        )
        .mappings()
        .first()
    )
    if user is None:
        raise BadInput.field("owner", f"no user with the e-mail {email[:254]!r}; create the account first")
    refused = owner_refusal(
        {
            "owner_is_active": user["is_active"],
            "owner_is_admin": user["is_admin"],
            "job_type": spec.job_type,
            "template": spec.template,
        }
    )
    if refused is not None:
        raise BadInput.field(
            "owner", f"{user['email']}: {refused.removeprefix('its owner may no longer start it: ')}"
        )
    return SystemPrincipal(id=user["id"], email=user["email"])


_TEXT_FIELDS = {"name": "name", "cron": "cron", "timezone": "timezone", "owner_email": "owner"}


def _check_kinds(spec: ScheduleSpec) -> None:
    """Raises BadInput naming each field of the spec whose value is not of its kind (text, an object),
    which the checks after this one would meet as a TypeError and end the worker's start with."""
    errors = {
        key: "must be text" for attr, key in _TEXT_FIELDS.items() if not isinstance(getattr(spec, attr), str)
    }
    for attr, key in (("job_type", "type"), ("template", "template")):
        if getattr(spec, attr) is not None and not isinstance(getattr(spec, attr), str):
            errors[key] = "must be text or None"
    if not isinstance(spec.input_data, dict):
        errors["input_data"] = "must be a dict"
    if errors:
        raise BadInput("; ".join(f"{k}: {v}" for k, v in errors.items()), errors=errors)


async def _sync_one(conn: AsyncConnection, spec: ScheduleSpec, settings: Settings) -> None:
    _check_kinds(spec)
    owner = await _owner(conn, spec)
    await create_schedule(
        conn,
        cron=spec.cron,
        timezone=spec.timezone,
        job_type=spec.job_type,
        template=spec.template,
        input_data=spec.input_data,
        enabled=spec.enabled,
        catch_up=spec.catch_up,
        name=spec.name,
        owner=owner,
        settings=settings,
        source="code",
    )


async def _refuse(conn: AsyncConnection, spec: ScheduleSpec, problem: str, log: Any) -> None:
    """Log the refusal, disable the row an earlier version of the code made, and tell the admins."""
    if log is not None:
        log.error("code schedule refused; fix it in the code", schedule=spec.name, error=problem)
    await conn.execute(DISABLE_CODE_ROW, {"name": spec.name})
    row_id = (await conn.execute(CODE_ROW_ID, {"name": spec.name})).scalar()
    await outbox.record_admin_action(
        conn,
        admin_email="system",
        action="schedule.invalid",
        count=1,
        target_type="schedule",
        targets=[row_id] if row_id is not None else [],
        outcome=f"the schedule defined in code is not valid, so it does not run: {problem}"[:500],
        detail={"name": spec.name},
    )


async def sync_code_schedules(db: AsyncConnection | AsyncSession, settings: Settings, log: Any = None) -> int:
    """Upsert the schedules registered in code, by name; returns how many were synced. A schedule that
    is not valid is refused (see the module docstring) and the others are synced all the same; a
    schedule made in the console or the API is never overwritten (its name clashes: refused too)."""
    conn = await queue.conn_of(db)
    registry.names()  # import modules, which register schedules
    await conn.execute(SYNC_LOCK)
    synced = 0
    for spec in list(CODE_SCHEDULES.values()):
        try:
            async with conn.begin_nested():
                await _sync_one(conn, spec, settings)
        except (BadInput, TooLarge) as exc:
            await _refuse(conn, spec, _problem(exc), log)
            continue
        synced += 1
    return synced
