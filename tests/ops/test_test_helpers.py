"""The tests sign in to a browser through one helper (:func:`tests.support.browser.sign_in`): a copy
of its lines in a test file drifts from it (one waited for the home page, another only for a load)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# the login form's own tests type into it on purpose: a wrong password first, a ``next=`` address
OWN_LOGIN_TESTS = {"browser/test_browser_foundation.py", "alerts/test_alerts.py", "support/browser.py"}
COPY = re.compile(r'def _?sign_in\(page|\.fill\("#password", PASSWORD\)')


def test_no_test_file_keeps_its_own_browser_sign_in() -> None:
    copies = sorted(
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if str(p.relative_to(TESTS)) not in OWN_LOGIN_TESTS and COPY.search(p.read_text())
    )
    assert copies == [], f"sign in with tests.support.browser.sign_in instead: {copies}"
