"""The base layout in a real browser (headless Chromium): sign in and out under the strict CSP, htmx
loaded with eval off and carrying the CSRF token from <body>, no horizontal scroll at 375 px."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.support.browser import BROWSER_MARKS, CHROMIUM
from tests.support.webkit import PASSWORD, add_user, running_server

pytestmark = BROWSER_MARKS


def test_sign_in_and_out_in_chromium(db_url: str, tmp_path: Path, artifacts_dir: Path) -> None:
    from playwright.sync_api import sync_playwright

    asyncio.run(add_user(db_url, "ann@example.com"))
    problems: list[str] = []
    with running_server(db_url, tmp_path / "data") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 375, "height": 800})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))

            page.goto(base + "/")
            assert page.url == base + "/login"
            page.screenshot(path=str(artifacts_dir / "foundation-login-375.png"), full_page=True)
            page.fill("#email", "ann@example.com")
            page.fill("#password", "wrong password!")
            page.click("button[type=submit]")
            assert page.locator("#login-error").inner_text() == "Wrong email or password."
            assert page.input_value("#email") == "ann@example.com"

            page.fill("#password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(base + "/")
            assert page.locator("h1").inner_text() == "Start a job"
            page.screenshot(path=str(artifacts_dir / "foundation-home-375.png"), full_page=True)

            # htmx 2.0.11 is loaded and configured for the CSP; no horizontal scrolling on a phone
            assert page.evaluate("htmx.version") == "2.0.11"
            assert page.evaluate("htmx.config.allowEval") is False
            assert page.evaluate("htmx.config.includeIndicatorStyles") is False
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

            # an htmx POST carries the CSRF token from <body hx-headers>: sign-out through htmx works
            status = page.evaluate(
                """() => new Promise(resolve => {
                    document.body.addEventListener('htmx:afterRequest', e => resolve(e.detail.xhr.status), {once: true});
                    htmx.ajax('POST', '/logout', {target: '#app-alert', swap: 'none'});
                })"""
            )
            assert status == 200  # the 303 to /login, followed by the browser
            page.goto(base + "/")
            assert page.url == base + "/login"
        finally:
            browser.close()
    # the only console error is the wrong password's 401; no CSP violation, no script error
    assert problems == ["Failed to load resource: the server responded with a status of 401 (Unauthorized)"]


def test_polling_pauses_while_the_tab_is_hidden(db_url: str, tmp_path: Path) -> None:
    """static/app.js: an `hx-trigger="every …"` poll sends nothing while document.hidden, and polls once
    right away when the tab is shown again (case C17)."""
    from playwright.sync_api import sync_playwright

    with running_server(db_url, tmp_path / "data") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            polls: list[float] = []
            page.on(
                "request",
                lambda req: polls.append(time.monotonic()) if req.url.endswith("/healthz") else None,
            )
            page.goto(base + "/login")
            page.evaluate(
                """() => {
                    const el = document.createElement('div');
                    el.setAttribute('hx-get', '/healthz');
                    el.setAttribute('hx-trigger', 'every 200ms');
                    el.setAttribute('hx-swap', 'none');
                    document.body.appendChild(el);
                    htmx.process(el);
                }"""
            )
            page.wait_for_timeout(1000)
            assert len(polls) >= 3  # polling runs while visible

            page.evaluate(
                "() => { Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
                " document.dispatchEvent(new Event('visibilitychange')); }"
            )
            page.wait_for_timeout(300)
            hidden_at = len(polls)
            page.wait_for_timeout(1200)
            assert len(polls) == hidden_at  # nothing sent while hidden

            shown = time.monotonic()
            page.evaluate(
                "() => { Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
                " document.dispatchEvent(new Event('visibilitychange')); }"
            )
            page.wait_for_timeout(150)  # shorter than the poll interval: the refresh comes from app.js
            assert any(t >= shown for t in polls)
            page.wait_for_timeout(800)
            assert len([t for t in polls if t >= shown]) >= 3  # and polling resumed
        finally:
            browser.close()


def test_no_browser_test_waits_with_a_predicate_evaluated_in_the_page() -> None:
    """``wait_for_function`` re-evaluates its predicate inside the page, which our CSP refuses on some
    Playwright versions: a test that uses it passes or fails with the installed version. Tests wait
    with locator assertions (``expect``) or ``tests.support.browser.wait_until`` instead."""
    tests = Path(__file__).resolve().parents[1]
    users = [
        str(path.relative_to(tests))
        for path in tests.rglob("*.py")
        if path != Path(__file__).resolve() and "wait_for_function(" in path.read_text()
    ]
    assert users == [], f"wait_for_function in {users}: use expect(...) or wait_until(...)"
