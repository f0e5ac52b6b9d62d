"""The admin job console in headless Chromium (case C19), against ``jobdesk serve``:
bulk-cancel ticked rows from ``/admin/jobs`` (the confirm step shows the count, the outcome appears in
place), and stored-XSS payloads in a job's title, input and error never run a script on ``/admin/jobs``
or ``/admin/failed``. Screenshots (desktop and a 390 px phone) go to ``tests/artifacts/admin-*.png``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.sync_api import expect

from app.db import asyncpg_dsn
from app.jobs.queue import new_id
from tests.support.browser import BROWSER_MARKS, XSS, Watch, answer_confirm, no_horizontal_scroll, sign_in
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS


async def _seed(db_url: str) -> dict[str, Any]:
    admin = await add_user(db_url, "root@example.com", admin=True)
    ann = await add_user(db_url, "ann@example.com")
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        queued = [new_id() for _ in range(3)]
        for i, jid in enumerate(queued):
            await conn.execute(
                "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title) "
                "VALUES ($1, 'noop', 'queued', $2, '{}', 3, $3)",
                jid,
                ann.id,
                f"Queued {i} {XSS}",
            )
        failed = new_id()
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title, "
            "error_message, started_at, completed_at) VALUES ($1, 'noop', 'failed', $2, $3, 1, 1, $4, $5, "
            "now(), now())",
            failed,
            ann.id,
            f'{{"name": "{XSS.replace(chr(34), chr(92) + chr(34))}"}}',
            f"Broken {XSS}",
            f"RuntimeError: {XSS} in row 17\nTraceback",
        )
    finally:
        await conn.close()
    return {"admin": admin, "queued": queued, "failed": failed}


@pytest.fixture
def seeded_server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    data = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base, data


async def _read_statuses(db_url: str) -> dict[Any, str]:
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        return {r["id"]: r["status"] for r in await conn.fetch("SELECT id, status FROM jobs")}
    finally:
        await conn.close()


def _statuses(db_url: str) -> dict[Any, str]:
    """Job statuses now (in a thread: Playwright's sync API keeps an event loop running in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _read_statuses(db_url)).result()


def test_bulk_cancel_from_the_admin_list_and_no_stored_xss_runs(
    seeded_server: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path, db_url: str
) -> None:
    base, data = seeded_server
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "root@example.com")
    page.goto(base + "/admin/jobs")
    page.wait_for_selector("#count-queued")  # the counts strip arrived by htmx
    assert page.locator("#count-queued .count-n").inner_text() == "3"
    assert page.locator("#count-failed .count-n").inner_text() == "1"
    assert page.locator("tbody tr").count() == 4
    assert XSS in page.locator(f"#row-{data['failed']}").inner_text()  # shown as text
    page.screenshot(path=str(artifacts_dir / "admin-jobs-desktop.png"), full_page=True)

    q0, q1, q2 = data["queued"]
    page.check(f"#row-{q0} input[type=checkbox]")
    page.check(f"#row-{q1} input[type=checkbox]")
    page.evaluate("window.__sameDocument = true")
    page.click("#bulk-cancel-selected")
    page.wait_for_selector("#bulk-count")
    assert page.locator("#bulk-count").inner_text() == "2"
    assert set(_statuses(db_url).values()) == {"queued", "failed"}  # nothing yet
    page.screenshot(path=str(artifacts_dir / "admin-jobs-bulk-confirm.png"), full_page=True)
    page.click("#bulk-confirm-button")
    page.wait_for_selector("#bulk-outcome")
    assert "Cancelled 2 jobs" in page.locator("#bulk-outcome").inner_text()
    assert page.evaluate("window.__sameDocument === true")  # in place, no navigation
    statuses = _statuses(db_url)
    assert (statuses[q0], statuses[q1], statuses[q2]) == ("cancelled", "cancelled", "queued")
    # the counts strip follows at once, not at its next 30 s poll
    expect(page.locator("#count-queued .count-n")).to_have_text("1", timeout=5_000)
    expect(page.locator("#count-cancelled .count-n")).to_have_text("2", timeout=5_000)

    # a row action with its confirmation, answered in place
    page.click(f"#cancel-{q2}")
    answer_confirm(page)
    page.wait_for_selector(f"#row-{q2} .notice")
    assert "Cancelled." in page.locator(f"#row-{q2} .notice").inner_text()
    expect(page.locator("#count-queued .count-n")).to_have_text("0", timeout=5_000)
    expect(page.locator("#count-cancelled .count-n")).to_have_text("3", timeout=5_000)
    assert "Cancelled." in page.locator(f"#row-{q2} .notice").inner_text()  # the list was not redrawn

    # /admin: the job that failed a moment ago counts in "Failed, last hour" (no worker ran here, so the
    # workers' tallies that figure came from said 0 beside a per-type table saying 1)
    page.goto(base + "/admin")
    assert page.locator("#stat-failed").inner_text() == "1"

    page.goto(base + "/admin/failed")
    assert page.locator("table.failed-groups tbody tr").count() == 1
    assert "row N" in page.locator("table.failed-groups").inner_text()
    page.screenshot(path=str(artifacts_dir / "admin-failed-desktop.png"), full_page=True)

    phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    phone_watch = Watch(phone)
    sign_in(phone, base, "root@example.com")
    for path, name in (("/admin/jobs", "admin-jobs-phone.png"), ("/admin/failed", "admin-failed-phone.png")):
        phone.goto(base + path)
        if path == "/admin/jobs":
            phone.wait_for_selector("#count-queued")
        assert no_horizontal_scroll(phone), path
        phone.screenshot(path=str(artifacts_dir / name), full_page=True)

    assert watch.alerts == []  # no payload ran (case C19)
    assert phone_watch.alerts == []
    assert watch.errors == [], watch.errors + phone_watch.errors
    assert phone_watch.errors == [], watch.errors + phone_watch.errors
