""" "Run now" on a job whose type is paused moves its due time, but no worker takes it until the type is
resumed: the answer says so on the page, and the API's description of the route does, rather than
"it will start as soon as a worker is free"."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.settings import Settings
from tests.support.jobsteps import enqueue
from tests.support.webkit import HX, add_token, add_user, csrf, sign_in_as

LATER = datetime(2031, 1, 1, tzinfo=UTC)
PAUSED = "its type is paused: it waits until an admin resumes the type"


async def test_run_now_on_a_paused_type_says_it_waits_for_the_resume(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    api = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    h = {**HX, "x-csrftoken": await csrf(client)}

    running = await enqueue(engine, settings, owner.id, run_at=LATER)
    r = await client.post(f"/jobs/{running}/run-now", headers=h)
    assert r.status_code == 200 and "It will start as soon as a worker is free." in r.text, r.text

    assert (await client.post("/api/job-types/test.form/pause", headers=api)).status_code == 200
    for path in ("/api/job-types/test.form/pause", "/api/job-types/*/pause"):
        waiting = await enqueue(engine, settings, owner.id, run_at=LATER)
        if path.endswith("*/pause"):  # every type paused, this one resumed
            assert (await client.post("/api/job-types/test.form/resume", headers=api)).status_code == 200
            assert (await client.post(path, headers=api)).status_code == 200
        r = await client.post(f"/jobs/{waiting}/run-now", headers=h)
        assert r.status_code == 200, r.text
        assert PAUSED in r.text, r.text
        assert "It will start as soon as a worker is free." not in r.text
        assert await pg.fetchval("SELECT run_at <= now() FROM jobs WHERE id = $1", waiting)

    by_api = await enqueue(engine, settings, owner.id, run_at=LATER)
    r = await client.post(f"/api/jobs/{by_api}/run-now", headers=api)
    assert r.status_code == 200 and r.json()["status"] == "queued", r.text
    doc = (await client.get("/schema/openapi.json")).json()
    described = doc["paths"]["/api/jobs/{job_id}/run-now"]["post"]["description"]
    assert "paused" in described and "resumed" in described, described
