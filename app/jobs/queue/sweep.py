"""The sweep's work: rescuing jobs whose worker was lost (expired leases), pruning old finished jobs, and
the dependency invariant that tests and health checks assert."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs import outbox
from app.jobs.queue.common import notify_jobs, sql
from app.jobs.queue.consequences import consequences, consequences_of_lost_jobs
from app.jobs.queue.holds import hold_requeued
from app.jobs.states import Status

RESCUE_LOCK_KEY = 0x6A6F6264  # "jobd": one sweeper at a time across processes
PRUNE_BATCH = 500

EXPIRED = sql(
    """
    SELECT id, pipeline_id FROM jobs
    WHERE status = 'in_progress' AND lease_expires_at < now()
    ORDER BY lease_expires_at LIMIT :limit
    """
)
RESCUE = sql(
    """
    WITH expired AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND lease_expires_at < now()
        FOR UPDATE SKIP LOCKED
    ), input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:delays AS float8[])) AS t(id, delay)
    ), upd AS (
        UPDATE jobs j
        SET status = CASE WHEN NOT j.is_active THEN 'cancelled'
                          WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
            run_at = CASE WHEN j.is_active AND j.attempts < j.max_attempts
                          THEN now() + make_interval(secs => input.delay) ELSE j.run_at END,
            completed_at = CASE WHEN NOT j.is_active OR j.attempts >= j.max_attempts THEN now() END,
            error_message = CASE WHEN NOT j.is_active THEN 'cancelled; its worker was lost before it stopped'
                                 ELSE 'lease expired: worker lost (' || j.locked_by || ')' END,
            locked_by = NULL, lease_expires_at = NULL, updated_at = now()
        FROM expired JOIN input ON input.id = expired.id
        WHERE j.id = expired.id AND j.status = 'in_progress'
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key, j.attempts, j.max_attempts,
                  j.error_message, j.run_at
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'rescued', 'in_progress', status, :actor, error_message,
               jsonb_build_object('attempt', attempts, 'max_attempts', max_attempts)
        FROM upd
    )
    SELECT * FROM upd
    """
)


JOB_TYPES = sql("SELECT id, type, attempts FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))")
LOCK_FREE_PIPELINES = sql(
    "SELECT id FROM pipelines WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE SKIP LOCKED"
)

Delays = Mapping[str, Any]
"""Retry delay per job type: a callable ``(attempt) -> seconds``."""


async def _retry_delays(conn: AsyncConnection, ids: list[uuid.UUID], delays: Delays | None) -> list[float]:
    """Seconds until each rescued job (by ``ids``) may run again: its type's delay, else at once."""
    values = [0.0] * len(ids)
    if not delays:
        return values
    meta = (await conn.execute(JOB_TYPES, {"ids": ids})).mappings().all()
    by_id = {m["id"]: m for m in meta}
    for i, jid in enumerate(ids):
        m = by_id.get(jid)
        fn = delays.get(m["type"]) if m else None
        if m is not None and fn is not None:
            values[i] = float(fn(m["attempts"]))
    return values


async def rescue_expired(
    conn: AsyncConnection, *, delays: Delays | None = None, limit: int = 500
) -> list[RowMapping]:
    """The rescue sweep: ``in_progress`` jobs whose lease expired (their worker died or hung).

    Runs under a transaction-level advisory lock, so one process sweeps at a time (others return ``[]``).
    Each job goes back to ``queued`` with the lost attempt counted and the error "lease expired: worker
    lost (<worker id>)", or to ``failed`` when no attempts remain (with one ``rescued`` alert), or to
    ``cancelled`` if a cancel was pending; a job whose pipeline another transaction has locked is left
    for a later pass rather than waited for. ``delays`` gives each job type's retry delay; default: due at
    once. The update repeats the ``lease_expires_at < now()`` guard under the row lock, so a lease
    renewed meanwhile wins.
    """
    got = (await conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": RESCUE_LOCK_KEY})).scalar()
    if not got:
        return []
    candidates = (await conn.execute(EXPIRED, {"limit": limit})).mappings().all()
    # A pipeline another transaction keeps locked (a stuck session) would hold the whole rescue, every
    # worker's, for as long as it is held: its jobs wait for a later pass, the others are rescued now.
    # Nothing is waited for, so the order the pipelines are locked in cannot deadlock.
    pipelines = sorted({c["pipeline_id"] for c in candidates if c["pipeline_id"] is not None}, key=str)
    if pipelines:
        free = set((await conn.execute(LOCK_FREE_PIPELINES, {"ids": pipelines})).scalars())
        candidates = [c for c in candidates if c["pipeline_id"] is None or c["pipeline_id"] in free]
    if not candidates:
        return []
    ids = [c["id"] for c in candidates]
    params = {"ids": ids, "delays": await _retry_delays(conn, ids, delays), "actor": "system:sweep"}
    rows = (await conn.execute(RESCUE, params)).mappings().all()
    if rows:
        await hold_requeued(conn, rows)  # a disabled owner's job, back to waiting, waits held
        await consequences(conn, [r for r in rows if r["status"] != Status.FAILED], "system:sweep")
        dead = [r for r in rows if r["status"] == Status.FAILED]
        if dead:
            await outbox.record_rescue_failures(conn, dead)
            await consequences_of_lost_jobs(conn, dead)
        if any(r["status"] == Status.QUEUED for r in rows):
            await notify_jobs(conn)
    return list(rows)


# --- retention --------------------------------------------------------------------------------------

PRUNE_JOBS = sql(
    """
    WITH doomed AS (
        SELECT id FROM jobs
        WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < now() - make_interval(days => :days)
          AND pipeline_id IS NULL
          AND NOT EXISTS (
              SELECT 1 FROM job_dependencies d JOIN jobs c ON c.id = d.job_id
              WHERE d.depends_on = jobs.id AND c.status NOT IN ('completed', 'failed', 'cancelled')
          )
        ORDER BY completed_at LIMIT :batch
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM jobs WHERE id IN (SELECT id FROM doomed) RETURNING id
    """
)
PRUNE_PIPELINES = sql(
    """
    WITH doomed AS (
        SELECT id FROM pipelines
        WHERE finished_at < now() - make_interval(days => :days)
        ORDER BY finished_at LIMIT :batch
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM pipelines WHERE id IN (SELECT id FROM doomed) RETURNING id
    """
)
PRUNE_BATCHES = sql(
    """
    WITH doomed AS (
        SELECT b.id FROM batches b
        WHERE b.created_at < now() - make_interval(days => :days)
          AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.batch_id = b.id)
        ORDER BY b.created_at LIMIT :batch
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM batches WHERE id IN (SELECT id FROM doomed) RETURNING id
    """
)
"""Batches none of whose jobs is left (the jobs just pruned, or deleted one by one), older than the
retention: an empty batch would only show zero counts. A batch's jobs finish after it was made, so
once retention has taken them all the batch is old enough too; the age check keeps a batch being
created (its jobs go in with it, in one transaction) out of reach all the same."""
PRUNE_ORPHAN_FILES = sql(
    """
    WITH candidate AS MATERIALIZED (
        SELECT f.id, f.user_id FROM files f
        WHERE f.job_id IS NULL AND f.created_at < now() - make_interval(days => :days)
          AND NOT EXISTS (
              SELECT 1 FROM schedules s WHERE strpos(lower(CAST(s.input_data AS text)), CAST(f.id AS text)) > 0
          )
        ORDER BY f.created_at LIMIT :batch
        FOR UPDATE OF f SKIP LOCKED
    ), owner AS (
        SELECT DISTINCT user_id FROM candidate
    ), named AS (
        SELECT lower(v #>> '{}') AS ref, j.id AS job_id
        FROM jobs j CROSS JOIN LATERAL jsonb_path_query(j.input_data, 'strict $.**') v
        WHERE j.user_id IN (SELECT user_id FROM owner) AND jsonb_typeof(v) = 'string'
        UNION ALL
        SELECT lower(v #>> '{}'), (SELECT pj.id FROM jobs pj WHERE pj.pipeline_id = p.id ORDER BY pj.id DESC LIMIT 1)
        FROM pipelines p CROSS JOIN LATERAL jsonb_path_query(p.input_data, 'strict $.**') v
        WHERE p.user_id IN (SELECT user_id FROM owner) AND jsonb_typeof(v) = 'string'
    ), holder AS (
        SELECT DISTINCT ON (c.id) c.id, n.job_id
        FROM candidate c JOIN named n ON n.ref = CAST(c.id AS text)
        WHERE n.job_id IS NOT NULL
        ORDER BY c.id, n.job_id DESC
    ), rehomed AS (
        UPDATE files f SET job_id = holder.job_id FROM holder WHERE f.id = holder.id RETURNING f.id
    )
    DELETE FROM files WHERE id IN (SELECT id FROM candidate) AND id NOT IN (SELECT id FROM holder)
    RETURNING id
    """
)
"""One batch of files no job holds (``files.job_id`` is empty: an upload no job took, or a file whose
job was deleted) and older than the retention. Each is kept if something that can still run names it:

* a job still in the database (waiting, running, or finished and not yet pruned — "Run again" reuses
  its input) or a pipeline: the file is attached to the newest such job (the pipeline's newest step),
  so it lives as long as that job and is not looked for again on every pass;
* a schedule's input: it stays unattached (schedules are few; their inputs are searched every pass).

The rest are deleted. A job may only name its owner's files, so only the owners' jobs and pipelines
are read — once per batch, every value of their input (``jsonb_path_query``), matched by a hash join."""


async def prune(conn: AsyncConnection, retention_days: float, *, batch: int = PRUNE_BATCH) -> dict[str, Any]:
    """Delete one small batch of finished jobs older than ``retention_days``.

    Standalone jobs go individually (their events with them, by the trigger on ``jobs``); a pipeline's
    jobs go only with the whole pipeline, once it has finished — never from under a running one. Files
    then left without a job and older than the retention (those of deleted jobs, and uploads) are deleted
    too, unless a job, pipeline or schedule still in the database names them in its input: then a job or
    pipeline takes the file over (:data:`PRUNE_ORPHAN_FILES`). Batches left without a job go too (:data:`PRUNE_BATCHES`).
    Returns ``{"jobs": n, "pipelines": n, "batches": n, "files": [deleted file ids]}``; the caller removes those
    files' bytes after commit (:meth:`app.files.FileStore.remove`).
    """
    days = float(retention_days)
    job_ids = list((await conn.execute(PRUNE_JOBS, {"days": days, "batch": batch})).scalars())
    pipeline_ids = list(
        (await conn.execute(PRUNE_PIPELINES, {"days": days, "batch": max(1, batch // 10)})).scalars()
    )
    batch_ids = list((await conn.execute(PRUNE_BATCHES, {"days": days, "batch": batch})).scalars())
    file_ids = list((await conn.execute(PRUNE_ORPHAN_FILES, {"days": days, "batch": batch})).scalars())
    return {
        "jobs": len(job_ids),
        "pipelines": len(pipeline_ids),
        "batches": len(batch_ids),
        "files": file_ids,
    }


# --- invariants (tests and health checks) --------------------------------------------------------

STUCK_DEPENDENTS = sql(
    """
    SELECT c.id FROM jobs c
    WHERE c.status = 'queued' AND c.pending_parents > 0 AND (
        EXISTS (
            SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
            WHERE d.job_id = c.id AND p.status IN ('failed', 'cancelled')
        )
        OR c.pending_parents > (
            SELECT count(*) FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
            WHERE d.job_id = c.id AND p.status <> 'completed'
        )
    )
    """
)


async def stuck_dependents(conn: AsyncConnection) -> list[uuid.UUID]:
    """Jobs waiting on a dependency that is failed, cancelled or missing — must always be empty: such a
    job could never run (the invariant behind cancelling dependents and re-opening them on retry)."""
    return list((await conn.execute(STUCK_DEPENDENTS)).scalars())


RUNNING_CLAIMS = sql(
    "SELECT id, claims FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress'"
)


async def running_claims(conn: AsyncConnection, ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """The claim of each of ``ids`` that runs now, on whichever worker holds it (jobs not running are
    left out): what a worker's leftovers (its scratch directories) may still belong to. The claim, not the
    attempt: a retry or a rerun sets the attempt back, so two claims of a job can share an attempt."""
    if not ids:
        return {}
    rows = await conn.execute(RUNNING_CLAIMS, {"ids": ids})
    return {row.id: row.claims for row in rows}
