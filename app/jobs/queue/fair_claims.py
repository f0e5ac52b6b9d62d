"""Fair claims: no person's jobs take more running slots than their limit, across every worker.

Two rules, both counted against the person's jobs ``in_progress`` at the moment of the claim:

* ``USER_MAX_RUNNING_JOBS`` (the worker's setting; 0 = none): at most this many of one person's jobs
  run at once, whatever their types;
* ``max_running_per_user`` of a job type's control row: at most this many of one person's jobs of that
  type run at once.

A claim under either rule is the statement :data:`FAIR_CLAIM`, in a transaction that first takes one
transaction-level advisory lock (:data:`FAIR_LOCK`, released at commit, so it works behind PgBouncer in
transaction mode): fair claimers take turns, and each counts the running jobs its predecessors claimed
(the count is a later statement than the lock, so it sees their commits). Claims without such a rule keep
the one-statement path of :mod:`app.jobs.queue.claims`, which skips the types that have a per-person
limit.

The statement looks at the people with waiting jobs (an index-only walk of ``ix_jobs_user_waiting``,
one probe per person), takes each one's first ``limit`` claimable jobs in claim order, then keeps, in
turn: at most each per-type limit's room, each person's room per type, each person's room overall —
and the first ``limit`` of what is left, in claim order (priority, due time, id).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.queue.claims import (
    CLAIMABLE,
    CLAIMED_FROM_PICKED,
    LIMITED_ROW,
    MINUTE_AGO,
    SERVED,
    Claimed,
    _params,
    claim_within_limits,
    lock_limits,
)
from app.jobs.queue.common import fetch_rows, sql
from app.jobs.rows import claimed_jobs

ORDER = "priority DESC, run_at, id"

FAIR_LOCK = sql("SELECT pg_advisory_xact_lock(hashtext('jobdesk.fair_claims'))")
"""Taken by every claim under a per-person rule, for the rest of its transaction."""

# Whether any type among the worker's has a per-person limit (and is not paused).
PER_USER_RULES = sql(
    f"""
    SELECT EXISTS (
        SELECT 1 FROM job_type_controls
        WHERE type <> '*' AND NOT paused AND max_running_per_user IS NOT NULL AND {SERVED}
    )
    """
)

# Types a fair claim may take: not paused; a type with a concurrency or rate limit only when the
# caller has locked its control row (its room is then counted in ``room``).
FAIR_TYPE = """
    AND NOT EXISTS (SELECT 1 FROM job_type_controls a WHERE a.type = '*' AND a.paused)
    AND NOT EXISTS (
        SELECT 1 FROM job_type_controls c
        WHERE c.type = jobs.type
          AND (c.paused OR ((c.max_running IS NOT NULL OR c.max_per_minute IS NOT NULL)
                            AND NOT c.type = ANY(CAST(:locked AS text[]))))
    )
"""

FAIR_CLAIM = sql(
    f"""
    WITH RECURSIVE owners AS (
        (SELECT user_id FROM jobs WHERE status = 'queued' ORDER BY user_id LIMIT 1)
        UNION ALL
        SELECT (SELECT j.user_id FROM jobs j WHERE j.status = 'queued' AND j.user_id > o.user_id
                ORDER BY j.user_id LIMIT 1)
        FROM owners o WHERE o.user_id IS NOT NULL
    ), room AS MATERIALIZED (
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
          AND (c.max_running IS NOT NULL OR c.max_per_minute IS NOT NULL)  -- a room for the type as a whole
    ), cand AS MATERIALIZED (
        SELECT l.* FROM owners o CROSS JOIN LATERAL (
            SELECT id, user_id, type, priority, run_at FROM jobs
            WHERE jobs.user_id = o.user_id AND {CLAIMABLE} AND {SERVED} {FAIR_TYPE}
            ORDER BY {ORDER}
            LIMIT :limit
        ) l
        WHERE o.user_id IS NOT NULL
    ), running AS MATERIALIZED (
        SELECT r.user_id, r.type, count(*) AS n FROM jobs r
        WHERE r.status = 'in_progress' AND r.user_id IN (SELECT DISTINCT user_id FROM cand)
        GROUP BY r.user_id, r.type
    ), by_type AS (
        SELECT t.id, t.user_id, t.type, t.priority, t.run_at FROM (
            SELECT cand.*, row_number() OVER (PARTITION BY cand.type ORDER BY {ORDER}) AS nth FROM cand
        ) t LEFT JOIN room ON room.type = t.type
        WHERE room.type IS NULL OR t.nth <= room.n
    ), by_user_type AS (
        SELECT t.id, t.user_id, t.priority, t.run_at FROM (
            SELECT by_type.*, row_number() OVER (PARTITION BY user_id, type ORDER BY {ORDER}) AS nth
            FROM by_type
        ) t
        LEFT JOIN job_type_controls c ON c.type = t.type
        LEFT JOIN running r ON r.user_id = t.user_id AND r.type = t.type
        WHERE c.max_running_per_user IS NULL OR t.nth + COALESCE(r.n, 0) <= c.max_running_per_user
    ), picked AS MATERIALIZED (
        SELECT id FROM jobs WHERE {CLAIMABLE} AND id IN (
            SELECT t.id FROM (
                SELECT by_user_type.*, row_number() OVER (PARTITION BY user_id ORDER BY {ORDER}) AS nth
                FROM by_user_type
            ) t
            WHERE :user_max = 0
               OR t.nth + (SELECT COALESCE(sum(r.n), 0) FROM running r WHERE r.user_id = t.user_id) <= :user_max
            ORDER BY {ORDER}
            LIMIT :limit
        )
        FOR UPDATE SKIP LOCKED
    ){CLAIMED_FROM_PICKED}    """
)


async def fair_rules(conn: AsyncConnection, types: Sequence[str] | None, user_max: int) -> bool:
    """Whether a claim of ``types`` must be fair: ``user_max`` is set, or one of the types has a
    per-person limit."""
    if user_max > 0:
        return True
    params = {"types": None if types is None else list(types)}
    return bool((await conn.execute(PER_USER_RULES, params)).scalar())


async def claim_fairly(
    conn: AsyncConnection,
    worker_id: str,
    limit: int,
    lease_secs: float,
    *,
    types: Sequence[str] | None = None,
    user_max: int = 0,
) -> Claimed:
    """Claim like :func:`app.jobs.queue.claim_within_limits`, and within each person's limits, in the
    caller's transaction (which must commit promptly: it holds the fair-claim lock)."""
    await conn.execute(FAIR_LOCK)
    limited, locked = await lock_limits(conn, types)
    if limit <= 0:
        return Claimed([], limited=True)
    params = {**_params(worker_id, limit, lease_secs, types), "locked": locked, "user_max": user_max}
    jobs = claimed_jobs(await fetch_rows(conn, FAIR_CLAIM, params))
    # always "limited": the worker keeps taking this path while a per-person rule may apply
    return Claimed(jobs, limited=True, held_back=tuple(locked) if len(jobs) < limit else ())


async def claim_within_all_limits(
    conn: AsyncConnection,
    worker_id: str,
    limit: int,
    lease_secs: float,
    *,
    types: Sequence[str] | None = None,
    user_max: int = 0,
) -> Claimed:
    """:func:`claim_fairly` while a per-person rule applies to ``types``, else
    :func:`app.jobs.queue.claim_within_limits`; in the caller's transaction."""
    if await fair_rules(conn, types, user_max):
        return await claim_fairly(conn, worker_id, limit, lease_secs, types=types, user_max=user_max)
    return await claim_within_limits(conn, worker_id, limit, lease_secs, types=types)
