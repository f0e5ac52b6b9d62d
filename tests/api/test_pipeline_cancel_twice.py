"""A second cancel of a pipeline whose running steps are already stopping changes nothing, yet a trial saw
it answer 200 "1 running step is stopping", audited "ok" with a count of 1: the stopping step was counted
again. It is now a 409 "Nothing changed" audited as refused, as a second cancel of the job itself is, on
the API and the pipeline page alike."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from tests.api.test_approvals_api import token_of
from tests.support.jobsteps import claim
from tests.support.webkit import HX, add_user, csrf, sign_in_as

PIPELINE = {
    "name": "two steps",
    "steps": [
        {"key": "fetch", "type": "test.step", "input_data": {}},
        {"key": "publish", "type": "test.step", "input_data": {}, "depends_on": ["fetch"]},
    ],
}
WORDS = "Nothing changed: the pipeline's running steps are already stopping."


async def test_a_second_cancel_while_its_steps_stop_is_refused_as_nothing_changed(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    alice = await add_user(db_url, "alice@example.com")
    r = await client.post("/api/pipelines", json=PIPELINE, headers=await token_of(db_url, alice))
    assert r.status_code == 201, r.text
    pid, ids = r.json()["id"], {s["key"]: s["job_id"] for s in r.json()["steps"]}
    await claim(engine)  # "fetch" runs
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    as_root = await token_of(db_url, root)

    r = await client.post(f"/api/pipelines/{pid}/cancel", headers=as_root)
    assert r.status_code == 200 and (r.json()["cancelled"], r.json()["cancelling"]) == (1, 1), r.text
    r = await client.post(f"/api/pipelines/{pid}/cancel", headers=as_root)
    assert r.status_code == 409 and r.json()["detail"] == WORDS, r.text
    r = await client.post(f"/pipelines/{pid}/cancel", headers={**HX, "x-csrftoken": await csrf(client)})
    assert r.status_code == 409 and WORDS.replace("'", "&#39;") in r.text, r.text[-600:]

    rows = await pg.fetch("SELECT outcome, count FROM audit_log WHERE action = 'pipeline.cancel' ORDER BY id")
    assert [(r["outcome"], r["count"]) for r in rows] == [("ok", 2)] + [(f"refused: {WORDS}", 0)] * 2, rows
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", ids["fetch"]) == "in_progress"
