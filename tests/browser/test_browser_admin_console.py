"""The admin console as an admin reads it, in headless Chromium at 1280 and 390 px, on a database with a
few thousand jobs of several types, owners and pipelines (a realistic sample through the API, the volume
by ``COPY``): ``/admin/jobs`` one line per job, e-mails never broken mid-word, a card per job on a phone,
the in-page confirmation dialog (cancel does nothing, confirm acts), rows refreshed after a bulk action,
and notices that only an action can leave (a crafted ``?done=`` / ``?notice=`` link shows nothing).
Screenshots go to ``tests/artifacts/console-*.png``.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.sync_api import expect

from app.db import asyncpg_dsn
from app.jobs.queue import new_id
from tests.support.browser import BROWSER_MARKS, Watch, answer_confirm, no_horizontal_scroll, sign_in
from tests.support.webkit import add_token, add_user, running_server

pytestmark = BROWSER_MARKS

LONG_EMAIL = "annabelle.operations-team@subsidiary.example.com"
VOLUME = 3000
ERROR = "ConnectionError: upstream https://files.example.com/exports/2026/report.csv refused\n" + "\n".join(
    f'  File "/srv/app/step{i}.py", line {i}, in run' for i in range(8)
)


async def _fill(db_url: str) -> dict[str, Any]:
    """Users, two pipelines and :data:`VOLUME` jobs of four types in every finished and waiting status."""
    root = await add_user(db_url, "root@example.com", admin=True)
    ann = await add_user(db_url, LONG_EMAIL)
    bob = await add_user(db_url, "bob@example.com")
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        pipelines = [new_id(), new_id()]
        for i, pid in enumerate(pipelines):
            await conn.execute(
                "INSERT INTO pipelines (id, name, user_id, status) VALUES ($1, $2, $3, 'running')",
                pid,
                f"Nightly report export {i + 1}",
                ann.id,
            )
        rnd = random.Random(7)
        start = datetime.now(UTC) - timedelta(days=2)
        records = []
        for n in range(VOLUME):
            status = rnd.choice(["completed", "completed", "failed", "cancelled", "queued"])
            kind = rnd.choice(["noop", "sleep", "fail", "http.request"])
            finished = status in ("completed", "failed", "cancelled")
            records.append(
                (
                    new_id(),
                    kind,
                    status,
                    rnd.choice([ann.id, bob.id]),
                    json.dumps(
                        {"url": f"https://hooks.example.com/very/long/path/{n}"}
                        if kind == "http.request"
                        else {}
                    ),
                    3,
                    1 if finished else 0,
                    ERROR if status == "failed" else None,
                    rnd.choice(pipelines) if n % 7 == 0 else None,
                    start + timedelta(seconds=n * 40),
                    start + timedelta(seconds=n * 40 + 5) if finished else None,
                )
            )
        await conn.copy_records_to_table(
            "jobs",
            records=records,
            columns=[
                "id",
                "type",
                "status",
                "user_id",
                "input_data",
                "max_attempts",
                "attempts",
                "error_message",
                "pipeline_id",
                "created_at",
                "completed_at",
            ],
        )
        await conn.execute(
            "INSERT INTO throughput_samples (minute, worker_id, completed, failed) "
            "SELECT date_trunc('minute', now()) - i * interval '1 minute', 'w-1', 20 + (i * 7) % 30, (i * 3) % 5 "
            "FROM generate_series(0, 60 * 24 * 7, 7) i"
        )
        await conn.execute("ANALYZE jobs")
    finally:
        await conn.close()
    return {"ann": ann, "bob": bob, "admin_id": root.id}


async def _api_sample(base: str, db_url: str, ann_id: int) -> list[str]:
    """A few jobs the way a person submits them (through the JSON API), newest on the first page."""
    token = await add_token(db_url, ann_id)
    ids = []
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        for i in range(3):
            r = await client.post(
                "/api/jobs",
                json={"type": "http.request", "input_data": {"url": f"https://example.com/hook/{i}"}},
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
    return ids


@pytest.fixture
def console(db_url: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    data = asyncio.run(_fill(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        data["api_jobs"] = asyncio.run(_api_sample(base, db_url, data["ann"].id))
        data["admin_token"] = asyncio.run(add_token(db_url, data["admin_id"]))
        yield base, data


def _status(db_url: str, job_id: str) -> str:
    async def read() -> str:
        conn = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            return str(await conn.fetchval("SELECT status FROM jobs WHERE id = $1::uuid", job_id))
        finally:
            await conn.close()

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API keeps an event loop running in this thread
        return pool.submit(asyncio.run, read()).result()


ONE_LINE_JS = """el => {
  const r = el.getBoundingClientRect();
  const lh = parseFloat(getComputedStyle(el).lineHeight) || parseFloat(getComputedStyle(el).fontSize) * 1.5;
  return {lines: Math.round(r.height / lh), rects: el.getClientRects().length, clipped: el.scrollWidth > el.clientWidth};
}"""


def test_admin_jobs_reads_at_a_glance_with_dialogs_and_flash(
    console: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path, db_url: str
) -> None:
    base, data = console
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    watch = Watch(page)
    sign_in(page, base, "root@example.com")
    page.goto(base + "/admin")
    page.click("#range-24h")  # the chart's range, swapped in place
    page.wait_for_selector("#range-24h[aria-current]")
    assert "last 24 hours" in page.locator("#chart-heading").inner_text()
    page.screenshot(path=str(artifacts_dir / "console-admin.png"), full_page=True)
    page.goto(base + "/admin/jobs")
    page.wait_for_selector("#count-queued")
    rows = page.locator("#admin-job-list tbody tr")
    assert rows.count() == 50
    page.screenshot(path=str(artifacts_dir / "console-admin-jobs-desktop.png"), full_page=True)
    height = page.locator("#admin-job-list table").bounding_box()["height"]
    # a few lines per job at most (the error's traceback folded), not 7,000 px for 50 rows: the title,
    # what it works on, the error's first line and the owner's e-mail wrap instead of ending in "…"
    assert height < 5000, height
    # an e-mail is shown whole, never cut with "…" (it breaks after its @ and dots where it must:
    # tests/browser/test_browser_admin_jobs_text.py)
    owner = page.locator(".owner", has_text=LONG_EMAIL).first
    shape = owner.evaluate(ONE_LINE_JS)
    assert not shape["clipped"], shape
    # the error: its first line shown, the traceback folded
    failed_row = page.locator("#admin-job-list tr:has(details.row-error)").first
    assert "ConnectionError" in failed_row.locator("summary").inner_text()
    assert not failed_row.locator("pre.error-rest").is_visible()
    assert page.locator(".job-pipeline a").count() > 0  # steps say which pipeline they belong to
    assert page.locator(".job-input", has_text="https://example.com/hook/").count() == 3  # the API sample

    # a row's Cancel asks in the page: "Go back" in the dialog changes nothing, the button acts
    job = data["api_jobs"][0]
    page.click(f"#cancel-{job}")
    question = answer_confirm(page, yes=False)
    assert "Cancel this job?" in question
    page.wait_for_timeout(300)
    assert _status(db_url, job) == "queued"
    page.click(f"#cancel-{job}")
    answer_confirm(page)
    page.wait_for_selector(f"#row-{job} .notice")
    assert _status(db_url, job) == "cancelled"

    # a bulk cancel refreshes the rows in place
    others = data["api_jobs"][1:]
    for jid in others:
        page.check(f"#row-{jid} input[type=checkbox]")
    page.click("#bulk-cancel-selected")
    page.wait_for_selector("#bulk-count")
    page.click("#bulk-confirm-button")
    page.wait_for_selector("#bulk-outcome")
    for jid in others:
        expect(page.locator(f"#row-{jid} .status-cell")).to_contain_text("Cancelled")

    # notices come from actions only: crafted links show nothing
    for path in ("/admin/jobs?done=All+jobs+deleted", "/admin?notice=All+jobs+deleted&done=All+jobs+deleted"):
        page.goto(base + path)
        assert page.locator("#flash-notice").count() == 0
        assert "All jobs deleted" not in page.content()
    # a plain form post (disable a user) leaves its notice for the next page, once
    page.goto(base + "/admin/users")
    page.locator(f"form[action='/admin/users/{data['bob'].id}/disable'] button").click()
    answer_confirm(page)
    page.wait_for_selector("#flash-notice")
    assert "?" not in page.url
    page.reload()
    assert page.locator("#flash-notice").count() == 0

    # a new schedule: pick the type, then its own form; every error at once next to its field, values kept,
    # the next five runs as the cron is typed
    page.goto(base + "/admin/schedules")
    page.select_option("#s-target", "type:http.request")
    page.click("#pick-target-submit")
    page.wait_for_selector("#schedule-form")
    assert page.locator("#f-url").is_visible() and page.locator("#s-timezone").is_visible()
    page.fill("#s-name", "Nightly webhook")
    page.fill("#s-timezone", "Europe/Berlin")
    page.fill("#s-cron", "30 2 * * *")
    expect(page.locator("#fire-times li")).to_have_count(5)
    page.fill("#s-cron", "99 * * * *")
    page.fill("#f-url", "not a web address")
    page.click("#save-schedule")
    page.wait_for_selector("#form-errors")
    assert page.locator("#e-_cron").is_visible() and page.locator("#e-url").is_visible()
    assert page.input_value("#s-cron") == "99 * * * *" and page.input_value("#f-url") == "not a web address"
    assert (
        page.input_value("#s-name") == "Nightly webhook"
        and page.input_value("#s-timezone") == "Europe/Berlin"
    )
    page.screenshot(path=str(artifacts_dir / "console-schedule-form.png"), full_page=True)
    page.fill("#s-cron", "30 2 * * *")
    page.fill("#f-url", "https://hooks.example.com/nightly")
    page.click("#save-schedule")
    page.wait_for_selector("#schedules-table")
    assert "Nightly webhook" in page.inner_text("#schedules-table")
    # its edit form is the same form, filled in
    page.locator("#schedules-table a:has-text('Edit')").first.click()
    page.wait_for_selector("#schedule-form")
    assert page.input_value("#f-url") == "https://hooks.example.com/nightly"
    assert page.locator("#fire-times li").count() == 5

    phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    phone_watch = Watch(phone)
    sign_in(phone, base, "root@example.com")
    phone.goto(base + "/admin/jobs")
    phone.wait_for_selector("#count-queued")
    assert no_horizontal_scroll(phone)
    first = phone.locator("#admin-job-list tbody tr").first
    assert first.evaluate("el => getComputedStyle(el).display") == "grid"  # a card per job
    assert phone.locator("#admin-job-list thead").is_hidden()
    card = first.bounding_box()
    assert card["width"] <= 390 and card["height"] < 260, card
    shape = phone.locator(".owner", has_text=LONG_EMAIL).first.evaluate(ONE_LINE_JS)
    assert not shape["clipped"], shape
    first.scroll_into_view_if_needed()
    phone.screenshot(path=str(artifacts_dir / "console-admin-jobs-phone.png"), full_page=False)
    # the new-schedule form on a phone: one column, no sideways scrolling, errors next to their fields
    phone.goto(base + "/admin/schedules/new?target=type:http.request")
    phone.fill("#s-cron", "every day")
    phone.click("#save-schedule")
    phone.wait_for_selector("#form-errors")
    assert phone.locator("#e-_cron").is_visible() and phone.locator("#e-url").is_visible()
    assert no_horizontal_scroll(phone)
    phone.screenshot(path=str(artifacts_dir / "schedule-form-phone.png"), full_page=True)

    assert watch.alerts == [] and phone_watch.alerts == []  # no browser confirm() left, no payload ran
    assert watch.errors == [] and phone_watch.errors == [], watch.errors + phone_watch.errors
