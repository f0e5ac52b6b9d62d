"""A job action refused because the job is not in the state it needs gives one reason, in the same words,
on the page and in the API: the queue's own ("it is Done, not failed"), with the status as the page
labels it. The page said "the job has already finished (Done)" where the API said why ("it is
completed, not failed", "not waiting for approval")."""

from __future__ import annotations

import html
import re

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import HX, add_token, csrf, sign_in_as

REASONS = {
    "retry": "it is Done, not failed",
    "approve": "it is Done, not waiting for approval",
    "rerun": "it is Done, not waiting for approval",
}


async def test_a_refused_action_gives_the_same_reason_on_the_page_and_in_the_api(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    jid = await enqueue(engine, settings, admin.id)
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result={"ok": True})
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    for action, reason in REASONS.items():
        r = await client.post(f"/jobs/{jid}/{action}", data={"view": "job"}, headers=page_h)
        assert r.status_code == 409, (action, r.status_code, r.text[-1500:])
        text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", r.text)).split())
        assert f"Nothing changed: {reason}." in text, (action, text[:1500])
        r = await client.post(f"/api/jobs/{jid}/{action}", headers=api_h)
        assert r.status_code == 409, (action, r.text)
        assert r.json()["detail"] == f"Cannot {action} job {jid}: {reason}.", r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "completed"
