"""The worker registry: each worker's row (listed on the admin health page while it is seen recently) and
its per-minute throughput samples."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.queue.common import sql

REGISTER_WORKER = sql(
    """
    INSERT INTO workers (id, hostname, pid, concurrency, version, listener_connected)
    VALUES (:id, :hostname, :pid, :concurrency, :version, false)
    ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stopping = false
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
FORGET_OLD = sql(
    """
    WITH w AS (DELETE FROM workers WHERE last_seen_at < now() - interval '1 day' RETURNING 1),
         t AS (DELETE FROM throughput_samples WHERE minute < now() - interval '1 day' RETURNING 1)
    SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM t)
    """
)


async def register_worker(
    conn: AsyncConnection, *, worker_id: str, hostname: str, pid: int, concurrency: int, version: str
) -> None:
    """Insert this worker's row, listed by the admin health page while it is seen recently."""
    await conn.execute(
        REGISTER_WORKER,
        {"id": worker_id, "hostname": hostname, "pid": pid, "concurrency": concurrency, "version": version},
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


async def forget_old(conn: AsyncConnection) -> None:
    """Housekeeping: worker rows and throughput samples older than a day."""
    await conn.execute(FORGET_OLD)
