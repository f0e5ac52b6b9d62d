"""A cancelled pipeline stays cancelled. A pipeline cancelled while one of its steps had already failed
kept the status ``failed``, with nothing saying that a person had stopped it, and a retry of that step
(or a rerun of a waiting one) put the pipeline back to running as if no one had. The cancel now marks
the pipeline (when, on the database's clock, and who), its status is ``cancelled`` once nothing is live,
and the queue refuses to retry or rerun its steps; a copy of a step on its own, or of the pipeline,
still runs."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from app import pipelines
from app.errors import Conflict
from app.jobs import queue
from app.settings import Settings
from tests.support.factories import TestUser
from tests.support.jobsteps import claim, finish

REFUSED = "its pipeline was cancelled, so its steps cannot run again; start the pipeline again instead"
STEPS = [
    {"key": "a", "type": "test.step", "input_data": {}, "max_attempts": 1},
    {"key": "b", "type": "test.step", "input_data": {}},
    {"key": "c", "type": "test.step", "input_data": {}, "depends_on": ["a"]},
]


async def cancelled_after_a_failure(
    engine: AsyncEngine, settings: Settings, owner: TestUser, canceller: Any
) -> tuple[uuid.UUID, dict[str, uuid.UUID]]:
    """A pipeline whose step ``a`` failed (cancelling ``c``, which waited for it) while ``b`` ran, then
    cancelled by ``canceller``; ``b`` has stopped since."""
    async with engine.begin() as conn:
        pid = (await pipelines.create(conn, name="three", steps=STEPS, user_id=owner.id, settings=settings))[
            "id"
        ]
        ids = {
            r.step_key: r.id
            for r in await conn.execute(
                queue.sql("SELECT id, step_key FROM jobs WHERE pipeline_id = :p"), {"p": pid}
            )
        }
    await claim(engine, ids["a"])  # claims b too
    await finish(engine, settings, ids["a"], "failed", error="boom")
    async with engine.begin() as conn:
        assert await pipelines.cancel(conn, pid, canceller) == {"cancelled": 0, "cancelling": 1}
    await finish(engine, settings, ids["b"], "cancelled")
    return pid, ids


async def test_a_pipeline_cancelled_after_a_step_failed_reads_cancelled_with_who_and_when(
    engine: AsyncEngine, settings: Settings, owner: TestUser, admin: TestUser, pg: asyncpg.Connection
) -> None:
    pid, ids = await cancelled_after_a_failure(engine, settings, owner, admin)
    row = await pg.fetchrow(
        "SELECT status, finished_at, cancelled_at, cancelled_by, cancelled_at <= now() AS past FROM pipelines"
        " WHERE id = $1",
        pid,
    )
    assert (row["status"], row["cancelled_by"], row["past"]) == ("cancelled", f"user:{admin.id}", True), row
    assert row["finished_at"] is not None
    # the marker is written with the cancel, in its transaction, before the stop it asked for ended
    cancel_event = await pg.fetchval(
        "SELECT at FROM job_events WHERE job_id = $1 AND kind = 'cancel_requested'", ids["b"]
    )
    assert row["cancelled_at"] == cancel_event
    async with engine.connect() as conn:
        view = await pipelines.get(conn, pid, owner)
    assert (view["status"], view["cancelled_by"]) == ("cancelled", admin.email)


async def test_a_step_of_a_cancelled_pipeline_cannot_be_retried_and_nothing_reopens(
    engine: AsyncEngine, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    pid, ids = await cancelled_after_a_failure(engine, settings, owner, owner)
    with pytest.raises(Conflict) as refused:
        async with engine.begin() as conn:
            await queue.retry(conn, ids["a"], owner)
    assert refused.value.detail == f"Cannot retry job {ids['a']}: {REFUSED}.", refused.value.detail
    statuses = dict(await pg.fetch("SELECT step_key, status FROM jobs WHERE pipeline_id = $1", pid))
    assert statuses == {"a": "failed", "b": "cancelled", "c": "cancelled"}
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "cancelled"
    async with engine.connect() as conn:  # the pages ask the same rule before offering the button
        row = await queue.get_job(conn, ids["a"])
        assert await queue.requeue_refusal(conn, row, owner, reopens=True) == REFUSED
        assert await queue.requeue_refusal(conn, row, owner, in_place=False) is None


async def test_a_copy_of_a_step_or_of_the_pipeline_still_runs(
    engine: AsyncEngine, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    pid, ids = await cancelled_after_a_failure(engine, settings, owner, owner)
    async with engine.begin() as conn:
        copy = await queue.run_again(conn, ids["a"], owner, settings)
        again = await pipelines.create(conn, name="three", steps=STEPS, user_id=owner.id, settings=settings)
    assert copy.job["status"] == "queued" and copy.job["pipeline_id"] is None
    assert (
        again["status"],
        await pg.fetchval("SELECT cancelled_at FROM pipelines WHERE id = $1", again["id"]),
    ) == (
        "running",
        None,
    )
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "cancelled"


async def test_a_waiting_step_of_a_cancelled_pipeline_cannot_be_rerun(
    engine: AsyncEngine, settings: Settings, admin: TestUser, pg: asyncpg.Connection
) -> None:
    """No path leaves a step waiting for approval in a cancelled pipeline today (the cancel stops it), so
    the marker is set by hand here: the rerun asks the same rule as a retry all the same."""
    steps = [{"key": "draft", "type": "test.step", "input_data": {}, "requires_approval": True}]
    async with engine.begin() as conn:
        pid = (await pipelines.create(conn, name="one", steps=steps, user_id=admin.id, settings=settings))[
            "id"
        ]
    draft = await claim(engine)
    await finish(engine, settings, draft, "completed", result={})
    await pg.execute("UPDATE pipelines SET cancelled_at = now(), cancelled_by = 'user:1' WHERE id = $1", pid)
    with pytest.raises(Conflict) as refused:
        async with engine.begin() as conn:
            await queue.rerun(conn, draft, admin)
    assert refused.value.detail == f"Cannot rerun job {draft}: {REFUSED}.", refused.value.detail
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", draft) == "waiting_approval"


async def test_the_migration_marks_pipelines_cancelled_before_it_from_their_history(
    fresh_db_url: str,
) -> None:
    """A pipeline cancelled before the marker existed gets it from the first event of a step its cancel
    stopped: when and who. One whose step alone was cancelled (no whole-pipeline cancel) stays unmarked."""
    from app.db import asyncpg_dsn, run_migrations

    await run_migrations(fresh_db_url, "0028")
    pg = await asyncpg.connect(asyncpg_dsn(fresh_db_url))
    try:
        owner = await pg.fetchval(
            "INSERT INTO users (email, password_hash) VALUES ('a@example.com', 'x') RETURNING id"
        )
        whole, one_step = uuid.uuid4(), uuid.uuid4()
        for pid in (whole, one_step):
            await pg.execute(
                "INSERT INTO pipelines (id, name, user_id, status) VALUES ($1, 'p', $2, 'failed')", pid, owner
            )
        events = [
            (whole, "cancel_requested", "user:7", "cancelled by an admin: the whole pipeline was cancelled"),
            (whole, "cancelled", "user:9", "cancelled by its owner: the whole pipeline was cancelled"),
            (one_step, "cancelled", "user:1", "cancelled by its owner"),
        ]
        for pid, kind, actor, message in events:
            jid = uuid.uuid4()
            await pg.execute(
                "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, pipeline_id, completed_at)"
                " VALUES ($1, 'noop', 'cancelled', $2, '{}', 1, $3, now())",
                jid,
                owner,
                pid,
            )
            await pg.execute(
                "INSERT INTO job_events (job_id, pipeline_id, kind, actor, message) VALUES ($1, $2, $3, $4, $5)",
                jid,
                pid,
                kind,
                actor,
                message,
            )
        await run_migrations(fresh_db_url)
        marked = {
            r["id"]: (r["cancelled_at"] is not None, r["cancelled_by"])
            for r in await pg.fetch("SELECT id, cancelled_at, cancelled_by FROM pipelines")
        }
        assert marked == {whole: (True, "user:7"), one_step: (False, None)}, marked
    finally:
        await pg.close()
