"""A priority above 0 is for admins, on every path that creates a job.

Claims are strictly by priority with no aging, so a person who could give their jobs a higher one would
starve everyone else's. The rule is :func:`app.jobs.types.priority_refusal`, applied in the actions
layer for what a person asks for (``POST /api/jobs``; an ad-hoc pipeline's steps, a ``for_each`` step
alike, from Python or ``POST /api/pipelines``) and in the queue for what is copied or made for them ("run again", a processor's next jobs).
Batches, schedules and templates have no priority to give (a field the route does not know is a 422).
A value outside the queue's range (-100–100) gets the range's words first, from anyone.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

import tests.support.forms  # noqa: F401  (registers test.form, a public type)
from app.actions import pipelines as pipeline_actions
from app.actions.trail import Actor
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob, Outcome
from app.jobs.types import NextJob
from app.settings import Settings
from tests.support.webkit import add_token, add_user, csrf_from, login


async def headers(db_url: str, email: str, *, admin: bool = False) -> tuple[Any, dict[str, str]]:
    user = await add_user(db_url, email, admin=admin)
    return user, {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}


JOB = {"type": "test.form", "input_data": {"name": "Ann"}}


async def test_a_non_admin_may_lower_but_not_raise_a_jobs_priority_through_the_api(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    _, bob = await headers(db_url, "bob@example.com")
    _, root = await headers(db_url, "root@example.com", admin=True)
    r = await client.post("/api/jobs", json={**JOB, "priority": 100}, headers=bob)
    assert r.status_code == 422, r.text
    assert "only admins may give a job a priority above 0" in r.json()["errors"]["priority"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    assert (await client.post("/api/jobs", json={**JOB, "priority": 0}, headers=bob)).status_code == 201
    assert (await client.post("/api/jobs", json={**JOB, "priority": -5}, headers=bob)).status_code == 201
    assert (await client.post("/api/jobs", json={**JOB, "priority": 100}, headers=root)).status_code == 201
    got = sorted(r["priority"] for r in await pg.fetch("SELECT priority FROM jobs"))
    assert got == [-5, 0, 100]


@pytest.mark.parametrize("for_each", [False, True])
async def test_a_non_admin_may_not_raise_a_pipeline_steps_priority(
    engine: AsyncEngine, settings: Settings, db_url: str, pg: asyncpg.Connection, for_each: bool
) -> None:
    """The API's steps have no ``priority`` (an unknown field, below); a Python caller of the action
    may give one, and the same rule answers."""
    bob = await add_user(db_url, "bob@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    high: dict[str, Any] = {"key": "b", "type": "test.form", "input_data": {"name": "Bo"}, "priority": 5}
    if for_each:
        high = {**high, "input_data": {"name": {"$item": ""}}, "for_each": ["Bo", "Cy"]}
    steps = [{"key": "a", **JOB}, high]
    async with AsyncSession(engine) as db:
        with pytest.raises(BadInput) as refused:
            await pipeline_actions.submit_steps(db, Actor(bob, settings=settings), "p", steps)
    assert "only admins may give a job a priority above 0" in refused.value.errors["steps[1].priority"]
    async with AsyncSession(engine) as db, db.begin():
        await pipeline_actions.submit_steps(db, Actor(root, settings=settings), "p", steps)
    assert await pg.fetchval("SELECT max(priority) FROM jobs") == 5


async def test_paths_without_a_priority_refuse_one_and_a_step_is_held_to_the_rule(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    _, bob = await headers(db_url, "bob@example.com")
    batch = {"type": "test.form", "rows": [{"name": "Ann"}], "priority": 100}
    assert (await client.post("/api/batches", json=batch, headers=bob)).status_code == 422
    tpl = {"template": "nosuch", "input_data": {}, "priority": 100}
    assert (await client.post("/api/pipelines", json=tpl, headers=bob)).status_code == 422
    # an ad-hoc pipeline's step takes a priority as a job does, by the same rule
    step = {"key": "a", **JOB, "priority": 100}
    r = await client.post("/api/pipelines", json={"name": "p", "steps": [step]}, headers=bob)
    assert r.status_code == 422
    assert "only admins may give a job a priority above 0" in r.json()["errors"]["steps[0].priority"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_run_again_gives_a_non_admins_job_at_most_priority_0(
    client: AsyncTestClient, engine: AsyncEngine, settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    """A job may hold a higher priority from before the rule, or from a processor's code: its run again
    is the owner's new job, so the rule applies to it (nobody chose a value here to refuse)."""
    bob_user, bob = await headers(db_url, "bob@example.com")
    root_user, root = await headers(db_url, "root@example.com", admin=True)
    ids = {}
    async with engine.begin() as conn:
        for who in (bob_user, root_user):
            new = NewJob(type="test.form", input_data={"name": "Ann"}, user_id=who.id, priority=100)
            ids[who.id] = (await queue.enqueue(conn, new, settings)).job["id"]
    lowered = "Its priority was lowered from 100 to 0: a priority above 0 is for admins"
    r = await client.post(f"/api/jobs/{ids[bob_user.id]}/run-again", headers=bob)
    assert r.status_code == 201, r.text
    assert r.json()["priority"] == 0
    assert r.json()["notice"].startswith(lowered)  # said, not done silently
    r = await client.post(f"/api/jobs/{ids[bob_user.id]}/run-again", headers=root)
    assert (r.status_code, r.json()["priority"]) == (201, 0) and r.json()["notice"].startswith(lowered)
    r = await client.post(f"/api/jobs/{ids[root_user.id]}/run-again", headers=root)
    assert (r.status_code, r.json()["priority"]) == (201, 100) and "notice" not in r.json()
    # the page's answer says it too
    assert (await login(client, "bob@example.com")).status_code == 303
    token = csrf_from((await client.get(f"/jobs/{ids[bob_user.id]}")).text)
    page = await client.post(
        f"/jobs/{ids[bob_user.id]}/run-again", data={"_csrf_token": token}, headers={"HX-Request": "true"}
    )
    assert page.status_code == 200 and lowered in page.text, page.text[-2000:]


async def completed_with_next(engine: AsyncEngine, settings: Settings, owner_id: int, priority: int) -> None:
    async with engine.begin() as conn:
        new = NewJob(type="test.form", input_data={"name": "Ann"}, user_id=owner_id)
        job = (await queue.enqueue(conn, new, settings)).job
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.claim(conn, "w1", 1, 60)] == [job["id"]]
    nxt = NextJob(type="test.form", input_data={"name": "Bo"}, priority=priority)
    outcome = Outcome(job["id"], "completed", result="{}", next_jobs=[nxt])
    async with engine.begin() as conn:
        await queue.finish(conn, "w1", [outcome], settings)


async def test_a_processors_next_job_gets_a_priority_above_0_only_for_an_admin_owner(
    engine: AsyncEngine, settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    with pytest.raises(BadInput) as refused:
        await completed_with_next(engine, settings, bob.id, 5)
    assert "only admins may give a job a priority above 0" in refused.value.errors["next_jobs[0].priority"]
    await pg.execute("DELETE FROM jobs")
    root = await add_user(db_url, "root@example.com", admin=True)
    await completed_with_next(engine, settings, root.id, 5)
    assert await pg.fetchval("SELECT max(priority) FROM jobs") == 5


OUT_OF_RANGE = [10**30, 101, -101]


@pytest.mark.parametrize("priority", OUT_OF_RANGE)
async def test_a_priority_out_of_range_gets_the_range_words_whoever_sends_it(
    client: AsyncTestClient,
    engine: AsyncEngine,
    settings: Settings,
    db_url: str,
    pg: asyncpg.Connection,
    priority: int,
) -> None:
    """A priority outside -100–100 is wrong before it is too high for a person who is not an admin: the
    range is the first thing said about it, on every path ("use 0 or lower" was said of ``10**30``)."""
    bob_user, bob = await headers(db_url, "bob@example.com")
    _, root = await headers(db_url, "root@example.com", admin=True)
    words = "must be a whole number from -100 to 100"
    for who in (bob, root):
        r = await client.post("/api/jobs", json={**JOB, "priority": priority}, headers=who)
        assert r.status_code == 422, r.text
        assert words in r.json()["errors"]["priority"], r.text
        step = {"key": "a", **JOB, "priority": priority}
        r = await client.post("/api/pipelines", json={"name": "p", "steps": [step]}, headers=who)
        assert r.status_code == 422, r.text
        assert words in r.json()["errors"]["steps[0].priority"], r.text
    steps = [{"key": "a", **JOB}, {"key": "b", **JOB, "priority": priority}]
    async with AsyncSession(engine) as db:
        with pytest.raises(BadInput) as refused:
            await pipeline_actions.submit_steps(db, Actor(bob_user, settings=settings), "p", steps)
    assert words in refused.value.errors["steps[1].priority"]
    await pg.execute("DELETE FROM jobs")
    with pytest.raises(BadInput) as refused:
        await completed_with_next(engine, settings, bob_user.id, priority)
    assert words in refused.value.errors["next_jobs[0].priority"]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 0
