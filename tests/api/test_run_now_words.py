""" "Run now" of a job that no longer waits is refused in its own words, with the status as its page
shows it ("Running", "Done"), the same sentence in the API's 409, the page's notice and the audit entry
— it said "Cannot reschedule job …: it is in_progress, not waiting." and the audit read "refused:
Nothing changed: Cannot reschedule …"."""

from __future__ import annotations

import uuid

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings
from tests.api.test_approvals_api import token_of
from tests.support.jobsteps import claim, finish
from tests.support.webkit import add_user, csrf_from, switch_to

RUNNING = "this job is Running, not waiting, so it cannot be run now."
DONE = "this job is Done, not waiting, so it cannot be run now."


async def test_run_now_of_a_job_no_longer_waiting_says_run_now_in_the_pages_words(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    as_root = await token_of(db_url, root)
    made = await client.post("/api/jobs", json={"type": "noop", "input_data": {}}, headers=as_root)
    assert made.status_code == 201, made.text
    jid = uuid.UUID(made.json()["id"])
    await claim(engine, jid)

    r = await client.post(f"/api/jobs/{jid}/run-now", headers=as_root)
    assert r.status_code == 409 and r.json()["detail"] == RUNNING, r.text
    await switch_to(client, "root@example.com")
    page = await client.get(f"/jobs/{jid}")
    r = await client.post(f"/jobs/{jid}/run-now", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 409 and f"Nothing changed: {RUNNING}" in r.text, r.text[:2000]
    assert "reschedule" not in r.text.lower().split("nothing changed", 1)[1][:200]

    await finish(engine, ui_settings, jid, "completed", result={})
    r = await client.post(f"/api/jobs/{jid}/run-now", headers=as_root)
    assert r.status_code == 409 and r.json()["detail"] == DONE, r.text

    outcomes = [
        r["outcome"]
        for r in await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'job.run_now' ORDER BY id")
    ]
    assert outcomes == [f"refused: Nothing changed: {w}" for w in (RUNNING, RUNNING, DONE)], outcomes
