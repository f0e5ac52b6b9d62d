"""Operator controls per job type: pause and resume, concurrency and rate limits.

* **Pause**: a paused type keeps accepting jobs but none is claimed — the claim query itself skips
  paused types (:data:`app.jobs.queue.NOT_CONTROLLED`), so the pause holds across every worker and
  survives restarts (it is a row in ``job_type_controls``). ``*`` pauses every type.
* **Limits**: ``max_running`` caps the jobs of a type running at once across all workers;
  ``max_running_per_user`` caps one person's (with ``USER_MAX_RUNNING_JOBS``, the cap over every type:
  fair claims, :mod:`app.jobs.queue.fair_claims`);
  ``max_per_minute`` caps its starts in any 60 seconds (a rolling minute, by the database's clock).
  Both are enforced in the claim (:func:`app.jobs.queue.claim_within_limits`, under the type's row
  lock), so no worker overshoots, and a limited type keeps its place in the claim order (priority, due
  time, id) among all the others; changes apply at the next claim.

Every change wakes idle workers (NOTIFY) when it can make jobs claimable. Who may change them, the
audit entry and the admin notice are :mod:`app.actions.controls`, which every page and API route
calls. Periodic schedules are in :mod:`app.schedules` (firing: :mod:`app.schedule_firing`); their names
are re-exported here for the callers that know them as ``controls.<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.code_schedules import sync_code_schedules
from app.cron import MAX_CATCH_UP, check_cron, fire_times, fired_title, next_fire, zone
from app.errors import BadInput, NotFound
from app.jobs import queue
from app.jobs.types import registry, type_shown
from app.schedule_firing import fire_due
from app.schedules import (
    CODE_SCHEDULES,
    SCHEDULE_COLUMNS,
    ScheduleSpec,
    create_schedule,
    delete_schedule,
    get_schedule,
    list_schedules,
    schedule,
    set_schedule_enabled,
)

__all__ = [
    "ALL_TYPES",
    "CODE_SCHEDULES",
    "MAX_CATCH_UP",
    "MAX_LIMIT",
    "SCHEDULE_COLUMNS",
    "ScheduleSpec",
    "check_cron",
    "check_type",
    "controls",
    "create_schedule",
    "delete_schedule",
    "fire_due",
    "fire_times",
    "fired_title",
    "get_schedule",
    "list_schedules",
    "next_fire",
    "pause_of",
    "paused_for",
    "schedule",
    "set_limits",
    "set_paused",
    "set_schedule_enabled",
    "sync_code_schedules",
    "zone",
]

ALL_TYPES = "*"
MAX_LIMIT = 100_000


def check_type(job_type: str) -> None:
    """Raises NotFound for a job type that is not registered (``*`` is every type)."""
    if job_type != ALL_TYPES and registry.get(job_type) is None:
        raise NotFound(f"No job type {type_shown(job_type)}.")


# --- pause, resume, limits ------------------------------------------------------------------------

UPSERT_PAUSE = text(
    """
    INSERT INTO job_type_controls (type, paused, paused_by, paused_at, updated_at, updated_by)
    VALUES (:type, :paused, CASE WHEN :paused THEN :by END, CASE WHEN :paused THEN now() END, now(), :by)
    ON CONFLICT (type) DO UPDATE SET paused = EXCLUDED.paused, paused_by = EXCLUDED.paused_by,
        paused_at = EXCLUDED.paused_at, updated_at = now(), updated_by = EXCLUDED.updated_by
    WHERE job_type_controls.paused IS DISTINCT FROM EXCLUDED.paused
    RETURNING type, paused, paused_by, paused_at, max_running, max_per_minute, max_running_per_user,
        updated_at, updated_by
    """
)
UPSERT_LIMITS = text(
    """
    INSERT INTO job_type_controls (type, max_running, max_per_minute, max_running_per_user, updated_at, updated_by)
    VALUES (:type, :max_running, :max_per_minute, :max_running_per_user, now(), :by)
    ON CONFLICT (type) DO UPDATE SET max_running = EXCLUDED.max_running, max_per_minute = EXCLUDED.max_per_minute,
        max_running_per_user = EXCLUDED.max_running_per_user, updated_at = now(), updated_by = EXCLUDED.updated_by
    WHERE (job_type_controls.max_running, job_type_controls.max_per_minute, job_type_controls.max_running_per_user)
        IS DISTINCT FROM (EXCLUDED.max_running, EXCLUDED.max_per_minute, EXCLUDED.max_running_per_user)
    RETURNING type, paused, paused_by, paused_at, max_running, max_per_minute, max_running_per_user,
        updated_at, updated_by
    """
)
LIST_CONTROLS = text(
    "SELECT type, paused, paused_by, paused_at, max_running, max_per_minute, max_running_per_user, "
    "updated_at, updated_by "
    "FROM job_type_controls ORDER BY type"
)


async def set_paused(
    db: AsyncConnection | AsyncSession, job_type: str, paused: bool, admin: Any
) -> RowMapping | None:
    """Pause (or resume) ``job_type`` (``*`` = every type) in ``admin``'s name. Returns the control row, or
    ``None`` when it was so already: nothing is written (who paused it and when stay as they were).

    Raises:
        NotFound: an unknown job type.
    """
    check_type(job_type)
    conn = await queue.conn_of(db)
    row = (
        (await conn.execute(UPSERT_PAUSE, {"type": job_type, "paused": paused, "by": admin.email}))
        .mappings()
        .first()
    )
    if row is not None and not paused:
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
    max_running_per_user: int | None = None,
) -> RowMapping | None:
    """Set (``None`` removes) the concurrency and rate limits of ``job_type`` in ``admin``'s name; takes
    effect at the next claim. ``max_running_per_user``: at most this many of one person's jobs of the type
    run at once (:mod:`app.jobs.queue.fair_claims`). Returns the control row, or ``None`` when the limits
    were these already (no limits for a type without a row): nothing is written.

    Raises:
        NotFound: unknown type (``*`` cannot have limits). BadInput: a limit outside 0–100000.
    """
    if job_type == ALL_TYPES:
        raise BadInput.field("type", "limits apply to one job type, not to every type at once")
    check_type(job_type)
    values = {
        "max_running": _limit(max_running, "max_running"),
        "max_per_minute": _limit(max_per_minute, "max_per_minute"),
        "max_running_per_user": _limit(max_running_per_user, "max_running_per_user"),
    }
    conn = await queue.conn_of(db)
    if all(v is None for v in values.values()) and job_type not in await controls(conn):
        return None
    row = (
        (await conn.execute(UPSERT_LIMITS, {"type": job_type, "by": admin.email, **values}))
        .mappings()
        .first()
    )
    if row is not None:
        await queue.notify_jobs(conn)
    return row


async def controls(db: AsyncConnection | AsyncSession) -> dict[str, Mapping[str, Any]]:
    """Every control row by type (small table); pages use it to show "Paused by <admin> at …"."""
    conn = await queue.conn_of(db)
    # straight on asyncpg: every list page reads it (the pause banner)
    return {r["type"]: r for r in await queue.fetch_rows(conn, LIST_CONTROLS, {})}


async def paused_for(db: AsyncConnection | AsyncSession, types: Any = None) -> list[Mapping[str, Any]]:
    """The control rows that pause any of ``types`` (an iterable of job types; ``None``: every paused
    row), ``*`` first — for the "Paused by <admin> at …" banner on pages listing those jobs.
    Reads the small ``job_type_controls`` table only."""
    rows = await controls(db)
    paused = [r for r in rows.values() if r["paused"]]
    if types is not None:
        wanted = set(types)
        paused = [r for r in paused if r["type"] == ALL_TYPES or r["type"] in wanted]
    return sorted(paused, key=lambda r: (r["type"] != ALL_TYPES, r["type"]))


def pause_of(rows: Mapping[str, Mapping[str, Any]], job_type: str) -> Mapping[str, Any] | None:
    """The control row that pauses ``job_type`` (its own, or ``*``), or ``None``."""
    for key in (job_type, ALL_TYPES):
        row = rows.get(key)
        if row is not None and row["paused"]:
            return row
    return None
