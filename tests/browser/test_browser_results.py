"""Results at a glance in a real browser (headless Chromium, time zone Europe/Copenhagen), against
``jobdesk serve`` with its in-app worker and the built-in picture and CSV job types:

* a CSV chosen as a picture is an error next to the field, before any job exists;
* a thumbnail job's page shows its pictures in place; My jobs finds it by its file name;
* "Photo batch" puts the contact sheet at the top and its header counts its steps (one per picture);
* "CSV report with review" (approved by an admin) offers its report, opened in a new tab;
* every page at 1280 px and at 390 px without sideways scrolling.

Screenshots go to ``tests/artifacts/results-*.png`` (the ones in ``docs/screenshots/`` come from here).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import (
    BROWSER_MARKS,
    Watch,
    answer_confirm,
    no_horizontal_scroll,
    sign_in,
    wait_until,
)
from tests.support.procs import EXAMPLES
from tests.support.webkit import FORMS_ENV, add_user, running_server

pytestmark = BROWSER_MARKS

ZONE = "Europe/Copenhagen"
WAIT = 120_000
"""Milliseconds a picture or CSV job may take on a busy 2-core machine."""


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(add_user(db_url, "ann@example.com"))
    asyncio.run(add_user(db_url, "root@example.com", admin=True))
    env = {
        "WORKER_ENABLED": "true",
        **FORMS_ENV,
        "JOB_PROCESSOR_POLL_INTERVAL": "0.5",
        "LOG_LEVEL": "WARNING",
    }
    with running_server(db_url, tmp_path / "data", **env) as base:
        yield base


def signed_in(browser: Any, base: str, email: str, width: int = 1280) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900}, timezone_id=ZONE)
    page = context.new_page()
    sign_in(page, base, email)
    return page


def shot(page: Any, artifacts_dir: Path, name: str) -> None:
    page.screenshot(path=str(artifacts_dir / f"results-{name}.png"), full_page=True)


def shown(page: Any, selector: str) -> None:
    """Every picture matching ``selector`` has loaded (scrolled into view first: they load lazily)."""
    pictures = page.locator(selector)
    for n in range(pictures.count()):
        pictures.nth(n).scroll_into_view_if_needed()
    wait_until(
        page,
        f"[...document.querySelectorAll({selector!r})].every(i => i.complete && i.naturalWidth > 0)",
        WAIT,
    )


def on_a_phone(page: Any, artifacts_dir: Path, name: str) -> None:
    """The same page at 390 px: nothing scrolls sideways."""
    phone = page.context.new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(page.url)
    phone.wait_for_load_state()
    assert no_horizontal_scroll(phone), f"{name} scrolls sideways at 390 px"
    shot(phone, artifacts_dir, f"{name}-390")
    phone.close()


def test_results_at_a_glance_at_desktop_and_phone_width(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    base = server
    page = signed_in(browser, base, "ann@example.com")
    watch = Watch(page)
    assert page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone") == ZONE
    shot(page, artifacts_dir, "catalogue")
    on_a_phone(page, artifacts_dir, "catalogue")

    # a CSV given as a picture: an error next to the field, no job
    page.goto(base + "/jobs/new/images.thumbnail")
    assert page.get_attribute("#f-image", "accept") == "image/*"
    assert page.locator("#f-format option[value='WEBP']").inner_text() == "WebP"
    page.set_input_files("#f-image", str(EXAMPLES / "csv" / "penguins.csv"))
    page.click("button.submit")
    page.wait_for_load_state()
    assert "not a picture" in page.locator("#e-image").inner_text()
    shot(page, artifacts_dir, "form-error")
    on_a_phone(page, artifacts_dir, "form-error")

    # a picture: the job is named after it, and its page shows the thumbnails in place
    page.set_input_files("#f-image", str(EXAMPLES / "images" / "chelsea.jpg"))
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/jobs/[0-9a-f-]{36}$"))
    assert page.locator("h1").inner_text() == "chelsea.jpg"
    page.locator("#job-status .status-head .status", has_text="Done").wait_for(timeout=WAIT)
    previews = page.locator("#result figure.preview img")
    assert previews.count() == 2
    shown(page, "#result figure.preview img")
    shot(page, artifacts_dir, "job-done")
    on_a_phone(page, artifacts_dir, "job-done")

    # a running job shows its progress and message
    page.goto(base + "/jobs/new/test.form")
    page.fill("#f-name", "Ann")
    page.fill("#f-pause", "4")
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/jobs/[0-9a-f-]{36}$"))
    page.locator("#job-status .progress-text", has_text="Step").wait_for(timeout=WAIT)
    shot(page, artifacts_dir, "job-running")

    # My jobs: the search box finds the picture job by its file name
    page.goto(base + "/jobs")
    page.fill("#filter-q", "chelsea")
    page.click(".filters button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs\?.*q=chelsea"))
    assert page.locator("#job-list tbody tr").count() == 1
    on_a_phone(page, artifacts_dir, "my-jobs-search")

    # Photo batch: the contact sheet at the top; the header counts its steps (one per picture, the sheet)
    page.goto(base + "/pipelines/new/photo_batch")
    assert "one step per picture" in page.locator(".steps-preview summary").inner_text()
    page.set_input_files("#f-images", [str(EXAMPLES / "images" / n) for n in ("chelsea.jpg", "coffee.jpg")])
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/pipelines/[0-9a-f-]{36}$"))
    page.locator("#pipeline-status .status-head .status", has_text="Done").wait_for(timeout=WAIT)
    assert page.locator("#pipeline-summary").inner_text().startswith("Pipeline of 3 steps")
    sheet = page.locator("#outputs figure.preview img")
    assert sheet.count() == 1
    shown(page, "#outputs figure.preview img")
    assert page.locator("#outputs a", has_text="thumbnails.zip").count() >= 1
    shot(page, artifacts_dir, "photo-batch")
    on_a_phone(page, artifacts_dir, "photo-batch")

    # CSV report with review: an admin approves the columns; the report opens in a new tab
    page.goto(base + "/pipelines/new/csv_report_review")
    page.set_input_files("#f-file", str(EXAMPLES / "csv" / "penguins.csv"))
    page.click("button.submit")
    page.wait_for_url(re.compile(r".*/pipelines/[0-9a-f-]{36}$"))
    pipeline_url = page.url
    admin = signed_in(browser, base, "root@example.com")
    admin.goto(pipeline_url)
    admin.locator("[id^=approve-]").first.click(timeout=WAIT)
    answer_confirm(admin)  # the in-page dialog
    admin.locator("#pipeline-status .notice", has_text="Approved").wait_for(timeout=WAIT)
    page.locator("#pipeline-status .status-head .status", has_text="Done").wait_for(timeout=WAIT)
    report = page.locator("#outputs a[target=_blank][href$='?view=1']")
    assert report.count() == 1
    with page.context.expect_page() as opened:
        report.click()
    tab = opened.value
    tab.wait_for_load_state()
    assert tab.locator("h1").count() == 1  # shown as a page, not downloaded
    tab.close()
    shot(page, artifacts_dir, "csv-review")
    on_a_phone(page, artifacts_dir, "csv-review")
    assert watch.alerts == []
    assert watch.errors == []
