"""A failed job whose input does not fit its type would fail the same way again: one rule
(:func:`app.jobs.error_text.retry_refusal`) hides the page's Retry and makes the queue's retry refuse it,
on every path — one job through the API (owner and admin), a bulk retry, a batch's "Retry failed rows"."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.jobs.error_text import INPUT_UNFIT
from app.settings import Settings
from tests.support.jobsteps import failed_job
from tests.support.webkit import bearer, login

UNFIT = f"{INPUT_UNFIT}test.form: input_data.name: Enter text"


async def test_a_job_whose_input_does_not_fit_is_not_retried_on_any_path(
    client: AsyncTestClient, engine: AsyncEngine, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    ann, ann_auth = await bearer(db_url, "ann@example.com")
    _, root_auth = await bearer(db_url, "root@example.com", admin=True)
    unfit = await failed_job(engine, ui_settings, ann.id, UNFIT)
    other = await failed_job(engine, ui_settings, ann.id, "the server did not answer in time")
    events = await pg.fetchval("SELECT count(*) FROM job_events WHERE job_id = $1", unfit)

    # the page hides the button (the same rule)
    assert (await login(client, "ann@example.com")).status_code == 303
    assert 'id="act-retry"' not in (await client.get(f"/jobs/{unfit}")).text
    assert 'id="act-retry"' in (await client.get(f"/jobs/{other}")).text

    # the owner's and an admin's retry through the API are refused, saying why and what to do
    for auth in (ann_auth, root_auth):
        r = await client.post(f"/api/jobs/{unfit}/retry", headers=auth)
        assert r.status_code == 409, r.text
        detail = r.json()["detail"]
        assert "does not fit its type" in detail and "input_data.name: Enter text" in detail
        assert "would fail the same way" in detail and "corrected input" in detail
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", unfit)
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE job_id = $1", unfit) == events

    # a bulk retry retries the other and says why it skipped this one
    bulk = await client.post(
        "/api/jobs/bulk", json={"action": "retry", "ids": [str(unfit), str(other)]}, headers=root_auth
    )
    assert bulk.status_code == 200, bulk.text
    assert (bulk.json()["done"], bulk.json()["skipped"]) == ([str(other)], [str(unfit)])
    assert "input does not fit their type" in bulk.json()["message"]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", unfit) == "failed"
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", other) == "queued"


async def test_retry_failed_rows_leaves_rows_whose_input_does_not_fit(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    _, ann_auth = await bearer(db_url, "ann@example.com")
    rows = [{"url": f"http://jobs.test:9/item/{i}", "timeout": 5} for i in range(2)]
    made = await client.post("/api/batches", json={"type": "http.request", "rows": rows}, headers=ann_auth)
    assert made.status_code == 201, made.text
    bid = made.json()["id"]
    await pg.execute(
        "UPDATE jobs SET status = 'failed', attempts = max_attempts, completed_at = now(), error_message = $1",
        f"{INPUT_UNFIT}http.request: input_data.url: URL scheme should be 'http' or 'https'",
    )
    assert (await login(client, "ann@example.com")).status_code == 303
    assert 'id="retry-failed"' not in (await client.get(f"/batches/{bid}")).text

    r = await client.post(f"/api/batches/{bid}/retry-failed", headers=ann_auth)
    assert r.status_code == 409, r.text
    assert "2 failed rows cannot be retried: their input does not fit the job type" in r.json()["detail"]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 2

    # a row that failed otherwise is retried; the other is named
    first = await pg.fetchval("SELECT id FROM jobs ORDER BY id LIMIT 1")
    await pg.execute("UPDATE jobs SET error_message = 'connection refused' WHERE id = $1", first)
    assert 'id="retry-failed"' in (await client.get(f"/batches/{bid}")).text
    r = await client.post(f"/api/batches/{bid}/retry-failed", headers=ann_auth)
    assert r.status_code == 200, r.text
    assert r.json()["retried"] == 1
    assert "1 failed row cannot be retried" in r.json()["message"]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", first) == "queued"
