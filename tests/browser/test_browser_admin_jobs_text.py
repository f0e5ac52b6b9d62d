"""/admin/jobs in headless Chromium, at 1280 px and a phone's 390 px: the owner's e-mail broke at any
character ("someone.with.a.r" / "ather…"); it breaks after its "@" and dots, inside a part only when that
part is wider than the column. Screenshots: ``tests/artifacts/admin-jobs-text-<width>.png``."""

from __future__ import annotations

import asyncio
import json
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

OWNER = "someone.with.a.rather.long.address@example-company.com"
TITLE = (
    "Tell the warehouse team about the delayed order 10442 and every other order of that customer this week"
)
URL = "https://hooks.example-company.com/services/T0001/B0002/notify-the-team-about-the-order"
ERROR = "Could not connect to hooks.example-company.com: the name does not exist, and the fallback was refused too"


async def _seed(db_url: str) -> None:
    await add_user(db_url, "root@example.com", admin=True)
    owner = await add_user(db_url, OWNER)
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title, "
            "error_message, started_at, completed_at) VALUES ($1, 'http.request', 'failed', $2, $3, 3, 3, "
            "$4, $5, now(), now())",
            new_id(),
            owner.id,
            json.dumps({"url": URL}),
            TITLE,
            ERROR,
        )
    finally:
        await conn.close()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base


#: Where each line of an element's text starts (character indexes), and the widths of the parts of
#: the text between its "@" and dots, measured unbroken in the element's own font.
LINES = """el => {
  const text = el.textContent; const starts = []; let last = null; let at = 0;
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (let i = 0; i < n.length; i++, at++) {
      const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
      const top = Math.round(r.getBoundingClientRect().top);
      if (last !== null && top > last + 2) starts.push(at);
      last = top;
    }
  }
  const probe = document.createElement('span'); probe.style.whiteSpace = 'nowrap';
  el.appendChild(probe);
  const parts = text.split(/(?<=[@.])/).map(p => { probe.textContent = p; return [p, probe.getBoundingClientRect().width]; });
  probe.remove();
  return {text, starts, parts, width: el.getBoundingClientRect().width};
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_owner_breaks_after_at_and_dots(
    server: str, browser: Any, artifacts_dir: Path, width: int
) -> None:
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    sign_in(page, server, "root@example.com")
    page.goto(server + "/admin/jobs")
    page.wait_for_selector(".admin-job-table .owner")
    page.screenshot(path=str(artifacts_dir / f"admin-jobs-text-{width}.png"), full_page=True)
    got = page.locator(".admin-job-table .owner").first.evaluate(LINES)
    assert got["text"] == OWNER
    # each line starts after an "@" or a dot, unless the part it breaks is wider than the column
    wide = [p for p, w in got["parts"] if w > got["width"] + 0.5]
    for start in got["starts"]:
        if got["text"][start - 1] in "@.":
            continue
        part_start = max(got["text"].rfind("@", 0, start), got["text"].rfind(".", 0, start)) + 1
        assert any(p.startswith(got["text"][part_start:start]) for p in wide), (
            f"broken inside {got['text'][part_start:start]!r}|{got['text'][start:]!r} at {width} px: {got}"
        )
    page.context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_title_input_and_error_are_read_whole(
    server: str, browser: Any, artifacts_dir: Path, width: int
) -> None:
    # the job's title, its URL and its error's first line ended in "…", whole only in a title attribute
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    sign_in(page, server, "root@example.com")
    page.goto(server + "/admin/jobs")
    page.wait_for_selector(".admin-job-table .job-cell")
    cell = page.locator(".admin-job-table .job-cell").first
    cell.screenshot(path=str(artifacts_dir / f"admin-jobs-job-cell-{width}.png"))
    shown = cell.evaluate("el => el.innerText")
    # an address past the row's 80 characters says it is cut; the title links to the job's page (whole)
    assert len(URL) > 80 and cell.locator("a.job-title").get_attribute("href", timeout=2000).startswith(
        "/jobs/"
    )
    for whole in (TITLE, URL[:80] + "…", ERROR):
        assert " ".join(whole.split()) in " ".join(shown.replace("\n", "").split()), (whole, shown)
    cut = cell.evaluate(
        "el => [el, ...el.querySelectorAll('*')].filter(e => e.scrollWidth > e.clientWidth + 0.5"
        " && getComputedStyle(e).overflow !== 'visible').map(e => e.className + ': ' + e.textContent)"
    )
    assert cut == [], f"clipped at {width} px: {cut}"
    screen = page.evaluate("document.documentElement.clientWidth")
    box = cell.bounding_box()
    assert box and box["x"] + box["width"] <= screen + 0.5, (box, screen)
    page.context.close()
