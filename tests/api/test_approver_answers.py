"""What a decision answers to someone who may decide a step but may not see its job (a named approver
who is neither its owner nor an admin): the decision and the step as their list names it, never the
job's input or result — on every route that decides (``/api/approvals/{id}/approve|reject``,
``/api/jobs/{id}/approve|reject``, the job page's and the approver's page's forms). The owner and
admins still get the whole job."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.webkit import HX, add_token, add_user, csrf_from, switch_to

SECRET = "X-Api-Key: SECRET-4411"


async def waiting_step(
    client: AsyncTestClient,
    engine: AsyncEngine,
    settings: Settings,
    pg: asyncpg.Connection,
    headers: dict[str, str],
    **approval: Any,
) -> uuid.UUID:
    """A step whose input holds a secret, waiting for approval."""
    spec = {
        "name": "deploy",
        "steps": [
            {
                "key": "call",
                "type": "test.step",
                "input_data": {"label": SECRET},
                "requires_approval": True,
                **approval,
            },
            {"key": "after", "type": "test.step", "input_data": {}, "depends_on": ["call"]},
        ],
    }
    r = await client.post("/api/pipelines", json=spec, headers=headers)
    assert r.status_code == 201, r.text
    jid = uuid.UUID(str(next(s["job_id"] for s in r.json()["steps"] if s["key"] == "call")))
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result={"echo": "done"})
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
    return jid


async def test_a_named_approver_never_gets_the_job_from_a_decision(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    alice = await add_user(db_url, "alice@example.com")
    as_bob = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    as_alice = {"Authorization": f"Bearer {await add_token(db_url, alice.id)}"}
    for path, body, status in (
        ("/api/approvals/{}/approve", {}, "completed"),
        ("/api/approvals/{}/reject", {"comment": "no"}, "failed"),
        ("/api/jobs/{}/approve", None, "completed"),
        ("/api/jobs/{}/reject", {"reason": "no"}, "failed"),
    ):
        jid = await waiting_step(client, engine, ui_settings, pg, as_bob, approvers=["alice@example.com"])
        assert (await client.get(f"/api/jobs/{jid}", headers=as_alice)).status_code == 404
        r = await client.post(path.format(jid), json=body, headers=as_alice)
        assert r.status_code == 200, (path, r.text)
        assert "SECRET" not in r.text, (path, r.text)
        answer = r.json()
        assert "input_data" not in answer and "result_data" not in answer, (path, answer)
        assert (answer["id"], answer["status"]) == (str(jid), status), (path, answer)
        assert answer["message"] and answer["step_key"] == "call"

    # the pages' forms: the job page's (a fragment through htmx, or the whole page) and the approver's
    await switch_to(client, "alice@example.com")
    for path, headers in (("/jobs/{}/approve", HX), ("/jobs/{}/approve", {}), ("/approvals/{}/approve", {})):
        jid = await waiting_step(client, engine, ui_settings, pg, as_bob, approvers=["alice@example.com"])
        page = await client.get(f"/approvals/{jid}")
        r = await client.post(
            path.format(jid), data={"_csrf_token": csrf_from(page.text)}, headers={**headers, **as_alice}
        )
        assert "SECRET" not in r.text, (path, r.status_code, r.text)


async def test_the_owner_and_an_admin_still_get_the_whole_job(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_bob = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    as_root = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    jid = await waiting_step(client, engine, ui_settings, pg, as_bob, approvers=["owner"])
    r = await client.post(f"/api/approvals/{jid}/approve", json={}, headers=as_bob)
    assert r.status_code == 200 and r.json()["input_data"] == {"label": SECRET, "seconds": 0.0}, r.text
    jid = await waiting_step(client, engine, ui_settings, pg, as_bob, approvers=["admins"])
    r = await client.post(f"/api/jobs/{jid}/reject", json={"reason": "no"}, headers=as_root)
    assert r.status_code == 200 and r.json()["input_data"]["label"] == SECRET, r.text
    assert r.json()["result_data"] == {"echo": "done"}
