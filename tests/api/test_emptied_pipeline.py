"""A pipeline never turns "completed" because it has no steps left: when an admin deletes its steps one
by one, it keeps the finished status it had (here "cancelled", from the first delete's cascade), on the
API and on its page alike. Nor does it when a step was deleted before it completed and the rest did: it
did not run every step. (Jobs are deleted through the API only; the pages show the status it derives.)"""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (test.step)
from app.settings import Settings
from tests.api.test_approvals_api import token_of
from tests.support.webkit import add_user, switch_to
from tests.support.workers import running_worker, wait_status

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


async def _status(client: AsyncTestClient, pid: str, headers: dict[str, str]) -> str:
    r = await client.get(f"/api/pipelines/{pid}", headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


async def test_a_pipeline_that_lost_an_unfinished_step_is_never_completed(
    client: AsyncTestClient, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    """Deleting the last unfinished step (the others completed) ends the pipeline "cancelled", and a
    step deleted while independent ones still run keeps it from completing once they do; a completed
    step deleted takes nothing away."""
    alice = await add_user(db_url, "alice@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_alice, as_root = await token_of(db_url, alice), await token_of(db_url, root)
    chained = {
        "name": "then approve",
        "steps": [
            {"key": "a", "type": "test.step", "input_data": {}},
            {
                "key": "b",
                "type": "test.step",
                "input_data": {},
                "depends_on": ["a"],
                "requires_approval": True,
            },
        ],
    }
    side_by_side = {
        "name": "side by side",
        "steps": [
            {"key": "a", "type": "test.step", "input_data": {}, "requires_approval": True},
            {"key": "b", "type": "test.step", "input_data": {}, "requires_approval": True},
        ],
    }
    done = {"name": "done", "steps": [{"key": "a", "type": "test.step", "input_data": {}}]}
    made = {}
    for spec in (chained, side_by_side, done):
        r = await client.post("/api/pipelines", json=spec, headers=as_alice)
        assert r.status_code == 201, r.text
        made[spec["name"]] = (r.json()["id"], {s["key"]: s["job_id"] for s in r.json()["steps"]})
    chain_pid, chain = made["then approve"]
    side_pid, side = made["side by side"]
    done_pid, finished = made["done"]
    async with running_worker(ui_settings):
        for jid in (chain["b"], side["a"], side["b"]):
            await wait_status(pg, jid, ["waiting_approval"])
        await wait_status(pg, finished["a"], ["completed"])

    # The last unfinished step deleted, the other completed.
    assert (await client.delete(f"/api/jobs/{chain['b']}", headers=as_root)).status_code == 204
    assert await _status(client, chain_pid, as_alice) == "cancelled"

    # A step deleted while another is still live: the pipeline cannot complete once that one does.
    assert (await client.delete(f"/api/jobs/{side['b']}", headers=as_root)).status_code == 204
    assert await _status(client, side_pid, as_alice) == "waiting_approval"
    r = await client.post(f"/api/jobs/{side['a']}/approve", headers=as_root)
    assert r.status_code == 200, r.text
    assert await _status(client, side_pid, as_alice) == "cancelled"

    # A completed step deleted takes nothing away.
    assert await _status(client, done_pid, as_alice) == "completed"
    assert (await client.delete(f"/api/jobs/{finished['a']}", headers=as_root)).status_code == 204
    assert await _status(client, done_pid, as_alice) == "completed"

    await switch_to(client, "alice@example.com")
    page = await client.get(f"/pipelines/{chain_pid}")
    assert page.status_code == 200
    badge = page.text.split('class="status status-', 1)[1].split("</span>", 2)[1]
    assert "Cancelled" in badge and "Completed" not in badge, badge


async def test_a_pipeline_whose_failed_step_was_deleted_stays_failed_however_the_rest_end(
    client: AsyncTestClient, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    """A step failed (rejected) while another waited for approval; the failed step was deleted: the
    pipeline read "waiting for approval" and, once the other step completed (or was cancelled, or deleted
    too), "cancelled" — though it had a failed step. It is "failed" throughout."""
    alice = await add_user(db_url, "alice@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_alice, as_root = await token_of(db_url, alice), await token_of(db_url, root)
    side_by_side = {
        "name": "side by side",
        "steps": [
            {"key": "a", "type": "test.step", "input_data": {}, "requires_approval": True},
            {"key": "b", "type": "test.step", "input_data": {}, "requires_approval": True},
        ],
    }
    made = []
    for _ in range(3):
        r = await client.post("/api/pipelines", json=side_by_side, headers=as_alice)
        assert r.status_code == 201, r.text
        made.append((r.json()["id"], {s["key"]: s["job_id"] for s in r.json()["steps"]}))
    async with running_worker(ui_settings):
        for _, steps in made:
            for jid in steps.values():
                await wait_status(pg, jid, ["waiting_approval"])
    ends = {
        "approved": ("POST", "/api/jobs/{b}/approve"),
        "cancelled": ("POST", "/api/jobs/{b}/cancel"),
        "deleted": ("DELETE", "/api/jobs/{b}"),
    }
    for (pid, steps), (end, (method, path)) in zip(made, ends.items(), strict=True):
        r = await client.post(f"/api/jobs/{steps['a']}/reject", json={"reason": "wrong"}, headers=as_root)
        assert r.status_code == 200, r.text
        assert await _status(client, pid, as_alice) == "failed"
        assert (await client.delete(f"/api/jobs/{steps['a']}", headers=as_root)).status_code == 204
        assert await _status(client, pid, as_alice) == "failed", end
        assert await pg.fetchval("SELECT finished_at FROM pipelines WHERE id = $1", pid) is None, end
        r = await client.request(method, path.format(b=steps["b"]), headers=as_root)
        assert r.status_code in (200, 204), (end, r.text)
        assert await _status(client, pid, as_alice) == "failed", end
        assert await pg.fetchval("SELECT finished_at IS NOT NULL FROM pipelines WHERE id = $1", pid), end
