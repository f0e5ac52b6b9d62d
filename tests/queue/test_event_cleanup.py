"""A job's events go with the job, whichever way the job goes: deleted by an admin, by the retention
sweep with its pipeline, with its owner's account, by ``TRUNCATE``, and when the delete waited for a
transaction that wrote one more event for the job. ``job_events.job_id`` has no foreign key (it cost an
index probe and a row lock per event on the hot path); triggers on ``jobs`` do the cascade
(migration 0013)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from app import pipelines
from app.jobs import queue
from app.settings import Settings
from tests.support.factories import TestUser, make_job, make_user

ORPHANS = "SELECT count(*) FROM job_events e WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = e.job_id)"


async def _events(pg: asyncpg.Connection, job_id: Any) -> int:
    return int(await pg.fetchval("SELECT count(*) FROM job_events WHERE job_id = $1", job_id))


async def test_events_go_with_a_job_an_admin_deletes_and_with_an_owner_and_a_pipeline(
    engine: AsyncEngine, settings: Settings, owner: TestUser, admin: Any, pg: asyncpg.Connection
) -> None:
    deleted = (await make_job(engine, settings, owner))["id"]
    kept = (await make_job(engine, settings, owner))["id"]
    assert await _events(pg, deleted) == 1
    async with engine.begin() as conn:
        await queue.delete(conn, deleted, admin)
    assert await _events(pg, deleted) == 0
    assert await _events(pg, kept) == 1

    async with engine.begin() as conn:
        row = await pipelines.create(
            conn,
            name="p",
            steps=[{"key": "a", "type": "noop"}, {"key": "b", "type": "noop", "depends_on": ["a"]}],
            user_id=owner.id,
            settings=settings,
        )
    steps = [r["id"] for r in await pg.fetch("SELECT id FROM jobs WHERE pipeline_id = $1", row["id"])]
    assert len(steps) == 2 and all([await _events(pg, s) for s in steps])
    await pg.execute("DELETE FROM pipelines WHERE id = $1", row["id"])  # cascades to its jobs
    assert [await _events(pg, s) for s in steps] == [0, 0]

    leaving = await make_user(pg)
    theirs = (await make_job(engine, settings, leaving))["id"]
    await pg.execute("DELETE FROM users WHERE id = $1", leaving.id)  # cascades to their jobs
    assert await _events(pg, theirs) == 0
    assert await _events(pg, kept) == 1
    assert await pg.fetchval(ORPHANS) == 0

    await pg.execute("TRUNCATE jobs CASCADE")
    assert await pg.fetchval("SELECT count(*) FROM job_events") == 0
    await make_job(engine, settings, owner)
    await pg.execute("TRUNCATE jobs, job_events CASCADE")  # both named: the trigger must not truncate again
    assert await pg.fetchval("SELECT count(*) FROM job_events") == 0


async def test_an_event_committed_while_the_delete_waited_goes_with_the_job(
    engine: AsyncEngine, settings: Settings, owner: TestUser, pg: asyncpg.Connection, db_url: str
) -> None:
    """The writer of an event holds the job's row (it changed it in the same transaction); a delete of
    the job waits for that row, and must then also delete the event committed meanwhile."""
    job = (await make_job(engine, settings, owner))["id"]
    dsn = db_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    writer, deleter = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        tx = writer.transaction()
        await tx.start()
        await writer.execute(
            """
            WITH held AS (UPDATE jobs SET is_active = false WHERE id = $1 RETURNING id, pipeline_id)
            INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor)
            SELECT id, pipeline_id, 'held', 'queued', 'queued', 'test' FROM held
            """,
            job,
        )
        delete = asyncio.create_task(deleter.execute("DELETE FROM jobs WHERE id = $1", job))
        while not await pg.fetchval(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM jobs%'"
        ):
            await asyncio.sleep(0.01)
        await tx.commit()
        assert await delete == "DELETE 1"
    finally:
        await writer.close()
        await deleter.close()
    assert await _events(pg, job) == 0
    assert await pg.fetchval(ORPHANS) == 0
