"""A retry of many jobs — ticked rows or a filter on /admin/jobs, "Retry all" of a group on
/admin/failed, a batch's "Retry failed rows" — says in its question how many of them failed with a
permanent error, as one job's "Retry anyway" does, by the same rule
(:func:`app.actions.jobs.failed_for_good`): the bulk confirmations asked "Retry 3 jobs?" alone."""

from __future__ import annotations

import html
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.actions.jobs import retry_many_warning
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import HX, bearer, csrf, login, sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def _failed(engine: AsyncEngine, settings: Settings, user_id: int, *, permanent: bool) -> Any:
    jid = await enqueue(engine, settings, user_id, max_attempts=3 if permanent else 1, priority=100)
    assert await claim(engine) == jid
    await finish(engine, settings, jid, "failed", error="boom", permanent=permanent)
    return jid


async def test_bulk_retries_say_how_many_failed_permanently(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    gone = [await _failed(engine, settings, root.id, permanent=True) for _ in range(2)]
    tired = await _failed(engine, settings, root.id, permanent=False)
    warning = retry_many_warning(2)
    assert warning.startswith("2 jobs of these failed with an error that trying again does not fix")
    token = await csrf(client)

    ticked = {"_csrf_token": token, "action": "retry", "scope": "selected", "ids": [str(i) for i in gone]}
    r = await client.post(
        "/admin/jobs/bulk/confirm", data={**ticked, "ids": [*ticked["ids"], str(tired)]}, headers=HX
    )
    assert r.status_code == 200, r.text
    assert warning in html.unescape(r.text), r.text
    r = await client.post("/admin/jobs/bulk/confirm", data={**ticked, "ids": str(tired)}, headers=HX)
    assert r.status_code == 200 and 'id="bulk-permanent"' not in r.text, r.text

    by_filter = {"_csrf_token": token, "action": "retry", "scope": "filter", "status": "failed"}
    r = await client.post("/admin/jobs/bulk/confirm", data=by_filter, headers=HX)
    assert r.status_code == 200 and warning in html.unescape(r.text), r.text

    group = {"_csrf_token": token, "type": "test.form", "signature": "boom"}
    r = await client.post("/admin/failed/retry/confirm", data=group, headers=HX)
    assert r.status_code == 200 and warning in html.unescape(r.text), r.text


async def test_retry_failed_rows_says_how_many_failed_permanently(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    _, ann_auth = await bearer(db_url, "ann@example.com")
    rows = [{"url": f"http://jobs.test:9/item/{i}", "timeout": 5} for i in range(3)]
    made = await client.post("/api/batches", json={"type": "http.request", "rows": rows}, headers=ann_auth)
    assert made.status_code == 201, made.text
    bid = made.json()["id"]
    async with engine.begin() as conn:  # one row runs out of tries, the others fail permanently
        await conn.execute(text("UPDATE jobs SET max_attempts = 1"))
    for n in range(3):
        jid = await claim(engine)
        await finish(engine, settings, jid, "failed", error="The page was not found (404).", permanent=n > 0)
    assert (await login(client, "ann@example.com")).status_code == 303
    page = html.unescape((await client.get(f"/batches/{bid}")).text)
    assert 'id="retry-failed"' in page and "Failed: <strong>3</strong>" in page
    assert (
        "Retry every failed row with a fresh set of attempts? " + retry_many_warning(2, of_rows=True) in page
    )


async def test_a_bulk_retry_through_the_api_says_how_many_failed_permanently(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    """The API's bulk retry answers with the count of permanent failures it retried anyway, as the web
    confirmation warns of them; a cancel retries none."""
    root, auth = await bearer(db_url, "root@example.com", admin=True)
    gone = [await _failed(engine, settings, root.id, permanent=True) for _ in range(2)]
    tired = await _failed(engine, settings, root.id, permanent=False)
    body = {"action": "retry", "ids": [str(i) for i in [*gone, tired]]}
    r = await client.post("/api/jobs/bulk", json=body, headers=auth)
    assert r.status_code == 200, r.text
    assert len(r.json()["done"]) == 3 and r.json()["failed_permanently"] == 2, r.json()
    r = await client.post("/api/jobs/bulk", json={"action": "cancel", "ids": body["ids"]}, headers=auth)
    assert r.status_code == 200 and r.json()["failed_permanently"] == 0, r.json()
