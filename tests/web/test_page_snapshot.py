"""A job's and a pipeline's page read what they show — the status and the history below it — from one
snapshot: a step that changes between the reads (here: claimed by a worker just before the history is
read) shows up in neither, or in both, never in the history alone. A batch's page likewise: its counts
and the failed rows listed below them; My jobs: its rows and the recent batches' counts above them;
``/admin/jobs``: its rows and the counts per status above them."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form and test.steps)
from app import batches
from app.db import create_engine
from app.processors import registry
from app.web import batch_page, job_page, my_jobs, pipeline_page
from app.web.admin import jobs as admin_jobs
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import HX, csrf_from, sign_in_as


def _history(html: str) -> str:
    start = html.index('aria-labelledby="history-heading"')
    return html[start : html.index("</section>", start)]


def _claim_before(module: Any, name: str, url: str, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Make ``module.name`` (a history read) first let a worker claim the job, committed at once (on an
    engine of its own: the app's requests run on another event loop than the test)."""
    real, claimed = getattr(module, name), []

    async def history_after_a_claim(*args: Any, **kw: Any) -> Any:
        if not claimed:
            worker = create_engine(url, pool_size=1)
            try:
                claimed.append(bool(await claim(worker)))
            finally:
                await worker.dispose()
        return await real(*args, **kw)

    monkeypatch.setattr(module, name, history_after_a_claim)
    return claimed


async def test_the_pipeline_page_shows_its_steps_and_history_from_one_snapshot(
    client: AsyncTestClient,
    db_url: str,
    settings: Any,
    pg: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/pipelines/new/test.steps")
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    made = await client.post(
        "/pipelines/new/test.steps",
        data={"_csrf_token": csrf_from(page.text), "_form_key": key},
        follow_redirects=False,
    )
    url = made.headers["location"]
    claimed = _claim_before(pipeline_page, "pipeline_history", settings.database_url, monkeypatch)
    shown = await client.get(url)
    assert claimed == [True]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'in_progress'") == 1
    # the steps above say nothing has started; the history below must not say otherwise
    assert "Started" not in _history(shown.text), _history(shown.text)
    # the next read sees the claim in both
    monkeypatch.undo()
    again = await client.get(url)
    assert "Started" in _history(again.text)


async def test_the_job_page_shows_its_status_and_history_from_one_snapshot(
    client: AsyncTestClient, db_url: str, engine: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    job = await enqueue(engine, settings, ann.id)
    claimed = _claim_before(job_page, "job_history", settings.database_url, monkeypatch)
    shown = await client.get(f"/jobs/{job}")
    assert claimed == [True]
    assert "Started" not in _history(shown.text), _history(shown.text)
    monkeypatch.undo()
    assert "Started" in _history((await client.get(f"/jobs/{job}")).text)


async def test_the_batch_page_shows_its_counts_and_failed_rows_from_one_snapshot(
    client: AsyncTestClient,
    db_url: str,
    engine: Any,
    settings: Any,
    pg: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its counts say one row failed; a second row fails (committed) before the failed rows are read:
    the rows listed below must be the one the counts above say, not two."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        batch, _ = await batches.create(
            conn,
            spec=registry.get("test.form"),
            inputs=[{"name": "Row 1"}, {"name": "Row 2"}],
            user_id=ann.id,
            settings=settings,
            name="Two rows",
            source="test",
        )
    await pg.execute("UPDATE jobs SET max_attempts = 1 WHERE batch_id = $1", batch["id"])
    first, second = [await claim(engine) for _ in range(2)]
    await finish(engine, settings, first, "failed", error="first")
    real, failed_late = batch_page.viewer_bell, []

    async def bell_after_a_failure(*args: Any, **kw: Any) -> Any:  # read between the counts and the rows
        if not failed_late:
            worker = create_engine(settings.database_url, pool_size=1)
            try:
                await finish(worker, settings, second, "failed", error="second")
            finally:
                await worker.dispose()
            failed_late.append(True)
        return await real(*args, **kw)

    monkeypatch.setattr(batch_page, "viewer_bell", bell_after_a_failure)
    shown = await client.get(f"/batches/{batch['id']}")
    assert failed_late == [True]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 2
    counted = re.search(r'data-status="failed">[^<]*<strong>(\d+)</strong>', shown.text)
    listed = shown.text.count('class="failed-row"')
    assert counted is not None and (int(counted.group(1)), listed) == (1, 1), (counted, listed)
    monkeypatch.undo()
    again = await client.get(f"/batches/{batch['id']}")
    assert (
        again.text.count('class="failed-row"') == 2
        and 'data-status="failed">Failed: <strong>2<' in again.text
    )


def _fail_before(
    module: Any, name: str, settings: Any, job: Any, monkeypatch: pytest.MonkeyPatch
) -> list[bool]:
    """Make ``module.name`` (a page's later read) first let the worker fail ``job`` for good, committed at
    once (on an engine of its own: the app's requests run on another event loop than the test)."""
    real, failed = getattr(module, name), []

    async def read_after_a_failure(*args: Any, **kw: Any) -> Any:
        if not failed:
            worker = create_engine(settings.database_url, pool_size=1)
            try:
                await finish(worker, settings, job, "failed", error="late")
            finally:
                await worker.dispose()
            failed.append(True)
        return await real(*args, **kw)

    monkeypatch.setattr(module, name, read_after_a_failure)
    return failed


def _cell_label(html: str, job: Any) -> str:
    """The status a My jobs row shows for ``job``."""
    cell = re.search(
        rf'id="cell-{job}"[^>]*><span class="status-icon" aria-hidden="true"></span>([^<·]+)', html
    )
    assert cell is not None, html
    return cell.group(1).strip()


async def test_my_jobs_shows_its_rows_and_the_batches_above_them_from_one_snapshot(
    client: AsyncTestClient,
    db_url: str,
    engine: Any,
    settings: Any,
    pg: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's one row is running; it fails (committed) after the list was read and before the recent
    batches are: the batch above must not count as failed the row the list below shows running."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        batch, _ = await batches.create(
            conn,
            spec=registry.get("test.form"),
            inputs=[{"name": "Row 1"}],
            user_id=ann.id,
            settings=settings,
            name="One row",
            source="test",
        )
    await pg.execute("UPDATE jobs SET max_attempts = 1 WHERE batch_id = $1", batch["id"])
    job = await claim(engine)
    failed_late = _fail_before(my_jobs, "recent_batches", settings, job, monkeypatch)
    shown = (await client.get("/jobs")).text
    assert failed_late == [True]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "failed"
    counts = re.search(r'class="batch-counts">([^<]*)<', shown)
    assert counts is not None, shown
    assert (_cell_label(shown, job), counts.group(1)) == ("Running", "1 in all · Running 1")
    monkeypatch.undo()
    again = (await client.get("/jobs")).text
    assert _cell_label(again, job) == "Failed" and "1 in all · Failed 1" in again


def _admin_counts(html: str) -> dict[str, str]:
    return dict(re.findall(r'id="count-([a-z_]+)".*?class="count-n">([^<]+)<', html, re.S))


def _admin_statuses(html: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", label).strip()
        for label in re.findall(r'class="status-cell"[^>]*>(.*?)</td>', html, re.S)
    ]


async def test_the_admin_list_and_its_counts_come_from_one_snapshot(
    client: AsyncTestClient,
    db_url: str,
    engine: Any,
    settings: Any,
    pg: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``/admin/jobs`` renders its counts per status with its rows, the page and the list htmx fetches
    again after a bulk action (the counts out of band) alike. A running job fails (committed) after the
    rows were read and before the counts are: the counts must say what the rows say, running, not
    failed. (The strip used to load itself by a request of its own, which saw the failure.)"""
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    await enqueue(engine, settings, root.id, max_attempts=1)
    for headers in ({}, HX):
        job = await claim(engine)
        failed = str(await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'"))
        failed_late = _fail_before(admin_jobs, "status_counts", settings, job, monkeypatch)
        shown = (await client.get("/admin/jobs", headers=headers)).text
        assert failed_late == [True]
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "failed"
        counted, listed = _admin_counts(shown), _admin_statuses(shown)
        seen = (counted.get("in_progress"), counted.get("failed"), listed.count("Running"))
        assert seen == ("1", failed, 1), (counted, listed)
        # the list fetched again by htmx brings the strip out of band; the page has it in place
        assert ('<section id="job-counts" hx-swap-oob="innerHTML">' in shown) == bool(headers)
        monkeypatch.undo()
        again = (await client.get("/admin/jobs", headers=headers)).text
        failed = str(int(failed) + 1)
        assert (_admin_counts(again)["failed"], str(_admin_statuses(again).count("Failed"))) == (
            failed,
            failed,
        )
        await enqueue(engine, settings, root.id, max_attempts=1)  # the next round's running job
