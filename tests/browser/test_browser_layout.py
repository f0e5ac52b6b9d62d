"""The frame of every page in headless Chromium, on a 390 px phone and on a desktop: the top bar is
compact (on a phone it was four rows, ~220 px, before any content) and keeps every way around — the
pages, the Admin menu (opening inside the screen), the bell, the account and "Sign out" — with nothing
sticking out sideways; the admin section tabs line up with the page's text (they sat 8 px to the left
and past the right edge). Screenshots go to ``tests/artifacts/layout-*.png``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from app.db import asyncpg_dsn
from tests.support.browser import BROWSER_MARKS, Watch, no_horizontal_scroll, sign_in
from tests.support.webkit import FORMS_ENV, add_token, add_user, running_server

pytestmark = BROWSER_MARKS

LONG_EMAIL = "someone.with.a.rather.long.address@example-company.com"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    asyncio.run(add_user(db_url, "root@example.com", admin=True))
    user = asyncio.run(add_user(db_url, LONG_EMAIL))
    asyncio.run(add_token(db_url, user.id))  # its table on /account
    with running_server(db_url, tmp_path / "data", **FORMS_ENV) as base:
        yield base


def signed_in(browser: Any, base: str, email: str, viewport: dict[str, int]) -> Any:
    phone = viewport["width"] < 500
    page = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone).new_page()
    sign_in(page, base, email)
    return page


def box(page: Any, selector: str) -> dict[str, float]:
    first = page.locator(selector).first
    # A poll's out-of-band swap can replace an element (the bell, when a notice came) as it is measured.
    with contextlib.suppress(PlaywrightTimeout):
        first.wait_for(state="visible", timeout=5_000)
    found = first.bounding_box()
    assert found is not None, f"{selector} is not shown"
    return dict(found)


def inside_screen(page: Any, selector: str) -> None:
    b = box(page, selector)
    width = page.evaluate("document.documentElement.clientWidth")
    assert b["x"] >= 0 and b["x"] + b["width"] <= width + 0.5, f"{selector} sticks out: {b}, screen {width}"


def check_top_bar(page: Any, admin: bool, max_height: float) -> None:
    height = box(page, ".site-header")["height"]
    assert height <= max_height, f"the top bar is {height:.0f} px tall"
    assert no_horizontal_scroll(page)
    links = [".site-header .brand", "#notif-bell", "#account-link", ".site-header button[type=submit]"]
    links += [f".site-header a[href='{href}']" for href in ("/", "/jobs", "/batches", "/approvals")]
    if admin:
        links.append(".site-header .admin-menu summary")
    for selector in links:
        inside_screen(page, selector)


def tabs_line_up(page: Any) -> None:
    tabs, heading = box(page, "nav.admin-tabs ul"), box(page, "main h1")
    assert abs(tabs["x"] - heading["x"]) <= 1, f"tabs start at {tabs['x']}, the heading at {heading['x']}"
    assert tabs["x"] + tabs["width"] <= heading["x"] + heading["width"] + 1
    first = box(page, "nav.admin-tabs li")
    assert abs(first["x"] - heading["x"]) <= 1


def test_top_bar_and_admin_tabs_on_a_phone_and_a_desktop(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    base = server
    for name, viewport, max_height in (("390", PHONE, 100), ("desktop", DESKTOP, 80)):
        page = signed_in(browser, base, "root@example.com", viewport)
        watch = Watch(page)
        for path in ("/", "/jobs", "/admin", "/admin/jobs"):
            page.goto(base + path)
            check_top_bar(page, admin=True, max_height=max_height)
            if path.startswith("/admin"):
                tabs_line_up(page)
        # /admin/jobs' filters two a row on a phone, not seven stacked before the first job
        assert box(page, "#af-status")["y"] == box(page, "#af-type")["y"]
        assert box(page, "#af-from")["y"] == box(page, "#af-to")["y"]
        page.goto(base + "/admin")
        # the chart's times apart (on a phone they touched and read "…03:146 Dec 2026, 03:44…")
        ticks = [box(page, f".chart-x li:nth-child({n}) time") for n in (1, 2, 3)]
        assert all(a["x"] + a["width"] + 4 <= b["x"] for a, b in zip(ticks, ticks[1:], strict=False)), ticks
        page.screenshot(path=str(artifacts_dir / f"layout-admin-{name}.png"))
        # the Admin menu opens inside the screen, every section reachable
        page.click(".site-header .admin-menu summary")
        for href in ("/admin", "/admin/jobs", "/admin/alerts"):
            inside_screen(page, f".admin-menu a[href='{href}']")
        page.screenshot(path=str(artifacts_dir / f"layout-admin-menu-{name}.png"))
        page.click(".admin-menu a[href='/admin/jobs']")
        page.wait_for_url(base + "/admin/jobs")
        assert not watch.errors and not watch.alerts
        page.context.close()

        # a long address shortens with "…" instead of pushing the bar onto more rows
        page = signed_in(browser, base, LONG_EMAIL, viewport)
        for path in ("/", "/jobs", "/account"):
            page.goto(base + path)
            check_top_bar(page, admin=False, max_height=max_height)
        page.screenshot(path=str(artifacts_dir / f"layout-user-{name}.png"))
        page.context.close()


# The width each visible field of a page leaves for its text, against its placeholder's width in the
# field's own font: a field narrower than its placeholder shows it cut off ("Token name (opti").
FIELDS_CUT = """() => {
  const ctx = document.createElement("canvas").getContext("2d");
  const out = [];
  for (const el of document.querySelectorAll("main input, main select, main textarea")) {
    const r = el.getBoundingClientRect();
    if (!r.width || el.type === "hidden" || el.type === "checkbox" || el.type === "radio") continue;
    const s = getComputedStyle(el);
    const room = el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
    ctx.font = s.font;
    const need = el.placeholder ? ctx.measureText(el.placeholder).width : 0;
    // a field in a table that scrolls sideways is reached by scrolling the table, not the page
    const sticksOut = !el.closest(".table-scroll") &&
      (r.left < 0 || r.right > document.documentElement.clientWidth + 0.5);
    if (need > room + 0.5 || sticksOut)
      out.push(`${el.id || el.name}: ${Math.round(need)} px of placeholder in ${Math.round(room)} px` +
               (sticksOut ? ", outside the screen" : ""));
  }
  return out;
}"""
ADMIN_FORMS = ("/admin/users", "/admin/schedules/new?target=type:test.form", "/admin/jobs", "/admin/audit")


def test_admin_form_fields_show_their_placeholders_whole_on_a_desktop_and_a_phone(
    server: str, browser: Any, artifacts_dir: Path
) -> None:
    """/admin/users' token name field showed "Token name (opti" at 1280 px; every admin form's fields
    are wide enough for their placeholders and inside the screen, on a desktop and on a phone."""
    base = server
    cut: dict[str, list[str]] = {}
    for name, viewport in (("390", PHONE), ("desktop", DESKTOP)):
        page = signed_in(browser, base, "root@example.com", viewport)
        watch = Watch(page)
        for path in ADMIN_FORMS:
            page.goto(base + path)
            found = page.evaluate(FIELDS_CUT)
            if found:
                cut[f"{path} at {name}"] = found
            shot = path.strip("/").split("?")[0].replace("/", "-")
            page.screenshot(path=str(artifacts_dir / f"layout-{shot}-{name}.png"), full_page=True)
        assert not watch.errors
        page.context.close()
    assert cut == {}


def _batch_with_every_state(db_url: str, base: str, token: str) -> None:
    """A batch with a long name whose rows are done, failed, cancelled and waiting to try again: the
    widest "Recent batches" row My jobs can show."""
    rows = [{"url": f"{base}/healthz?row={i}"} for i in range(4)]
    name = "Quarterly supplier price checks for the northern region warehouses"
    r = httpx.post(
        base + "/api/batches",
        json={"type": "http.request", "name": name, "rows": rows},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 201, r.text

    async def states() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            await conn.execute(
                """
                UPDATE jobs SET status = s.status, attempts = 1, error_message = 'connection refused',
                       completed_at = CASE WHEN s.status = 'queued' THEN NULL ELSE now() END
                FROM (SELECT id, (ARRAY['completed', 'failed', 'cancelled', 'queued'])[row_number() OVER (ORDER BY id)]
                             AS status FROM jobs) s
                WHERE jobs.id = s.id
                """
            )
        finally:
            await conn.close()

    asyncio.run(states())


@pytest.fixture
def batch_server(db_url: str, tmp_path: Path) -> Iterator[str]:
    """``jobdesk serve`` (no worker) with Ann's batch of every state; made on another thread, since a
    browser test's own thread runs Playwright's event loop."""

    def users() -> str:
        user = asyncio.run(add_user(db_url, "ann@example.com"))
        return asyncio.run(add_token(db_url, user.id))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        token = pool.submit(users).result()
        with running_server(db_url, tmp_path / "data", **FORMS_ENV) as base:
            pool.submit(_batch_with_every_state, db_url, base, token).result()
            yield base


def test_recent_batches_on_my_jobs_fit_a_phone(batch_server: str, browser: Any, artifacts_dir: Path) -> None:
    base = batch_server
    for name, viewport in (("390", PHONE), ("desktop", DESKTOP)):
        page = signed_in(browser, base, "ann@example.com", viewport)
        page.goto(base + "/jobs")
        page.wait_for_selector("#my-batches .batch-row")
        page.screenshot(path=str(artifacts_dir / f"layout-my-batches-{name}.png"), full_page=True)
        assert no_horizontal_scroll(page), f"/jobs scrolls sideways at {name}"
        cut = page.evaluate(
            "[...document.querySelectorAll('#my-batches .table-scroll')]"
            ".filter(el => el.scrollWidth > el.clientWidth + 0.5).length"
        )
        assert cut == 0, f"the Recent batches table is cut off at {name} and scrolls sideways"
        for selector in ("#my-batches .batch-row a", "#my-batches .batch-row .status", "#all-batches"):
            inside_screen(page, selector)
        page.context.close()


def test_the_admin_menu_shows_keyboard_focus(server: str, browser: Any) -> None:
    # Pico takes the outline off a dropdown's summary and puts a ring in its box-shadow, which the top
    # bar removes so that "Admin" reads as a link: reached with Tab, nothing showed where focus was
    page = signed_in(browser, server, "root@example.com", DESKTOP)
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.matches('.admin-menu summary')"):
            break
    else:
        raise AssertionError("Tab never reached the Admin menu")
    ring = page.evaluate(
        "(() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, parseFloat(s.outlineWidth), s.boxShadow]; })()"
    )
    assert ring[0] != "none" and ring[1] >= 2, f"no visible focus on the Admin menu: {ring}"
    page.context.close()


def test_a_long_unbroken_name_wraps_in_my_jobs(server: str, browser: Any) -> None:
    # a name of 200 letters without a space (a pasted token, a file name): the "What" cell was as wide as
    # the name, and the status and the time went off the page into the table's sideways scroll
    page = signed_in(browser, server, LONG_EMAIL, DESKTOP)
    page.goto(server + "/jobs/new/http.request")
    page.fill("#f-url", "https://example.com/")
    page.fill("#f-_title", "x" * 200)
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(server + "/jobs/*")
    page.goto(server + "/jobs")
    page.wait_for_selector("#job-list .job-table")
    cut = page.evaluate(
        "(() => { const el = document.querySelector('#job-list .table-scroll');"
        " return el.scrollWidth > el.clientWidth + 0.5; })()"
    )
    assert not cut, "My jobs scrolls sideways for a long name"
    inside_screen(page, "#job-list .job-table td:nth-child(2)")
    page.context.close()


def test_a_too_long_paste_reaches_the_server_and_gets_the_field_error(server: str, browser: Any) -> None:
    # a field's maxlength cut a pasted 270-character title to 200 without a word, so the server's rule
    # (refused with the limit and the count, never cut) never saw the extra
    page = signed_in(browser, server, LONG_EMAIL, DESKTOP)
    page.goto(server + "/jobs/new/http.request")
    page.fill("#f-url", "https://example.com/")
    page.focus("#f-_title")
    page.keyboard.insert_text("y" * 270)  # as a paste: typed text is what a maxlength cuts
    assert len(page.input_value("#f-_title")) == 270, "the browser cut the pasted title"
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_selector("#e-_title")
    error = page.inner_text("#e-_title")
    assert "200" in error and "270" in error, error
    assert len(page.input_value("#f-_title")) == 270, "the form shown again lost the extra"
    page.context.close()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_clear_stands_level_with_show_in_every_filter_form(
    server: str, browser: Any, viewport: dict[str, int]
) -> None:
    # "Clear" is a link drawn as a button; the row's stretch made it 20 px taller than "Show" beside it,
    # its word at the top of an empty box (My jobs, /admin/jobs and the audit trail)
    page = signed_in(browser, server, "root@example.com", viewport)
    for path in ("/jobs?q=x", "/admin/jobs?status=failed", "/admin/audit?action=user.create"):
        page.goto(server + path)
        show = box(page, "form.filters .filter-buttons button[type=submit]")
        clear = box(page, "form.filters .filter-buttons a[role=button]")
        assert abs(clear["y"] - show["y"]) <= 1 and abs(clear["height"] - show["height"]) <= 1, (
            f"{path}: Show is {show['height']:.0f} px tall at {show['y']:.0f}, "
            f"Clear {clear['height']:.0f} px at {clear['y']:.0f}"
        )
    page.context.close()


def test_a_fields_character_limit_stays_grey_beside_its_error(server: str, browser: Any) -> None:
    # Pico paints the <small> right after an invalid field red: under an empty required message, "Up to
    # 200,000 characters." stood in red above "Fill this in.", read as a second error
    page = signed_in(browser, server, LONG_EMAIL, DESKTOP)
    page.goto(server + "/jobs/new/email.send")
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_selector("#e-body")
    colour = "(s => getComputedStyle(document.querySelector(s)).color)"
    assert page.evaluate(f"{colour}('#l-body')") == page.evaluate(f"{colour}('#h-body')"), (
        "the limit is not in the help's grey: " + page.evaluate(f"{colour}('#l-body')")
    )
    assert page.evaluate(f"{colour}('#l-body')") != page.evaluate(f"{colour}('#e-body')")
    said = (page.get_attribute("#f-body", "aria-describedby") or "").split()
    assert said == ["h-body", "l-body", "e-body"], said  # a screen reader hears the limit too
    page.context.close()


def test_a_long_key_in_a_jobs_input_wraps_on_a_phone(server: str, browser: Any) -> None:
    # a one-column row grew to its longest unbroken word: a 100-letter key in "Extra settings" made it
    # 1,066 px wide on a 390 px phone, the key and its value cut off by the page's edge (which the page's
    # own overflow hides, so nothing scrolled sideways to show it)
    key = "k" * 100
    page = signed_in(browser, server, LONG_EMAIL, PHONE)
    page.goto(server + "/jobs/new/test.form")
    page.fill("#f-name", "Ann")
    page.fill("#f-extra", json.dumps({key: 5}))
    page.locator("main form button[type=submit]").last.click()
    page.wait_for_url(server + "/jobs/*")
    row = ".input dl.fields dl.fields .field-row"
    assert key.capitalize() in page.inner_text(row)
    inside_screen(page, row)
    inside_screen(page, row + " dd")
    assert page.evaluate("document.body.scrollWidth <= document.documentElement.clientWidth")
    page.context.close()
