"""A job page's History comes again with each status change: an opened "Full text" closed when it came,
and older events a person had loaded were folded away. The new events are added to what is shown."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db import asyncpg_dsn
from app.jobs.queue import new_id
from tests.support.browser import BROWSER_MARKS, Watch, sign_in, wait_until
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS


async def _seed(db_url: str) -> Any:
    ann = await add_user(db_url, "ann@example.com")
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    jid = new_id()
    try:
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title)"
            " VALUES ($1, 'noop', 'queued', $2, '{}', 3, 1, 'Weekly report')",
            jid,
            ann.id,
        )
        await conn.execute(
            "INSERT INTO job_events (job_id, kind, from_status, to_status, actor, message)"
            " VALUES ($1, 'failed', 'in_progress', 'queued', 'w-test', $2)",
            jid,
            "Could not connect to reports.example.com: " + "the server answered with a long page. " * 8,
        )
    finally:
        await conn.close()
    return jid


async def _start(db_url: str, jid: Any) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        await conn.execute(
            "UPDATE jobs SET status = 'in_progress', attempts = 2, started_at = now(), locked_by = 'w-test',"
            " lease_expires_at = now() + interval '1 hour' WHERE id = $1",
            jid,
        )
        await conn.execute(
            "INSERT INTO job_events (job_id, kind, from_status, to_status, actor, data)"
            " VALUES ($1, 'claimed', 'queued', 'in_progress', 'w-test', '{\"attempt\": 2}')",
            jid,
        )
    finally:
        await conn.close()


@pytest.fixture
def seeded(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    jid = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING", WORKER_ENABLED="false") as base:
        yield base, jid


def test_an_opened_full_text_stays_open_when_the_status_changes(
    seeded: tuple[str, Any], browser: Any, db_url: str, artifacts_dir: Path
) -> None:
    base, jid = seeded
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "ann@example.com")
    page.goto(f"{base}/jobs/{jid}")
    page.wait_for_selector("#job-history details summary")
    page.click("#job-history details summary")
    assert page.evaluate("document.querySelector('#job-history details').open")
    lines = page.locator("#job-history li").count()
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds an event loop in this thread
        pool.submit(asyncio.run, _start(db_url, jid)).result()
    wait_until(page, f"document.querySelectorAll('#job-history li').length > {lines}", 15_000)
    assert page.evaluate("document.querySelector('#job-history details').open"), "the Full text closed"
    page.screenshot(path=str(artifacts_dir / "history-kept.png"), full_page=True)
    assert watch.errors == []
    page.close()
