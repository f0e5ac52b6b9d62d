"""Case N14: many parents finishing at once on different workers release the children they share without
deadlocks — each completion locks the dependents it releases in one order (by id), so two completions
never wait for each other in a cycle — and every child runs exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support.factories import TestUser
from tests.support.workers import running_worker, wait_until

DEADLOCKS = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"


async def _deadlocks(pg: asyncpg.Connection) -> int:
    await pg.execute("SELECT pg_stat_clear_snapshot()")
    return int(await pg.fetchval(DEADLOCKS))


async def _round(
    engine: AsyncEngine, settings: Settings, owner: TestUser, parents: int, children: int, fan_in: int
) -> list[uuid.UUID]:
    """``parents`` standalone jobs due at the same moment, then ``children`` jobs each depending on a
    shuffled ``fan_in`` of them; returns the children's ids."""
    async with engine.begin() as conn:
        at = (await conn.exec_driver_sql("SELECT now()")).scalar_one()
        ids = await queue.enqueue_many(
            conn,
            [NewJob(type="noop", input_data={}, user_id=owner.id, run_at=at) for _ in range(parents)],
            settings,
        )
        kids = [
            NewJob(type="noop", input_data={}, user_id=owner.id, depends_on=random.sample(ids, fan_in))
            for _ in range(children)
        ]
        for kid in kids:
            await queue.enqueue(conn, kid, settings)
    return [k.id for k in kids]


async def test_parents_finishing_at_once_release_shared_children_without_deadlocks(
    engine: AsyncEngine, make_settings, owner: TestUser, pg: asyncpg.Connection, long_run: bool
) -> None:
    settings = make_settings(max_concurrent_jobs=10)
    before = await _deadlocks(pg)
    rounds = [(20, 20, 20)] * (5 if long_run else 2) + [(40, 40, 20)]
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(3):
            await stack.enter_async_context(running_worker(settings))
        children: list[uuid.UUID] = []
        for parents, kids, fan_in in rounds:
            children += await _round(engine, settings, owner, parents, kids, fan_in)
            await asyncio.sleep(0.2)
        await wait_until(
            lambda: pg.fetchval(
                "SELECT count(*) = $2 FROM jobs WHERE id = ANY($1::uuid[]) AND status = 'completed'",
                children,
                len(children),
            ),
            timeout=120,
            what="every child to complete",
        )
    runs = await pg.fetchval(
        "SELECT count(*) FROM job_events WHERE job_id = ANY($1::uuid[]) AND kind = 'claimed'", children
    )
    assert runs == len(children)  # each child ran exactly once
    await asyncio.sleep(1.5)  # statistics reach pg_stat_database when sessions flush them
    assert await _deadlocks(pg) == before
