"""A step's id cannot be probed: someone a step does not name, and who may not see its job (neither its
owner nor an admin), gets from the approver's page and from every decision route exactly the answer an
id that does not exist gets. Someone who may see the job but may not decide is told why (403)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings
from tests.api.test_approvals_api import token_of, waiting
from tests.support.webkit import add_user, csrf_from, switch_to

API_ROUTES = (
    ("/api/approvals/{}/approve", {}),
    ("/api/approvals/{}/reject", {"comment": "no"}),
    ("/api/jobs/{}/approve", None),
    ("/api/jobs/{}/reject", {"reason": "no"}),
)


def shape(body: Any, jid: uuid.UUID) -> Any:
    """A JSON answer with the probed id taken out (the rest must be the same)."""
    return re.sub(str(jid), "<id>", str(body))


def page_shape(html: str, jid: uuid.UUID) -> str:
    """A page's text without the probed id, its CSRF token and its request id."""
    html = html.replace(str(jid), "<id>")
    html = re.sub(r'name="_csrf_token" value="[^"]+"', "", html)
    html = re.sub(r'content="[^"]{20,}"', "", html)
    return re.sub(r"[0-9a-f]{16,}", "<hex>", html)


async def test_a_stranger_gets_the_unknown_id_answer_on_the_page_and_the_api(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "owner@example.com")
    await add_user(db_url, "ann@example.com")
    bob = await add_user(db_url, "bob@example.com")
    as_owner, as_bob = await token_of(db_url, owner), await token_of(db_url, bob)
    real = await waiting(client, engine, ui_settings, pg, as_owner, approvers=["ann@example.com"])
    unknown = uuid.uuid4()

    for path, body in API_ROUTES:
        answers = []
        for jid in (real, unknown):
            r = await client.post(path.format(jid), json=body, headers=as_bob)
            answers.append((r.status_code, shape(r.json(), jid)))
        assert answers[0] == answers[1], (path, answers)
        assert answers[0][0] == 404, (path, answers)

    await switch_to(client, "bob@example.com")
    token = csrf_from((await client.get("/approvals")).text)
    for method, path in (
        ("get", "/approvals/{}"),
        ("post", "/approvals/{}/approve"),
        ("post", "/approvals/{}/reject"),
    ):
        answers = []
        for jid in (real, unknown):
            if method == "get":
                r = await client.get(path.format(jid))
            else:
                r = await client.post(path.format(jid), data={"_csrf_token": token, "reason": "no"})
            answers.append((r.status_code, page_shape(r.text, jid)))
        assert answers[0][0] == answers[1][0] == 404, (path, answers[0][0], answers[1][0])
        assert answers[0][1] == answers[1][1], path
    assert await pg.fetchval("SELECT count(*) FROM job_approvals") == 0
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", real) == "waiting_approval"


async def test_one_who_may_see_the_job_but_not_decide_is_told_why(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "owner@example.com")
    await add_user(db_url, "ann@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_owner, as_root = await token_of(db_url, owner), await token_of(db_url, root)
    jid = await waiting(client, engine, ui_settings, pg, as_owner, approvers=["ann@example.com"])
    for who, why in ((as_owner, "someone else must decide"), (as_root, "not one of the approvers")):
        for path, body in API_ROUTES:
            r = await client.post(path.format(jid), json=body, headers=who)
            assert r.status_code == 403 and why in r.json()["detail"], (path, r.text)
    await switch_to(client, "owner@example.com")
    page = await client.get(f"/approvals/{jid}")
    assert page.status_code == 200 and "someone else must decide" in page.text
    r = await client.post(f"/approvals/{jid}/approve", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 403 and "someone else must decide" in r.text
