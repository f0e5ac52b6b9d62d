"""Admin actions on schedules: create one, enable or disable it, delete it.

Each action takes ``(db, actor, parameters…)`` — ``db`` an ``AsyncSession`` or ``AsyncConnection``
whose transaction the caller commits, ``actor`` the signed-in user — checks that the actor is an admin,
makes the change through :mod:`app.controls` (which writes the audit entry with it) and adds the admin
notice, all inside one savepoint.

Errors: :class:`~app.errors.Forbidden` (403), :class:`~app.errors.NotFound` (an unknown schedule, 404),
:class:`~app.errors.Conflict` (deleting a schedule defined in code, 409), :class:`~app.errors.BadInput`
(422, naming the field: ``cron``, ``timezone``, ``type``, ``template``, ``input_data…``, ``name``,
``owner``), :class:`~app.errors.TooLarge` (the input is over ``JOB_MAX_INPUT_BYTES``, 413).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import RowMapping

from app import auth, controls
from app.actions.admin_trail import Db, notify, require_admin
from app.errors import BadInput, NotFound
from app.settings import Settings

CRON_MAX = 300
TIMEZONE_MAX = 100
EMAIL_MAX = 254
NAME_MAX = 300


def _text(value: Any, field: str, limit: int) -> str:
    """``value`` when it is storable text of at most ``limit`` characters.

    Raises:
        BadInput: not text, too long, or holding a NUL character (which PostgreSQL text cannot store,
        and which the time-zone lookup rejects with an error of its own).
    """
    if not isinstance(value, str):
        raise BadInput.field(field, "must be text")
    if "\x00" in value:
        raise BadInput.field(field, "contains a NUL character (U+0000), which is not allowed")
    if len(value) > limit:
        raise BadInput.field(field, f"is {len(value):,} characters long; at most {limit:,} are allowed")
    if not _encodable(value):
        raise BadInput.field(field, "contains a lone surrogate (like \\ud800), which is not a character")
    return value


def _encodable(value: Any) -> bool:
    """Whether ``value`` (text, or a JSON value holding text) can be sent to the database as UTF-8: a
    lone surrogate (``"\\ud800"`` in JSON) cannot, and would fail the query instead of the input."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except (TypeError, ValueError, RecursionError):
        return True  # not JSON, or nested too deeply: the input checks of app.controls say which field
    return True


async def _owner(db: Db, actor: Any, owner_email: str | None) -> Any:
    """The user a schedule's jobs belong to: ``owner_email``'s account, or the actor when it is empty."""
    email = _text(owner_email or "", "owner", EMAIL_MAX).strip().lower()
    if not email or email == actor.email:
        return actor
    try:
        return await auth.get_user_by_email(db, email)
    except NotFound as exc:
        raise BadInput.field("owner", exc.detail) from None


async def create_schedule(
    db: Db,
    actor: Any,
    *,
    cron: str,
    timezone: str = "UTC",
    job_type: str | None = None,
    template: str | None = None,
    input_data: dict[str, Any] | None = None,
    enabled: bool = True,
    catch_up: bool = False,
    name: str | None = None,
    owner_email: str | None = None,
    settings: Settings,
    ip: str | None = None,
) -> RowMapping:
    """Create a schedule firing ``job_type`` or ``template`` with ``input_data`` on ``cron`` (read in
    ``timezone``); its jobs belong to ``owner_email``'s account (default: the actor). A taken name is
    refused, never overwritten. Returns the schedule row."""
    require_admin(actor, "create schedules")
    cron = _text(cron, "cron", CRON_MAX)
    timezone = _text(timezone, "timezone", TIMEZONE_MAX).strip()
    name = _text(name or "", "name", NAME_MAX)
    if not timezone:
        raise BadInput.field("timezone", "Choose a time zone.")
    if not _encodable(input_data):
        raise BadInput.field(
            "input_data", "contains text with a lone surrogate (like \\ud800), which is not a character"
        )
    owner = await _owner(db, actor, owner_email)
    async with db.begin_nested():
        row = await controls.create_schedule(
            db,
            cron=cron,
            timezone=timezone,
            job_type=job_type,
            template=template,
            input_data=input_data,
            enabled=enabled,
            catch_up=catch_up,
            name=name,
            owner=owner,
            settings=settings,
            admin=actor,
            ip=ip,
        )
        await notify(
            db,
            actor,
            "schedule.create",
            target_type="schedule",
            target_ids=[row["id"]],
            detail={"name": row["name"], "cron": row["cron"], "timezone": row["timezone"]},
        )
    return row


async def set_enabled(
    db: Db, actor: Any, schedule_id: Any, enabled: bool, *, ip: str | None = None
) -> RowMapping:
    """Enable (the next run is computed from now; missed runs are not back-filled) or disable a schedule.
    Returns the updated row."""
    require_admin(actor, "enable or disable schedules")
    async with db.begin_nested():
        row = await controls.set_schedule_enabled(db, schedule_id, enabled, actor, ip=ip)
        await notify(
            db,
            actor,
            "schedule.enable" if enabled else "schedule.disable",
            target_type="schedule",
            target_ids=[row["id"]],
            detail={"name": row["name"]},
        )
    return row


async def delete_schedule(db: Db, actor: Any, schedule_id: Any, *, ip: str | None = None) -> RowMapping:
    """Delete a schedule made in the console or the API (the jobs it started stay); returns the deleted
    row. One defined in code is refused with Conflict: the next worker start would create it again."""
    require_admin(actor, "delete schedules")
    async with db.begin_nested():
        row = await controls.get_schedule(db, schedule_id)
        await controls.delete_schedule(db, row["id"], actor, ip=ip)
        await notify(
            db,
            actor,
            "schedule.delete",
            target_type="schedule",
            target_ids=[row["id"]],
            detail={"name": row["name"]},
        )
    return row
