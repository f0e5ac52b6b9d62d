"""A finished job's "took" is the time its last attempt ran: a job cancelled while it waited for a retry
showed "took 7.1 s" (from the failed attempt's start to the cancel: a wait, not work), and one cancelled
before it ever ran must show none either."""

from __future__ import annotations

import re
import uuid

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.jobs import queue
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import HX, csrf, sign_in_as


def finished_line(page: str) -> str:
    found = re.search(r"<dt>Finished</dt><dd>(.*?)</dd>", page, re.S)
    assert found, "no Finished line"
    return found.group(1)


async def test_took_is_shown_only_for_time_spent_running(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    h = {**HX, "x-csrftoken": await csrf(client)}

    async def cancel(jid: uuid.UUID) -> str:
        assert (await client.post(f"/jobs/{jid}/cancel", headers=h)).status_code == 200
        return finished_line((await client.get(f"/jobs/{jid}")).text)

    # a failed attempt, then a cancel while it waits for its retry: 7 s after the attempt started
    retrying = await enqueue(engine, settings, user.id, max_attempts=3)
    assert await claim(engine, retrying) == retrying
    await finish(engine, settings, retrying, "failed", error="Boom")
    await pg.execute("UPDATE jobs SET started_at = now() - interval '7 seconds' WHERE id = $1", retrying)
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", retrying) == "queued"
    line = await cancel(retrying)
    assert "took" not in line, f"a job cancelled while it waited for a retry: {line!r}"

    # never ran
    line = await cancel(await enqueue(engine, settings, user.id))
    assert "took" not in line, f"a job cancelled before it ran: {line!r}"

    # ran and was stopped by its cancel: that run is its time
    running = await enqueue(engine, settings, user.id)
    assert await claim(engine, running) == running
    assert (await client.post(f"/jobs/{running}/cancel", headers=h)).status_code == 200
    await finish(engine, settings, running, "cancelled")
    # its run set to 3 s exactly, from its end: a slow machine's second between the steps shows no more
    await pg.execute(
        "UPDATE jobs SET started_at = completed_at - interval '3 seconds' WHERE id = $1", running
    )
    assert " · took 3 s" in finished_line((await client.get(f"/jobs/{running}")).text)

    # ran to the end
    done = await enqueue(engine, settings, user.id)
    assert await claim(engine, done) == done
    await finish(engine, settings, done, "completed", result={})
    await pg.execute("UPDATE jobs SET started_at = completed_at - interval '2 seconds' WHERE id = $1", done)
    assert " · took 2 s" in finished_line((await client.get(f"/jobs/{done}")).text)


async def test_a_pipelines_took_counts_from_its_first_step_start_and_says_the_wait_apart(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    """A pipeline that waited a minute for a worker and then ran for 5 s read "took 1 min 5 s": its wait
    counted as its work. It reads "took 5 s", the wait said apart."""
    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        pipeline = await queue.create_pipeline(
            conn,
            name="One step",
            steps=[{"key": "a", "type": "test.form", "input_data": {"name": "A"}}],
            user_id=user.id,
            settings=settings,
        )
    step = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1", pipeline["id"])
    assert await claim(engine, step) == step
    await finish(engine, settings, step, "completed", result={})
    await pg.execute("UPDATE jobs SET started_at = completed_at - interval '5 seconds' WHERE id = $1", step)
    await pg.execute(
        "UPDATE pipelines SET created_at = finished_at - interval '65 seconds' WHERE id = $1", pipeline["id"]
    )
    line = finished_line((await client.get(f"/pipelines/{pipeline['id']}")).text)
    assert " · took 5 s" in line, line
    assert "after waiting 1 min for its first step to start" in line, line

    # cancelled before any step started: no "took"
    async with engine.begin() as conn:
        unstarted = await queue.create_pipeline(
            conn,
            name="Never ran",
            steps=[{"key": "a", "type": "test.form", "input_data": {"name": "A"}}],
            user_id=user.id,
            settings=settings,
        )
    h = {**HX, "x-csrftoken": await csrf(client)}
    assert (await client.post(f"/pipelines/{unstarted['id']}/cancel", headers=h)).status_code == 200
    line = finished_line((await client.get(f"/pipelines/{unstarted['id']}")).text)
    assert "took" not in line, line
