"""The approval page's Approve and Reject forms refuse a field they have not, or one sent twice, as every
other page form does: a 422 with nothing decided and, for an admin, one ``refused: …`` entry on the
audit trail (:func:`app.actions.trail.refused_form`, as a job page's approve and reject leave). They
answered the 422 without it, so an admin's refused decision left no trace there."""

from __future__ import annotations

import json
import uuid

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.webkit import add_token, add_user, csrf_from, switch_to

SPEC = {
    "name": "press release",
    "steps": [
        {
            "key": "draft",
            "type": "test.step",
            "input_data": {},
            "requires_approval": True,
            "approvers": ["ann@example.com", "admins"],
        }
    ],
}
REFUSED = "SELECT action, target_ids, outcome FROM audit_log WHERE outcome LIKE 'refused: %' ORDER BY id"


async def _waiting_step(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> uuid.UUID:
    owner = await add_user(db_url, "owner@example.com")
    await add_user(db_url, "ann@example.com")
    await add_user(db_url, "root@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db_url, owner.id)}"}
    r = await client.post("/api/pipelines", json=SPEC, headers=headers)
    assert r.status_code == 201, r.text
    jid = uuid.UUID(str(r.json()["steps"][0]["job_id"]))
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result={"headline": "We ship"})
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
    return jid


async def _post_bad_forms(client: AsyncTestClient, jid: uuid.UUID) -> list[tuple[str, str]]:
    """Each decision's form with a field it has not, then with its text field twice; every answer a 422."""
    token = csrf_from((await client.get(f"/approvals/{jid}")).text)
    sent = []
    for decision, field in (("approve", "comment"), ("reject", "reason")):
        for how, extra in (("unknown", [("junk", "1")]), ("twice", [(field, "a"), (field, "b")])):
            r = await client.post(
                f"/approvals/{jid}/{decision}",
                content="&".join(f"{k}={v}" for k, v in [("_csrf_token", token), *extra]),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert r.status_code == 422, (decision, how, r.status_code, r.text[:500])
            assert "Nothing changed" in r.text, (decision, how, r.text[-3000:])
            sent.append((decision, how))
    return sent


async def test_an_admins_refused_decision_form_is_audited_once_a_plain_users_is_not(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    jid = await _waiting_step(client, db_url, engine, ui_settings, pg)

    await switch_to(client, "ann@example.com")  # a named approver, not an admin
    await _post_bad_forms(client, jid)
    assert await pg.fetch(REFUSED) == []

    await switch_to(client, "root@example.com")
    sent = await _post_bad_forms(client, jid)
    refused = await pg.fetch(REFUSED)
    assert [r["action"] for r in refused] == [f"job.{decision}" for decision, _ in sent], refused
    assert all(json.loads(r["target_ids"]) == [str(jid)] for r in refused), refused
    outcomes = [r["outcome"] for r in refused]
    assert ["'junk'" in o for o in outcomes] == [True, False, True, False], outcomes
    assert ["more than once" in o for o in outcomes] == [False, True, False, True], outcomes
    assert await pg.fetchval("SELECT count(*) FROM job_approvals") == 0
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
