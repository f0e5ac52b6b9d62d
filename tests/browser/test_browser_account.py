"""The account page in headless Chromium with the browser in Europe/Copenhagen, at 1280 px and 390 px:
the first sign-in stores the browser's zone and times show CET/CEST; a token is created, shown once,
copied, works with the API and stops working when revoked; the theme switch; a password change signs out
the person's other browser; an admin's password reset makes the person choose a new password.
Screenshots: ``tests/artifacts/account-*.png``."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.sync_api import expect

from app.db import asyncpg_dsn
from tests.support.browser import BROWSER_MARKS, Watch, answer_confirm, no_horizontal_scroll, sign_in
from tests.support.webkit import PASSWORD, add_user, running_server

pytestmark = BROWSER_MARKS

ZONE = "Europe/Copenhagen"
NEW_PASSWORD = "a much better passphrase"


def _fetch(db_url: str, query: str, *args: Any) -> Any:
    async def run() -> Any:
        conn = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            return await conn.fetchval(query, *args)
        finally:
            await conn.close()

    # Playwright's sync API keeps an event loop running in this thread: the query gets its own thread
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def _context(browser: Any, width: int) -> Any:
    height = 900 if width > 500 else 844
    context = browser.new_context(viewport={"width": width, "height": height}, timezone_id=ZONE)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    return context


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(add_user(db_url, "ann@example.com"))
    asyncio.run(add_user(db_url, "root@example.com", admin=True))
    with running_server(db_url, tmp_path / "data") as base:
        yield base


def test_account_page_flows_in_copenhagen(
    server: str, db_url: str, browser: Any, artifacts_dir: Path
) -> None:
    base = server
    if True:
        desk = _context(browser, 1280)
        page = desk.new_page()
        watch = Watch(page)

        # the first sign-in stores the browser's zone; times on the pages carry its abbreviation
        sign_in(page, base, "ann@example.com")
        assert _fetch(db_url, "SELECT timezone FROM users WHERE email = 'ann@example.com'") == ZONE
        page.click("#account-link")
        page.wait_for_url(base + "/account")
        assert page.input_value("#account-timezone") == ZONE

        # a token: created, shown once with a copy button, works with the API, revoked stops working
        page.fill("#token-name", "nightly export")
        page.fill("#token-days", "30")
        page.click("#create-token")
        page.wait_for_selector("#secret-value")
        token = page.inner_text("#secret-value").strip()
        page.click("#copy-secret")
        expect(page.locator("#secret-value-copied")).not_to_be_empty()
        assert page.inner_text("#secret-value-copied") == "Copied."
        assert page.evaluate("navigator.clipboard.readText()") == token
        row = page.locator("#token-table tbody tr").first
        assert re.search(r"\d\d:\d\d CES?T", row.inner_text()), row.inner_text()
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(base + "/api/me", headers=auth).json()["email"] == "ann@example.com"
        page.screenshot(path=str(artifacts_dir / "account-desktop.png"), full_page=True)
        page.goto(base + "/account")
        assert token not in page.content()
        page.locator("#token-table form[action$='/revoke'] button").first.click()
        assert "Programs using it stop working" in answer_confirm(page)  # the in-page dialog
        page.wait_for_selector("#no-tokens")
        assert httpx.get(base + "/api/me", headers=auth).status_code == 401

        # the theme: automatic follows the device, a choice is kept on every page
        page.emulate_media(color_scheme="dark")
        page.goto(base + "/account")
        auto_dark = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        page.emulate_media(color_scheme="light")
        page.reload()
        auto_light = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        assert auto_dark != auto_light
        page.check("#theme-dark")
        page.click("#save-theme")
        page.wait_for_selector("#flash-notice")  # the page after the change, with its notice
        assert page.get_attribute("html", "data-theme") == "dark"
        assert page.evaluate("getComputedStyle(document.documentElement).backgroundColor") == auto_dark
        page.goto(base + "/jobs")
        assert page.get_attribute("html", "data-theme") == "dark"
        page.goto(base + "/account")
        page.screenshot(path=str(artifacts_dir / "account-dark.png"), full_page=True)
        page.check("#theme-auto")
        page.click("#save-theme")
        page.wait_for_selector("#flash-notice")  # the page after the change, with its notice
        assert page.get_attribute("html", "data-theme") is None

        # on a phone: the same page, nothing scrolls sideways; it is another browser of ann's
        phone = _context(browser, 390)
        other = phone.new_page()
        sign_in(other, base, "ann@example.com")
        other.goto(base + "/account")
        assert no_horizontal_scroll(other)
        # the address in the top bar is whole: it lost its last letters, with no "…", at 390 px
        whole = (
            "(a => a.scrollWidth <= a.clientWidth"
            " && a.getBoundingClientRect().right <= a.closest('li').getBoundingClientRect().right + 1)"
            "(document.getElementById('account-link'))"
        )
        assert other.evaluate(whole)
        other.screenshot(path=str(artifacts_dir / "account-phone.png"), full_page=True)

        # changing the password here signs the phone out, not this browser
        page.fill("#current-password", PASSWORD)
        page.fill("#new-password", NEW_PASSWORD)
        page.fill("#repeat-password", NEW_PASSWORD)
        page.click("#change-password")
        page.wait_for_selector(".notice-ok")
        assert "1 other session signed out" in page.inner_text(".notice-ok")
        other.goto(base + "/jobs")
        assert other.url.startswith(base + "/login")
        page.goto(base + "/jobs")
        assert page.url == base + "/jobs"

        # an admin resets ann's password; with the one-time password ann must choose a new one first
        admin = desk.browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=ZONE)
        admin_page = admin.new_page()
        Watch(admin_page)
        sign_in(admin_page, base, "root@example.com")
        admin_page.goto(base + "/admin/users")
        ann_id = _fetch(db_url, "SELECT id FROM users WHERE email = 'ann@example.com'")
        assert "last signed in" in admin_page.inner_text(f"#last-sign-in-{ann_id}")
        admin_page.click(f"#reset-password-{ann_id}")
        answer_confirm(admin_page)
        admin_page.wait_for_selector("#secret-value")
        one_time = admin_page.inner_text("#secret-value").strip()
        page.goto(base + "/jobs")
        assert page.url.startswith(base + "/login")  # the reset signed ann out
        sign_in(other, base, "ann@example.com", one_time, lands="/account#password")
        assert other.locator("#must-change").is_visible()
        other.goto(base + "/")
        assert other.url == base + "/account#password"
        other.fill("#current-password", one_time)
        other.fill("#new-password", "chosen by ann herself")
        other.fill("#repeat-password", "chosen by ann herself")
        other.click("#change-password")
        other.wait_for_selector(".notice-ok")
        other.goto(base + "/jobs")
        assert other.url == base + "/jobs"
        assert watch.errors == [] and watch.alerts == []
        for context in (desk, phone, admin):
            context.close()
