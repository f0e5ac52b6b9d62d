"""A step key holds no dot, wherever a step gets its key: a pipeline's steps, a template's, a
processor's next jobs (their own keys and the ones made for them).

``{"$ref": "<step>.<field>"}`` ends the step's key at its first dot: a step ``x.y`` could never be read
(``x.y.body`` reads step ``x``), and beside a step ``x`` the reference would be ambiguous.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app import pipelines
from app.errors import BadInput
from app.jobs import queue
from app.jobs.graph import KEY_PATTERN, plan_next_jobs
from app.jobs.queue import NewJob, Outcome
from app.jobs.types import NextJob
from app.settings import Settings
from tests.support.factories import TestUser

DOT = "must not contain '.'"


async def test_a_pipeline_step_key_with_a_dot_is_refused_saying_why(
    engine: AsyncEngine, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    steps: list[dict[str, Any]] = [
        {"key": "x", "type": "noop"},
        {"key": "x.y", "type": "noop", "depends_on": ["x"]},
        {"key": "z", "type": "noop", "depends_on": ["x.y"], "input_data": {"seconds": {"$ref": "x.y.n"}}},
    ]
    with pytest.raises(BadInput) as refused:
        async with engine.begin() as conn:
            await pipelines.create(conn, name="p", steps=steps, user_id=owner.id, settings=settings)
    message = refused.value.errors["steps[1].key"]
    assert DOT in message and "$ref" in message, message
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


def test_no_shipped_template_has_a_key_with_a_dot() -> None:
    keys = [s.key for t in pipelines.all_templates() for s in t.steps]
    assert keys and all(KEY_PATTERN.match(k) and "." not in k for k in keys), keys


async def finish_with(engine: AsyncEngine, settings: Settings, owner_id: int, nexts: list[NextJob]) -> Any:
    async with engine.begin() as conn:
        new = NewJob(type="noop", input_data={}, user_id=owner_id)
        job = (await queue.enqueue(conn, new, settings)).job
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.claim(conn, "w1", 1, 60)] == [job["id"]]
    outcome = Outcome(job["id"], "completed", result="{}", next_jobs=nexts)
    async with engine.begin() as conn:
        await queue.finish(conn, "w1", [outcome], settings)
    return job


async def test_a_next_jobs_key_with_a_dot_is_refused_when_planned_and_when_inserted(
    engine: AsyncEngine, settings: Settings, admin: TestUser, pg: asyncpg.Connection
) -> None:
    nexts = [NextJob(type="noop", key="a"), NextJob(type="noop", key="a.b", depends_on=["a"])]
    with pytest.raises(BadInput) as planned:
        plan_next_jobs({}, nexts, settings)
    assert DOT in planned.value.errors["next_jobs[1].key"]
    with pytest.raises(BadInput) as inserted:
        await finish_with(engine, settings, admin.id, nexts)
    assert DOT in inserted.value.errors["next_jobs[1].key"]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE step_key LIKE '%.%'") == 0


async def test_a_next_job_made_a_key_gets_no_dot_from_its_creators_key(
    engine: AsyncEngine, settings: Settings, admin: TestUser, pg: asyncpg.Connection
) -> None:
    """A creator's key from before dots were refused: the key made for its next job is still readable."""
    async with engine.begin() as conn:
        row = await pipelines.create(
            conn, name="p", steps=[{"key": "old", "type": "noop"}], user_id=admin.id, settings=settings
        )
    await pg.execute("UPDATE jobs SET step_key = 'old.one' WHERE pipeline_id = $1", row["id"])
    async with engine.begin() as conn:
        assert len(await queue.claim(conn, "w1", 1, 60)) == 1
    jid = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1", row["id"])
    outcome = Outcome(jid, "completed", result="{}", next_jobs=[NextJob(type="noop")])
    async with engine.begin() as conn:
        await queue.finish(conn, "w1", [outcome], settings)
    keys = {
        r["step_key"] for r in await pg.fetch("SELECT step_key FROM jobs WHERE pipeline_id = $1", row["id"])
    }
    assert keys == {"old.one", "old-one-next-1"}
