"""Keyboard focus after "Cancel job" on a running job, in headless Chromium against ``jobdesk serve``:
the answer's notice ("Stopping the job…") takes the focus, and when the job has stopped the poll's card
(which has no notice) puts it on the card's status line — "Cancelled" and the buttons after it — where
it went to the whole card, read by a screen reader from top to bottom, or was lost to the page."""

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
from tests.browser.test_browser_keyboard_focus import FOCUS, tab_to
from tests.support.browser import BROWSER_MARKS, Watch, sign_in, wait_until
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS


async def _seed(db_url: str) -> Any:
    ann = await add_user(db_url, "ann@example.com", admin=True)  # a diagnostic type has "Run again" for her
    jid = new_id()
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        # running on a worker that is not there: the cancel is a request the worker would pick up
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title, started_at,"
            " locked_by, lease_expires_at) VALUES ($1, 'noop', 'in_progress', $2, '{}', 1, 1, 'Weekly report',"
            " now(), 'w-test', now() + interval '1 hour')",
            jid,
            ann.id,
        )
    finally:
        await conn.close()
    return jid


async def _stopped(db_url: str, jid: Any) -> None:
    # what the worker's acknowledgement of the cancel writes
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        await conn.execute(
            "UPDATE jobs SET status = 'cancelled', completed_at = now(), locked_by = NULL,"
            " lease_expires_at = NULL WHERE id = $1",
            jid,
        )
        await conn.execute(
            "INSERT INTO job_events (job_id, kind, from_status, to_status, actor)"
            " VALUES ($1, 'cancelled', 'in_progress', 'cancelled', 'w-test')",
            jid,
        )
    finally:
        await conn.close()


@pytest.fixture
def seeded(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    jid = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base, jid


def test_focus_lands_on_the_new_status_when_the_stopped_job_comes_back(
    seeded: tuple[str, Any], browser: Any, db_url: str, artifacts_dir: Path
) -> None:
    base, jid = seeded
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "ann@example.com")
    page.goto(f"{base}/jobs/{jid}")
    tab_to(page, "#act-cancel")
    page.keyboard.press("Enter")
    page.wait_for_selector("#confirm-dialog[open]")
    page.keyboard.press("Tab")  # from "Go back" to "Cancel job"
    page.keyboard.press("Enter")
    page.wait_for_selector("#job-status .notice")
    assert page.evaluate("document.activeElement.matches('#job-status .notice')"), page.evaluate(FOCUS)

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds an event loop in this thread
        pool.submit(asyncio.run, _stopped(db_url, jid)).result()
    wait_until(
        page, "document.querySelector('#job-status .status-head').textContent.includes('Cancelled')", 15_000
    )
    wait_until(page, "document.activeElement !== document.body", 3_000)
    assert page.evaluate("document.activeElement.matches('#job-status .status-head')"), (
        f"after the job stopped the focus is on {page.evaluate(FOCUS)}"
    )
    page.keyboard.press("Tab")  # on to the buttons after the status
    assert page.evaluate("!!document.activeElement.closest('#job-status footer')"), page.evaluate(FOCUS)
    page.screenshot(path=str(artifacts_dir / "focus-after-stop.png"))
    assert watch.errors == [] and watch.alerts == []
    page.close()
