"""A running job's lease: renewals (the worker's heartbeat), the durable cancel check, and progress.

Every write and check here is guarded by ``status = 'in_progress' AND locked_by = <this worker>`` and by
the claim the worker holds (``claims``, the fencing token its claim returned): a worker that lost its
lease changes nothing, and neither does what is left of an earlier claim of the same job by the same
worker (a retry or a rerun sets ``attempts`` back, so the attempt cannot tell the two apart).

The jobs are given as a mapping of job id to claim; a plain list of ids (claim unknown: ``None``) is
guarded by the worker alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.payload import cap_text
from app.jobs.queue.common import sql

Held = Mapping[uuid.UUID, int | None] | Iterable[uuid.UUID]
"""Jobs a worker holds: job id → the claim it holds (``None``: not fenced by the claim), or ids alone."""

# The jobs asked about, each with the claim the worker holds of it.
_INPUT = "SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:claims AS int[])) AS t(id, claim)"
_OURS = (
    "status = 'in_progress' AND locked_by = :worker AND (input.claim IS NULL OR jobs.claims = input.claim)"
)

RENEW_LEASES = sql(
    f"""
    WITH input AS ({_INPUT})
    UPDATE jobs SET lease_expires_at = now() + make_interval(secs => :lease)
    FROM input WHERE jobs.id = input.id AND {_OURS}
    RETURNING jobs.id, jobs.is_active
    """
)


def _fenced(jobs: Held) -> dict[str, list[Any]]:
    """The ``ids`` and ``claims`` parameters of the statements here."""
    if isinstance(jobs, Mapping):
        pairs = list(jobs.items())
    else:
        pairs = [(job_id, None) for job_id in jobs]
    return {"ids": [p[0] for p in pairs], "claims": [p[1] for p in pairs]}


@dataclass(frozen=True)
class LeaseReport:
    """Outcome of a heartbeat: ``renewed`` ids, ``cancelled`` ids (renewed, but a cancel was requested)
    and ``lost`` ids (no longer ours: rescued or finished elsewhere — stop without writing)."""

    renewed: frozenset[uuid.UUID]
    cancelled: frozenset[uuid.UUID]
    lost: frozenset[uuid.UUID]


async def heartbeat(conn: AsyncConnection, worker_id: str, jobs: Held, lease_secs: float) -> LeaseReport:
    """Renew the lease of every job ``worker_id`` is running, at the claim it holds (one statement).

    Only ``lease_expires_at`` changes — an unindexed column — so renewals are HOT updates and do not
    bloat the indexes however often they run. The returned ``is_active`` doubles as the durable cancel
    check (a cancel request whose NOTIFY was lost is still seen).
    """
    params = _fenced(jobs)
    ids = params["ids"]
    if not ids:
        return LeaseReport(frozenset(), frozenset(), frozenset())
    rows = (
        await conn.execute(RENEW_LEASES, {**params, "lease": float(lease_secs), "worker": worker_id})
    ).all()
    renewed = frozenset(r[0] for r in rows)
    return LeaseReport(
        renewed=renewed,
        cancelled=frozenset(r[0] for r in rows if not r[1]),
        lost=frozenset(ids) - renewed,
    )


KEEP_LEASES = sql(
    f"""
    WITH input AS ({_INPUT}), mine AS (
        SELECT jobs.id FROM jobs JOIN input ON input.id = jobs.id
        WHERE {_OURS}
        FOR UPDATE OF jobs SKIP LOCKED
    )
    UPDATE jobs SET lease_expires_at = now() + make_interval(secs => :lease)
    FROM mine WHERE jobs.id = mine.id
    RETURNING jobs.id, jobs.is_active
    """
)
STILL_MINE = sql(
    f"WITH input AS ({_INPUT}) SELECT jobs.id FROM jobs JOIN input ON input.id = jobs.id WHERE {_OURS}"
)


async def keep_leases(conn: AsyncConnection, worker_id: str, jobs: Held, lease_secs: float) -> LeaseReport:
    """:func:`heartbeat` for a renewal that must never wait for a row lock: the worker's lease keeper
    thread, whose worker may hold a job's row in a transaction its stalled event loop cannot finish (an
    outcome or a progress report being written). Such a job is neither renewed nor lost this time."""
    fenced = _fenced(jobs)
    ids = fenced["ids"]
    if not ids:
        return LeaseReport(frozenset(), frozenset(), frozenset())
    params = {**fenced, "lease": float(lease_secs), "worker": worker_id}
    rows = (await conn.execute(KEEP_LEASES, params)).all()
    renewed = frozenset(r[0] for r in rows)
    mine = set((await conn.execute(STILL_MINE, {**fenced, "worker": worker_id})).scalars())
    return LeaseReport(
        renewed=renewed,
        cancelled=frozenset(r[0] for r in rows if not r[1]),
        lost=frozenset(ids) - renewed - mine,
    )


CANCEL_REQUESTED = sql(
    f"WITH input AS ({_INPUT}) SELECT jobs.id FROM jobs JOIN input ON input.id = jobs.id "
    f"WHERE {_OURS} AND NOT jobs.is_active"
)


async def cancel_requested(conn: AsyncConnection, worker_id: str, jobs: Held) -> set[uuid.UUID]:
    """Ids among ``jobs`` whose cancel was requested (at the claim held): the durable check behind
    NOTIFY."""
    params = _fenced(jobs)
    if not params["ids"]:
        return set()
    return set((await conn.execute(CANCEL_REQUESTED, {**params, "worker": worker_id})).scalars())


SET_PROGRESS = sql(
    """
    UPDATE jobs SET progress = :fraction, progress_message = :message, updated_at = now()
    WHERE id = :id AND status = 'in_progress' AND locked_by = :worker
      AND (CAST(:claim AS int) IS NULL OR claims = :claim)
    """
)


async def set_progress(
    conn: AsyncConnection,
    worker_id: str,
    job_id: uuid.UUID,
    fraction: float | None,
    message: str | None,
    *,
    claim: int | None = None,
) -> bool:
    """Record a running job's progress (0..1) and message, at ``claim`` (the job's ``claims`` as its claim
    returned it; ``None``: any claim of this worker's); ``False`` if the job is no longer ours."""
    if fraction is not None:
        fraction = min(max(float(fraction), 0.0), 1.0)
    result = await conn.execute(
        SET_PROGRESS,
        {
            "id": job_id,
            "worker": worker_id,
            "claim": claim,
            "fraction": fraction,
            "message": cap_text(message, 1000),
        },
    )
    return bool(result.rowcount == 1)
