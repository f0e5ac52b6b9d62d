"""A job's long History in headless Chromium, against ``jobdesk serve``: the page says it is cut, and each
click of "Older events" puts the next older events above those shown, in place (htmx), until the first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db import asyncpg_dsn
from app.jobs.queue import new_id
from app.web.job_page import HISTORY_LIMIT
from tests.support.browser import BROWSER_MARKS, Watch, sign_in
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS
EVENTS = 2 * HISTORY_LIMIT + 50


async def _seed(db_url: str) -> Any:
    ann = await add_user(db_url, "ann@example.com")
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        jid = new_id()
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title, started_at,"
            " completed_at) VALUES ($1, 'noop', 'completed', $2, '{}', 1, 1, 'Long story', now(), now())",
            jid,
            ann.id,
        )
        await conn.execute(
            "INSERT INTO job_events (job_id, kind, actor, message)"
            " SELECT $1, 'note', 'system', 'Note ' || i FROM generate_series(1, $2) i ORDER BY i",
            jid,
            EVENTS,
        )
    finally:
        await conn.close()
    return jid


@pytest.fixture
def seeded_server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    jid = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base, jid


def test_older_events_come_in_place_until_the_first(seeded_server: tuple[str, Any], browser: Any) -> None:
    base, jid = seeded_server
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "ann@example.com")
    page.goto(f"{base}/jobs/{jid}")
    lines = page.locator("#job-history ol.timeline li")
    assert lines.count() == HISTORY_LIMIT
    assert "This history is cut" in page.locator("#job-history").inner_text()
    for shown in (2 * HISTORY_LIMIT, EVENTS):
        page.locator("#job-history a", has_text="Older events").click()
        lines.nth(shown - 1).wait_for()
        assert lines.count() == shown
    assert page.locator("#job-history a", has_text="Older events").count() == 0
    texts = lines.all_inner_texts()
    assert "Note 1\n" in texts[0] + "\n" and f"Note {EVENTS}" in texts[-1]  # oldest first, all in place
    assert page.url == f"{base}/jobs/{jid}"
    assert watch.errors == [] and watch.alerts == [], (watch.errors, watch.alerts)
