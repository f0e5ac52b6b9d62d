"""Keyboard focus after an action that replaces the part of the page it sits in, in headless Chromium
against ``jobdesk serve``: "Cancel job" on a job's page and "Approve" in the admins' inbox, each pressed
with Enter. The button goes with the part it was in; the focus used to fall to the page itself, so the
next Tab started again at "Skip to content" and a screen reader said nothing. It now lands on what
replaced that part (its notice when it has one).
Also the card those buttons sit in: a failed job's sentences on what each button does belong to
its footer, not below it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db import asyncpg_dsn
from app.jobs.queue import new_id
from tests.support.browser import BROWSER_MARKS, Watch, sign_in, wait_until
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS

FOCUS = "(() => { const e = document.activeElement; return e && e !== document.body ? e.outerHTML.slice(0, 80) : 'the page itself'; })()"


async def _seed(db_url: str) -> dict[str, Any]:
    root = await add_user(db_url, "root@example.com", admin=True)
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    waiting, step, failed = new_id(), new_id(), new_id()
    try:
        # no worker runs: the job waits, scheduled for tomorrow, and can be cancelled
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title, run_at)"
            " VALUES ($1, 'noop', 'queued', $2, '{}', 1, 'Weekly report', now() + interval '1 day')",
            waiting,
            root.id,
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title, requires_approval,"
            " result_data, started_at) VALUES ($1, 'noop', 'waiting_approval', $2, '{}', 1, 'Press release',"
            " true, '{\"words\": 420}', now())",
            step,
            root.id,
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title,"
            " error_message, started_at, completed_at) VALUES ($1, 'noop', 'failed', $2, '{}', 1, 1,"
            " 'Monthly export', 'The export server did not answer.', now(), now())",
            failed,
            root.id,
        )
    finally:
        await conn.close()
    return {"waiting": waiting, "step": step, "failed": failed}


@pytest.fixture
def seeded_server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    data = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base, data


def tab_to(page: Any, selector: str) -> None:
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate(f"document.activeElement.matches({selector!r})"):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_focus_stays_where_an_action_replaced_the_page(
    seeded_server: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path
) -> None:
    base, data = seeded_server
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "root@example.com")

    page.goto(f"{base}/jobs/{data['waiting']}")
    tab_to(page, "#act-cancel")
    page.keyboard.press("Enter")
    page.wait_for_selector("#confirm-dialog[open]")
    page.keyboard.press("Tab")  # from "Go back" to "Cancel job"
    page.keyboard.press("Enter")
    page.wait_for_selector("#job-status .status-cancelled, #job-status:has-text('Cancelled')")
    wait_until(page, "!document.querySelector('#job-status [aria-busy]')")
    assert page.evaluate("!!document.activeElement.closest('#job-status')"), (
        f"after Cancel job the focus is on {page.evaluate(FOCUS)}"
    )
    page.keyboard.press("Tab")
    assert page.evaluate("!!document.activeElement.closest('main')"), (
        f"the next Tab went to {page.evaluate(FOCUS)}"
    )
    page.screenshot(path=str(artifacts_dir / "focus-after-cancel.png"))

    page.goto(f"{base}/admin/approvals")
    tab_to(page, f"#approve-{data['step']}")
    page.keyboard.press("Enter")
    page.wait_for_selector(".approval-done")
    assert page.evaluate("document.activeElement.matches('.approval-done')"), (
        f"after Approve the focus is on {page.evaluate(FOCUS)}"
    )
    assert watch.errors == [] and watch.alerts == []
    page.close()


def test_a_failed_jobs_buttons_and_what_they_do_share_the_cards_footer(
    seeded_server: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path
) -> None:
    # "Retry runs this same job again …" and the other two sentences sat under the footer's grey band,
    # on the card's white, as if they belonged to nothing
    base, data = seeded_server
    for viewport in ({"width": 1280, "height": 900}, {"width": 390, "height": 844}):
        page = browser.new_page(viewport=viewport)
        sign_in(page, base, "root@example.com")
        page.goto(f"{base}/jobs/{data['failed']}")
        footer = page.locator("#job-status footer.actions").bounding_box()
        hints = page.locator("#job-status .action-hints").bounding_box()
        assert footer and hints and "Retry" in page.inner_text("#job-status .action-hints")
        assert hints["y"] + hints["height"] <= footer["y"] + footer["height"] + 0.5, (hints, footer)
        page.locator("#job-status").screenshot(
            path=str(artifacts_dir / f"failed-footer-{viewport['width']}.png")
        )
        page.close()
