"""A step of a cancelled pipeline cannot be brought back by any path: the JSON API's retry and rerun (409
with the queue's sentence), the pages' buttons (not offered; a post anyway is a 409 notice), a bulk retry
on the API and on /admin/jobs (skipped, and counted in its answer). Before, a retry of a step that had
failed before the cancel re-opened the pipeline and it ran on; and the pipeline read "failed", with
nothing saying a person had cancelled it. Its JSON and page now say so."""

from __future__ import annotations

import html
import re
import uuid

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from app.settings import Settings
from tests.support.jobsteps import claim, failed_job, finish
from tests.support.webkit import HX, add_token, add_user, csrf, sign_in_as

REFUSED = "its pipeline was cancelled, so its steps cannot run again; start the pipeline again instead"
PIPELINE = {
    "name": "three steps",
    "steps": [
        {"key": "a", "type": "test.step", "input_data": {}, "max_attempts": 1},
        {"key": "b", "type": "test.step", "input_data": {}},
        {"key": "c", "type": "test.step", "input_data": {}, "depends_on": ["a"]},
    ],
}


def words(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


async def test_no_path_retries_or_reruns_a_step_of_a_cancelled_pipeline(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com")
    as_ann = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    r = await client.post("/api/pipelines", json=PIPELINE, headers=as_ann)
    assert r.status_code == 201, r.text
    pid, ids = r.json()["id"], {s["key"]: uuid.UUID(s["job_id"]) for s in r.json()["steps"]}
    await claim(engine, ids["a"])  # b too
    await finish(engine, settings, ids["a"], "failed", error="boom")  # c is cancelled: it waited for a
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    as_root = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    r = await client.post(f"/pipelines/{pid}/cancel", headers=page_h)
    assert r.status_code == 200, r.text[-600:]
    await finish(engine, settings, ids["b"], "cancelled")

    # the pipeline says it was cancelled, and by whom, though a step had failed before
    r = await client.get(f"/api/pipelines/{pid}", headers=as_ann)
    body = r.json()
    assert (body["status"], body["cancelled_by"]) == ("cancelled", "root@example.com"), body
    assert body["cancelled_at"] is not None and body["finished_at"] is not None, body
    listed = (await client.get("/api/pipelines", headers=as_ann)).json()["items"]
    assert [(p["status"], p["cancelled_at"]) for p in listed] == [("cancelled", body["cancelled_at"])]
    page = await client.get(f"/pipelines/{pid}")
    assert "Cancelled by root@example.com at" in words(page.text), words(page.text)[:1500]
    assert f'id="retry-{ids["a"]}"' not in page.text  # no button its action refuses

    # JSON API: the owner's retry and an admin's
    for headers in (as_ann, as_root):
        r = await client.post(f"/api/jobs/{ids['a']}/retry", headers=headers)
        assert r.status_code == 409, r.text
        assert r.json()["detail"] == f"Cannot retry job {ids['a']}: {REFUSED}.", r.text
    # the page's button, posted anyway (a page open from before the cancel)
    r = await client.post(f"/jobs/{ids['a']}/retry", data={"view": "pipeline"}, headers=page_h)
    assert r.status_code == 409, r.text[-600:]
    assert f"Nothing changed: {REFUSED}." in words(r.text), words(r.text)[:1500]

    # bulk retry, on the API and on /admin/jobs: skipped and counted, the other failed job retried
    other = await failed_job(engine, settings, ann.id, "Boom")
    r = await client.post(
        "/api/jobs/bulk", json={"action": "retry", "ids": [str(ids["a"]), str(other)]}, headers=as_root
    )
    assert r.status_code == 200, r.text
    assert (r.json()["done"], r.json()["skipped"]) == ([str(other)], [str(ids["a"])]), r.text
    counted = "1 because their pipeline was cancelled, so its steps cannot run again"
    assert f"Retried 1 job; 1 skipped: {counted}" in r.json()["message"], r.text
    body = {"action": "retry", "scope": "selected", "ids": [str(ids["a"])]}
    r = await client.post("/admin/jobs/bulk", data=body, headers=page_h)
    assert r.status_code == 200, r.text[-600:]
    assert f"Retried 0 jobs; 1 skipped: {counted}" in words(r.text), words(r.text)[:1500]

    statuses = dict(
        await pg.fetch("SELECT step_key, status FROM jobs WHERE pipeline_id = $1", uuid.UUID(pid))
    )
    assert statuses == {"a": "failed", "b": "cancelled", "c": "cancelled"}
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", uuid.UUID(pid)) == "cancelled"


async def test_a_waiting_step_of_a_cancelled_pipeline_is_not_rerun_on_the_api_or_the_page(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    """No path leaves a step waiting for approval in a cancelled pipeline today (the cancel stops it), so
    the marker is set by hand: the rerun asks the queue's rule all the same."""
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    as_root = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    spec = {"name": "one", "steps": [{"key": "draft", "type": "test.step", "requires_approval": True}]}
    r = await client.post("/api/pipelines", json=spec, headers=as_root)
    assert r.status_code == 201, r.text
    pid, draft = uuid.UUID(r.json()["id"]), uuid.UUID(r.json()["steps"][0]["job_id"])
    await claim(engine, draft)
    await finish(engine, settings, draft, "completed", result={})
    await pg.execute(
        "UPDATE pipelines SET cancelled_at = now(), cancelled_by = $2 WHERE id = $1", pid, f"user:{root.id}"
    )

    r = await client.post(f"/api/jobs/{draft}/rerun", headers=as_root)
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == f"Cannot rerun job {draft}: {REFUSED}.", r.text
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    page = await client.get(f"/pipelines/{pid}")
    assert f'id="rerun-{draft}"' not in page.text and f'id="approve-{draft}"' in page.text
    r = await client.post(f"/jobs/{draft}/rerun", data={"view": "pipeline"}, headers=page_h)
    assert r.status_code == 409, r.text[-600:]
    assert f"Nothing changed: {REFUSED}." in words(r.text), words(r.text)[:1500]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", draft) == "waiting_approval"


async def test_the_admin_lists_offer_no_retry_of_a_cancelled_pipeline_s_step_nor_count_one(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    """/admin/jobs and /admin/failed decided their Retry buttons from the row alone and offered one on a
    failed step of a cancelled pipeline (a 409 when pressed); a bulk retry's confirm step counted such a
    step as one it would retry, and its answer then reported it skipped. The list reads the pipeline's
    marker in its own statement now, and the confirm step counts only what the retry will do."""
    ann = await add_user(db_url, "ann@example.com")
    as_ann = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    r = await client.post("/api/pipelines", json=PIPELINE, headers=as_ann)
    assert r.status_code == 201, r.text
    pid, ids = r.json()["id"], {s["key"]: uuid.UUID(s["job_id"]) for s in r.json()["steps"]}
    await claim(engine, ids["a"])
    await finish(engine, settings, ids["a"], "failed", error="boom")
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    assert (await client.post(f"/pipelines/{pid}/cancel", headers=page_h)).status_code == 200
    await finish(engine, settings, ids["b"], "cancelled")
    other = await failed_job(engine, settings, ann.id, "Other")

    listed = (await client.get("/admin/jobs?status=failed")).text
    assert f'id="retry-{other}"' in listed and f'id="retry-{ids["a"]}"' not in listed, listed[-3000:]
    failed = await client.get("/admin/failed")
    group = re.search(r'<tr id="group-\w+">(?:(?!</tr>).)*boom(?:(?!</tr>).)*</tr>', failed.text, re.S)
    assert group is not None and "Retry all" not in group.group(0), failed.text[-3000:]
    assert "Steps of cancelled pipelines: not retried" in group.group(0)

    for body in (
        {"action": "retry", "scope": "selected", "ids": [str(ids["a"]), str(other)]},
        {"action": "retry", "scope": "filter", "status": "failed"},
    ):
        r = await client.post("/admin/jobs/bulk/confirm", data=body, headers=page_h)
        assert r.status_code == 200, r.text[-600:]
        assert re.search(r'id="bulk-count">1<', r.text), (body, words(r.text)[:1500])
    r = await client.post(
        "/admin/failed/retry/confirm", data={"type": "test.step", "signature": "boom"}, headers=page_h
    )
    assert "No job here can be retried" in words(r.text), words(r.text)[:1500]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", ids["a"]) == "failed"
