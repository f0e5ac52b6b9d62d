"""A step's named approver opens the files its result lists while it waits for their decision — through
the file page, its ``?view=1`` and the API alike, since all three ask :meth:`FileStore.get`. Only those
files (not the owner's other files, not the pipeline's input), only while the step waits, and never for
someone the step does not name: they get the unknown id's 404."""

from __future__ import annotations

import uuid

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from app.files import FileStore, file_ref
from app.settings import Settings
from tests.api.test_approvals_api import spec, token_of
from tests.support.jobsteps import claim, finish
from tests.support.webkit import add_user, switch_to

REPORT = b"<html><body><h1>Summary</h1></body></html>"


async def test_a_named_approver_opens_the_waiting_steps_result_files_and_nobody_else(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    alice = await add_user(db_url, "alice@example.com")
    bob = await add_user(db_url, "bob@example.com")
    carol = await add_user(db_url, "carol@example.com")
    as_alice = await token_of(db_url, alice)
    as_bob = await token_of(db_url, bob)
    as_carol = await token_of(db_url, carol)

    r = await client.post("/api/pipelines", json=spec(approvers=["bob@example.com"]), headers=as_alice)
    assert r.status_code == 201, r.text
    jid = uuid.UUID(str(next(s["job_id"] for s in r.json()["steps"] if s["key"] == "draft")))
    await claim(engine, jid)
    store = FileStore(ui_settings.files_dir)
    async with engine.begin() as conn:
        report = await store.save(conn, user_id=alice.id, name="summary.html", data=REPORT, job_id=jid)
        other = await store.save(conn, user_id=alice.id, name="private.csv", data=b"a,b\n1,2\n")
    await finish(engine, ui_settings, jid, "completed", result={"files": [file_ref(report)]})
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"

    listed = (await client.get("/api/approvals", headers=as_bob)).json()["items"]
    fid = listed[0]["result_data"]["files"][0]["file_id"]
    assert fid == str(report["id"])

    r = await client.get(f"/api/files/{fid}", headers=as_bob)
    assert r.status_code == 200, r.text
    assert r.content == REPORT
    for who in (as_bob, as_carol):
        r = await client.get(f"/api/files/{other['id']}", headers=who)
        assert r.status_code == 404 and r.json()["detail"] == "No such file.", r.text
    r = await client.get(f"/api/files/{fid}", headers=as_carol)
    assert r.status_code == 404 and r.json()["detail"] == "No such file.", r.text

    await switch_to(client, "bob@example.com")
    page = await client.get(f"/approvals/{jid}")
    assert page.status_code == 200 and f"/files/{fid}" in page.text
    for path in (f"/files/{fid}?view=1", f"/files/{fid}"):
        r = await client.get(path)
        assert r.status_code == 200 and r.content == REPORT, (path, r.status_code)
    assert (await client.get(f"/files/{other['id']}")).status_code == 404
    await switch_to(client, "carol@example.com")
    for path in (f"/files/{fid}?view=1", f"/files/{fid}"):
        assert (await client.get(path)).status_code == 404, path

    # once decided, the result is the owner's again: the approver's reading ends with the wait
    r = await client.post(f"/api/approvals/{jid}/approve", json={}, headers=as_bob)
    assert r.status_code == 200, r.text
    assert (await client.get(f"/api/files/{fid}", headers=as_bob)).status_code == 404
    assert (await client.get(f"/api/files/{fid}", headers=as_alice)).status_code == 200
