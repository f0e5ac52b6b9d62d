"""Per-person limits: what one person may have waiting, submit per minute and keep stored, and how large
one pipeline may be. Each limit is a setting; 0 turns it off.

This module counts and words the refusals; :mod:`app.actions.quotas` enforces them on every path a
person submits by (forms, the JSON API, run again, uploads), and :mod:`app.schedule_firing` asks
:func:`schedule_refusal` before a firing. Checks and inserts of one person are serialised by a
transaction-scoped advisory lock on the person (:func:`lock`), so concurrent requests cannot all pass
a check that only one of them fits.

* **waiting** (``USER_MAX_WAITING_JOBS``): the person's ``queued`` jobs — ready, scheduled, waiting for
  earlier steps or held. Admins are exempt. The rule is the core's (:mod:`app.jobs.queue.waiting`), which
  also holds the jobs a finished parent adds to it (a list's instances, a processor's next jobs: recorded
  failed, saying why).
* **per minute** (``USER_MAX_JOBS_PER_MINUTE``): submissions in the last 60 seconds, where a job, a
  whole pipeline (or batch) each count once, whatever its number of jobs, and so does a person's own
  retry (one job, or a batch's failed rows; ``counted_retries``, :func:`count_retry`); processors' next
  jobs do not count. Admins are exempt.
* **stored** (``USER_MAX_UPLOAD_BYTES``): bytes of every file the person owns — uploads, used by a job
  or not, and results — until retention deletes them. Admins too. Every file stored for a person goes
  through :func:`app.storage_limit.check_room` (an upload is refused with a 429, a job's output fails the job).
* **pipeline size** (``PIPELINE_MAX_STEPS``, ``PIPELINE_MAX_EDGES``): steps and ``depends_on`` entries of
  one pipeline when it starts. Admins too. This one is a 422 naming ``steps``: retrying never helps. Its
  rule is :func:`app.jobs.queue.new_jobs.pipeline_size_refusal`, which every pipeline meets when its spec is
  checked (a schedule's too), so that a schedule is refused when it is made, not when it fires.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app import dbclock, storage_limit
from app.errors import RateLimited
from app.formatting import format_bytes, format_sizes
from app.jobs.queue.waiting import over_limit
from app.settings import Settings

LOCK_NAMESPACE = storage_limit.OWNER_LOCK_NAMESPACE
"""First key of the two-key advisory lock (the second is the user id), so it meets no other lock; the
storage rule (:func:`app.storage_limit.check_room`) takes the same lock."""
WINDOW_SECS = 60
WAITING_RETRY_SECS = 60
"""``Retry-After`` when the waiting limit is reached: how soon jobs finish is not known in advance (they
may be due next year), so the words promise no time; the header only says when a client may ask again."""

LOCK = text("SELECT pg_advisory_xact_lock(:ns, :user_id)")
WAITING = text("SELECT count(*) FROM jobs WHERE user_id = :user_id AND status = 'queued'")
# The person's lock and, under it, their ``queued`` jobs (when ``:count_waiting``) and the submission in
# the window that frees the next per-minute place when the limit is reached (the ``:skip + 1``-th newest;
# none while there are fewer), in one round trip. The function (migration 0014) counts with a snapshot
# taken after the lock is held, so it sees what the submission it waited for committed.
# Its parameters are named apart from a job's (:func:`_state_params`), to sit in the insert's statement.
STATE_CALL = (
    "jobdesk_submission_state(:quota_ns, :quota_user_id, :quota_count_waiting, :quota_per_minute, "
    ":quota_since_id, :quota_window, :quota_skip)"
)
STATE = text(f"SELECT waiting, first, db_now FROM {STATE_CALL}")
# The same state as the guard of a job's insert (:class:`app.jobs.queue.Guard`): the insert happens only
# when ``ok`` — no per-minute refusal, and one more job still within the waiting limit (``:quota_max_waiting``;
# the count is ``NULL`` when that limit is off).
GUARD = f"""
    SELECT s.waiting AS quota_waiting, s.first AS quota_first, s.db_now AS quota_now,
           s.first IS NULL AND (s.waiting IS NULL OR s.waiting + 1 <= :quota_max_waiting) AS ok
    FROM {STATE_CALL} AS s
"""
# When the person's first stored file is due for retention (unused uploads: from their upload; files of
# finished jobs: from the job's end).
FIRST_EXPIRY = text(
    """
    SELECT min(COALESCE(j.completed_at, CASE WHEN f.job_id IS NULL THEN f.created_at END))
           + make_interval(days => :days) - now()
    FROM files f LEFT JOIN jobs j ON j.id = f.job_id WHERE f.user_id = :user_id
    """
)
# One of the person's own retries, as a submission in the per-minute window (rows older than any
# window are deleted on the way: the table holds minutes, not history).
COUNT_RETRY = text(
    """
    WITH old AS (
        DELETE FROM counted_retries WHERE user_id = :user_id AND at < now() - make_interval(secs => :keep)
    )
    INSERT INTO counted_retries (user_id) VALUES (:user_id)
    """
)
USAGE = text(
    """
    SELECT u.id,
           (SELECT count(*) FROM jobs WHERE jobs.user_id = u.id AND status = 'queued') AS waiting,
           (SELECT count(*) FROM jobs WHERE jobs.user_id = u.id AND status = 'queued' AND NOT is_active)
               AS held,
           (SELECT COALESCE(sum(size), 0) FROM files f WHERE f.user_id = u.id) AS stored_bytes
    FROM users u WHERE u.id = ANY(CAST(:ids AS int[]))
    """
)


def refusal(message: str, retry_after: float) -> RateLimited:
    """A 429 whose message says the limit and when to try again, with ``Retry-After`` in seconds."""
    seconds = max(1, math.ceil(retry_after))
    return RateLimited(message, extra={"headers": {"Retry-After": str(seconds)}, "retry_after": seconds})


def retry_words(seconds: float) -> str:
    """``"Try again in 42 seconds."`` / ``"… in 3 minutes."`` / ``"… in 2 hours."``."""
    s = max(1, math.ceil(seconds))
    for size, unit in ((86_400, "day"), (3_600, "hour"), (60, "minute")):
        if s >= 2 * size:
            n = math.ceil(s / size)
            return f"Try again in {n} {unit}s."
    return f"Try again in {s} second{'s' if s != 1 else ''}."


async def _conn(db: AsyncConnection | AsyncSession) -> AsyncConnection:
    return await db.connection() if isinstance(db, AsyncSession) else db


async def lock(db: AsyncConnection | AsyncSession, user_id: int) -> None:
    """Serialise this person's checked submissions and uploads until the transaction ends."""
    await (await _conn(db)).execute(LOCK, {"ns": LOCK_NAMESPACE, "user_id": user_id})


async def waiting(db: AsyncConnection | AsyncSession, user_id: int) -> int:
    """The person's ``queued`` jobs (ready, scheduled, waiting for earlier steps, held)."""
    return int((await (await _conn(db)).execute(WAITING, {"user_id": user_id})).scalar_one())


def waiting_refusal(
    settings: Settings, now_waiting: int, added: int, whose: str | None = None
) -> RateLimited | None:
    """The refusal when ``now_waiting`` (counted after adding ``added``) is above the limit; ``whose``
    names the person whose jobs they are when it is not the one asking (an admin's retry of theirs)."""
    limit = settings.user_max_waiting_jobs
    before = now_waiting - added
    if not over_limit(limit, before, added):
        return None
    adds = f"; this would add {added:,}" if added > 1 else ""
    has = f"{whose} has {before:,} waiting jobs" if whose else f"you have {before:,} waiting"
    return refusal(
        f"Too many jobs waiting: {has} and the limit is {limit:,} per person{adds}. "
        "Wait until some have run, or cancel some.",
        WAITING_RETRY_SECS,
    )


def _since_id(now: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of a moment safely before the window (ids are made on the database's clock,
    :mod:`app.dbclock`; the margin covers what that leaves: offsets under a second, a clock step since
    the offset was measured)."""
    ms = int((now - timedelta(seconds=WINDOW_SECS * 5)).timestamp() * 1000)
    return uuid.UUID(int=max(ms, 0) << 80)


def _per_minute_words(limit: int, wait: float) -> RateLimited:
    return refusal(
        f"Too many submissions: the limit is {limit:,} a minute per person (a pipeline or a batch counts "
        f"once). {retry_words(wait)}",
        wait,
    )


def _state_params(settings: Settings, user_id: int) -> dict[str, Any]:
    limit = settings.user_max_jobs_per_minute
    return {
        "quota_ns": LOCK_NAMESPACE,
        "quota_user_id": user_id,
        "quota_count_waiting": bool(settings.user_max_waiting_jobs),
        "quota_per_minute": bool(limit),
        "quota_since_id": _since_id(dbclock.db_time()),
        "quota_window": WINDOW_SECS,
        "quota_skip": max(limit - 1, 0),
    }


def _per_minute_state(settings: Settings, first: datetime | None, db_now: datetime) -> RateLimited | None:
    limit = settings.user_max_jobs_per_minute
    if not limit or first is None:
        return None
    return _per_minute_words(limit, (first + timedelta(seconds=WINDOW_SECS) - db_now).total_seconds())


async def submission_state(
    db: AsyncConnection | AsyncSession, settings: Settings, user_id: int
) -> tuple[int | None, RateLimited | None]:
    """Take the person's :func:`lock` for this transaction and say, in the same round trip, what
    :func:`waiting` says and whether the per-minute limit refuses: the person's waiting jobs (``None`` when
    ``USER_MAX_WAITING_JOBS`` is off) and the per-minute refusal, if any. Call it in the transaction
    that then adds the jobs."""
    row = (await (await _conn(db)).execute(STATE, _state_params(settings, user_id))).one()
    waiting_now = None if row.waiting is None else int(row.waiting)
    return waiting_now, _per_minute_state(settings, row.first, row.db_now)


async def count_retry(db: AsyncConnection | AsyncSession, user_id: int) -> None:
    """Count a retry of the person's own (one job, or a batch's failed rows at once) as one submission
    in their per-minute window, as a new job is; call under :func:`lock`, after the check."""
    await (await _conn(db)).execute(COUNT_RETRY, {"user_id": user_id, "keep": WINDOW_SECS * 5})


def guard_params(settings: Settings, user_id: int) -> dict[str, Any]:
    """The parameters of :data:`GUARD` for one job of the person's."""
    return {**_state_params(settings, user_id), "quota_max_waiting": settings.user_max_waiting_jobs}


def guard_refusal(settings: Settings, row: Any) -> RateLimited:
    """Why :data:`GUARD` kept a job out (its row, ``ok`` false): the per-minute limit first, as
    :func:`submission_state` refuses before anything is added, else the waiting limit with the job added."""
    refused = _per_minute_state(settings, row["quota_first"], row["quota_now"])
    if refused is None:
        refused = waiting_refusal(settings, int(row["quota_waiting"]) + 1, 1)
    assert refused is not None, "the guard refused a job within the limits"
    return refused


async def _first_expiry(conn: AsyncConnection, settings: Settings, user_id: int) -> float:
    """Seconds until the person's first stored file is due for deletion (an hour when unknown)."""
    params = {"user_id": user_id, "days": settings.job_retention_days}
    first: Any = (await conn.execute(FIRST_EXPIRY, params)).scalar()
    return first.total_seconds() if first is not None and first.total_seconds() > 0 else 3600


async def stored_refusal(
    db: AsyncConnection | AsyncSession, settings: Settings, user_id: int, adding: int
) -> RateLimited | None:
    """The refusal when storing ``adding`` more bytes would take the person above
    ``USER_MAX_UPLOAD_BYTES``; it says when their first file is due for deletion."""
    limit = settings.user_max_upload_bytes
    if not limit:
        return None
    conn = await _conn(db)
    stored = await storage_limit.stored_bytes(conn, user_id)
    if stored + adding <= limit:
        return None
    wait = await _first_expiry(conn, settings, user_id)
    kept, most = format_sizes(stored, limit)  # never "you keep 2 KiB … the limit is 2 KiB" with room left
    return refusal(
        f"Not enough room for this file ({format_bytes(adding)}): you keep {kept} of files "
        f"and the limit is {most} per person. Files are deleted "
        f"{settings.job_retention_days:g} days after the job that used them finished. {retry_words(wait)}",
        wait,
    )


async def schedule_waiting(
    conn: AsyncConnection, settings: Settings, user_id: int, is_admin: bool
) -> int | None:
    """Take the owner's :func:`lock` for a schedule's firing and count their waiting jobs; ``None`` when
    the limit does not hold (off, or an admin's schedule: exempt, as admins are)."""
    if is_admin or not settings.user_max_waiting_jobs:
        return None
    await lock(conn, user_id)
    return await waiting(conn, user_id)


def schedule_refusal(settings: Settings, before: int | None, after: int | None = None) -> str | None:
    """Why a schedule's firing is skipped, or ``None``: the owner had ``before`` jobs waiting
    (:func:`schedule_waiting`), and the firing adds at least one (``after``: counted once it has fired,
    a pipeline's steps all count, as a person's submission of it is counted)."""
    limit = settings.user_max_waiting_jobs
    if before is None:
        return None
    adding = 1 if after is None else after - before
    if not over_limit(limit, before, adding):
        return None
    adds = f", this firing would add {adding:,}" if adding > 1 else ""
    return (
        f"skipped a firing: its owner has {before:,} jobs waiting{adds}, the limit is {limit:,} "
        "(USER_MAX_WAITING_JOBS); it fires again at its next time"
    )


@dataclass(frozen=True)
class Usage:
    """One person's use of the limits, for the admins."""

    waiting: int
    held: int
    stored_bytes: int


async def usage_of(db: AsyncConnection | AsyncSession, user_ids: list[int]) -> dict[int, Usage]:
    """Waiting and held jobs and stored bytes per user."""
    rows = (await (await _conn(db)).execute(USAGE, {"ids": user_ids})).mappings().all()
    return {r["id"]: Usage(int(r["waiting"]), int(r["held"]), int(r["stored_bytes"])) for r in rows}


def limits(settings: Settings) -> dict[str, int]:
    """The limits in force, by setting name (0 = off)."""
    return {
        "USER_MAX_WAITING_JOBS": settings.user_max_waiting_jobs,
        "USER_MAX_JOBS_PER_MINUTE": settings.user_max_jobs_per_minute,
        "USER_MAX_UPLOAD_BYTES": settings.user_max_upload_bytes,
        "PIPELINE_MAX_STEPS": settings.pipeline_max_steps,
        "PIPELINE_MAX_EDGES": settings.pipeline_max_edges,
    }
