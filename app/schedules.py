"""Periodic schedules (cron): a cron expression (croniter) in a time zone fires a job type or a pipeline
template. This module keeps the rows: checked, created, changed, enabled, listed and deleted, and the
rule whether a schedule's owner may still start its target (:func:`owner_refusal`). Firing the due ones,
once each however many workers run, is :mod:`app.schedule_firing`.

Time: a cron expression names wall-clock times in the schedule's zone, and each fires at most once
across daylight-saving changes (:func:`next_fire` gives the rule); "now" is always the database's clock
(:func:`db_now`), never the process's. The cron arithmetic is :mod:`app.cron`.

Who may change schedules, the audit entry and the admin notice of each change are
:mod:`app.actions.schedules`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from uuid_utils.compat import uuid7

from app import pipelines
from app.cron import check_cron, check_zone, next_fire
from app.errors import BadInput, Conflict, NotFound
from app.jobs import queue, types
from app.jobs.file_inputs import file_refs
from app.jobs.payload import check_input, json_text, text_problem
from app.jobs.types import registry, type_shown
from app.settings import Settings


async def db_now(conn: AsyncConnection) -> datetime:
    """The database's clock, the one every due time is compared with (``now()``: this transaction's
    start). Web hosts and workers may be minutes off; a first fire computed from their clock would be
    that much early (fired at once, for a stale time) or late."""
    return (await conn.execute(text("SELECT now()"))).scalar_one()


@dataclass
class ScheduleSpec:
    """A schedule defined in code (``source = 'code'``), synced into the database at worker start by
    :func:`app.code_schedules.sync_code_schedules`; ``owner_email`` names the user its jobs belong to."""

    name: str
    cron: str
    owner_email: str
    job_type: str | None = None
    template: str | None = None
    input_data: dict[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    enabled: bool = True
    catch_up: bool = False


CODE_SCHEDULES: dict[str, ScheduleSpec] = {}


def schedule(spec: ScheduleSpec) -> ScheduleSpec:
    """Register a schedule in code (call at import of a module in ``PROCESSOR_MODULES``)."""
    CODE_SCHEDULES[spec.name] = spec
    return spec


INSERT_SCHEDULE = text(
    """
    INSERT INTO schedules (id, name, cron, timezone, job_type, template, input_data, user_id, enabled, catch_up,
                           source, next_fire_at)
    VALUES (:id, :name, :cron, :timezone, :job_type, :template, CAST(CAST(:input AS text) AS jsonb), :user_id,
            :enabled, :catch_up, :source, :next_fire_at)
    ON CONFLICT (name) DO UPDATE SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, job_type = EXCLUDED.job_type,
        template = EXCLUDED.template, input_data = EXCLUDED.input_data, user_id = EXCLUDED.user_id,
        enabled = schedules.enabled AND EXCLUDED.enabled, catch_up = EXCLUDED.catch_up, updated_at = now(),
        next_fire_at = CASE WHEN NOT (schedules.enabled AND EXCLUDED.enabled) THEN NULL
                            WHEN schedules.cron = EXCLUDED.cron AND schedules.timezone = EXCLUDED.timezone
                            THEN schedules.next_fire_at
                            ELSE EXCLUDED.next_fire_at END
    WHERE schedules.source = 'code' AND EXCLUDED.source = 'code'
    RETURNING *
    """
)
SCHEDULE_COLUMNS = (
    "id, name, cron, timezone, job_type, template, input_data, user_id, enabled, catch_up, source, next_fire_at, "
    "last_fire_at, last_job_id, last_pipeline_id, created_at, updated_at"
)


def _validate_target(
    job_type: str | None, template: str | None, input_data: Any, settings: Settings
) -> dict[str, Any]:
    if (job_type is None) == (template is None):
        raise BadInput.field("type", "choose either a job type or a pipeline template")
    if not isinstance(input_data, dict):
        raise BadInput.field("input_data", "must be a JSON object")
    check_input(input_data, settings.job_max_input_bytes)
    if job_type is not None:
        spec = registry.get(job_type)
        if spec is None:
            raise BadInput.field("type", f"unknown job type {type_shown(job_type)}")
        valid = spec.validate_input(input_data)
        spec.check_submission(valid, settings, has_parents=False)
        return valid
    tpl = pipelines.get_template(template or "")
    if tpl is None:
        raise BadInput.field("template", f"unknown pipeline template {str(template)[:100]!r}")
    values, steps = tpl.build(input_data)
    # the pipeline each firing will make, checked now (its $refs too) rather than at every firing
    queue.check_spec(tpl.title, steps, settings)
    return values


NAME_MAX = 200
"""The longest name a schedule takes."""


def check_name(name: Any) -> str:
    """A schedule's name, stripped; ``""`` when none was given (one is made from its target and cron).

    Raises:
        BadInput: (``name``) not text, text PostgreSQL cannot store, or over :data:`NAME_MAX` characters.
    """
    if name is None:
        return ""
    if not isinstance(name, str):
        raise BadInput.field("name", "must be text")
    if (problem := text_problem(name)) is not None:
        raise BadInput.field("name", problem)
    name = name.strip()
    if len(name) > NAME_MAX:
        raise BadInput.field("name", f"is {len(name):,} characters long; at most {NAME_MAX:,} are allowed")
    return name


def check_schedule(
    cron: str,
    timezone: str,
    job_type: str | None,
    template: str | None,
    input_data: Any,
    settings: Settings,
    *,
    name: Any = None,
) -> tuple[str, dict[str, Any]]:
    """The normalised cron expression and the target's validated input; ``name`` is checked with them
    (:func:`check_name`).

    Raises:
        BadInput: every bad field at once (cron, timezone, type/template, input_data…, name), so a form
        can show them all next to their fields.
    """
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    for key, check in (
        ("cron", lambda: check_cron(cron)),
        ("zone", lambda: check_zone(timezone)),
        (
            "values",
            lambda: _validate_target(job_type, template, {} if input_data is None else input_data, settings),
        ),
        ("name", lambda: check_name(name)),
    ):
        try:
            out[key] = check()
        except BadInput as exc:
            for path, message in (exc.errors or {"input_data": exc.detail}).items():
                errors.setdefault(path, message)
    if errors:
        raise BadInput("; ".join(f"{k}: {v}" for k, v in errors.items()), errors=errors)
    return out["cron"], out["values"]


async def _check_files(
    conn: AsyncConnection, job_type: str | None, template: str | None, values: dict[str, Any], owner_id: int
) -> None:
    """Every file the target's input names must be the owner's, and of the kind its field takes, as when
    the owner submits it: otherwise a schedule would be accepted and fail at each firing, and an admin
    could point a person's schedule at another person's file.

    Raises:
        BadInput: ``input_data.<field>`` → "no such file (<id>); upload it first", or the file's kind.
    """
    if job_type is not None:
        spec = registry.get(job_type)
        model = spec.input_model if spec is not None else None
    else:
        tpl = pipelines.get_template(template or "")
        model = tpl.input_model if tpl is not None else None
    if model is not None:
        await queue.check_file_owners(conn, [(owner_id, *ref) for ref in file_refs(model, values)])


async def create_schedule(
    db: AsyncConnection | AsyncSession,
    *,
    cron: str,
    timezone: str = "UTC",
    job_type: str | None = None,
    template: str | None = None,
    input_data: dict[str, Any] | None = None,
    enabled: bool = True,
    catch_up: bool = False,
    name: str | None = None,
    owner: Any,
    settings: Settings,
    source: str = "ui",
) -> RowMapping:
    """Create (or, for a code schedule, update by name) a schedule; its jobs belong to ``owner``. A UI
    schedule whose name is taken is refused, never overwritten.

    A code schedule's update takes the code's definition but keeps a disabled row disabled: an admin's
    Disable (or the system's) must outlast the next worker start. ``enabled=False`` in the code
    disables it.

    Raises:
        BadInput: invalid cron, time zone, target or input — each naming its field — or a file in the
        input that is not the owner's. Conflict: created enabled for an owner whose account is disabled
        (:func:`check_may_enable`); created disabled, it is kept.
    """
    cron, values = check_schedule(cron, timezone, job_type, template, input_data, settings, name=name)
    name = check_name(name) or f"{job_type or template} at {cron} ({timezone})"[:NAME_MAX]
    params = {
        "id": uuid7(),
        "name": name,
        "cron": cron,
        "timezone": timezone,
        "job_type": job_type,
        "template": template,
        "input": json_text(values),
        "user_id": owner.id,
        "enabled": enabled,
        "catch_up": catch_up,
        "source": source,
    }
    conn = await queue.conn_of(db)
    await _check_files(conn, job_type, template, values, owner.id)
    if enabled and source != "code":
        # the rule of Enable (a code schedule's owner is checked, by its own words, at the sync)
        await check_may_enable(
            conn, {"user_id": owner.id, "name": name, "job_type": job_type, "template": template}
        )
    params["next_fire_at"] = next_fire(cron, timezone, await db_now(conn)) if enabled else None
    row = (await conn.execute(INSERT_SCHEDULE, params)).mappings().first()
    if row is None:
        raise BadInput.field("name", f"a schedule named {name!r} already exists")
    return row


def _changes_definition(row: RowMapping, cron: str, timezone: str, input_data: Any) -> bool:
    """Whether an edit changes more of ``row`` than its enabled flag (the cron expression compared as
    stored, normalised; one that is not valid is a change)."""
    try:
        same_cron = check_cron(cron) == row["cron"]
    except BadInput:
        same_cron = False
    return not same_cron or timezone != row["timezone"] or (input_data or {}) != row["input_data"]


async def update_schedule(
    db: AsyncConnection | AsyncSession,
    schedule_id: Any,
    *,
    cron: str,
    timezone: str,
    input_data: dict[str, Any],
    enabled: bool,
    settings: Settings,
) -> tuple[RowMapping, RowMapping]:
    """Change a schedule's cron expression, time zone, input and enabled flag (its target and owner stay);
    the next run is computed again from now. Returns the row before and after: the same row, unwritten,
    when nothing would change. Of a schedule defined in code, only the enabled flag may change.

    Raises:
        NotFound: unknown id. BadInput: invalid cron, time zone or input, each naming its field.
        Conflict: a change of a code schedule's cron expression, time zone or input; enabling a
        schedule whose owner's account is disabled (:func:`check_may_enable`).
    """
    conn = await queue.conn_of(db)
    before = await get_schedule(conn, schedule_id, lock=True)
    if before["source"] == "code" and _changes_definition(before, cron, timezone, input_data):
        # The next worker start would put the code's definition back without a word.
        raise Conflict(
            f"The schedule {before['name']!r} is defined in code: change its cron expression, time zone and "
            "input in the code (the next worker start would undo a change made here); enable or disable it "
            "here."
        )
    cron, values = check_schedule(
        cron, timezone, before["job_type"], before["template"], input_data, settings
    )
    await _check_files(conn, before["job_type"], before["template"], values, before["user_id"])
    if enabled and not before["enabled"]:
        await check_may_enable(conn, before)
    stored = json_text(values)
    if (cron, timezone, enabled) == (before["cron"], before["timezone"], before["enabled"]) and json.loads(
        stored
    ) == before["input_data"]:
        # Nothing to change: no write, so its next run stays as it was (computing it again from now
        # would pass over a run that is due), and the caller records nothing.
        return before, before
    nxt = next_fire(cron, timezone, await db_now(conn)) if enabled else None
    after = (
        (
            await conn.execute(
                text(
                    "UPDATE schedules SET cron = :cron, timezone = :tz, input_data = CAST(CAST(:input AS text) AS jsonb),"
                    " enabled = :e,"
                    f" next_fire_at = :n, updated_at = now() WHERE id = :id RETURNING {SCHEDULE_COLUMNS}"
                ),
                {
                    "cron": cron,
                    "tz": timezone,
                    "input": stored,
                    "e": enabled,
                    "n": nxt,
                    "id": before["id"],
                },
            )
        )
        .mappings()
        .one()
    )
    return before, after


OWNER_STATE = text("SELECT email, is_active, is_admin FROM users WHERE id = :id")


async def check_may_enable(conn: AsyncConnection, row: Mapping[Any, Any]) -> None:
    """Refuse to enable (or resume) a schedule its next firing would disable again (:func:`owner_refusal`):
    its owner's account is disabled, or its owner may no longer start its target (an admin since demoted,
    whose schedule starts a diagnostic type), so enabling it would only seem to work. The one rule for
    the console's buttons and form and the API.

    Raises:
        Conflict: (``extra["field"]`` is ``enabled``) the owner's account is disabled, naming it, or the
        owner may not start the target, saying why.
    """
    owner = (await conn.execute(OWNER_STATE, {"id": row["user_id"]})).mappings().first()
    if owner is None:
        return
    if not owner["is_active"]:
        raise Conflict(
            f"The schedule {row['name']!r} cannot be enabled: its owner's account ({owner['email']}) is "
            "disabled, and the schedule cannot run until that account is enabled again.",
            extra={"field": "enabled"},
        )
    refused = owner_refusal(
        {
            "owner_is_active": True,
            "owner_is_admin": owner["is_admin"],
            "job_type": row.get("job_type"),
            "template": row.get("template"),
        }
    )
    if refused is not None:
        raise Conflict(
            f"The schedule {row['name']!r} cannot be enabled: {refused} ({owner['email']} owns it), so "
            "its next run would disable it again. Make a new schedule that someone who may start it owns.",
            extra={"field": "enabled"},
        )


async def set_schedule_enabled(
    db: AsyncConnection | AsyncSession, schedule_id: Any, enabled: bool
) -> RowMapping:
    """Enable (next fire computed from now, no back-fill) or disable a schedule; one already so is
    returned as it is, unwritten.

    Raises:
        NotFound: unknown id. Conflict: enabling a schedule whose owner's account is disabled
        (:func:`check_may_enable`).
    """
    return await switch_schedule(db, await get_schedule(db, schedule_id, lock=True), enabled)


async def switch_schedule(db: AsyncConnection | AsyncSession, row: RowMapping, enabled: bool) -> RowMapping:
    """:func:`set_schedule_enabled` for a schedule the caller has just read (``row``), without reading it
    again.

    Raises:
        Conflict: enabling a schedule whose owner's account is disabled (:func:`check_may_enable`).
    """
    conn = await queue.conn_of(db)
    if row["enabled"] == enabled:
        return row  # already so: no write (an enabled schedule keeps its next run)
    if enabled:
        await check_may_enable(conn, row)
    nxt = next_fire(row["cron"], row["timezone"], await db_now(conn)) if enabled else None
    updated = (
        (
            await conn.execute(
                text(
                    f"UPDATE schedules SET enabled = :e, next_fire_at = :n, updated_at = now() WHERE id = :id RETURNING {SCHEDULE_COLUMNS}"
                ),
                {"e": enabled, "n": nxt, "id": row["id"]},
            )
        )
        .mappings()
        .one()
    )
    return updated


def declared_code_schedules() -> frozenset[str]:
    """The names of the schedules this process's code declares (its processor modules imported)."""
    registry.names()  # import the modules, which declare the code's schedules
    return frozenset(CODE_SCHEDULES)


async def delete_schedule(db: AsyncConnection | AsyncSession, schedule_id: Any) -> RowMapping:
    """Delete a schedule (its past jobs stay); returns the deleted row. A schedule defined in code cannot be deleted while it is
    enabled or this process's code declares it (the next worker start would create it again): disable
    it, or remove it from the code — a worker start then disables it, and it may be deleted.

    Raises:
        NotFound: unknown id. Conflict: a code-defined schedule still enabled or declared.
    """
    conn = await queue.conn_of(db)
    row = await get_schedule(conn, schedule_id, lock=True)
    registry.names()  # import the modules, which declare the code's schedules
    if row["source"] == "code" and (row["enabled"] or row["name"] in CODE_SCHEDULES):
        raise Conflict(
            f"The schedule {row['name']!r} is defined in code and cannot be deleted here; disable it instead, "
            "or remove it from the code."
        )
    await conn.execute(text("DELETE FROM schedules WHERE id = :id"), {"id": row["id"]})
    return row


async def get_schedule(
    db: AsyncConnection | AsyncSession, schedule_id: Any, *, lock: bool = False
) -> RowMapping:
    """The schedule; with ``lock``, its row locked until the transaction ends, for a change decided on
    what it reads: the same change sent twice at once then sees the first one's outcome (nothing to
    change, or no schedule), where both read the row before either wrote and both reported "ok".
    ``NO KEY UPDATE``: rows that only point at it (its jobs) are not held up.

    Raises:
        NotFound: an unknown or malformed id (or one deleted while a lock was awaited).
    """
    conn = await queue.conn_of(db)
    try:
        sid = uuid.UUID(str(schedule_id))
    except ValueError:
        raise NotFound("No such schedule.") from None
    locked = " FOR NO KEY UPDATE" if lock else ""
    row = (
        (
            await conn.execute(
                text(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = :id{locked}"), {"id": sid}
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound("No such schedule.")
    return row


async def list_schedules(db: AsyncConnection | AsyncSession) -> list[RowMapping]:
    conn = await queue.conn_of(db)
    return list(
        (await conn.execute(text(f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name"))).mappings().all()
    )


def owner_refusal(row: RowMapping | Mapping[str, Any]) -> str | None:
    """Why the schedule's owner may no longer start its target (they lost their admin rights, or the
    type became admins-only, or their account is disabled), or ``None`` when they may — the same rule as
    when a person submits."""
    if row.get("owner_is_active") is False:
        return "its owner's account is disabled"
    if row["owner_is_admin"]:
        return None
    if row["job_type"]:
        spec = registry.get(row["job_type"])
        refused = None if spec is None else types.owner_refusal(False, spec)
        return None if refused is None else f"its owner may no longer start it: {refused}"
    tpl = pipelines.get_template(row["template"] or "")
    if tpl is not None and tpl.diagnostic:
        return f"its owner may no longer start it: only admins may start {tpl.name!r}"
    return None
