"""The API says whether a failed job failed permanently (``failed_permanently``), by the rule the pages'
"Retry anyway" follows (:mod:`app.jobs.permanence`): one job, the list and a callback's body, where a
program could not tell a 404 that stopped at once from a job that ran out of tries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.callbacks import body_of
from app.jobs.permanence import permanent_among
from app.settings import Settings
from tests.support.jobsteps import enqueue
from tests.support.webkit import add_token, sign_in_as
from tests.web.test_retry_permanent import _failed


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def test_every_jobs_json_says_whether_it_failed_permanently(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    gone = await _failed(engine, settings, root.id, permanent=True, title="Fetch the price list")
    tired = await _failed(engine, settings, root.id, permanent=False, title="Ping the warehouse")
    waiting = await enqueue(engine, settings, root.id)
    auth = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}

    expected = {str(gone): True, str(tired): False, str(waiting): None}
    for jid, want in expected.items():
        got = (await client.get(f"/api/jobs/{jid}", headers=auth)).json()
        assert got["failed_permanently"] is want, (jid, got)
    listed = {
        i["id"]: i["failed_permanently"]
        for i in (await client.get("/api/jobs", headers=auth)).json()["items"]
    }
    assert {k: listed[k] for k in expected} == expected

    # a callback's body, the shape of GET /api/jobs/{id}
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT * FROM jobs WHERE id = :id"), {"id": gone})).mappings().one()
        permanent = await permanent_among(conn, [gone])
    assert json.loads(body_of(row, [], permanent))["failed_permanently"] is True

    # retried, it is no longer failed
    r = await client.post(f"/api/jobs/{gone}/retry", headers=auth)
    assert r.status_code == 200 and r.json()["failed_permanently"] is None, r.text
