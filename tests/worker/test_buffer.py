"""The worker's buffer of claimed jobs ahead of its slots (app/worker/buffer.py): a buffered job keeps
its lease while it waits, goes back to ``queued`` (attempt not counted) when the worker stops, and a
higher-priority job enqueued after the buffer filled starts before the lower-priority jobs beyond it."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from app.jobs import queue
from app.jobs.queue import NewJob
from tests.support.factories import TestUser, event_kinds
from tests.support.workers import running_worker, wait_until


async def _enqueue(engine: Any, settings: Any, user: TestUser, job_type: str, data: dict, **kw: Any) -> Any:
    done = await queue.enqueue(
        engine, NewJob(type=job_type, input_data=data, user_id=user.id, **kw), settings
    )
    return done.job["id"]


async def _in_progress(pg: asyncpg.Connection) -> int:
    return int(await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'in_progress'"))


async def test_a_buffered_job_keeps_its_lease_and_is_released_at_shutdown(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """One slot, busy with a long job; the next job waits in the buffer for longer than a lease. Its lease
    is renewed meanwhile (no rescue, one claim), and when the worker stops it is handed back: ``queued``,
    attempt not counted, a ``released`` event."""
    settings = make_settings(
        worker_visibility_timeout_secs=3, worker_sweep_interval_secs=0.3, worker_shutdown_grace_secs=0.2
    )
    long_job = await _enqueue(engine, settings, owner, "sleep", {"seconds": 30}, priority=5)
    waiting = await _enqueue(engine, settings, owner, "noop", {})
    async with running_worker(settings, concurrency=1, buffer=1) as worker:
        await wait_until(lambda: _in_progress_is(pg, 2), what="one running, one buffered")
        assert waiting in worker.buffer
        await asyncio.sleep(4)  # more than a lease
        row = await pg.fetchrow("SELECT status, attempts, locked_by FROM jobs WHERE id = $1", waiting)
        assert dict(row) == {"status": "in_progress", "attempts": 1, "locked_by": worker.id}
        assert await event_kinds(pg, waiting) == ["enqueued", "claimed"], "the buffered job was rescued"
    row = await pg.fetchrow("SELECT status, attempts, locked_by FROM jobs WHERE id = $1", waiting)
    assert dict(row) == {"status": "queued", "attempts": 0, "locked_by": None}
    assert await event_kinds(pg, waiting) == ["enqueued", "claimed", "released"]
    message = await pg.fetchval(
        "SELECT message FROM job_events WHERE job_id = $1 AND kind = 'released'", waiting
    )
    assert "not started" in message
    assert (await pg.fetchval("SELECT status FROM jobs WHERE id = $1", long_job)) == "queued"


async def _in_progress_is(pg: asyncpg.Connection, n: int) -> bool:
    return await _in_progress(pg) == n


async def test_a_later_higher_priority_job_is_not_starved_by_the_buffer(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """One slot and a buffer of one, six low-priority jobs: one runs, one waits in the buffer. A
    higher-priority job enqueued then starts before the four low-priority jobs beyond the buffer."""
    settings = make_settings()
    low = [await _enqueue(engine, settings, owner, "sleep", {"seconds": 0.3}) for _ in range(6)]
    async with running_worker(settings, concurrency=1, buffer=1):
        await wait_until(lambda: _in_progress_is(pg, 2), what="one running, one buffered")
        high = await _enqueue(engine, settings, owner, "sleep", {"seconds": 0.3}, priority=10)
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 7 FROM jobs WHERE status = 'completed'"),
            what="all done",
            timeout=30,
        )
    started = {
        r["id"]: r["started_at"]
        for r in await pg.fetch("SELECT id, started_at FROM jobs WHERE id = ANY($1::uuid[])", [*low, high])
    }
    before_high = sorted(j for j in low if started[j] < started[high])
    assert len(before_high) <= 2, f"{len(before_high)} lower-priority jobs started before the higher one"
