"""A job name holding U+202E (right-to-left override), in headless Chromium: on /admin/jobs it reversed
the type label after it in the same cell ("Send a web request (webhook)" read "(koohbew) tseuqer bew a
dneS"). The label after such a name reads left to right, its first letter left of its last — the page
closes what a value opens (``app.formatting.balanced`` on every output) and the stylesheet sets every
inline element apart (``unicode-bidi: isolate``). Screenshot: ``tests/artifacts/text-direction.png``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db import asyncpg_dsn
from app.jobs.queue import new_id
from tests.support.browser import BROWSER_MARKS, sign_in
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS

RLO = "\u202e"

# the x of a text's first two and last two letters as laid out: left to right when each pair's first is
# left of its second (pairs of neighbours, on one line even when the text wraps in a narrow cell)
LETTERS = """(selector) => {
  const text = document.querySelector(selector).firstChild, range = document.createRange();
  const at = (i) => { range.setStart(text, i); range.setEnd(text, i + 1); return range.getBoundingClientRect().x; };
  const words = text.textContent, first = words.search(/\\S/), last = words.trimEnd().length - 1;
  return [words.slice(first, last + 1), [at(first), at(first + 1)], [at(last - 1), at(last)]];
}"""


async def _seed(db_url: str) -> None:
    admin = await add_user(db_url, "root@example.com", admin=True)
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title) "
            "VALUES ($1, 'http.request', 'queued', $2, '{\"url\": \"https://example.com/\"}', 3, $3)",
            new_id(),
            admin.id,
            RLO + "Send a web request (webhook)",
        )
    finally:
        await conn.close()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base


def test_the_label_after_a_name_with_an_override_reads_in_its_own_direction(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(page, server, "root@example.com")
    page.goto(server + "/admin/jobs")
    page.wait_for_selector(".admin-job-table .job-type")
    page.screenshot(path=str(artifacts_dir / "text-direction.png"))
    for selector in (".admin-job-table .job-type", ".admin-job-table .job-input"):
        words, start, end = page.evaluate(LETTERS, selector)
        for left, right in (start, end):
            assert left < right, f"{words!r} ({selector}) is laid out right to left: {left} > {right}"
    page.context.close()
