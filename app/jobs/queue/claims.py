"""Claiming: a worker takes due jobs (``queued`` → ``in_progress``) under a lease, in one statement.

One order for every job, limited or not: ``priority DESC, run_at, id``. One statement (:data:`CLAIM`)
takes the first ``limit`` claimable jobs in that order among the types the worker runs, each limited type
contributing at most its room (``max_running`` minus its running jobs, ``max_per_minute`` minus its
starts in the last 60 seconds).

Counting a limited type's room is only exact while no other claimer can start jobs of that type, so a
claim that may take limited types first locks their control rows (:data:`LOCK_LIMITS`, in type order)
in the same transaction. The count cannot share the lock's statement: under READ COMMITTED a statement
sees the database as of its own start, so a count in the statement that waited for the lock would miss
the jobs its previous holder claimed. A claim without those locks (autocommit, one round trip: the
worker's path while none of its types has a limit) skips limited types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.queue.common import fetch_rows, sql
from app.jobs.rows import CLAIM_FIELDS, ClaimedJob, claimed_jobs

CLAIM_COLUMNS = ", ".join(CLAIM_FIELDS)
"""The job columns a claim returns (:class:`~app.jobs.rows.ClaimedJob` adds ``parents``)."""

# The claimable predicate, in one place: due, queued, not cancelled, no unfinished dependency.
CLAIMABLE = """
    status = 'queued' AND is_active AND pending_parents = 0 AND run_at <= now()
"""
# The types a worker runs (``NULL``: every type, for callers that are not a worker).
SERVED = "(CAST(:types AS text[]) IS NULL OR type = ANY(CAST(:types AS text[])))"
# A control row that limits its type (and does not pause it). A limit per person
# (``max_running_per_user``) counts: such a type is claimed only by a fair claim (fair_claims.py).
LIMITED_ROW = """
    type <> '*' AND NOT paused
    AND (max_running IS NOT NULL OR max_per_minute IS NOT NULL OR max_running_per_user IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM job_type_controls a WHERE a.type = '*' AND a.paused)
"""
# Types that are neither paused nor limited. Written as an uncorrelated check of the '*' row (one InitPlan
# per claim) and a per-candidate lookup of the type's own row kept as a SubPlan (``OFFSET 0`` stops
# PostgreSQL from turning it into an anti-join), not as one correlated NOT EXISTS: the planner cannot
# estimate an anti-join against the small, rarely analysed controls table (an empty table is assumed to
# hold ~500 rows), and with that misestimate it read every due row and sorted them on each claim instead
# of reading the first few in claim order from ix_jobs_claim: a claim whose cost grew with the backlog.
NOT_CONTROLLED = """
    AND NOT EXISTS (SELECT 1 FROM job_type_controls a WHERE a.type = '*' AND a.paused)
    AND NOT EXISTS (
        SELECT 1 FROM job_type_controls c
        WHERE c.type = jobs.type
          AND (c.paused OR (c.type <> '*' AND (c.max_running IS NOT NULL OR c.max_per_minute IS NOT NULL
                                               OR c.max_running_per_user IS NOT NULL)))
        OFFSET 0
    )
"""
MINUTE_AGO = "statement_timestamp() - interval '1 minute'"

# ``room``: per limited type the caller has locked, how many more of its jobs may start now (LEAST
# ignores the NULL of a limit that is not set). ``free``: the first ``limit`` jobs of the other types.
# ``capped``: per limited type, its first ``room`` jobs (ix_jobs_claim_by_type: a few index entries
# however many jobs of other types come first). ``picked``: the first ``limit`` of both, in claim order.
# Every time the claim writes is the statement's own (``statement_timestamp()``): it began after the
# previous holder of the type's lock committed, so starts are recorded in the order they happened.
# What a claim does with the rows its ``picked`` step chose (and the ``room`` of their types): marks them
# in progress with a lease, writes each one's ``claimed`` event and the rated types' starts, and returns
# them with their parents' results — shared by the plain claim and the claim under per-person limits.
# The UPDATE visits its rows in whatever order its plan reads them (by id, through pk_jobs), so the events
# are inserted in claim order explicitly: their ids then tell the order jobs were taken in, in one claim
# as across claims.


def _claimed_from_picked(rated: bool) -> str:
    # ``rated``: the claim may take types with a per-minute limit (a ``room`` CTE precedes it), whose
    # starts it records; a claim that takes no limited type leaves those two steps out.
    starts = f"""
    , started AS (
        INSERT INTO job_type_starts (type, at, n)
        SELECT claimed.type, statement_timestamp(), count(*)
        FROM claimed JOIN room ON room.type = claimed.type AND room.rated
        GROUP BY claimed.type
        ON CONFLICT (type, at) DO UPDATE SET n = job_type_starts.n + EXCLUDED.n
    ), pruned AS (
        DELETE FROM job_type_starts s USING room WHERE s.type = room.type AND s.at < {MINUTE_AGO}
    )"""
    return f"""
    , claimed AS (
        UPDATE jobs j
        SET status = 'in_progress', attempts = j.attempts + 1, claims = j.claims + 1, locked_by = :worker,
            lease_expires_at = statement_timestamp() + make_interval(secs => :lease),
            started_at = statement_timestamp(), updated_at = now(), progress = NULL, progress_message = NULL
        WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.status = 'queued'
        RETURNING {", ".join("j." + c for c in CLAIM_FIELDS)}
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, data, at)
        SELECT id, pipeline_id, 'claimed', 'queued', 'in_progress', :actor,
               jsonb_build_object('attempt', attempts), statement_timestamp()
        FROM claimed ORDER BY priority DESC, run_at, id
    ){starts if rated else ""}
    SELECT claimed.*, (
        SELECT jsonb_object_agg(COALESCE(p.step_key, p.id::text), p.result_data)
        FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on WHERE d.job_id = claimed.id
    ) AS parents
    FROM claimed ORDER BY priority DESC, run_at, id
"""


CLAIMED_FROM_PICKED = _claimed_from_picked(rated=True)

CLAIM = sql(
    f"""
    WITH room AS MATERIALIZED (
        SELECT c.type, c.max_per_minute IS NOT NULL AS rated, GREATEST(0, LEAST(
            :limit,
            c.max_running - (SELECT count(*) FROM jobs r WHERE r.status = 'in_progress' AND r.type = c.type),
            c.max_per_minute - (
                SELECT COALESCE(sum(s.n), 0) FROM job_type_starts s
                WHERE s.type = c.type AND s.at >= {MINUTE_AGO}
            )
        )) AS n
        FROM job_type_controls c
        WHERE c.type = ANY(CAST(:locked AS text[])) AND {LIMITED_ROW}
    ), free AS (
        SELECT id, priority, run_at FROM jobs
        WHERE {CLAIMABLE} AND {SERVED} {NOT_CONTROLLED}
        ORDER BY priority DESC, run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), capped AS (
        SELECT l.id, l.priority, l.run_at FROM room CROSS JOIN LATERAL (
            SELECT id, priority, run_at FROM jobs
            WHERE {CLAIMABLE} AND jobs.type = room.type
            ORDER BY priority DESC, run_at, id
            LIMIT room.n
            FOR UPDATE SKIP LOCKED
        ) l
    ), picked AS MATERIALIZED (
        SELECT id FROM (SELECT * FROM free UNION ALL SELECT * FROM capped) c
        ORDER BY priority DESC, run_at, id
        LIMIT :limit
    ){CLAIMED_FROM_PICKED}    """
)

# The claim when no limited type is locked (the worker's path while none of its types has a limit):
# ``free`` alone, without the steps for limited types. Their planning and start-up were a sixth of a
# claim's server time (10 jobs: 0.67 against 0.83 ms inside a transaction).
CLAIM_UNLIMITED = sql(
    f"""
    WITH free AS (
        SELECT id FROM jobs
        WHERE {CLAIMABLE} AND {SERVED} {NOT_CONTROLLED}
        ORDER BY priority DESC, run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), picked AS MATERIALIZED (
        SELECT id FROM free
    ){_claimed_from_picked(rated=False)}    """
)

# Locks, in type order (no deadlock between claimers), the control rows of the limited types among
# ``types`` that have claimable jobs, and counts every limited type among them (``limited``: whether the
# worker needs this path at all). A limited type without claimable jobs is not locked, so a limit on an
# idle type does not make claimers wait for each other.
LOCK_LIMITS = sql(
    f"""
    SELECT l.limited, c.type FROM
        (SELECT count(*) AS limited FROM job_type_controls WHERE {LIMITED_ROW} AND {SERVED}) l
    LEFT JOIN LATERAL (
        SELECT type FROM job_type_controls c
        WHERE {LIMITED_ROW} AND {SERVED}
          AND EXISTS (SELECT 1 FROM jobs j WHERE {CLAIMABLE} AND j.type = c.type)
        ORDER BY type
        FOR UPDATE
    ) c ON true
    """
)

# After a claim that took fewer jobs than asked: which locked types still have claimable jobs (their
# limit held them back) and, for a type whose per-minute limit is used up, when its oldest start leaves
# the 60-second window.
HELD_BACK = sql(
    f"""
    SELECT c.type,
           CASE WHEN w.n >= c.max_per_minute
                THEN EXTRACT(EPOCH FROM w.first + interval '1 minute' - statement_timestamp()) END AS room_in
    FROM job_type_controls c
    CROSS JOIN LATERAL (
        SELECT COALESCE(sum(s.n), 0) AS n, min(s.at) AS first FROM job_type_starts s
        WHERE s.type = c.type AND s.at >= {MINUTE_AGO}
    ) w
    WHERE c.type = ANY(CAST(:locked AS text[]))
      AND EXISTS (SELECT 1 FROM jobs j WHERE {CLAIMABLE} AND j.type = c.type)
    ORDER BY c.type
    """
)


@dataclass(frozen=True)
class Claimed:
    """What a claim took, and what it left for later."""

    jobs: list[ClaimedJob]
    limited: bool = False
    """Some of the types asked for have a limit (the claim must lock them to take their jobs)."""
    held_back: tuple[str, ...] = ()
    """Limited types whose claimable jobs their limit held back: a job of theirs finishing lifts it."""
    room_in: float | None = None
    """Seconds until a held-back type's per-minute limit lets one more start (``None``: not that limit)."""


def _params(worker_id: str, limit: int, lease_secs: float, types: Sequence[str] | None) -> dict[str, object]:
    return {
        "worker": worker_id,
        "limit": limit,
        "lease": float(lease_secs),
        "actor": f"worker:{worker_id}",
        "types": None if types is None else list(types),
    }


async def claim(
    conn: AsyncConnection,
    worker_id: str,
    limit: int,
    lease_secs: float,
    *,
    types: Sequence[str] | None = None,
    locked: Sequence[str] = (),
) -> list[ClaimedJob]:
    """Claim up to ``limit`` due jobs of ``types`` (``None``: any type) for ``worker_id`` in one statement.

    ``queued`` → ``in_progress``: ``attempts + 1`` and ``claims + 1`` (the fencing token every report of
    this claim carries: ``attempts`` is set back by a retry or a rerun, ``claims`` never), lease until ``lease_secs`` from now, ``started_at``;
    ordered ``priority DESC, run_at, id``; ``FOR UPDATE SKIP LOCKED`` so concurrent claimers never take
    the same row. Jobs of a limited type are taken only when its control row is in ``locked`` (locked
    by :func:`lock_limits` in the caller's transaction), and at most as many as its limits allow.
    """
    if limit <= 0:
        return []
    params = _params(worker_id, limit, lease_secs, types)
    if not locked:
        return claimed_jobs(await fetch_rows(conn, CLAIM_UNLIMITED, params))
    return claimed_jobs(await fetch_rows(conn, CLAIM, {**params, "locked": list(locked)}))


async def lock_limits(conn: AsyncConnection, types: Sequence[str] | None = None) -> tuple[bool, list[str]]:
    """Lock the control rows of the limited types among ``types`` that have claimable jobs, for the rest
    of the caller's transaction; returns whether any of ``types`` is limited, and the locked types."""
    rows = (await conn.execute(LOCK_LIMITS, {"types": None if types is None else list(types)})).all()
    return bool(rows and rows[0][0]), [r[1] for r in rows if r[1] is not None]


async def claim_within_limits(
    conn: AsyncConnection,
    worker_id: str,
    limit: int,
    lease_secs: float,
    *,
    types: Sequence[str] | None = None,
) -> Claimed:
    """Claim like :func:`claim`, limited types included, in the caller's transaction (which must commit
    promptly: it holds the limited types' locks). Concurrent claimers of a limited type take turns, so
    at most ``max_running`` of its jobs run at once across all workers and at most ``max_per_minute``
    start in any 60 seconds (by the database's clock)."""
    limited, locked = await lock_limits(conn, types)
    jobs = await claim(conn, worker_id, limit, lease_secs, types=types, locked=locked)
    if len(jobs) >= limit or not locked:
        return Claimed(jobs, limited=limited)
    rows = (await conn.execute(HELD_BACK, {"locked": locked})).all()
    waits = [float(r[1]) for r in rows if r[1] is not None]
    return Claimed(
        jobs, limited=limited, held_back=tuple(r[0] for r in rows), room_in=min(waits) if waits else None
    )


NEXT_DUE = sql(
    "SELECT EXTRACT(EPOCH FROM (min(run_at) - now())) FROM jobs WHERE status = 'queued' AND run_at > now()"
)


async def seconds_until_next_due(conn: AsyncConnection) -> float | None:
    """Seconds until the earliest future ``run_at`` of a queued job, or ``None`` if there is none.

    The worker sleeps at most this long, so scheduled jobs and backed-off retries start on time
    without a separate scheduler.
    """
    row = (await conn.execute(NEXT_DUE)).scalar()
    return float(row) if row is not None else None
