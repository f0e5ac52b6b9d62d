"""Holding a disabled person's waiting jobs, and an admin's release or cancel of them, take the one lock
order of every multi-row action: the jobs' pipelines first, in id order, then the jobs, in id order. Each
interleaving is forced with a row lock held by another session, as an action or a worker holds it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app import pipelines
from app.actions import held_jobs
from app.actions import users as user_actions
from app.db import asyncpg_dsn
from tests.support.factories import TestUser, make_job

WAITING_ON_A_LOCK = """
    SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
"""


async def _until_waiting_or(pg: asyncpg.Connection, done: asyncio.Event) -> None:
    """Until ``done`` is set or another session waits for a lock."""
    for _ in range(500):
        if done.is_set() or await pg.fetchval(WAITING_ON_A_LOCK):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the disable neither held the jobs nor came to wait for a lock")


async def _disable(
    engine: Any, admin: TestUser, owner: TestUser, done: asyncio.Event, go: asyncio.Event | None = None
) -> Any:
    async with AsyncSession(engine) as db, db.begin():
        ended = await user_actions.set_active(db, admin, owner.id, False)
        done.set()
        if go is not None:
            await go.wait()  # the disable's transaction stays open, holding what it locked
        return ended


async def _act(engine: Any, admin: TestUser, owner: TestUser, action: str, done: asyncio.Event) -> Any:
    if action == "disable":
        return await _disable(engine, admin, owner, done)
    async with AsyncSession(engine) as db, db.begin():
        outcome = await held_jobs.act_on_held(db, admin, owner.id, action)
        done.set()
        return outcome


@pytest.mark.parametrize("action", ["disable", "release-jobs", "cancel-jobs"])
async def test_a_disabled_person_s_jobs_are_held_released_or_cancelled_in_id_order_without_deadlock(
    engine, settings, owner, admin, pg, db_url, action: str
) -> None:
    """Holding was one UPDATE over the person's waiting jobs (releasing and cancelling them too), which
    locked them in the order its plan read them: by an index's key or where the rows lie, not by id. An
    action that locks jobs in id order, holding the older one and wanting the newer, deadlocked with it,
    and the disable (the release, the cancel) failed."""
    low, high = sorted([(await make_job(engine, settings, owner))["id"] for _ in range(2)], key=str)
    if action != "disable":
        await pg.execute("UPDATE users SET is_active = false WHERE id = $1", owner.id)
        await pg.execute("UPDATE jobs SET is_active = false WHERE user_id = $1", owner.id)
    # the older job was changed since (rescheduled): its row now lies after the newer one's, and so do its
    # index entries, so every way of reading the person's waiting jobs comes to the newer one first
    await pg.execute("UPDATE jobs SET run_at = run_at - interval '1 second' WHERE id = $1", low)
    holder = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", low)  # an action's first job
        done = asyncio.Event()
        acting = asyncio.create_task(_act(engine, admin, owner, action, done))
        await _until_waiting_or(pg, done)
        await holder.execute("SET LOCAL lock_timeout = '5s'")
        await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", high)  # its second
        await tx.commit()
        await acting
    finally:
        await holder.close()
    rows = await pg.fetch("SELECT id, status, is_active FROM jobs ORDER BY id")
    want = {
        "disable": ("queued", False),
        "release-jobs": ("queued", True),
        "cancel-jobs": ("cancelled", False),
    }
    assert [(r["id"], r["status"], r["is_active"]) for r in rows] == [(j, *want[action]) for j in (low, high)]


async def test_holding_a_disabled_person_s_jobs_waits_for_their_pipeline_before_taking_any_of_them(
    engine, settings, owner, admin, pg, db_url
) -> None:
    """A worker recording a step's outcome holds the step's pipeline and then locks its jobs; the hold
    took the waiting steps' rows without their pipeline, so the worker waited on a job lock while holding
    the pipeline, against the one order every action keeps."""
    steps = [
        {"key": "a", "type": "noop", "input_data": {}, "depends_on": []},
        {"key": "b", "type": "noop", "input_data": {}, "depends_on": ["a"]},
    ]
    async with engine.begin() as conn:
        p = await pipelines.create(conn, name="held", steps=steps, user_id=owner.id, settings=settings)
    step_ids: list[uuid.UUID] = [
        r["id"] for r in await pg.fetch("SELECT id FROM jobs WHERE pipeline_id = $1 ORDER BY id", p["id"])
    ]
    holder = await asyncpg.connect(asyncpg_dsn(db_url))
    go = asyncio.Event()
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM pipelines WHERE id = $1 FOR UPDATE", p["id"])  # the worker's
        done = asyncio.Event()
        disabling = asyncio.create_task(_disable(engine, admin, owner, done, go))
        await _until_waiting_or(pg, done)
        # the worker goes on to the pipeline's steps: none is locked by the hold, which waits for the pipeline
        assert not done.is_set(), "the hold did not wait for the pipeline"
        for step in step_ids:
            await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE NOWAIT", step)
        await tx.commit()
        go.set()
        await disabling
    finally:
        go.set()
        await holder.close()
    held = await pg.fetchval("SELECT count(*) FROM jobs WHERE pipeline_id = $1 AND NOT is_active", p["id"])
    assert held == 2
