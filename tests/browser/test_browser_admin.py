"""The admin console in headless Chromium (case C19): walk /admin,
/admin/users (create a user), /admin/schedules (a form error, then a schedule), with stored-XSS payloads in
a user's email, a schedule's input and name, and an error message — none runs. Screenshots on a desktop and
a 390 px phone go to ``tests/artifacts/admin-*.png``; no page scrolls sideways on the phone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import BROWSER_MARKS, XSS, Watch, answer_confirm, no_horizontal_scroll, sign_in
from tests.support.webkit import FORMS_ENV, add_user, running_server

pytestmark = BROWSER_MARKS


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(add_user(db_url, "root@example.com", admin=True))
    with running_server(db_url, tmp_path / "data", **FORMS_ENV) as base:
        yield base


def test_admin_console_walk_forms_and_no_script_runs(server: str, browser: Any, artifacts_dir: Path) -> None:
    base = server
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "root@example.com")

    # users: an XSS email is a form error shown as text; then a real user with a generated password
    page.goto(base + "/admin/users")
    page.fill("#u-email", XSS + "@example.com")
    page.click("#create-user-submit")
    page.wait_for_selector("#e-email")
    page.fill("#u-email", "ann@example.com")
    page.click("#create-user-submit")
    page.wait_for_selector("#secret-value")
    assert page.inner_text("#secret-value").strip()
    page.screenshot(path=str(artifacts_dir / "admin-users.png"), full_page=True)
    # destructive buttons ask first, in the page (data-confirm, static/confirm.js)
    page.goto(base + "/admin/users")
    page.locator("form[action$='/disable'] button").first.click()
    question = answer_confirm(page)  # the count and the consequence, read when the page rendered
    assert question.startswith("Disable ") and "session" in question and "API token" in question, question
    page.wait_for_selector("form[action$='/enable']")

    # schedules: pick the type, fill in its own form; a bad cron is a form error; XSS in the name and the
    # input is stored and shown as text
    page.goto(base + "/admin/schedules")
    page.select_option("#s-target", "type:test.form")
    page.click("#pick-target-submit")
    page.fill("#s-name", XSS)
    page.fill("#s-cron", "not a cron")
    page.fill("#f-name", "x")
    page.fill("#f-notes", XSS)
    page.click("#save-schedule")
    page.wait_for_selector("#e-_cron")
    page.screenshot(path=str(artifacts_dir / "admin-schedules-error.png"), full_page=True)
    page.fill("#s-cron", "*/5 * * * *")
    page.click("#save-schedule")
    page.wait_for_selector("#schedules-table")
    assert XSS in page.inner_text("#schedules-table")
    page.screenshot(path=str(artifacts_dir / "admin-schedules.png"), full_page=True)

    # health, with a paused type; the live part refreshes by itself
    page.goto(base + "/admin")
    page.wait_for_selector("#admin-health")
    page.locator("form[action='/admin/controls/pause']").nth(1).locator("button").click()
    assert "until you resume" in answer_confirm(page)
    page.wait_for_selector(".badge-paused")
    with page.expect_response(lambda r: "/admin/health" in r.url, timeout=15_000):
        pass
    page.screenshot(path=str(artifacts_dir / "admin-health.png"), full_page=True)
    page.goto(base + "/admin/audit")
    assert page.locator("#audit-table tr").count() >= 4
    page.screenshot(path=str(artifacts_dir / "admin-audit.png"), full_page=True)
    # The detail column wraps within the page: a long value (a schedule's name, an e-mail) must not widen
    # the table past its box, leaving the details cut off behind a sideways scroll.
    wrap = page.locator("#audit-table").locator("xpath=..").evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert wrap[0] <= wrap[1], f"the audit table is {wrap[0]} px wide in a {wrap[1]} px box"

    phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    Watch(phone)
    phone.context.add_cookies(page.context.cookies())
    for name in ("admin", "admin/users", "admin/schedules", "admin/audit"):
        phone.goto(f"{base}/{name}")
        phone.screenshot(
            path=str(artifacts_dir / f"admin-phone-{name.replace('/', '-')}.png"), full_page=True
        )
        assert no_horizontal_scroll(phone), name
    assert watch.alerts == []
    assert not [e for e in watch.errors if "alert" in e]


def test_oldest_waiting_does_not_say_nobody_waits_beside_jobs_waiting(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    # "Oldest waiting" counts only a job that is due and free to start; with only a scheduled job it
    # said "nobody is waiting" right beside "Jobs waiting 1"
    base = server
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    sign_in(page, base, "root@example.com")
    page.goto(base + "/jobs/new/test.step")
    page.click("details.run-at summary")
    page.fill("#run-at-date", "2031-01-15")
    page.fill("#run-at-time", "09:00")
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(base + "/jobs/*")
    page.goto(base + "/admin")
    assert page.inner_text("#stat-waiting") == "1"
    oldest = page.inner_text("#stat-oldest + small")
    assert oldest == "none is ready to run", oldest
    page.locator(".stat-grid").screenshot(path=str(artifacts_dir / "admin-oldest-waiting.png"))
    page.close()


def test_the_audit_trail_on_a_phone_names_each_cell(server: str, browser: Any, artifacts_dir: Path) -> None:
    # stacked on a phone, an entry's cells lost their column's name: "On" was a bare "2" (the user's id)
    # and the outcome a lone "ok"
    base = server
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    sign_in(page, base, "root@example.com")
    page.goto(base + "/admin/users")
    page.fill("#u-email", "bea@example.com")
    page.click("#create-user-submit")
    page.wait_for_selector("#secret-value")
    page.close()
    phone = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    ).new_page()
    sign_in(phone, base, "root@example.com")
    phone.goto(base + "/admin/audit")
    row = phone.locator("#audit-table tbody tr").first
    assert "bea@example.com" in row.inner_text()
    names = row.locator("td").evaluate_all("tds => tds.map(td => getComputedStyle(td, '::before').content)")
    for name in ("Who", "On", "Outcome"):
        assert f'"{name}: "' in names, names
    assert no_horizontal_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "admin-audit-phone.png"), full_page=True)
    phone.context.close()
