""" "Run for each row of a spreadsheet" in a real browser (headless Chromium), against ``jobdesk serve``
with its in-app worker: from a job type's form, upload a CSV, see its columns matched, start it and see
a row's problem listed by row and column with nothing started, upload the corrected file, start it, and
watch the batch page count its rows to Done without a reload; then download all results. At 1280 px and
390 px, without horizontal scrolling.

Screenshots go to ``tests/artifacts/batch-*.png`` (the batch page is copied to ``docs/screenshots/``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.sync_api import expect

from app.db import asyncpg_dsn
from tests.support.browser import BROWSER_MARKS, Watch, no_horizontal_scroll, sign_in
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS


def sheet(base: str, bad: bool) -> bytes:
    third = "ftp://example.com/file" if bad else f"{base}/static/app.js"
    rows = [f"{base}/healthz,GET", f"{base}/readyz,GET", f"{third},GET", f"{base}/static/app.css,GET"]
    return ("Address (URL),Method\n" + "\n".join(rows) + "\n").encode()


def upload(page: Any, selector: str, name: str, data: bytes) -> None:
    page.set_input_files(selector, files=[{"name": name, "mimeType": "text/csv", "buffer": data}])


def batch_jobs(db_url: str) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            return int(await conn.fetchval("SELECT count(*) FROM jobs"))
        finally:
            await conn.close()

    # Playwright's sync API runs an event loop in this thread: ask from another one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, count()).result()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    """``jobdesk serve`` with its worker; started before the browser (whose loop then owns this thread)."""
    asyncio.run(add_user(db_url, "ann@example.com"))
    env = {"WORKER_ENABLED": "true", "JOB_PROCESSOR_POLL_INTERVAL": "0.5", "LOG_LEVEL": "WARNING"}
    with running_server(db_url, tmp_path / "data", **env) as base:
        yield base


def test_a_spreadsheet_becomes_a_batch_that_runs_to_done(
    server: str, db_url: str, browser: Any, artifacts_dir: Path
) -> None:
    base = server
    page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    watch = Watch(page)
    sign_in(page, base, "ann@example.com")

    page.goto(base + "/jobs/new/http.request")
    page.click("#run-for-each-row")
    page.wait_for_url(base + "/batches/new/http.request")
    upload(page, "#f-sheet", "requests.csv", sheet(base, bad=True))
    page.click("#read-sheet")
    page.wait_for_selector("#mapping-form")
    assert "4 rows" in page.locator("#mapping-form").inner_text()
    # the columns were matched by the fields' titles and names
    assert page.locator("#map-url option:checked").inner_text() == "Address (URL)"
    assert page.locator("#map-method option:checked").inner_text() == "Method"

    page.click("#check-and-start")
    page.wait_for_selector("#row-problems")
    problem = page.locator("tr.row-problem")
    assert problem.count() == 1
    cells = problem.locator("td").all_inner_texts()
    assert cells[:3] == ["4", "Address (URL)", "Address (URL)"]  # row 4 of the file: header is row 1
    assert "ftp://" in cells[3]
    assert batch_jobs(db_url) == 0  # nothing was started
    page.screenshot(path=str(artifacts_dir / "batch-row-problem-1280.png"), full_page=True)

    # the corrected file is read as soon as it is chosen: with a button to press first, a person who
    # pressed "Check every row and start" instead had the old file checked again and the new one dropped
    upload(page, "#f-sheet-again", "requests-fixed.csv", sheet(base, bad=False))
    page.locator("#mapping-form", has_text="requests-fixed.csv").wait_for(timeout=10_000)
    assert page.locator("#row-problems").count() == 0
    page.click("#check-and-start")
    page.wait_for_url(lambda url: "/batches/" in url and "/new/" not in url)
    batch_url = page.url

    # the page counts its rows to Done by polling, without a reload
    page.wait_for_selector("#batch-status .batch-counts li[data-status=completed]", timeout=60_000)
    expect(page.locator("#batch-percent")).to_have_text("100%", timeout=60_000)
    assert page.url == batch_url
    assert page.locator(".batch-counts li[data-status=completed] strong").inner_text() == "4"
    assert page.locator("#retry-failed").count() == 0
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(artifacts_dir / "batch-page-1280.png"), full_page=True)

    with page.expect_download() as info:
        page.click("#download-results")
    archive = zipfile.ZipFile(io.BytesIO(Path(info.value.path()).read_bytes()))
    lines = archive.read("results.csv").decode("utf-8-sig").splitlines()
    assert len(lines) == 5 and all(",completed," in line for line in lines[1:])

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.context.add_cookies(page.context.cookies())
    phone.goto(batch_url)
    assert phone.locator(".batch-counts li[data-status=completed] strong").inner_text() == "4"
    assert no_horizontal_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "batch-page-390.png"), full_page=True)
    phone.goto(base + "/batches/new/http.request")
    upload(phone, "#f-sheet", "requests.csv", sheet(base, bad=True))
    phone.click("#read-sheet")
    phone.wait_for_selector("#mapping-form")
    phone.click("#check-and-start")
    phone.wait_for_selector("#row-problems")
    assert no_horizontal_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "batch-row-problem-390.png"), full_page=True)
    assert watch.errors == [], watch.errors
    assert watch.alerts == []
