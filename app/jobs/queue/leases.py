"""A running job's lease: renewals (the worker's heartbeat), the durable cancel check, and progress.

Every write here is guarded by ``status = 'in_progress' AND locked_by = <this worker>``: a worker that
lost its lease changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.payload import cap_text
from app.jobs.queue.common import sql

RENEW_LEASES = sql(
    """
    UPDATE jobs SET lease_expires_at = now() + make_interval(secs => :lease)
    WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker
    RETURNING id, is_active
    """
)


@dataclass(frozen=True)
class LeaseReport:
    """Outcome of a heartbeat: ``renewed`` ids, ``cancelled`` ids (renewed, but a cancel was requested)
    and ``lost`` ids (no longer ours: rescued or finished elsewhere — stop without writing)."""

    renewed: frozenset[uuid.UUID]
    cancelled: frozenset[uuid.UUID]
    lost: frozenset[uuid.UUID]


async def heartbeat(
    conn: AsyncConnection, worker_id: str, job_ids: Iterable[uuid.UUID], lease_secs: float
) -> LeaseReport:
    """Renew the lease of every job ``worker_id`` is running (one statement).

    Only ``lease_expires_at`` changes — an unindexed column — so renewals are HOT updates and do not
    bloat the indexes however often they run. The returned ``is_active`` doubles as the durable cancel
    check (a cancel request whose NOTIFY was lost is still seen).
    """
    ids = list(job_ids)
    if not ids:
        return LeaseReport(frozenset(), frozenset(), frozenset())
    rows = (
        await conn.execute(RENEW_LEASES, {"ids": ids, "lease": float(lease_secs), "worker": worker_id})
    ).all()
    renewed = frozenset(r[0] for r in rows)
    return LeaseReport(
        renewed=renewed,
        cancelled=frozenset(r[0] for r in rows if not r[1]),
        lost=frozenset(ids) - renewed,
    )


KEEP_LEASES = sql(
    """
    WITH mine AS (
        SELECT id FROM jobs
        WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker
        FOR UPDATE SKIP LOCKED
    )
    UPDATE jobs SET lease_expires_at = now() + make_interval(secs => :lease)
    FROM mine WHERE jobs.id = mine.id
    RETURNING jobs.id, jobs.is_active
    """
)
STILL_MINE = sql(
    "SELECT id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker"
)


async def keep_leases(
    conn: AsyncConnection, worker_id: str, job_ids: Iterable[uuid.UUID], lease_secs: float
) -> LeaseReport:
    """:func:`heartbeat` for a renewal that must never wait for a row lock: the worker's lease keeper
    thread, whose worker may hold a job's row in a transaction its stalled event loop cannot finish (an
    outcome or a progress report being written). Such a job is neither renewed nor lost this time."""
    ids = list(job_ids)
    if not ids:
        return LeaseReport(frozenset(), frozenset(), frozenset())
    params = {"ids": ids, "lease": float(lease_secs), "worker": worker_id}
    rows = (await conn.execute(KEEP_LEASES, params)).all()
    renewed = frozenset(r[0] for r in rows)
    mine = set((await conn.execute(STILL_MINE, {"ids": ids, "worker": worker_id})).scalars())
    return LeaseReport(
        renewed=renewed,
        cancelled=frozenset(r[0] for r in rows if not r[1]),
        lost=frozenset(ids) - renewed - mine,
    )


CANCEL_REQUESTED = sql(
    "SELECT id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker "
    "AND NOT is_active"
)


async def cancel_requested(
    conn: AsyncConnection, worker_id: str, job_ids: Iterable[uuid.UUID]
) -> set[uuid.UUID]:
    """Ids among ``job_ids`` whose cancel was requested: the durable check behind NOTIFY."""
    ids = list(job_ids)
    if not ids:
        return set()
    return set((await conn.execute(CANCEL_REQUESTED, {"ids": ids, "worker": worker_id})).scalars())


SET_PROGRESS = sql(
    """
    UPDATE jobs SET progress = :fraction, progress_message = :message, updated_at = now()
    WHERE id = :id AND status = 'in_progress' AND locked_by = :worker
    """
)


async def set_progress(
    conn: AsyncConnection, worker_id: str, job_id: uuid.UUID, fraction: float | None, message: str | None
) -> bool:
    """Record a running job's progress (0..1) and message; ``False`` if the job is no longer ours."""
    if fraction is not None:
        fraction = min(max(float(fraction), 0.0), 1.0)
    result = await conn.execute(
        SET_PROGRESS,
        {"id": job_id, "worker": worker_id, "fraction": fraction, "message": cap_text(message, 1000)},
    )
    return bool(result.rowcount == 1)
