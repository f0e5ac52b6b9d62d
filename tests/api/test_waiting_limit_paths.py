"""The per-person waiting limit (``USER_MAX_WAITING_JOBS``) through every path that creates jobs: a job and
a batch and a pipeline a person submits (429, nothing added), a processor's next jobs and a list from a
parent's result (nobody to answer: recorded failed with their events, nothing lost unseen, the parent's
own completion kept), and a schedule's firing (skipped, with all of a pipeline's steps counted). In
each, the owner has two jobs waiting, the limit is three and the path would add two: the owner never
ends above the limit, and the refusal is there to read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.step, test.steps)
from app import pipelines, schedule_firing, schedules
from app.db import create_engine
from app.jobs import queue
from app.jobs.queue import NewJob, Outcome, SystemPrincipal
from app.jobs.types import NextJob
from app.settings import Settings
from tests.support.webkit import add_token, add_user, app_client

LIMIT = 3
NO_LIMITS = {
    "user_max_jobs_per_minute": 0,
    "user_max_upload_bytes": 0,
    "pipeline_max_steps": 0,
    "pipeline_max_edges": 0,
}


@dataclass
class Scene:
    client: AsyncTestClient
    settings: Settings
    pg: asyncpg.Connection
    engine: Any
    user_id: int
    auth: dict[str, str]


@pytest.fixture
async def scene(make_settings: Any, pg: asyncpg.Connection) -> AsyncIterator[Scene]:
    """A started app (no worker), Ann with a token and two jobs waiting (due tomorrow), the limit three."""
    settings = make_settings(worker_enabled=False, user_max_waiting_jobs=LIMIT, **NO_LIMITS)
    db = settings.database_url or ""
    ann = await add_user(db, "ann@example.com")
    engine = create_engine(db, pool_size=2)
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    async with engine.begin() as conn:
        for _ in range(2):
            await queue.enqueue(
                conn, NewJob(type="noop", input_data={}, user_id=ann.id, run_at=tomorrow), settings
            )
    auth = {"Authorization": f"Bearer {await add_token(db, ann.id)}"}
    async with app_client(settings) as client:
        yield Scene(client, settings, pg, engine, ann.id, auth)
    await engine.dispose()


async def waiting(s: Scene) -> int:
    return int(
        await s.pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1 AND status = 'queued'", s.user_id)
    )


async def run_one(s: Scene, **outcome: Any) -> Any:
    """Claim the one due job and complete it (with ``outcome``'s fields); its row, claimed."""
    async with s.engine.begin() as conn:
        [row] = await queue.claim(conn, "test-worker", 10, 60)
    async with s.engine.begin() as conn:
        await queue.finish(conn, "test-worker", [Outcome(row["id"], "completed", **outcome)], s.settings)
    return row


async def submitted_job(s: Scene) -> str:
    assert (
        await s.client.post("/api/jobs", json={"type": "test.step", "input_data": {}}, headers=s.auth)
    ).status_code == 201
    r = await s.client.post("/api/jobs", json={"type": "test.step", "input_data": {}}, headers=s.auth)
    assert r.status_code == 429, r.text
    return str(r.json()["detail"])


async def batch(s: Scene) -> str:
    rows = [{"url": f"http://jobs.test:9/item/{i}", "timeout": 5} for i in range(2)]
    r = await s.client.post("/api/batches", json={"type": "http.request", "rows": rows}, headers=s.auth)
    assert r.status_code == 429, r.text
    return str(r.json()["detail"])


async def pipeline(s: Scene) -> str:
    body = {"name": "two", "steps": [{"key": "a", "type": "test.step"}, {"key": "b", "type": "test.step"}]}
    r = await s.client.post("/api/pipelines", json=body, headers=s.auth)
    assert r.status_code == 429, r.text
    return str(r.json()["detail"])


async def next_jobs(s: Scene) -> str:
    async with s.engine.begin() as conn:
        await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=s.user_id), s.settings)
    nexts = [NextJob(type="noop", key="n1"), NextJob(type="noop", key="n2", depends_on=["n1"])]
    creator = await run_one(s, result="{}", next_jobs=nexts)
    rows = await s.pg.fetch(
        "SELECT id, step_key, status, error_message FROM jobs WHERE created_by_job = $1 ORDER BY step_key",
        creator["id"],
    )
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", creator["id"]) == "completed"
    assert [(r["step_key"], r["status"]) for r in rows] == [("n1", "failed"), ("n2", "failed")]
    events = await s.pg.fetch(
        "SELECT kind, to_status, message FROM job_events WHERE job_id = ANY($1::uuid[])",
        [r["id"] for r in rows],
    )
    assert [(e["kind"], e["to_status"]) for e in events] == [("failed", "failed")] * 2
    assert {e["message"] for e in events} == {rows[0]["error_message"]}
    pid = await s.pg.fetchval("SELECT pipeline_id FROM jobs WHERE id = $1", creator["id"])
    assert await s.pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "failed"
    # Made failed without the steps they were to wait for, they are not retried (n2 would run before n1
    # and without what n1 gives it); the refusal says what to do instead.
    r = await s.client.post(f"/api/jobs/{rows[1]['id']}/retry", headers=s.auth)
    assert r.status_code == 409, r.text
    assert "it never ran: its owner's waiting limit refused it" in r.json()["detail"]
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", rows[1]["id"]) == "failed"
    return str(rows[0]["error_message"])


async def for_each(s: Scene) -> str:
    steps = [
        {"key": "src", "type": "noop", "input_data": {"items": [1, 2]}},
        {
            "key": "each",
            "type": "noop",
            "input_data": {"x": {"$item": ""}},
            "for_each": {"$ref": "src.items"},
        },
    ]
    async with s.engine.begin() as conn:
        pid = (
            await pipelines.create(conn, name="each", steps=steps, user_id=s.user_id, settings=s.settings)
        )["id"]
    await run_one(s, result=json.dumps({"items": [1, 2]}))
    row = await s.pg.fetchrow(
        "SELECT status, error_message FROM jobs WHERE pipeline_id = $1 AND step_key = 'each'", pid
    )
    assert row["status"] == "failed"
    return str(row["error_message"])


async def schedule(s: Scene) -> str:
    owner = SystemPrincipal(id=s.user_id, is_admin=False, email="ann@example.com")
    async with s.engine.begin() as conn:
        await schedules.create_schedule(
            conn,
            name="every minute",
            cron="* * * * *",
            timezone="UTC",
            template="test.steps",
            input_data={},
            owner=owner,
            settings=s.settings,
        )
    await s.pg.execute("UPDATE schedules SET next_fire_at = now() - interval '1 second'")
    async with s.engine.begin() as conn:
        assert await schedule_firing.fire_due(conn, s.settings) == []
    assert await s.pg.fetchval("SELECT count(*) FROM pipelines") == 0
    notice = await s.pg.fetchval("SELECT payload::text FROM alert_outbox WHERE kind = 'admin_action'")
    assert "schedule.skip" in notice
    return str(json.loads(notice)["outcome"])


PATHS = {
    "a submitted job": (submitted_job, "the limit is 3 per person"),
    "a batch": (batch, "the limit is 3 per person; this would add 2"),
    "a pipeline": (pipeline, "the limit is 3 per person; this would add 2"),
    "next jobs": (
        next_jobs,
        "asked for 2 next jobs, and with them its owner would have 4 jobs waiting; the limit is 3 per person",
    ),
    "a list from a result": (
        for_each,
        "its list has 2 items, and with them its owner would have 4 jobs waiting; the limit is 3 per person",
    ),
    "a schedule's pipeline": (
        schedule,
        "its owner has 2 jobs waiting, this firing would add 4, the limit is 3",
    ),
}


@pytest.mark.parametrize("path", list(PATHS))
async def test_no_path_takes_a_person_above_their_waiting_limit(scene: Scene, path: str) -> None:
    add, says = PATHS[path]
    words = await add(scene)
    assert says in words, words
    assert await waiting(scene) <= LIMIT


async def test_an_admins_next_jobs_are_created_past_the_limit(scene: Scene) -> None:
    """Admins are exempt from the waiting limit, their processors' next jobs too."""
    await scene.pg.execute("UPDATE users SET is_admin = true WHERE id = $1", scene.user_id)
    async with scene.engine.begin() as conn:
        await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=scene.user_id), scene.settings)
    creator = await run_one(scene, result="{}", next_jobs=[NextJob(type="noop"), NextJob(type="noop")])
    statuses = await scene.pg.fetch("SELECT status FROM jobs WHERE created_by_job = $1", creator["id"])
    assert [r["status"] for r in statuses] == ["queued", "queued"]
    assert await waiting(scene) == 4
