"""The worker registry: each worker's row (listed on the admin health page while it is seen recently),
with the job types it runs, and its per-minute throughput samples."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.queue.common import sql

FRESH_SECS = 90.0
"""A worker is live while its heartbeat is at most this old (the admin page passes its own figure)."""

REGISTER_WORKER = sql(
    """
    INSERT INTO workers (id, hostname, pid, concurrency, version, listener_connected, types)
    VALUES (:id, :hostname, :pid, :concurrency, :version, false, CAST(:types AS text[]))
    ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stopping = false, types = EXCLUDED.types
    """
)
TOUCH_WORKER = sql(
    """
    UPDATE workers SET last_seen_at = now(), running = :running, stopping = :stopping,
        listener_connected = :listener_connected
    WHERE id = :id
    """
)
RECORD_THROUGHPUT = sql(
    """
    INSERT INTO throughput_samples (minute, worker_id, completed, failed)
    VALUES (date_trunc('minute', now()), :id, :completed, :failed)
    ON CONFLICT (minute, worker_id) DO UPDATE
    SET completed = throughput_samples.completed + EXCLUDED.completed,
        failed = throughput_samples.failed + EXCLUDED.failed
    """
)
UNREGISTER_WORKER = sql("DELETE FROM workers WHERE id = :id")
# Tallies are kept for a day beyond the longest range /admin's chart shows (a week).
FORGET_OLD = sql(
    """
    WITH w AS (DELETE FROM workers WHERE last_seen_at < now() - interval '1 day' RETURNING 1),
         t AS (DELETE FROM throughput_samples WHERE minute < now() - interval '8 days' RETURNING 1),
         s AS (DELETE FROM job_type_starts WHERE at < now() - interval '1 minute' RETURNING 1)
    SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM t), (SELECT count(*) FROM s)
    """
)
# Waiting types by a skip scan of ix_jobs_live (status, type), each kept only when no live worker that is
# not stopping runs it (a worker row without types is of an earlier version, which runs every type).
TYPES_WITHOUT_WORKERS = sql(
    """
    WITH RECURSIVE t(type) AS (
        (SELECT type FROM jobs WHERE status = 'queued' ORDER BY type LIMIT 1)
        UNION ALL
        SELECT (SELECT j.type FROM jobs j WHERE status = 'queued' AND j.type > t.type ORDER BY j.type LIMIT 1)
        FROM t WHERE t.type IS NOT NULL
    ), live AS MATERIALIZED (
        SELECT types FROM workers
        WHERE last_seen_at > now() - make_interval(secs => :fresh) AND NOT stopping
    )
    SELECT t.type,
           (SELECT count(*) FROM (
                SELECT 1 FROM jobs j WHERE j.status = 'queued' AND j.type = t.type LIMIT 10001
            ) n) AS waiting
    FROM t
    WHERE t.type IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM live WHERE live.types IS NULL OR t.type = ANY(live.types))
    ORDER BY t.type
    LIMIT 200
    """
)


async def register_worker(
    conn: AsyncConnection,
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    concurrency: int,
    version: str,
    types: Sequence[str] | None = None,
) -> None:
    """Insert this worker's row, listed by the admin health page while it is seen recently. ``types``: the
    job types it runs (``None``: every type)."""
    await conn.execute(
        REGISTER_WORKER,
        {
            "id": worker_id,
            "hostname": hostname,
            "pid": pid,
            "concurrency": concurrency,
            "version": version,
            "types": None if types is None else sorted(types),
        },
    )


async def touch_worker(
    conn: AsyncConnection,
    worker_id: str,
    *,
    running: int,
    stopping: bool,
    listener_connected: bool,
    completed: int = 0,
    failed: int = 0,
) -> None:
    """Refresh the worker's row (its heartbeat) and add finished counts to this minute's sample."""
    await conn.execute(
        TOUCH_WORKER,
        {"id": worker_id, "running": running, "stopping": stopping, "listener_connected": listener_connected},
    )
    if completed or failed:
        await conn.execute(RECORD_THROUGHPUT, {"id": worker_id, "completed": completed, "failed": failed})


SET_WORKER_HEALTH = sql("UPDATE workers SET health = CAST(:health AS jsonb) WHERE id = :id")


async def set_worker_health(conn: AsyncConnection, worker_id: str, health: str) -> None:
    """Store what the worker reports about itself besides its counts (JSON text: event loop stalls,
    lingering processor tasks, failing lease renewal), for the admin health page."""
    await conn.execute(SET_WORKER_HEALTH, {"id": worker_id, "health": health})


async def unregister_worker(conn: AsyncConnection, worker_id: str) -> None:
    await conn.execute(UNREGISTER_WORKER, {"id": worker_id})


# A session of the worker's own (its name, and a process the worker recorded, started when the worker
# noted: a process id reused by a later session, even one of the worker's own, is another session), never
# this one. The identity is checked in the statement that terminates.
RECORDED_SESSIONS = """
    FROM pg_stat_activity AS a
    JOIN unnest(CAST(:pids AS int[]), CAST(:started AS timestamptz[])) AS s (pid, started) ON s.pid = a.pid
    WHERE a.application_name = :name AND a.pid <> pg_backend_pid()
      AND (s.started IS NULL OR a.backend_start = s.started)
"""
END_SESSIONS = sql("SELECT a.pid, pg_terminate_backend(a.pid)" + RECORDED_SESSIONS)
SESSIONS_LEFT = sql("SELECT count(*)" + RECORDED_SESSIONS)


async def end_sessions(
    conn: AsyncConnection,
    pids: Sequence[int],
    application_name: str,
    *,
    started: Sequence[datetime | None] | None = None,
    wait_secs: float = 2.0,
) -> bool:
    """End the server sessions ``pids`` of a worker's (``application_name``), rolling back whatever they
    were running, and wait (up to ``wait_secs``) until they are gone; returns whether they are.
    ``started``, one for each of ``pids``: when each session started (``None``: not known, the process
    id and the name alone then): a process id reused since by another session — of another program, or
    a later connection of the same worker — is left alone. ``conn`` in autocommit mode."""
    params = {
        "pids": list(pids),
        "started": list(started) if started is not None else [None] * len(pids),
        "name": application_name,
    }
    await conn.execute(END_SESSIONS, params)
    deadline = time.monotonic() + wait_secs
    while (await conn.execute(SESSIONS_LEFT, params)).scalar_one():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def forget_old(conn: AsyncConnection) -> None:
    """Housekeeping: worker rows older than a day, throughput samples older than eight days, starts older
    than a minute (the claim prunes those of the types it takes; these are of types whose limit was
    lifted)."""
    await conn.execute(FORGET_OLD)


async def types_without_workers(conn: AsyncConnection, *, fresh_secs: float = FRESH_SECS) -> list[RowMapping]:
    """Job types with queued jobs that no live worker runs (during a rolling deploy, or with a processor
    module missing on every worker): their jobs wait until a worker that runs them starts.

    Rows ``{"type", "waiting"}``: the queued jobs of the type, counted up to 10,001 (a poll stays cheap
    however long the backlog). A worker is live while its heartbeat is at most ``fresh_secs`` old and it
    is not stopping.
    """
    return list((await conn.execute(TYPES_WITHOUT_WORKERS, {"fresh": fresh_secs})).mappings().all())
