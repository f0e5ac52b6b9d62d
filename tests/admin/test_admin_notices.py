"""Notices after admin actions come from the action only (a signed, session-bound cookie read once, never
the query string); the audit trail shows bulk outcomes as worked and details as fields; the alerts page
says when no channel is configured; the limits form keeps what was typed next to its error."""

from __future__ import annotations

import re

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, …)
from app.auth import CurrentUser
from app.web.flash import COOKIE
from tests.admin.test_admin import post
from tests.support.webkit import HX, add_user, switch_to


async def test_a_notice_is_shown_once_and_never_taken_from_the_address(
    client: AsyncTestClient, admin: CurrentUser, db_url: str
) -> None:
    r = await client.get("/admin?done=All+jobs+deleted&notice=All+jobs+deleted")
    assert r.status_code == 200 and "All jobs deleted" not in r.text and 'id="flash-notice"' not in r.text

    r = await post(client, "/admin/controls/pause", {"type": "test.form"})  # a plain form post
    assert r.status_code == 303 and r.headers["location"] == "/admin"
    carried = client.cookies.get(COOKIE)
    assert carried
    page = (await client.get("/admin")).text
    assert 'id="flash-notice"' in page and "Paused test.form." in page
    assert 'id="flash-notice"' not in (await client.get("/admin")).text  # once

    # an edited cookie, or one made for another session, shows nothing
    body, sig = carried.rsplit(".", 1)
    client.cookies.set(COOKIE, body[:-2] + "xx." + sig)
    assert 'id="flash-notice"' not in (await client.get("/admin")).text
    await add_user(db_url, "other@example.com", admin=True)
    await switch_to(client, "other@example.com")
    client.cookies.set(COOKIE, carried)
    assert 'id="flash-notice"' not in (await client.get("/admin")).text


async def test_audit_shows_bulk_outcomes_as_worked_and_details_as_fields(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    await pg.execute(
        "INSERT INTO audit_log (user_email, action, target_type, target_ids, count, outcome, detail) VALUES "
        "('root@example.com', 'jobs.bulk_cancel', 'job', '[]', 2, '2 done, 0 skipped', "
        """'{"filter": {"status": "queued", "type": "noop"}, "skipped": 0}'),"""
        "('root@example.com', 'job.cancel', 'job', '[]', 1, 'refused: it had finished', NULL)"
    )
    page = (await client.get("/admin/audit")).text
    assert '<span class="badge badge-ok">2 done, 0 skipped</span>' in page
    assert '<span class="badge badge-refused">refused: it had finished</span>' in page
    assert "<dt>filter status</dt><dd>queued</dd>" in page and "<dt>skipped</dt><dd>0</dd>" in page
    assert "{&#34;filter" not in page and '{"filter' not in page


async def test_alerts_without_a_channel_count_nothing_waiting(
    client: AsyncTestClient, admin: CurrentUser
) -> None:
    page = (await client.get("/admin/alerts")).text
    assert "no channel configured" in page and "Waiting to be sent or retried" not in page


async def test_limits_form_keeps_what_was_typed(client: AsyncTestClient, admin: CurrentUser) -> None:
    r = await post(
        client,
        "/admin/controls/limits",
        {"type": "test.form", "max_running": "7x", "max_per_minute": "12"},
        headers=HX,
    )
    assert r.status_code == 422
    assert 'value="7x"' in r.text and 'value="12"' in r.text


async def test_limits_form_keeps_the_typed_per_person_limit_not_the_stored_one(
    client: AsyncTestClient, admin: CurrentUser
) -> None:
    saved = {"type": "test.form", "max_running": "", "max_per_minute": "", "max_running_per_user": "4"}
    assert (await post(client, "/admin/controls/limits", saved, headers=HX)).status_code == 200
    typed = {**saved, "max_running": "7x", "max_running_per_user": "9"}
    r = await post(client, "/admin/controls/limits", typed, headers=HX)
    assert r.status_code == 422
    shown = re.findall(r'name="max_running_per_user"[^>]*value="([^"]*)"', r.text)
    assert "9" in shown and "4" not in shown, shown


async def test_resume_of_a_type_that_is_not_paused_says_so(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    r = await post(client, "/admin/controls/resume", {"type": "test.form"}, headers=HX)
    assert r.status_code == 409 and "test.form is not paused" in r.text
    # a refusal: on record as refused, with no notice
    outcomes = await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'job_type.resume'")
    assert [r["outcome"] for r in outcomes] == ["refused: Nothing changed: test.form is not paused."]
    assert await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'") == 0


async def test_no_page_takes_a_notice_from_its_address(client: AsyncTestClient, admin: CurrentUser) -> None:
    r = await post(client, "/jobs/new/test.form", {"name": "Ann"})
    assert r.status_code == 303, r.text
    job = r.headers["location"].rsplit("/", 1)[1]
    fake = "Your+files+were+deleted"
    for path in (f"/jobs/{job}", "/account", "/jobs", "/admin/users", "/admin/schedules", "/admin/jobs"):
        r = await client.get(f"{path}?done={fake}&notice={fake}")
        assert r.status_code == 200, path
        assert "Your files were deleted" not in r.text, path


async def test_a_notice_cookie_with_characters_no_signature_has_is_ignored_on_every_page(
    client: AsyncTestClient, admin: CurrentUser
) -> None:
    """Any site on the same host name can set the notice cookie (cookies ignore the port): one whose
    signature held a non-ASCII character made every full page a 500, signed in or not, until it was
    gone. It is ignored like any forged notice, and cleared."""
    signed_in = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
    for value in ("x.\u00e9", "\u00e9.\u00e9\u00e9", "eyJtIjoiaGkifQ.\u00ff"):
        for path, cookies in (
            ("/admin", signed_in),
            ("/jobs", signed_in),
            ("/account", signed_in),
            ("/login", ""),
        ):
            header = f"{cookies}; {COOKIE}={value}".lstrip("; ").encode()  # as a browser sends it: UTF-8
            r = await client.get(path, headers={"Cookie": header}, follow_redirects=False)
            assert r.status_code == 200, (value, path, r.status_code)
            assert 'id="flash-notice"' not in r.text
