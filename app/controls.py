"""Operator controls (issue 11): pause and resume job types, per-type concurrency and rate limits, and
periodic schedules (cron).

* **Pause** (§3): a paused type keeps accepting jobs but none is claimed — the claim query itself skips
  paused types (:data:`app.jobs.queue.NOT_CONTROLLED`), so the pause holds across every worker and
  survives restarts (it is a row in ``job_type_controls``). ``*`` pauses every type.
* **Limits** (§4): ``max_running`` caps the jobs of a type running at once across all workers;
  ``max_per_minute`` caps its starts per one-minute window. Both are enforced in the claim
  (:func:`app.jobs.queue.claim_limited`, under the type's row lock), so no worker overshoots; changes
  apply at the next claim.
* **Schedules** (§2): a cron expression (croniter) in a time zone fires a job type or a pipeline
  template. Each due time fires exactly once however many workers run: the sweep takes the schedule row
  with ``FOR UPDATE SKIP LOCKED`` and moves ``next_fire_at`` in the same transaction as the enqueue, and
  each job carries the idempotency key ``schedule:<id>:<fire time>``. After downtime only the latest
  missed time fires, unless ``catch_up`` is set (then each missed time, at most :data:`MAX_CATCH_UP`).

Every change is recorded in the audit trail (§5) and wakes idle workers (NOTIFY) when it can make jobs
claimable.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter
from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from uuid_utils.compat import uuid7

from app import audit, pipelines
from app.errors import BadInput, Conflict, NotFound
from app.jobs import queue
from app.jobs.payload import check_input, json_text
from app.jobs.queue import NewJob
from app.processors import registry
from app.settings import Settings

ALL_TYPES = "*"
MAX_CATCH_UP = 100
"""At most this many missed fire times are back-filled at once for a ``catch_up`` schedule."""
MAX_LIMIT = 100_000


async def _conn(db: AsyncConnection | AsyncSession) -> AsyncConnection:
    return await db.connection() if isinstance(db, AsyncSession) else db


def _check_type(job_type: str) -> None:
    if job_type != ALL_TYPES and registry.get(job_type) is None:
        raise NotFound(f"No job type {job_type[:100]!r}.")


# --- pause, resume, limits ------------------------------------------------------------------------

UPSERT_PAUSE = text(
    """
    INSERT INTO job_type_controls (type, paused, paused_by, paused_at, updated_at, updated_by)
    VALUES (:type, :paused, CASE WHEN :paused THEN :by END, CASE WHEN :paused THEN now() END, now(), :by)
    ON CONFLICT (type) DO UPDATE SET paused = EXCLUDED.paused, paused_by = EXCLUDED.paused_by,
        paused_at = EXCLUDED.paused_at, updated_at = now(), updated_by = EXCLUDED.updated_by
    RETURNING type, paused, paused_by, paused_at, max_running, max_per_minute, updated_at, updated_by
    """
)
UPSERT_LIMITS = text(
    """
    INSERT INTO job_type_controls (type, max_running, max_per_minute, updated_at, updated_by)
    VALUES (:type, :max_running, :max_per_minute, now(), :by)
    ON CONFLICT (type) DO UPDATE SET max_running = EXCLUDED.max_running, max_per_minute = EXCLUDED.max_per_minute,
        updated_at = now(), updated_by = EXCLUDED.updated_by
    RETURNING type, paused, paused_by, paused_at, max_running, max_per_minute, updated_at, updated_by
    """
)
LIST_CONTROLS = text(
    "SELECT type, paused, paused_by, paused_at, max_running, max_per_minute, updated_at, updated_by "
    "FROM job_type_controls ORDER BY type"
)


async def set_paused(
    db: AsyncConnection | AsyncSession, job_type: str, paused: bool, admin: Any, *, ip: str | None = None
) -> RowMapping:
    """Pause (or resume) ``job_type`` (``*`` = every type). Returns the control row.

    Raises:
        NotFound: an unknown job type.
    """
    _check_type(job_type)
    conn = await _conn(db)
    row = (
        (await conn.execute(UPSERT_PAUSE, {"type": job_type, "paused": paused, "by": admin.email}))
        .mappings()
        .one()
    )
    await audit.record(
        conn,
        user=admin,
        action="job_type.pause" if paused else "job_type.resume",
        target_type="job_type",
        target_ids=[job_type],
        ip=ip,
    )
    if not paused:
        await queue.notify_jobs(conn)
    return row


def _limit(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        # 0 would stop the type while the console still showed it "Running" (a trial found it): pausing
        # is the way to stop a type, and says so on every page that lists its jobs
        raise BadInput.field(
            name,
            f"must be a whole number from 1 to {MAX_LIMIT}, or empty for no limit (to stop a type, pause it)",
        )
    return value


async def set_limits(
    db: AsyncConnection | AsyncSession,
    job_type: str,
    *,
    max_running: int | None,
    max_per_minute: int | None,
    admin: Any,
    ip: str | None = None,
) -> RowMapping:
    """Set (``None`` removes) the concurrency and rate limits of ``job_type``; takes effect at the next claim.

    Raises:
        NotFound: unknown type (``*`` cannot have limits). BadInput: a limit outside 0–100000.
    """
    if job_type == ALL_TYPES:
        raise BadInput.field("type", "limits apply to one job type, not to every type at once")
    _check_type(job_type)
    values = {
        "max_running": _limit(max_running, "max_running"),
        "max_per_minute": _limit(max_per_minute, "max_per_minute"),
    }
    conn = await _conn(db)
    row = (
        (await conn.execute(UPSERT_LIMITS, {"type": job_type, "by": admin.email, **values})).mappings().one()
    )
    await audit.record(
        conn,
        user=admin,
        action="job_type.limits",
        target_type="job_type",
        target_ids=[job_type],
        detail=values,
        ip=ip,
    )
    await queue.notify_jobs(conn)
    return row


async def controls(db: AsyncConnection | AsyncSession) -> dict[str, RowMapping]:
    """Every control row by type (small table); pages use it to show "Paused by <admin> at …"."""
    conn = await _conn(db)
    return {r["type"]: r for r in (await conn.execute(LIST_CONTROLS)).mappings().all()}


async def paused_for(db: AsyncConnection | AsyncSession, types: Any = None) -> list[RowMapping]:
    """The control rows that pause any of ``types`` (an iterable of job types; ``None``: every paused
    row), ``*`` first — for the "Paused by <admin> at …" banner on pages listing those jobs (issue 11 §3).
    Reads the small ``job_type_controls`` table only."""
    rows = await controls(db)
    paused = [r for r in rows.values() if r["paused"]]
    if types is not None:
        wanted = set(types)
        paused = [r for r in paused if r["type"] == ALL_TYPES or r["type"] in wanted]
    return sorted(paused, key=lambda r: (r["type"] != ALL_TYPES, r["type"]))


def pause_of(rows: dict[str, RowMapping], job_type: str) -> RowMapping | None:
    """The control row that pauses ``job_type`` (its own, or ``*``), or ``None``."""
    for key in (job_type, ALL_TYPES):
        row = rows.get(key)
        if row is not None and row["paused"]:
            return row
    return None


# --- schedules ------------------------------------------------------------------------------------


def zone(name: str) -> ZoneInfo:
    """Raises BadInput for an unknown IANA time-zone name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadInput.field(
            "timezone", f"unknown time zone {name[:60]!r}; use a name like Europe/Berlin or UTC"
        ) from None


def next_fire(cron: str, tz: str, after: datetime) -> datetime:
    """The first fire time of ``cron`` in zone ``tz`` strictly after ``after``, as UTC.

    Raises:
        BadInput: an invalid cron expression (the message shows the expected form).
    """
    local = after.astimezone(zone(tz))
    try:
        it = croniter(cron, local)
        return it.get_next(datetime).astimezone(UTC)
    except (CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, ValueError, KeyError) as exc:
        raise BadInput.field(
            "cron",
            f"not a valid cron expression ({exc}); five fields: minute hour day month weekday, e.g. '*/15 * * * *'",
        ) from None


def fired_title(name: str, at: datetime) -> str:
    """The title of the job a schedule starts: its name and the due time, the name shortened so that the
    title stays within the 200 characters a job title may have (a trial found a 190-character name
    accepted, then every firing refused and the schedule disabled)."""
    suffix = f" ({at:%Y-%m-%d %H:%M} UTC)"
    room = 200 - len(suffix)
    return (name if len(name) <= room else name[: room - 1] + "…") + suffix


def check_cron(cron: str) -> str:
    """A normalised cron expression, or BadInput (case: "invalid expressions get a clear form error").
    Five fields (minute hour day month weekday), or six with seconds as the sixth (croniter's extension,
    for schedules more often than once a minute)."""
    cron = " ".join((cron or "").split())
    if not cron:
        raise BadInput.field("cron", "give a cron expression, e.g. '0 9 * * 1-5' (weekdays at 9:00)")
    if len(cron.split()) not in (5, 6):
        raise BadInput.field(
            "cron",
            "a cron expression has five fields: minute hour day month weekday, e.g. '*/15 * * * *' "
            "(a sixth field, seconds, fires more often than once a minute)",
        )
    next_fire(cron, "UTC", datetime.now(UTC))
    return cron


@dataclass
class ScheduleSpec:
    """A schedule defined in code (``source = 'code'``), synced into the database at worker start by
    :func:`sync_code_schedules`; ``owner_email`` names the user its jobs belong to."""

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
        enabled = EXCLUDED.enabled, catch_up = EXCLUDED.catch_up, updated_at = now(),
        next_fire_at = CASE WHEN schedules.cron = EXCLUDED.cron AND schedules.timezone = EXCLUDED.timezone
                             AND schedules.enabled = EXCLUDED.enabled THEN schedules.next_fire_at
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
            raise BadInput.field("type", f"unknown job type {job_type[:100]!r}")
        return spec.validate_input(input_data)
    tpl = pipelines.get_template(template or "")
    if tpl is None:
        raise BadInput.field("template", f"unknown pipeline template {str(template)[:100]!r}")
    values, _steps = tpl.build(input_data)
    return values


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
    ip: str | None = None,
    admin: Any = None,
) -> RowMapping:
    """Create (or, for a code schedule, update by name) a schedule; its jobs belong to ``owner``.
    ``admin`` is who is recorded in the audit trail (default: ``owner``). A UI schedule whose name is
    taken is refused, never overwritten.

    Raises:
        BadInput: invalid cron, time zone, target or input — each naming its field.
    """
    cron = check_cron(cron)
    zone(timezone)
    values = _validate_target(job_type, template, input_data if input_data is not None else {}, settings)
    name = (name or "").strip() or f"{job_type or template} at {cron} ({timezone})"
    if len(name) > 200 or "\x00" in name:
        raise BadInput.field("name", "at most 200 characters")
    conn = await _conn(db)
    row = (
        (
            await conn.execute(
                INSERT_SCHEDULE,
                {
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
                    "next_fire_at": next_fire(cron, timezone, datetime.now(UTC)) if enabled else None,
                },
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise BadInput.field("name", f"a schedule named {name!r} already exists")
    if source == "ui":
        await audit.record(
            conn,
            user=admin or owner,
            action="schedule.create",
            target_type="schedule",
            target_ids=[row["id"]],
            detail={"name": name, "cron": cron, "timezone": timezone, "type": job_type, "template": template},
            ip=ip,
        )
    return row


async def set_schedule_enabled(
    db: AsyncConnection | AsyncSession, schedule_id: Any, enabled: bool, admin: Any, *, ip: str | None = None
) -> RowMapping:
    """Enable (next fire computed from now, no back-fill) or disable a schedule.

    Raises:
        NotFound: unknown id.
    """
    conn = await _conn(db)
    row = await get_schedule(conn, schedule_id)
    nxt = next_fire(row["cron"], row["timezone"], datetime.now(UTC)) if enabled else None
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
    await audit.record(
        conn,
        user=admin,
        action="schedule.enable" if enabled else "schedule.disable",
        target_type="schedule",
        target_ids=[row["id"]],
        ip=ip,
    )
    return updated


async def delete_schedule(
    db: AsyncConnection | AsyncSession, schedule_id: Any, admin: Any, *, ip: str | None = None
) -> None:
    """Delete a schedule (its past jobs stay). A schedule defined in code cannot be deleted (the next
    worker start would create it again): disable it, or remove it from the code.

    Raises:
        NotFound: unknown id. Conflict: a code-defined schedule.
    """
    conn = await _conn(db)
    row = await get_schedule(conn, schedule_id)
    if row["source"] == "code":
        raise Conflict(
            f"The schedule {row['name']!r} is defined in code and cannot be deleted here; disable it instead, "
            "or remove it from the code."
        )
    await conn.execute(text("DELETE FROM schedules WHERE id = :id"), {"id": row["id"]})
    await audit.record(
        conn,
        user=admin,
        action="schedule.delete",
        target_type="schedule",
        target_ids=[row["id"]],
        detail={"name": row["name"]},
        ip=ip,
    )


async def get_schedule(db: AsyncConnection | AsyncSession, schedule_id: Any) -> RowMapping:
    """Raises NotFound for an unknown or malformed id."""
    conn = await _conn(db)
    try:
        sid = uuid.UUID(str(schedule_id))
    except ValueError:
        raise NotFound("No such schedule.") from None
    row = (
        (await conn.execute(text(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = :id"), {"id": sid}))
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound("No such schedule.")
    return row


async def list_schedules(db: AsyncConnection | AsyncSession) -> list[RowMapping]:
    conn = await _conn(db)
    return list(
        (await conn.execute(text(f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name"))).mappings().all()
    )


async def sync_code_schedules(db: AsyncConnection | AsyncSession, settings: Settings, log: Any = None) -> int:
    """Upsert the schedules registered in code (by name; a UI schedule of the same name is left alone).
    Returns how many were synced; a schedule whose owner does not exist is skipped with a warning."""
    conn = await _conn(db)
    registry.names()  # import modules, which register schedules
    synced = 0
    for spec in CODE_SCHEDULES.values():
        owner = (
            (
                await conn.execute(
                    text("SELECT id, email FROM users WHERE email = lower(:e)"), {"e": spec.owner_email}
                )
            )
            .mappings()
            .first()
        )
        if owner is None:
            if log is not None:
                log.warning(
                    "code schedule skipped: its owner does not exist",
                    schedule=spec.name,
                    owner=spec.owner_email,
                )
            continue
        principal = type("Owner", (), {"id": owner["id"], "email": owner["email"], "is_admin": True})()
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
            owner=principal,
            settings=settings,
            source="code",
        )
        synced += 1
    return synced


DUE_SCHEDULES = text(
    f"""
    SELECT {SCHEDULE_COLUMNS}, now() AS db_now FROM schedules
    WHERE enabled AND next_fire_at <= now()
    ORDER BY next_fire_at LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)
ADVANCE = text(
    """
    UPDATE schedules SET next_fire_at = :next, last_fire_at = :fired, last_job_id = :job_id,
        last_pipeline_id = :pipeline_id, updated_at = now()
    WHERE id = :id
    """
)


def fire_times(
    cron: str, tz: str, due: datetime, now: datetime, catch_up: bool
) -> tuple[list[datetime], datetime]:
    """The fire times to run now and the next one after ``now``.

    Without ``catch_up`` only the latest due time fires (no burst after downtime); with it, every missed
    time (at most :data:`MAX_CATCH_UP`, the most recent ones).
    """
    times = [due]
    while True:
        following = next_fire(cron, tz, times[-1])
        if following > now:
            break
        times.append(following)
        if len(times) > MAX_CATCH_UP * 10:  # a very dense cron after a long outage: stop counting
            times = times[-MAX_CATCH_UP:]
    nxt = next_fire(cron, tz, max(times[-1], now))
    return (times[-MAX_CATCH_UP:] if catch_up else times[-1:]), nxt


async def fire_due(conn: AsyncConnection, settings: Settings, *, limit: int = 50) -> list[dict[str, Any]]:
    """Fire every due schedule once (called by the worker's sweep loop, in the caller's transaction).

    Returns ``[{"schedule": name, "fired_at": …, "job_id"|"pipeline_id": …}]``. A schedule whose target
    became invalid (type removed, input no longer valid) is disabled and the reason logged in the audit
    trail, rather than failing the sweep.
    """
    rows = (await conn.execute(DUE_SCHEDULES, {"limit": limit})).mappings().all()
    fired: list[dict[str, Any]] = []
    for row in rows:
        times, nxt = fire_times(
            row["cron"], row["timezone"], row["next_fire_at"], row["db_now"], row["catch_up"]
        )
        job_id = pipeline_id = None
        try:
            async with conn.begin_nested():
                for at in times:
                    key = f"schedule:{row['id']}:{at.isoformat()}"
                    if row["job_type"]:
                        result = await queue.enqueue(
                            conn,
                            NewJob(
                                type=row["job_type"],
                                input_data=row["input_data"],
                                user_id=row["user_id"],
                                idempotency_key=key,
                                title=fired_title(row["name"], at),
                            ),
                            settings,
                            actor=f"schedule:{row['id']}",
                        )
                        job_id = result.job["id"]
                        fired.append(
                            {
                                "schedule": row["name"],
                                "fired_at": at,
                                "job_id": job_id,
                                "created": result.created,
                            }
                        )
                    else:
                        p = await pipelines.create_from_template(
                            conn,
                            row["template"],
                            row["input_data"],
                            user_id=row["user_id"],
                            settings=settings,
                        )
                        pipeline_id = p["id"]
                        fired.append({"schedule": row["name"], "fired_at": at, "pipeline_id": pipeline_id})
        except BadInput as exc:
            await conn.execute(
                text(
                    "UPDATE schedules SET enabled = false, next_fire_at = NULL, updated_at = now() WHERE id = :id"
                ),
                {"id": row["id"]},
            )
            await audit.record(
                conn,
                user=type("System", (), {"id": None, "email": "system"})(),
                action="schedule.disable",
                target_type="schedule",
                target_ids=[row["id"]],
                outcome=f"its target is no longer valid: {exc.detail}"[:500],
            )
            continue
        await conn.execute(
            ADVANCE,
            {"id": row["id"], "next": nxt, "fired": times[-1], "job_id": job_id, "pipeline_id": pipeline_id},
        )
    return fired
