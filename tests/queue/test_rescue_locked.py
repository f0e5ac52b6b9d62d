"""The rescue of expired leases waits for no lock another transaction holds: a lost step whose pipeline
row a stuck session keeps locked is left for a later pass, and every other lost job is rescued now."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

import tests.support.processors  # noqa: F401  (registers test.effect)
from app.jobs import queue
from app.settings import Settings
from tests.support.factories import TestUser, make_job


async def test_a_lost_step_whose_pipeline_is_locked_elsewhere_does_not_hold_the_rescue_of_the_others(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, db_url: str
) -> None:
    async with engine.begin() as conn:
        pipeline = await queue.create_pipeline(
            conn,
            name="Held",
            steps=[{"key": "a", "type": "test.effect", "input_data": {"seconds": 0}}],
            user_id=owner.id,
            settings=settings,
        )
    step = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1", pipeline["id"])
    alone = (await make_job(engine, settings, owner, "test.effect", {"seconds": 0}))["id"]
    async with engine.begin() as conn:
        assert len(await queue.claim(conn, "gone-worker", 10, 0.01)) == 2
    await asyncio.sleep(0.05)
    holder = await asyncpg.connect(db_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM pipelines WHERE id = $1 FOR UPDATE", pipeline["id"])
            async with asyncio.timeout(5), engine.begin() as conn:
                rescued = await queue.rescue_expired(conn)
            assert [r["id"] for r in rescued] == [alone]
            assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", step) == "in_progress"
        # the lock let go, the next pass rescues the step
        async with asyncio.timeout(5), engine.begin() as conn:
            rescued = await queue.rescue_expired(conn)
        assert [(r["id"], r["status"]) for r in rescued] == [(step, "queued")]
    finally:
        await holder.close()
