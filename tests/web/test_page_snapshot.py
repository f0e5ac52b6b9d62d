"""A job's and a pipeline's page read what they show — the status and the history below it — from one
snapshot: a step that changes between the reads (here: claimed by a worker just before the history is
read) shows up in neither, or in both, never in the history alone."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form and test.steps)
from app.db import create_engine
from app.web import job_page, pipeline_page
from tests.support.jobsteps import claim, enqueue
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
