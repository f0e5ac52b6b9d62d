"""Approvals in headless Chromium, against ``jobdesk serve``: the admin inbox ``/admin/approvals`` lists
waiting steps oldest first with their result and owner; "Approve" and "Reject" with a reason take the
row away in place, at 1280 px and at 390 px (no sideways scrolling); a named approver who is not an
admin approves from their own list ``/approvals``. Screenshots go to ``tests/artifacts/approvals-*.png``
(copied to ``docs/screenshots/``).
"""

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
from tests.support.browser import BROWSER_MARKS, Watch, answer_confirm, no_horizontal_scroll, sign_in
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS


async def _seed(db_url: str) -> dict[str, Any]:
    await add_user(db_url, "root@example.com", admin=True)
    owner = await add_user(db_url, "owner@example.com")
    ann = await add_user(db_url, "ann@example.com")
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    steps = []
    try:
        for i, (title, hours) in enumerate(
            [("Columns of sales.csv", 5), ("Press release draft", 26), ("Invoice batch", 1)]
        ):
            jid = new_id()
            await conn.execute(
                "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title, requires_approval,"
                " result_data, started_at, updated_at) VALUES ($1, 'noop', 'waiting_approval', $2, '{}', 1, $3,"
                " true, $4, now(), now() - make_interval(hours => $5))",
                jid,
                owner.id,
                title,
                f'{{"rows": {1200 + i}, "columns": ["region", "month", "revenue"], "file": "sales-{i}.csv"}}',
                hours,
            )
            steps.append(jid)
        await conn.execute(
            "INSERT INTO job_approval_rules (job_id, approvers, user_ids, admins) "
            "VALUES ($1, $2, ARRAY[$3::int], true)",
            steps[2],
            '["ann@example.com", "admins"]',
            ann.id,
        )
    finally:
        await conn.close()
    return {"oldest_first": [steps[1], steps[0], steps[2]]}


@pytest.fixture
def seeded_server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    data = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base, data


async def _read(db_url: str) -> dict[Any, str]:
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        return {r["id"]: r["status"] for r in await conn.fetch("SELECT id, status FROM jobs")}
    finally:
        await conn.close()


def _statuses(db_url: str) -> dict[Any, str]:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _read(db_url)).result()


def test_the_inbox_lists_oldest_first_and_a_decision_takes_the_row_away(
    seeded_server: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path, db_url: str
) -> None:
    base, data = seeded_server
    old, middle, new = data["oldest_first"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "root@example.com")
    page.goto(base + "/admin")
    assert "3 waiting for approval" in page.locator("#waiting-approval").inner_text()
    page.click("#waiting-approval a")
    page.wait_for_url(base + "/admin/approvals")
    ids = page.locator("article.approval-row").evaluate_all("els => els.map(e => e.id)")
    assert ids == [f"approval-{old}", f"approval-{middle}", f"approval-{new}"]
    first = page.locator(f"#approval-{old}")
    assert "owner@example.com" in first.inner_text() and "26 h" in first.inner_text()
    assert "revenue" in first.inner_text()  # the result to look at, in place
    page.screenshot(path=str(artifacts_dir / "approvals-inbox-desktop.png"), full_page=True)

    page.click(f"#approve-{old}")
    page.wait_for_selector(f"#approval-{old}", state="detached")
    assert _statuses(db_url)[old] == "completed"

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone_watch = Watch(phone)
    sign_in(phone, base, "root@example.com")
    phone.goto(base + "/admin/approvals")
    assert phone.locator("article.approval-row").count() == 2
    assert no_horizontal_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "approvals-inbox-phone.png"), full_page=True)
    phone.fill(f"#reason-{middle}", "The figures for March are missing")
    phone.click(f"#reject-{middle}")
    phone.wait_for_selector(f"#approval-{middle}", state="detached")
    assert _statuses(db_url)[middle] == "failed"

    # a named approver who is not an admin, from their own list on a phone
    ann = browser.new_page(viewport={"width": 390, "height": 844})
    ann_watch = Watch(ann)
    sign_in(ann, base, "ann@example.com")
    ann.goto(base + "/approvals")
    assert ann.locator("article.approval-row").count() == 1
    assert no_horizontal_scroll(ann)
    ann.click(f"#approve-{new}")
    ann.wait_for_selector(f"#approval-{new}", state="detached")
    assert _statuses(db_url)[new] == "completed"
    for w in (watch, phone_watch, ann_watch):
        assert w.errors == [] and w.alerts == [], (w.errors, w.alerts)


def test_a_reason_that_cannot_be_stored_comes_back_beside_its_field_as_typed(
    seeded_server: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path, db_url: str
) -> None:
    """A NUL in a reason (a paste from a binary file can carry one) was a bare 422 page in place of the
    row, or of the job's status part, the reason lost. Now the row, or the open Reject form, shows the
    error beside the field with the reason kept, at 1280 px and at 390 px; fixed, it goes through."""
    base, data = seeded_server
    old, middle, _ = data["oldest_first"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "root@example.com")
    page.goto(base + "/admin/approvals")
    page.fill(f"#reason-{old}", "The figures for March\x00 are missing")
    page.click(f"#reject-{old}")
    page.wait_for_selector(f"#e-reason-{old}")
    assert "NUL character" in page.locator(f"#e-reason-{old}").inner_text()
    assert page.input_value(f"#reason-{old}").startswith("The figures for March")
    page.screenshot(path=str(artifacts_dir / "approvals-reason-error-desktop.png"), full_page=True)
    assert _statuses(db_url)[old] == "waiting_approval"
    page.goto(f"{base}/jobs/{middle}")
    page.click(f"#reject-{middle} summary")
    page.fill(f"#reject-{middle}-reason", "Wrong\x00 numbers")
    page.click(f"#reject-{middle}-submit")
    answer_confirm(page)
    page.wait_for_selector(f"#e-reject-{middle}-reason")
    page.screenshot(path=str(artifacts_dir / "job-reason-error-desktop.png"), full_page=True)

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone_watch = Watch(phone)
    sign_in(phone, base, "root@example.com")
    phone.goto(f"{base}/jobs/{middle}")
    phone.click(f"#reject-{middle} summary")
    phone.fill(f"#reject-{middle}-reason", "Wrong\x00 numbers")
    phone.click(f"#reject-{middle}-submit")
    answer_confirm(phone)
    phone.wait_for_selector(f"#e-reject-{middle}-reason")
    assert "NUL character" in phone.locator(f"#e-reject-{middle}-reason").inner_text()
    assert phone.input_value(f"#reject-{middle}-reason").startswith("Wrong")
    assert phone.locator(f"#reject-{middle}").get_attribute("open") is not None
    assert no_horizontal_scroll(phone)
    phone.locator(f"#reject-{middle}").screenshot(path=str(artifacts_dir / "job-reason-error-phone.png"))
    phone.screenshot(path=str(artifacts_dir / "job-reason-error-phone-page.png"), full_page=True)
    assert _statuses(db_url)[middle] == "waiting_approval"
    phone.fill(f"#reject-{middle}-reason", "Wrong numbers")
    phone.click(f"#reject-{middle}-submit")
    answer_confirm(phone)
    phone.wait_for_selector(f"#reject-{middle}", state="detached")
    assert _statuses(db_url)[middle] == "failed"
    for w in (watch, phone_watch):
        assert w.errors == [] and w.alerts == [], (w.errors, w.alerts)


def test_the_inbox_counts_again_after_each_decision(
    seeded_server: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path
) -> None:
    # the sentence above the cards kept the count the page opened with: "3 steps waiting" beside two
    # cards, then beside none
    base, data = seeded_server
    old, middle, new = data["oldest_first"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "root@example.com")
    page.goto(base + "/admin/approvals")
    assert page.inner_text("main hgroup p").startswith("3 steps waiting")
    page.click(f"#approve-{old}")
    page.wait_for_selector(f"#approval-{old}", state="detached")
    assert page.inner_text("main hgroup p").startswith("2 steps waiting")
    page.fill(f"#reason-{middle}", "The figures for March are missing")
    page.click(f"#reject-{middle}")
    page.wait_for_selector(f"#approval-{middle}", state="detached")
    page.click(f"#approve-{new}")
    page.wait_for_selector(f"#approval-{new}", state="detached")
    assert page.inner_text("main hgroup p").startswith("0 steps waiting")
    page.screenshot(path=str(artifacts_dir / "approvals-inbox-all-decided.png"), full_page=True)
    assert watch.errors == [] and watch.alerts == [], (watch.errors, watch.alerts)
