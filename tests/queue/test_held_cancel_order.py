"""Cancelling a person's held jobs locks each job's pipeline before the job, also for a job held after
the cancel read which pipelines to lock (one lock order everywhere: a pipeline, then its jobs)."""

from __future__ import annotations

import uuid
from typing import Any

from app import pipelines
from app.jobs import queue
from app.jobs.queue import held_cancel
from tests.support.factories import TestUser


async def _pipeline(engine: Any, settings: Any, owner: TestUser, name: str) -> uuid.UUID:
    steps = [{"key": "a", "type": "noop", "input_data": {}, "depends_on": []}]
    async with engine.begin() as conn:
        row = await pipelines.create(conn, name=name, steps=steps, user_id=owner.id, settings=settings)
    return row["id"]


async def test_a_job_held_after_the_read_is_cancelled_only_with_its_pipeline_locked(
    engine, settings, owner, pg, monkeypatch
) -> None:
    first = await _pipeline(engine, settings, owner, "first")
    later = await _pipeline(engine, settings, owner, "later")
    await pg.execute("UPDATE jobs SET is_active = false WHERE pipeline_id = $1", first)
    locked: set[uuid.UUID] = set()
    lock = held_cancel.lock_pipelines

    async def lock_pipelines(conn: Any, ids: Any) -> None:
        ids = list(ids)
        if not locked:  # between the read of the pipelines and their lock: a step of another is held
            await pg.execute("UPDATE jobs SET is_active = false WHERE pipeline_id = $1", later)
        await lock(conn, ids)
        locked.update(i for i in ids if i is not None)

    monkeypatch.setattr(held_cancel, "lock_pipelines", lock_pipelines)
    async with engine.begin() as conn:
        done = await queue.cancel_user_jobs(conn, owner.id, "admin:root")
    rows = await pg.fetch("SELECT pipeline_id, status FROM jobs WHERE id = ANY($1::uuid[])", done.ids)
    assert {r["pipeline_id"] for r in rows} <= locked, "a held job was cancelled without its pipeline locked"
    statuses = dict(
        await pg.fetch(
            "SELECT pipeline_id, status FROM jobs WHERE pipeline_id = ANY($1::uuid[])", [first, later]
        )
    )
    assert statuses == {first: "cancelled", later: "cancelled"}
