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
from tests.support.jobsteps import claim, enqueue, failed_job, finish
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


async def test_a_refused_cancel_gives_the_same_reason_on_the_page_and_in_the_api(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    """The page said "the job has already finished (Cancelled)" where the API said "it was already
    cancelled" ("has already completed" for a done job, with the database's word), and "the job is already
    being stopped" where the API said "is already being cancelled". Both now give the queue's one reason,
    with the status as the page labels it, and leave the same audit entry."""
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    done = await enqueue(engine, settings, admin.id)
    await claim(engine, done)
    await finish(engine, settings, done, "completed", result={"ok": True})
    failed = await failed_job(engine, settings, admin.id, "boom")
    cancelled = await enqueue(engine, settings, admin.id)
    assert (await client.post(f"/api/jobs/{cancelled}/cancel", headers=api_h)).status_code == 200
    stopping = await enqueue(engine, settings, admin.id)
    await claim(engine, stopping)
    assert (await client.post(f"/api/jobs/{stopping}/cancel", headers=api_h)).status_code == 200
    reasons = {
        done: "it has already finished (Done)",
        failed: "it has already finished (Failed)",
        cancelled: "it has already finished (Cancelled)",
        stopping: "it is already being stopped",
    }
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    for jid, reason in reasons.items():
        r = await client.post(f"/api/jobs/{jid}/cancel", headers=api_h)
        assert r.status_code == 409, r.text
        assert r.json()["detail"] == f"Cannot cancel job {jid}: {reason}.", r.text
        # the job's page and the admin's list, each with its own form
        for page, form in ((f"/jobs/{jid}/cancel", {"view": "job"}), (f"/admin/jobs/{jid}/cancel", {})):
            r = await client.post(page, data=form, headers=page_h)
            assert r.status_code == 409, (page, r.status_code, r.text[-1500:])
            text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", r.text)).split())
            assert f"Nothing changed: {reason}." in text, (page, text[:1500])
        outcomes = await pg.fetch(
            "SELECT outcome FROM audit_log WHERE action = 'job.cancel' AND target_ids ->> 0 = $1"
            " AND outcome LIKE 'refused%' ORDER BY id",
            str(jid),
        )
        assert [o["outcome"] for o in outcomes] == [f"refused: Nothing changed: {reason}."] * 3, outcomes
    statuses = {r["id"]: r["status"] for r in await pg.fetch("SELECT id, status FROM jobs")}
    assert statuses == {done: "completed", failed: "failed", cancelled: "cancelled", stopping: "in_progress"}
