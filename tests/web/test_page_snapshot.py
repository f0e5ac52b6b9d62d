"""A job's and a pipeline's page read what they show — the status and the history below it — from one
snapshot: a step that changes between the reads (here: claimed by a worker just before the history is
read) shows up in neither, or in both, never in the history alone. A batch's page likewise: its counts
and the failed rows listed below them."""

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
from app.web import batch_page, job_page, pipeline_page
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import csrf_from, sign_in_as


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
