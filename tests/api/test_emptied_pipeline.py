"""A pipeline never turns "completed" because it has no steps left: when an admin deletes its steps one
by one, it keeps the finished status it had (here "cancelled", from the first delete's cascade), on the
API and on its page alike."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (test.step)
from tests.api.test_approvals_api import token_of
from tests.support.webkit import add_user, switch_to

PIPELINE = {
    "name": "two steps",
    "steps": [
        {"key": "a", "type": "test.step", "input_data": {}},
        {"key": "b", "type": "test.step", "input_data": {}, "depends_on": ["a"]},
    ],
}


async def test_a_pipeline_whose_steps_were_all_deleted_is_not_completed(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    alice = await add_user(db_url, "alice@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_alice, as_root = await token_of(db_url, alice), await token_of(db_url, root)
    r = await client.post("/api/pipelines", json=PIPELINE, headers=as_alice)
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    ids = {s["key"]: s["job_id"] for s in r.json()["steps"]}

    assert (await client.delete(f"/api/jobs/{ids['a']}", headers=as_root)).status_code == 204
    assert (await client.get(f"/api/pipelines/{pid}", headers=as_alice)).json()["status"] == "cancelled"
    assert (await client.delete(f"/api/jobs/{ids['b']}", headers=as_root)).status_code == 204

    body = (await client.get(f"/api/pipelines/{pid}", headers=as_alice)).json()
    assert body["steps"] == [] and body["status"] == "cancelled", body
    assert await pg.fetchval("SELECT finished_at IS NOT NULL FROM pipelines WHERE id = $1", pid)

    await switch_to(client, "alice@example.com")
    page = await client.get(f"/pipelines/{pid}")
    assert page.status_code == 200
    badge = page.text.split('class="status status-', 1)[1].split("</span>", 2)[1]
    assert "Cancelled" in badge and "Finished" not in badge and "Completed" not in badge, badge
