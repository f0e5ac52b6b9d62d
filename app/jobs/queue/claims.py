"""Claiming: a worker takes due jobs (``queued`` → ``in_progress``) under a lease, in one statement."""

from __future__ import annotations

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.queue.common import fetch_rows, sql
from app.jobs.rows import CLAIM_FIELDS, ClaimedJob, claimed_jobs

CLAIM_COLUMNS = ", ".join(CLAIM_FIELDS)
"""The job columns a claim returns (:class:`~app.jobs.rows.ClaimedJob` adds ``parents``)."""

# The claimable predicate, in one place: due, queued, not cancelled, no unfinished dependency, and its
# type not paused or limited (limited types are claimed by CLAIM_LIMITED under the type's control-row
# lock so that no worker overshoots).
CLAIMABLE = """
    status = 'queued' AND is_active AND pending_parents = 0 AND run_at <= now()
"""
# Written as an uncorrelated check of the '*' row (one InitPlan per claim) and a per-candidate lookup of the
# type's own row kept as a SubPlan (``OFFSET 0`` stops PostgreSQL from turning it into an anti-join), not
# as one correlated NOT EXISTS: the planner cannot estimate an anti-join against the small, rarely
# analysed controls table (an empty table is assumed to hold ~500 rows), and with that misestimate it
# read every due row and sorted them on each claim (or planned a parallel scan) instead of reading the
# first few in claim order from ix_jobs_claim: a claim whose cost grew with the backlog (found by the
# EXPLAIN tests on seeded tables in tests/test_ops.py). Same rows either way.
NOT_CONTROLLED = """
    AND NOT EXISTS (SELECT 1 FROM job_type_controls a WHERE a.type = '*' AND a.paused)
    AND NOT EXISTS (
        SELECT 1 FROM job_type_controls c
        WHERE c.type = jobs.type
          AND (c.paused OR (c.type <> '*' AND (c.max_running IS NOT NULL OR c.max_per_minute IS NOT NULL)))
        OFFSET 0
    )
"""

_CLAIM_UPDATE = f"""
    claimed AS (
        UPDATE jobs j
        SET status = 'in_progress', attempts = j.attempts + 1, locked_by = :worker,
            lease_expires_at = now() + make_interval(secs => :lease), started_at = now(), updated_at = now(),
            progress = NULL, progress_message = NULL
        WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.status = 'queued'  -- primary-key lookups
        RETURNING {", ".join("j." + c for c in CLAIM_FIELDS)}
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, data)
        SELECT id, pipeline_id, 'claimed', 'queued', 'in_progress', :actor, jsonb_build_object('attempt', attempts)
        FROM claimed
    )
    SELECT claimed.*, (
        SELECT jsonb_object_agg(COALESCE(p.step_key, p.id::text), p.result_data)
        FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on WHERE d.job_id = claimed.id
    ) AS parents
    FROM claimed ORDER BY priority DESC, run_at, id
"""

CLAIM = sql(
    f"""
    WITH picked AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE {CLAIMABLE} {NOT_CONTROLLED}
        ORDER BY priority DESC, run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), {_CLAIM_UPDATE}
    """
)

CLAIM_LIMITED = sql(
    f"""
    WITH picked AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE {CLAIMABLE} AND type = :type
        ORDER BY priority DESC, run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), {_CLAIM_UPDATE}
    """
)

LIMITED_TYPES = sql(
    """
    SELECT type, max_running, max_per_minute FROM job_type_controls
    WHERE type <> '*' AND NOT paused AND (max_running IS NOT NULL OR max_per_minute IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM job_type_controls a WHERE a.type = '*' AND a.paused)
    ORDER BY type
    """
)
LOCK_CONTROL = sql(
    """
    SELECT type, max_running, max_per_minute, paused,
           CASE WHEN window_start IS NULL OR window_start <= now() - interval '1 minute' THEN 0 ELSE window_count END
               AS window_count
    FROM job_type_controls WHERE type = :type FOR UPDATE
    """
)
COUNT_RUNNING_OF_TYPE = sql("SELECT count(*) FROM jobs WHERE status = 'in_progress' AND type = :type")
BUMP_WINDOW = sql(
    """
    UPDATE job_type_controls
    SET window_start = CASE WHEN window_start IS NULL OR window_start <= now() - interval '1 minute'
                            THEN now() ELSE window_start END,
        window_count = CASE WHEN window_start IS NULL OR window_start <= now() - interval '1 minute'
                            THEN :n ELSE window_count + :n END
    WHERE type = :type
    """
)


async def claim(conn: AsyncConnection, worker_id: str, limit: int, lease_secs: float) -> list[ClaimedJob]:
    """Claim up to ``limit`` due jobs for ``worker_id`` in one statement.

    ``queued`` → ``in_progress``: ``attempts + 1``, lease until ``now() + lease_secs``, ``started_at``;
    ordered ``priority DESC, run_at, id``; ``FOR UPDATE SKIP LOCKED`` so concurrent claimers never take
    the same row. Job types with a concurrency or rate limit are claimed by :func:`claim_limited`
    instead.
    """
    if limit <= 0:
        return []
    params = {"worker": worker_id, "limit": limit, "lease": float(lease_secs), "actor": f"worker:{worker_id}"}
    return claimed_jobs(await fetch_rows(conn, CLAIM, params))


async def limited_types(conn: AsyncConnection) -> list[RowMapping]:
    """Job types that have a concurrency or rate limit and are not paused."""
    return list((await conn.execute(LIMITED_TYPES)).mappings().all())


async def claim_limited(
    conn: AsyncConnection, worker_id: str, job_type: str, limit: int, lease_secs: float
) -> list[ClaimedJob]:
    """Claim up to ``limit`` jobs of a limited ``job_type`` without exceeding its limits.

    Holds the type's ``job_type_controls`` row lock (``FOR UPDATE``) for the rest of the caller's
    transaction, so claimers of that type are serialised and the count of running jobs they see is
    exact: at most ``max_running`` run at once across all workers, and at most ``max_per_minute`` start
    per rolling minute. The caller must commit promptly.
    """
    control = (await conn.execute(LOCK_CONTROL, {"type": job_type})).mappings().first()
    if control is None or control["paused"] or limit <= 0:
        return []
    allowance = limit
    if control["max_running"] is not None:
        running = (await conn.execute(COUNT_RUNNING_OF_TYPE, {"type": job_type})).scalar_one()
        allowance = min(allowance, control["max_running"] - running)
    if control["max_per_minute"] is not None:
        allowance = min(allowance, control["max_per_minute"] - control["window_count"])
    if allowance <= 0:
        return []
    params = {
        "worker": worker_id,
        "limit": allowance,
        "lease": float(lease_secs),
        "actor": f"worker:{worker_id}",
        "type": job_type,
    }
    rows = claimed_jobs(await fetch_rows(conn, CLAIM_LIMITED, params))
    if rows and control["max_per_minute"] is not None:
        await conn.execute(BUMP_WINDOW, {"type": job_type, "n": len(rows)})
    return rows


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
