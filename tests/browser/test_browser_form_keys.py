"""A job, pipeline or batch form's one-time key and the back button, in a real browser (headless Chromium).

Pages are sent ``Cache-Control: no-store``, so Back fetches the form page again and the server gives it
a new key; Chromium refills the typed fields but not the hidden key. ``static/app.js`` (3b) puts the key
the form was sent with back. So: sent, Back, sent unchanged → the same job (one in the database); Back,
an edit, sent → "This form was sent already, and it started a job then" with a link to it, nothing new; the
form a fresh visit shows ("Start a job" again) → a new job. A batch: its spreadsheet read and started,
Back to the upload form, the same file read and started → the same batch.

Screenshots go to ``tests/artifacts/form-key-*.png``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db import asyncpg_dsn
from tests.support.browser import BROWSER_MARKS, Watch, sign_in
from tests.support.webkit import FORMS_ENV, add_user, running_server

pytestmark = BROWSER_MARKS


def count(db_url: str, table: str) -> int:
    async def ask() -> int:
        conn = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
        finally:
            await conn.close()

    # Playwright's sync API runs an event loop in this thread: ask from another one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, ask()).result()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    """``jobdesk serve`` without a worker (what was started only has to exist) and the test form types."""
    asyncio.run(add_user(db_url, "ann@example.com"))
    with running_server(db_url, tmp_path / "data", **FORMS_ENV, LOG_LEVEL="WARNING") as base:
        yield base


FORMS = {
    # kind: (card on the start page, the form's URL, a field to fill, the table what it starts is in)
    "job": ("Every field", "/jobs/new/test.form", "#f-name", "jobs"),
    "pipeline": ("Four steps", "/pipelines/new/test.steps", "#f-title", "pipelines"),
}


@pytest.mark.parametrize("kind", sorted(FORMS))
def test_the_back_button_keeps_the_forms_key(
    kind: str, server: str, db_url: str, browser: Any, artifacts_dir: Path
) -> None:
    card, form_url, field, table = FORMS[kind]
    started = re.compile(rf".*/{table}/[0-9a-f-]{{36}}$")
    base = server
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    watch = Watch(page)
    sign_in(page, base)

    def fresh_visit() -> None:
        page.click("nav a:has-text('Start a job')")
        page.click(f"a.card-link:has-text('{card}')")
        page.wait_for_url(base + form_url)

    def send() -> None:
        page.click("button.submit")
        page.wait_for_load_state()

    fresh_visit()
    page.fill(field, "Ann")
    page.fill("#f-_title", "First")
    send()
    page.wait_for_url(started)
    first = page.url
    assert count(db_url, table) == 1

    # Back, then sent as it was: the same one, nothing new
    page.go_back()
    page.wait_for_url(base + form_url)
    assert page.input_value(field) == "Ann"  # the browser refilled what was typed
    send()
    page.wait_for_url(started)
    assert page.url == first
    assert count(db_url, table) == 1

    # Back, an edit, sent: it says it started one already, with a link to it, and starts nothing
    page.go_back()
    page.wait_for_url(base + form_url)
    page.fill(field, "Bob")
    send()
    assert page.url == base + form_url
    notice = page.locator(
        "#form-errors", has_text=f"This form was sent already, and it started a {kind} then"
    )
    assert notice.count() == 1
    assert notice.locator("a").get_attribute("href") == first.removeprefix(base)
    # said in the summary (with the link) and beside the button, as any error of the whole form, no more
    assert page.content().count("This form was sent already") == 2
    assert count(db_url, table) == 1
    page.screenshot(path=str(artifacts_dir / f"form-key-{kind}-sent-before.png"), full_page=True)

    # sent once more from there (a new key): the choice to start another
    send()
    page.wait_for_url(started)
    assert page.url != first
    assert count(db_url, table) == 2

    # a fresh visit has a key of its own: the same values start another one
    fresh_visit()
    page.fill(field, "Ann")
    page.fill("#f-_title", "First")
    send()
    page.wait_for_url(started)
    assert page.url != first
    assert count(db_url, table) == 3
    page.screenshot(path=str(artifacts_dir / f"form-key-{kind}-fresh.png"), full_page=True)
    assert watch.errors == [] and watch.alerts == []


def test_the_back_button_keeps_the_batch_forms_key(
    server: str, db_url: str, browser: Any, artifacts_dir: Path
) -> None:
    """The spreadsheet read, then started; Back past the mapping step (a POST's answer, which the
    browser would send again) to the upload form, the same file read and started → the same batch."""
    base = server
    form_url = base + "/batches/new/test.form"
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    watch = Watch(page)
    sign_in(page, base)
    rows = b"Your name\nAnn\nBob\n"

    def read_and_start() -> str:
        page.set_input_files(
            "#f-sheet", files=[{"name": "names.csv", "mimeType": "text/csv", "buffer": rows}]
        )
        page.click("#read-sheet")
        page.wait_for_selector("#mapping-form")
        page.click("#check-and-start")
        page.wait_for_url(lambda url: "/batches/" in url and "/new/" not in url)
        return str(page.url)

    page.goto(form_url)
    first = read_and_start()
    assert count(db_url, "batches") == 1
    page.evaluate("history.go(-2)")
    page.wait_for_url(form_url)
    page.wait_for_load_state()
    assert read_and_start() == first
    assert count(db_url, "batches") == 1
    assert count(db_url, "jobs") == 2
    page.goto(form_url)  # a fresh visit: another batch
    assert read_and_start() != first
    assert count(db_url, "batches") == 2
    assert watch.errors == [] and watch.alerts == []
