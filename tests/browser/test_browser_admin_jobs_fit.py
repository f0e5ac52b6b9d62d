"""/admin/jobs at 1280 px, in headless Chromium: with everyday rows (a web request waiting, one that
failed, a step waiting for approval, a finished one) the table scrolled sideways and cut off the Actions
column. It fits: no sideways scroll, every row's buttons inside the screen. Screenshot:
``tests/artifacts/admin-jobs-1280.png``."""

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

URL = '{"url": "https://hooks.example-company.com/services/T0001/B0002/notify-the-team"}'
ROWS = [  # status, title, error, requires approval
    ("queued", "Send a web request (webhook)", None, False),
    (
        "failed",
        "Tell the warehouse about order 10442",
        "Could not connect to hooks.example-company.com: the name does not exist\nTraceback …",
        False,
    ),
    ("waiting_approval", "Publish the quarterly numbers", None, True),
    ("completed", "Nightly ping", None, False),
]


async def _seed(db_url: str) -> None:
    await add_user(db_url, "root@example.com", admin=True)
    owner = await add_user(db_url, "someone.with.a.rather.long.address@example-company.com")
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        for status, title, error, approval in ROWS:
            await conn.execute(
                "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title, "
                "error_message, requires_approval, started_at, completed_at) VALUES ($1, 'http.request', "
                "$2, $3, $4, 3, 1, $5, $6, $7, now(), CASE WHEN $2 IN ('failed', 'completed') THEN now() END)",
                new_id(),
                status,
                owner.id,
                URL,
                title,
                error,
                approval,
            )
    finally:
        await conn.close()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base


def test_the_admin_job_table_fits_1280_px(server: str, browser: Any, artifacts_dir: Path) -> None:
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(page, server, "root@example.com")
    page.goto(server + "/admin/jobs")
    page.wait_for_selector(".admin-job-table .row-actions button")
    page.screenshot(path=str(artifacts_dir / "admin-jobs-1280.png"), full_page=True)
    widths = page.evaluate(
        "[...document.querySelectorAll('.admin-job-table thead th')].map(th => Math.round(th.getBoundingClientRect().width))"
    )
    scroll = page.evaluate(
        "(() => { const el = document.querySelector('#admin-job-list .table-scroll');"
        " return [el.scrollWidth, el.clientWidth]; })()"
    )
    assert scroll[0] <= scroll[1] + 0.5, f"the table scrolls sideways: {scroll}, columns {widths}"
    screen = page.evaluate("document.documentElement.clientWidth")
    for right in page.evaluate(
        "[...document.querySelectorAll('.admin-job-table .row-actions button')]"
        ".map(b => b.getBoundingClientRect().right)"
    ):
        assert right <= screen, f"an action button ends at {right} px, past the screen ({screen} px)"
    page.context.close()


def test_a_long_owner_address_is_shown_whole_at_1280_px(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    # the owner's e-mail ended in "…" at 1280 px, its rest only in a title a keyboard never shows
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(page, server, "root@example.com")
    page.goto(server + "/admin/jobs")
    page.wait_for_selector(".admin-job-table .owner")
    cut = page.evaluate(
        "[...document.querySelectorAll('.admin-job-table .owner-cell *')]"
        ".filter(e => e.scrollWidth > e.clientWidth + 0.5).map(e => e.textContent)"
    )
    assert cut == [], f"clipped at 1280 px: {cut}"
    owners = page.locator(".admin-job-table .owner")
    for i in range(owners.count()):
        box = owners.nth(i).bounding_box()
        cell = page.locator(".admin-job-table .owner-cell").nth(i).bounding_box()
        assert box and cell and box["x"] + box["width"] <= cell["x"] + cell["width"] + 0.5, (box, cell)
    page.locator(".admin-job-table tbody tr").first.screenshot(
        path=str(artifacts_dir / "admin-jobs-owner-1280.png")
    )
    page.context.close()
