"""Helpers for the headless Chromium tests: where the browser is, how it is launched, and a watch for
script errors and alert() dialogs (an XSS payload that runs)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
XSS = '<img src=x onerror="alert(1)"><script>alert(2)</script>'

BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (installed by .ci/run)"),
]
"""``pytestmark`` of every browser test module."""


class Watch:
    """Page problems: script errors, CSP violations, and any alert() dialog (an XSS payload running)."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.alerts: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", self._console)
        page.on("dialog", self._dialog)

    def _console(self, message: Any) -> None:
        text = message.text
        # a 4xx is an answer the page shows in place (a form's errors): the browser logs its status, and
        # htmx its "Response Status Error Code 422"; neither is a script error
        if (
            message.type != "error"
            or "status of 4" in text
            or text.startswith("Response Status Error Code 4")
        ):
            return
        if text.startswith("htmx:sendAbort"):
            # A request the browser dropped as the page was left (a poll in flight, or one htmx replaced):
            # htmx logs that as an error, after an "htmx:afterRequest" one; nobody sees either. A request
            # that failed ("htmx:sendError") still counts.
            if self.errors and self.errors[-1].startswith("htmx:afterRequest"):
                self.errors.pop()
            return
        self.errors.append(text)

    def _dialog(self, dialog: Any) -> None:
        # every confirmation is an in-page <dialog> (static/confirm.js): a browser dialog of any kind is
        # either a payload running or a confirm() that slipped back in
        self.alerts.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()


def wait_until(page: Any, expression: str, timeout_ms: float = 30_000) -> None:
    """Wait until the JavaScript ``expression`` is true on ``page``, checking it every 100 ms.

    Not ``page.wait_for_function``: our pages' Content-Security-Policy has no 'unsafe-eval', and
    Playwright re-evaluates that predicate from a string inside the page, which the policy refuses
    (an EvalError, depending on Playwright's version and on whether the first check passed). Each
    ``page.evaluate`` is a fresh evaluation from outside the page, which the policy allows."""
    deadline = time.monotonic() + timeout_ms / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout_ms / 1000:g} s: {expression}")
        time.sleep(0.1)


def no_horizontal_scroll(page: Any) -> bool:
    # clientWidth, not innerWidth: a page opened with is_mobile=True grows its layout viewport to fit
    # content that sticks out, so innerWidth went up with scrollWidth and a page wider than the phone
    # passed (/admin/failed was 575 px wide at 390 px).
    return bool(page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


def answer_confirm(page: Any, yes: bool = True) -> str:
    """Answer the in-page confirmation dialog (static/confirm.js) that a click opened; returns its question."""
    page.wait_for_selector("#confirm-dialog[open]")
    question = str(page.locator("#confirm-dialog-question").inner_text())
    page.click("#confirm-dialog-ok" if yes else "#confirm-dialog-cancel")
    page.wait_for_selector("#confirm-dialog", state="hidden")
    return question


def sign_in(
    page: Any, base: str, email: str = "ann@example.com", password: str | None = None, *, lands: str = "/"
) -> None:
    """Sign in through the login form and wait for the page it lands on (``lands``: the home page
    unless the person must go elsewhere first, as with a one-time password; ``password``: the tests'
    own)."""
    from tests.support.webkit import PASSWORD

    page.goto(base + "/login")
    page.fill("#email", email)
    page.fill("#password", password or PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(base + lands)
