"""The web UI in a real browser (headless Chromium through Playwright), against
``jobdesk serve`` with its in-app worker and the test-only job types of ``tests.support.forms``:

* sign in; a bad value is shown next to its field; a too-large file is refused before sending; a good
  form starts a job whose page goes Waiting → Running (progress) → Done without a reload;
* a pipeline's steps advance on its page until it is finished; a running job is cancelled in place;
  My jobs updates its cells by itself; stored-XSS payloads never run a script (case C19); no horizontal
  scrolling at 375 px.

Screenshots go to ``tests/artifacts/ui-*.png``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import BROWSER_MARKS, Watch, answer_confirm, no_horizontal_scroll, sign_in
from tests.support.webkit import FORMS_ENV, add_user, running_server

pytestmark = BROWSER_MARKS


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(add_user(db_url, "ann@example.com"))
    env = {
        "WORKER_ENABLED": "true",
        **FORMS_ENV,
        "UPLOAD_MAX_BYTES": "4096",
        "JOB_PROCESSOR_POLL_INTERVAL": "0.5",
        "LOG_LEVEL": "WARNING",
    }
    with running_server(db_url, tmp_path / "data", **env) as base:
        yield base


def test_forms_errors_and_a_job_that_finishes_without_a_reload(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    base = server
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    watch = Watch(page)
    sign_in(page, base)
    assert page.locator("h1").inner_text() == "Start a job"
    assert page.locator("a.card-link", has_text="Every field").count() == 1
    assert page.locator("a.card-link", has_text="Wait a while").count() == 0  # diagnostic: admins only
    page.screenshot(path=str(artifacts_dir / "ui-catalogue.png"), full_page=True)

    page.click("a.card-link:has-text('Every field')")
    page.wait_for_url(base + "/jobs/new/test.form")
    # a file above UPLOAD_MAX_BYTES is refused next to its field before anything is sent
    page.set_input_files(
        "#f-document",
        files=[{"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"x" * 5000}],
    )
    assert page.locator("#client-error-f-document").inner_text() == (
        "This file is 4.9 KiB; the largest file you can upload is 4 KiB."
    )
    page.set_input_files(
        "#f-document", files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello"}]
    )
    assert page.locator("#client-error-f-document").count() == 0

    # a bad value: the error is next to the field, what was typed is kept
    page.fill("#f-name", "Ann")
    page.fill("#f-copies", "11")
    page.fill("#f-notes", "Please <b>hurry</b>")
    page.click("button.submit")
    page.wait_for_load_state()
    assert page.locator("#e-copies").inner_text() == "Must be at most 10."
    assert page.get_attribute("#f-copies", "aria-invalid") == "true"
    assert page.input_value("#f-name") == "Ann"
    assert page.input_value("#f-notes") == "Please <b>hurry</b>"
    assert page.locator("#form-errors a[href='#f-copies']").count() == 1
    assert page.evaluate("document.activeElement.id") == "form-errors"  # focus moves to the problems
    assert page.locator("label:has-text('Use notes.txt') input").is_checked()  # the upload is kept
    page.screenshot(path=str(artifacts_dir / "ui-form-error.png"), full_page=True)

    # a good value: the job page follows the job to Done without a reload
    page.fill("#f-copies", "2")
    page.fill("#f-pause", "3")
    page.fill("#f-_title", "Birthday cards for the team")
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/jobs/[0-9a-f-]{36}$"))
    page.evaluate("window.__sameDocument = true")
    status = page.locator("#job-status .status-head .status")
    status.filter(has_text="Running").wait_for(timeout=20_000)
    page.locator("#job-status progress").wait_for()
    page.locator("#job-status .progress-text", has_text="Step").wait_for(timeout=10_000)
    page.screenshot(path=str(artifacts_dir / "ui-job-running.png"), full_page=True)
    status.filter(has_text="Done").wait_for(timeout=30_000)
    assert page.evaluate("window.__sameDocument === true")  # no navigation happened
    assert page.locator("#job-status").get_attribute("hx-get") is None  # polling stopped
    result = page.locator("#result")
    assert "Hello, Ann!" in result.inner_text()
    assert result.locator("a[download]", has_text="summary.txt").count() == 1
    assert result.locator("a[href='https://example.com/report']").count() == 1
    assert result.locator("a[href^='javascript']").count() == 0
    assert page.locator("#job-history li", has_text="Finished").count() == 1  # history refreshed in place
    page.screenshot(path=str(artifacts_dir / "ui-job-done.png"), full_page=True)
    assert watch.alerts == []
    assert watch.errors == []


def test_pipeline_steps_advance_cancel_in_place_and_my_jobs_on_a_phone(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    base = server
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    watch = Watch(page)
    sign_in(page, base)

    # stored-XSS payloads typed into forms, and a processor error with HTML in it (case C19)
    page.goto(base + "/jobs/new/test.form")
    page.fill("#f-name", "<img src=x onerror=alert(1)>")
    page.fill("#f-_title", '"><svg onload=alert(3)>')
    page.fill("#f-tags", '"><svg onload=alert(3)>\njavascript:alert(2)')
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/jobs/[0-9a-f-]{36}$"))
    page.goto(base + "/jobs/new/test.form")
    page.fill("#f-name", "explode")
    page.fill("#f-_title", "This one breaks")
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/jobs/[0-9a-f-]{36}$"))
    # after its failed attempt the job waits to be retried ("Retrying"), or has failed for good
    page.locator("#job-status .status", has_text="Retrying").or_(
        page.locator("#job-status .status", has_text="Failed")
    ).first.wait_for()

    # a pipeline: its steps advance on the page until it is finished
    page.goto(base + "/pipelines/new/test.steps")
    page.fill("#f-title", "Weekly report")
    page.fill("#f-seconds", "1.5")
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/pipelines/[0-9a-f-]{36}$"))
    page.evaluate("window.__sameDocument = true")
    steps = page.locator("li.step")
    assert steps.count() == 4
    page.locator("li.step.step-running").first.wait_for(timeout=20_000)
    page.locator("li.layer").nth(1).locator("li.step.step-running").first.wait_for(timeout=20_000)
    assert page.locator("li.layer").nth(0).locator("li.step.step-done").count() == 1
    page.screenshot(path=str(artifacts_dir / "ui-pipeline-running.png"), full_page=True)
    page.locator("#pipeline-status .status-head .status", has_text="Done").wait_for(timeout=30_000)
    assert page.locator("li.step.step-done").count() == 4
    assert "100%" in page.locator("#pipeline-status .status-head").inner_text()
    assert page.evaluate("window.__sameDocument === true")
    page.screenshot(path=str(artifacts_dir / "ui-pipeline-done.png"), full_page=True)
    # the history names the steps as their boxes do (it said "prepare" under a box saying "A step")
    boxes = set(page.locator("li.step .step-title").all_inner_texts())
    page.reload()  # the history as the page draws it, not as the poll left it
    assert set(page.locator("section.history .what a").all_inner_texts()) == boxes
    pipeline_url = page.url

    # cancel a running job: confirmation, then the outcome in place
    page.goto(base + "/jobs/new/test.form")
    page.fill("#f-name", "Long one")
    page.fill("#f-_title", "Slow greeting")
    page.fill("#f-pause", "40")
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/jobs/[0-9a-f-]{36}$"))
    page.locator("#job-status .status", has_text="Running").wait_for(timeout=20_000)
    page.evaluate("window.__sameDocument = true")
    # the poll pauses while the tab is hidden and asks at once when it is shown again (static/app.js)
    polls: list[float] = []
    page.on("request", lambda req: polls.append(time.monotonic()) if "/status?v=" in req.url else None)
    page.wait_for_timeout(2500)
    assert polls, "the status part polls while visible"
    page.evaluate(
        "() => { Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    page.wait_for_timeout(300)
    hidden_count = len(polls)
    page.wait_for_timeout(2500)
    assert len(polls) == hidden_count, "no poll while hidden"
    shown = time.monotonic()
    page.evaluate(
        "() => { Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    page.wait_for_timeout(400)
    assert any(t >= shown for t in polls), "a poll right after the tab is shown"
    page.click("#act-cancel")
    # under "Cancel this job?" the buttons were "Cancel" and "Confirm": which one cancels?
    page.wait_for_selector("#confirm-dialog[open]")
    assert page.locator("#confirm-dialog-cancel").inner_text() == "Go back"
    assert page.locator("#confirm-dialog-ok").inner_text() == "Cancel job"
    answer_confirm(page)
    page.locator("#job-status .notice", has_text="Stopping the job").wait_for(timeout=10_000)
    page.locator("#job-status .status-head .status", has_text="Cancelled").wait_for(timeout=20_000)
    assert page.evaluate("window.__sameDocument === true")
    assert "It was cancelled." in page.locator("#job-status").inner_text()

    # My jobs on a phone: every row, live cells, no horizontal scrolling
    phone = browser.new_page(viewport={"width": 375, "height": 800})
    phone_watch = Watch(phone)
    sign_in(phone, base)
    phone.goto(base + "/jobs/new/test.form")
    phone.fill("#f-name", "Watch me")
    phone.fill("#f-_title", "Watch me finish")
    phone.fill("#f-pause", "2")
    phone.click("button.submit")
    phone.wait_for_url(re.compile(r".*/jobs/[0-9a-f-]{36}$"))
    assert no_horizontal_scroll(phone)
    phone.goto(base + "/jobs")
    rows = phone.locator("table.job-table tbody tr")
    assert rows.count() == 5
    first = rows.first
    assert "Watch me finish" in first.inner_text()
    phone.screenshot(path=str(artifacts_dir / "ui-my-jobs-375.png"), full_page=True)
    first.locator(".cell", has_text="Done").wait_for(timeout=30_000)  # the cell updated by itself
    assert no_horizontal_scroll(phone)
    for url in ("/", "/jobs/new/test.form", "/pipelines/new/test.steps"):
        phone.goto(base + url)
        assert no_horizontal_scroll(phone), url
    phone.goto(page.url)  # the cancelled job
    assert no_horizontal_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "ui-job-cancelled-375.png"), full_page=True)
    phone.goto(pipeline_url)
    assert no_horizontal_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "ui-pipeline-done-375.png"), full_page=True)
    page.goto(base + "/jobs")
    page.screenshot(path=str(artifacts_dir / "ui-my-jobs.png"), full_page=True)
    # the XSS jobs' pages, fragments and list never ran a script
    for link in page.locator("table.job-table a").all()[:5]:
        href = link.get_attribute("href")
        phone.goto(base + href)
        phone.wait_for_timeout(300)
    assert watch.alerts == []
    assert phone_watch.alerts == []
    assert watch.errors == []
    assert phone_watch.errors == []
