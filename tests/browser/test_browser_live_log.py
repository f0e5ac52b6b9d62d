"""A running job's log and the notification bell in a real browser (headless Chromium), against
``jobdesk serve`` with its in-app worker: the lines a slow processor logs appear on its page while it
runs, appended by the page's existing 2-second poll, without a reload; the bell's unread count follows
on a poll when another job of the same person fails, there and on My jobs (a live row's cell poll)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.support.browser import BROWSER_MARKS, Watch, sign_in
from tests.support.webkit import admin_server_with_worker

pytestmark = BROWSER_MARKS


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    with admin_server_with_worker(
        db_url, tmp_path / "data", "tests.support.forms,tests.support.processors"
    ) as served:
        yield served


def submit(base: str, token: str, input_data: dict[str, Any], **kw: Any) -> str:
    r = httpx.post(
        base + "/api/jobs",
        json={"type": "test.logs", "input_data": input_data, **kw},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_log_lines_appear_while_the_job_runs_without_a_reload(
    server: tuple[str, str], browser: Any, artifacts_dir: Path
) -> None:
    base, token = server
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    watch = Watch(page)
    sign_in(page, base)

    job = submit(base, token, {"lines": 6, "interval": 1.0})
    page.goto(f"{base}/jobs/{job}")
    page.evaluate("window.__sameDocument = true")
    box = page.locator("#job-log-lines")
    page.wait_for_selector("#notif-bell[data-count]")  # the bell's count, fetched once on load
    assert page.locator("#notif-count").count() == 0
    # another job of Ann's fails while this page is open: the page's own poll brings the bell's count
    submit(base, token, {"lines": 0, "fail": True}, max_attempts=1)
    page.wait_for_selector("#notif-count", timeout=15_000)
    assert page.locator("#notif-count").inner_text() == "1"
    assert "line 5" not in box.inner_text()  # still running: the count came with a poll, not at the end
    page.locator("#job-log-lines", has_text="line 1").wait_for(timeout=15_000)
    # still running when the first lines are shown: they came through the poll, not at the end
    assert "line 5" not in box.inner_text()
    page.locator("#job-log-lines", has_text="from a thread").wait_for(timeout=20_000)
    assert page.evaluate("window.__sameDocument === true")  # appended in place, never reloaded
    texts = page.locator("#job-log-lines .log-line").all_inner_texts()
    body = [t.split(" ", 1)[1] for t in texts]
    assert [b for b in body if b.startswith("line ")] == [
        f"line {i}" for i in range(6)
    ]  # each once, in order
    assert page.locator("a[href$='/log.txt']").count() == 1
    page.locator("#notif-count", has_text="2").wait_for(timeout=10_000)

    # the notices page: its two buttons sit side by side at their own width (each spanned the page)
    page.goto(base + "/notifications")
    page.screenshot(path=str(artifacts_dir / "notifications-desktop.png"), full_page=True)
    boxes = [b.bounding_box() for b in page.locator(".notif-form > button").all()]
    assert len(boxes) == 2 and all(b is not None for b in boxes)
    assert boxes[0]["y"] == boxes[1]["y"] and all(b["width"] < 400 for b in boxes), boxes

    # My jobs: a live row's cell poll brings the count the same way (all read first: alike unread
    # notices fold into one row, which would not change the count)
    read = httpx.post(
        base + "/api/notifications/read", json={"all": True}, headers={"Authorization": f"Bearer {token}"}
    )
    assert read.json()["unread"] == 0
    submit(base, token, {"lines": 15, "interval": 1.0})
    page.goto(f"{base}/jobs")
    page.evaluate("window.__sameDocument = true")
    page.wait_for_selector("#notif-bell[data-count='0']")
    submit(base, token, {"lines": 0, "fail": True}, max_attempts=1)
    page.locator("#notif-count", has_text="1").wait_for(timeout=15_000)
    assert page.evaluate("window.__sameDocument === true")
    assert not watch.errors and not watch.alerts


def test_the_note_under_the_log_tells_the_truth_once_the_job_ended(
    server: tuple[str, str], browser: Any, artifacts_dir: Path
) -> None:
    """A page opened while its job ran said "Lines the job logs appear here while it runs." long after
    the job had ended: the note was drawn with the page, and the poll only appended lines."""
    base, token = server
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    watch = Watch(page)
    sign_in(page, base)

    # a job that logs nothing: while it runs the note says where lines will go, then that none came
    quiet = httpx.post(
        base + "/api/jobs",
        json={"type": "test.form", "input_data": {"name": "Ann", "pause": 3}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert quiet.status_code == 201, quiet.text
    page.goto(f"{base}/jobs/{quiet.json()['id']}")
    log = page.locator(".job-log")
    expect(log).to_contain_text("Lines the job logs appear here while it runs.")
    page.locator("#job-status .status-head .status", has_text="Done").wait_for(timeout=30_000)
    expect(log).to_contain_text("This job wrote no log lines.", timeout=10_000)
    expect(log).not_to_contain_text("while it runs")
    assert not page.locator("#job-log-lines").is_visible()  # no empty grey box
    page.screenshot(path=str(artifacts_dir / "log-none-390.png"), full_page=True)

    # a job that logs: its lines are shown, and the note offers the download instead
    page.goto(f"{base}/jobs/{submit(base, token, {'lines': 3, 'interval': 1.0})}")
    page.locator("#job-status .status-head .status", has_text="Done").wait_for(timeout=30_000)
    page.locator("#job-log-lines", has_text="from a thread").wait_for(timeout=10_000)
    expect(log).to_contain_text("Download the log")
    expect(log).not_to_contain_text("while it runs")
    page.screenshot(path=str(artifacts_dir / "log-lines-390.png"), full_page=True)
    assert not watch.errors and not watch.alerts
