"""A rate limit is a rolling minute, across worker processes: at most ``max_per_minute`` starts in any 60
seconds by the database's clock. (A fixed window opened by its first start let up to twice the limit start
within seconds around its edge.) With ``--long`` the test takes a little over a real minute; in CI the
first starts are moved 50 s into the past as they are made (the window's rows and their events), so the
same edge comes after 10 s."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg

from app import controls
from app.jobs import queue
from app.jobs.queue import NewJob
from tests.support.factories import make_user
from tests.support.workers import WorkerProcess, wait_until

LIMIT = 5


class Admin:
    def __init__(self, uid: int, email: str) -> None:
        self.id, self.email, self.is_admin = uid, email, True


async def noops(engine: Any, settings: Any, user_id: int, n: int) -> None:
    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn, [NewJob(type="noop", input_data={}, user_id=user_id) for _ in range(n)], settings
        )


async def starts(pg: asyncpg.Connection) -> list[Any]:
    return [r["at"] for r in await pg.fetch("SELECT at FROM job_events WHERE kind = 'claimed' ORDER BY at")]


async def backdate(pg: asyncpg.Connection, secs: float, since: Any, until: Any) -> None:
    """The starts made from ``since`` until before ``until`` (the limit's rows and their events), ``secs``
    earlier."""
    shift = timedelta(seconds=secs)
    async with pg.transaction():
        for table, which in (("job_type_starts", "true"), ("job_events", "kind = 'claimed'")):
            await pg.execute(
                f"UPDATE {table} SET at = at - $1::interval WHERE {which} AND at >= $2 AND at < $3",
                shift,
                since,
                until,
            )


def most_in_a_minute(times: list[Any]) -> int:
    """The most starts within any 60 seconds (each window opening at a start)."""
    return max((sum(1 for u in times if t <= u < t + timedelta(seconds=60)) for t in times), default=0)


# Case N09 (docs/cases.md).
async def test_at_most_n_starts_in_any_sixty_seconds_across_two_worker_processes(
    make_settings, engine, pg, tmp_path, long_run
) -> None:
    """max_per_minute=5, two worker processes polling every 2 s. One start at t0, four at t0+3 s: the sixth
    may start at t0+60 s — and does, promptly: the worker sleeps until the window moves on, not a poll
    interval — and the seventh not before t0+63 s (a window reset at t0+60 s let five more start then:
    nine within a minute). In CI, t0 is 50 s ago: each start is moved back as soon as it is made, before
    the workers compute the next one's time from it."""
    past = 0.0 if long_run else 50.0
    settings = make_settings(max_concurrent_jobs=4, job_processor_poll_interval=2.0)
    user = await make_user(pg, admin=True)
    async with engine.begin() as conn:
        await controls.set_limits(
            conn, "noop", max_running=None, max_per_minute=LIMIT, admin=Admin(user.id, user.email)
        )
    procs = [WorkerProcess(settings, tmp_path / f"w{i}.log") for i in range(2)]
    try:
        await wait_until(lambda: pg.fetchval("SELECT count(*) = 2 FROM workers"), what="two workers")
        await noops(engine, settings, user.id, 1)
        await wait_until(lambda: pg.fetchval("SELECT count(*) = 1 FROM jobs WHERE status = 'completed'"))
        (t0,) = await starts(pg)
        if past:
            await backdate(pg, past, since=t0 - timedelta(seconds=5), until=t0 + timedelta(seconds=1))
            t0 -= timedelta(seconds=past)
        await asyncio.sleep(3.0)
        await noops(engine, settings, user.id, 12)
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = $1 FROM job_events WHERE kind = 'claimed'", LIMIT),
            what="the rest of the first minute's starts",
        )
        if past:  # the four (not the sixth, due at t0+60 s, should this come late)
            await backdate(pg, past, since=t0 + timedelta(seconds=past + 1), until=t0 + timedelta(seconds=59))
        await asyncio.sleep(
            max(0.0, (t0 + timedelta(seconds=62.5) - await pg.fetchval("SELECT now()")).total_seconds())
        )
        times = await starts(pg)
        assert len(times) == LIMIT + 1, [str(t - t0) for t in times]
        assert timedelta(seconds=60) <= times[-1] - t0 < timedelta(seconds=61), times[-1] - t0
        assert most_in_a_minute(times) == LIMIT
    finally:
        for p in procs:
            p.close()
