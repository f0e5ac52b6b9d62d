"""A status that changes on a live page is said in one polite line, in headless Chromium against
``jobdesk serve``: My jobs' cells, a job's page and a pipeline's page. My jobs' list had no live region,
so a screen reader said nothing when a job finished; the job and pipeline pages had one around their
whole card, which re-read all of it (progress, facts, buttons) on each change. Now ``#status-news``
(role=status, polite) gets "<name>: <status>", and no live region wraps a list or a card."""

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

NEWS = "document.getElementById('status-news').textContent"
# every live region on the page but #status-news and the error box: none may hold a list or a card
OTHER_LIVE = (
    "[...document.querySelectorAll('[aria-live]:not([aria-live=off]), [role=status], [role=log]')]"
    ".filter(e => !['status-news', 'app-alert'].includes(e.id) && e.querySelector('table, article, ol, ul'))"
    ".map(e => e.outerHTML.slice(0, 80))"
)


async def _seed(db_url: str) -> dict[str, Any]:
    ann = await add_user(db_url, "ann@example.com")
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    first, second = new_id(), new_id()
    try:
        for jid, title in ((first, "Weekly report"), (second, "Monthly export")):
            await conn.execute(
                "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title)"
                " VALUES ($1, 'noop', 'queued', $2, '{}', 1, $3)",
                jid,
                ann.id,
                title,
            )
    finally:
        await conn.close()
    return {"first": first, "second": second}


def start(db_url: str, jid: Any) -> None:
    # from another thread: Playwright's sync API holds an event loop in this one
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _start(db_url, jid)).result()


async def _start(db_url: str, jid: Any) -> None:
    # what a claim writes, without a worker (none runs: the job would finish before the page saw it)
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        await conn.execute(
            "UPDATE jobs SET status = 'in_progress', attempts = 1, started_at = now(), locked_by = 'w-test',"
            " lease_expires_at = now() + interval '1 hour' WHERE id = $1",
            jid,
        )
        await conn.execute(
            "INSERT INTO job_events (job_id, kind, from_status, to_status, actor, data)"
            " VALUES ($1, 'claimed', 'queued', 'in_progress', 'w-test', '{\"attempt\": 1}')",
            jid,
        )
    finally:
        await conn.close()


@pytest.fixture
def seeded(db_url: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    data = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING", WORKER_ENABLED="false") as base:
        yield base, data


def test_a_status_change_is_said_in_one_polite_line(
    seeded: tuple[str, dict[str, Any]], browser: Any, db_url: str, artifacts_dir: Path
) -> None:
    base, data = seeded
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "ann@example.com")

    page.goto(f"{base}/jobs")
    page.wait_for_selector(f"#cell-{data['first']}")
    assert page.evaluate("document.getElementById('status-news').getAttribute('aria-live')") == "polite"
    assert page.evaluate(NEWS) == ""
    assert page.evaluate(OTHER_LIVE) == []
    start(db_url, data["first"])
    wait_until(page, f"{NEWS}.includes('Weekly report')", 15_000)
    assert page.evaluate(NEWS) == "Weekly report: Running", page.evaluate(NEWS)
    page.screenshot(path=str(artifacts_dir / "status-news-my-jobs.png"))

    page.goto(f"{base}/jobs/{data['second']}")
    page.wait_for_selector("#job-status")
    assert page.evaluate(OTHER_LIVE) == [], "a live region holds the whole status card"
    start(db_url, data["second"])
    wait_until(page, f"{NEWS}.includes('Monthly export')", 15_000)
    assert page.evaluate(NEWS) == "Monthly export: Running", page.evaluate(NEWS)
    assert watch.errors == [] and watch.alerts == []
    page.close()
