"""The forms that act on what is already there — approve and reject (with a reason) on the job, pipeline
and approval pages and in the admin's job list, reschedule, the bulk confirmations, pause, the e-mail
choice, "Mark as read", a schedule's edit form — answer text that cannot be stored (a NUL, a lone
surrogate, bytes that are not UTF-8) through the same rule as the forms of test_form_unstorable_text
(:func:`app.web.input_guard.problems_beside`): the page or part the person came from again, 422, the
error beside the field (or, for a hidden field or a button's value, at the top of the small form), what
was typed kept, and nothing done. They were a bare 422 page.

Every POST page route is either such a form, driven here or in test_form_unstorable_text, or posts no
field but its CSRF token; a form route added without the rule fails
:func:`test_every_post_page_route_shows_its_own_errors_or_reads_no_field`."""

from __future__ import annotations

import html
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form and test.approval)
from app import pipelines
from app.server import create_app
from app.settings import Settings
from app.web.input_guard import FORM_CHECKED
from tests.support.jobsteps import claim, enqueue, failed_job, finish
from tests.support.webkit import HX, csrf_from, sign_in_as
from tests.web.test_form_unstorable_text import UNSTORABLE, URLENCODED, _body


@dataclass
class World:
    client: AsyncTestClient
    waiting: str  # a job waiting for approval
    step: str  # a pipeline's step waiting for approval
    later: str  # a job scheduled for tomorrow
    failed: str  # a failed job (error "boom"); its owner (the admin) has a notification of it


@pytest.fixture
async def world(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> World:
    boss = await sign_in_as(client, db_url, "boss@example.com", admin=True)
    waiting = await enqueue(engine, ui_settings, boss.id, "noop", input_data={}, requires_approval=True)
    await claim(engine, waiting)
    await finish(engine, ui_settings, waiting, "completed", result={"ok": True})
    async with engine.begin() as conn:
        p = await pipelines.create_from_template(
            conn, "test.approval", {"title": "T"}, user_id=boss.id, settings=ui_settings
        )
    step = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'draft'", p["id"])
    await claim(engine, step)
    await finish(engine, ui_settings, step, "completed", result={"draft": "text"})
    failed = await failed_job(engine, ui_settings, boss.id, "boom", type_="noop", input_data={})
    later = await enqueue(
        engine, ui_settings, boss.id, "noop", input_data={}, run_at=datetime.now(UTC) + timedelta(days=1)
    )
    assert await pg.fetchval("SELECT count(*) FROM notifications WHERE read_at IS NULL") >= 1
    return World(client, str(waiting), str(step), str(later), str(failed))


Setup = Callable[[World], Awaitable[tuple[str, dict[str, str]]]]
NOTICE = "notice"
"""Where a hidden field's or a button's problem shows: the answer's error notice, above the form."""


@dataclass
class Case:
    """One form: its route (the handler's name); where it is posted and its fields as typed (``setup``);
    a text of the page or part the answer must be (not the bare error page); the fields corrupted in
    turn; where each one's error shows (an element id, ``{id}`` the form's job, or :data:`NOTICE`); and
    for a bad field a text of the answer that shows what was typed."""

    route: str
    setup: Setup
    part: str
    shown: dict[str, str]
    kept: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


async def _page(w: World, path: str) -> str:
    return csrf_from((await w.client.get(path)).text)


def _on(path: str, **fields: str) -> Callable[[Setup], Setup]:
    """A setup: the CSRF token from ``path`` (``{waiting}`` etc. filled from the world), then ``fields``."""

    def wrap(url_of: Setup) -> Setup:
        async def setup(w: World) -> tuple[str, dict[str, str]]:
            token = await _page(w, path.format(**vars(w)))
            url, extra = await url_of(w)
            return url, {"_csrf_token": token, **fields, **extra}

        return setup

    return wrap


async def _reject(w: World) -> tuple[str, dict[str, str]]:
    return f"/jobs/{w.waiting}/reject", {"reason": "The figures are wrong"}


async def _approve_step(w: World) -> tuple[str, dict[str, str]]:
    return f"/jobs/{w.step}/approve", {"view": "pipeline"}


async def _reject_step(w: World) -> tuple[str, dict[str, str]]:
    return f"/jobs/{w.step}/reject", {"view": "pipeline", "reason": "The figures are wrong"}


async def _reschedule(w: World) -> tuple[str, dict[str, str]]:
    return f"/jobs/{w.later}/reschedule", {"date": "2099-01-02", "time": "09:30", "tz": "Europe/Berlin"}


async def _row_reject(w: World) -> tuple[str, dict[str, str]]:
    return f"/admin/jobs/{w.waiting}/reject", {"reason": "The figures are wrong"}


async def _decide(w: World) -> tuple[str, dict[str, str]]:
    return f"/approvals/{w.waiting}/reject", {"reason": "The figures are wrong"}


async def _decide_approve(w: World) -> tuple[str, dict[str, str]]:
    return f"/approvals/{w.waiting}/approve", {"comment": "Checked twice"}


async def _bulk_confirm(w: World) -> tuple[str, dict[str, str]]:
    return "/admin/jobs/bulk/confirm", {"action": "retry", "scope": "selected", "ids": w.failed}


async def _bulk(w: World) -> tuple[str, dict[str, str]]:
    return "/admin/jobs/bulk", {"action": "retry", "scope": "selected", "ids": w.failed, "expected": "1"}


async def _group(w: World) -> tuple[str, dict[str, str]]:
    page = (await w.client.get("/admin/failed")).text
    hidden = dict(re.findall(r'<input type="hidden" name="(type|signature)" value="([^"]*)"', page))
    return "/admin/failed/retry/confirm", {k: html.unescape(v) for k, v in hidden.items()}


async def _group_retry(w: World) -> tuple[str, dict[str, str]]:
    _, fields = await _group(w)
    return "/admin/failed/retry", {**fields, "expected": "1"}


async def _pause(w: World) -> tuple[str, dict[str, str]]:
    return "/admin/controls/pause", {"type": "noop"}


async def _email(w: World) -> tuple[str, dict[str, str]]:
    return "/notifications/email", {"email": "on", "next": "/account"}


async def _read(w: World) -> tuple[str, dict[str, str]]:
    page = (await w.client.get("/notifications")).text
    nid = re.search(r'name="id" value="(\d+)"', page).group(1)  # type: ignore[union-attr]
    return "/notifications/read", {"id": nid, "all": ""}


async def _schedule_edit(w: World) -> tuple[str, dict[str, str]]:
    token = await _page(w, "/admin/schedules/new?target=type:test.form")
    fields = {"_target": "type:test.form", "_cron": "0 9 * * *", "_timezone": "UTC", "_name": "Daily"}
    fields["name"] = "Ann"
    made = await w.client.post("/admin/schedules/new", data={"_csrf_token": token, **fields})
    assert made.status_code == 200, made.text[:500]
    listing = (await w.client.get("/admin/schedules")).text
    sid = re.search(r'href="/admin/schedules/([^/"]+)/edit"', listing).group(1)  # type: ignore[union-attr]
    return f"/admin/schedules/{sid}/edit", {"_cron": "0 9 * * *", "_timezone": "UTC", "name": "Ann"}


REASON_KEPT = {"reason": 'The figures are wrong"'}
JOB_PART = '<article id="job-status"'
RESCHEDULE_KEPT = {"date": 'value="09:30"', "time": 'value="2099-01-02"', "tz": 'value="2099-01-02"'}
CASES = {
    "job page's reject": Case(
        "jobs.action",
        _on("/jobs/{waiting}")(_reject),
        JOB_PART,
        {"reason": "e-reject-{id}-reason"},
        REASON_KEPT,
        HX,
    ),
    "pipeline page's approve (a hidden field)": Case(
        "jobs.action", _on("/pipelines")(_approve_step), JOB_PART, {"view": NOTICE}
    ),
    "pipeline page's reject": Case(
        "jobs.action",
        _on("/pipelines")(_reject_step),
        '<article id="pipeline-status"',
        {"reason": "e-reject-{id}-reason"},
        REASON_KEPT,
        HX,
    ),
    "reschedule": Case(
        "jobs.reschedule",
        _on("/jobs/{later}")(_reschedule),
        JOB_PART,
        dict.fromkeys(("date", "time", "tz"), "e-reschedule-{id}"),
        RESCHEDULE_KEPT,
        HX,
    ),
    "admin row's reject": Case(
        "admin.jobs.action",
        _on("/admin/jobs")(_row_reject),
        '<tr id="row-{id}"',
        {"reason": "e-reject-{id}-reason"},
        REASON_KEPT,
        HX,
    ),
    "approval page's reject": Case(
        "approvals.decide",
        _on("/approvals/{waiting}")(_decide),
        "<h2>Your decision</h2>",
        {"reason": "e-reason"},
        REASON_KEPT,
    ),
    "approval page's approve with a comment": Case(
        "approvals.decide",
        _on("/approvals/{waiting}")(_decide_approve),
        "<h2>Your decision</h2>",
        {"comment": "e-comment"},
        {"comment": 'Checked twice"'},
    ),
    "approvals list row's reject": Case(
        "approvals.decide",
        _on("/admin/approvals")(_decide),
        '<article class="approval-row" id="approval-{id}"',
        {"reason": "e-reason-{id}"},
        REASON_KEPT,
        {**HX, "HX-Target": "approval-{id}"},
    ),
    "bulk confirm": Case(
        "admin.jobs.bulk_confirm",
        _on("/admin/jobs")(_bulk_confirm),
        'class="bulk-result"',
        dict.fromkeys(("action", "scope", "ids"), NOTICE),
        headers=HX,
    ),
    "bulk (page)": Case(
        "admin.jobs.bulk",
        _on("/admin/jobs")(_bulk),
        '<div id="bulk-panel">',
        dict.fromkeys(("ids", "expected"), NOTICE),
    ),
    "failed group's confirm": Case(
        "admin.failed.confirm",
        _on("/admin/failed")(_group),
        'class="bulk-result"',
        dict.fromkeys(("type", "signature"), NOTICE),
        headers=HX,
    ),
    "failed group's retry": Case(
        "admin.failed.retry",
        _on("/admin/failed")(_group_retry),
        'class="bulk-result"',
        dict.fromkeys(("type", "expected"), NOTICE),
        headers=HX,
    ),
    "pause": Case(
        "admin.controls.pause", _on("/admin")(_pause), 'id="admin-controls"', {"type": NOTICE}, headers=HX
    ),
    "e-mail choice": Case(
        "notifications.email",
        _on("/account")(_email),
        'id="email-choice-form"',
        dict.fromkeys(("email", "next"), "e-email"),
    ),
    "mark as read": Case(
        "notifications.read",
        _on("/notifications")(_read),
        "<h1>Notifications</h1>",
        dict.fromkeys(("id", "all"), "e-read"),
    ),
    "schedule's edit form": Case(
        "admin.schedules.save",
        _on("/admin/schedules")(_schedule_edit),
        "<h1>Edit “Daily”</h1>",
        {"_cron": "e-_cron", "_timezone": "e-_timezone", "name": "e-name"},
        {"_cron": 'value="Ann"'},
    ),
}

STATE = """SELECT (SELECT count(*) FROM audit_log WHERE outcome NOT LIKE 'refused: %'),
    (SELECT string_agg(id::text || status || coalesce(run_at::text, ''), ',' ORDER BY id) FROM jobs),
    (SELECT count(*) FROM notifications WHERE read_at IS NOT NULL),
    (SELECT string_agg(email_notifications::text, ',' ORDER BY id) FROM users),
    (SELECT count(*) FROM job_type_controls), (SELECT count(*) FROM job_approvals),
    (SELECT string_agg(name || cron, ',') FROM schedules)"""
"""What any of these forms would change."""


def _shown(page: str, where: str) -> str:
    if where == NOTICE:
        found = re.search(r'class="notice notice-error"[^>]*>([^<]*)<', page)
    else:
        found = re.search(rf'id="{re.escape(where)}"[^>]*>([^<]*)<', page)
    return html.unescape(found.group(1)) if found else ""


@pytest.mark.parametrize("kind", list(UNSTORABLE))
@pytest.mark.parametrize("name", list(CASES))
async def test_unstorable_text_in_an_action_form_is_an_error_on_the_form(
    world: World, pg: asyncpg.Connection, name: str, kind: str
) -> None:
    case = CASES[name]
    raw, words = UNSTORABLE[kind]
    url, fields = await case.setup(world)
    job = m.group() if (m := re.search(r"[0-9a-f]{8}-[0-9a-f-]{27}", url)) else ""
    headers = {k: v.format(id=job) for k, v in {**URLENCODED, **case.headers}.items()}
    before = await pg.fetchrow(STATE)
    for bad, where in case.shown.items():
        sent = await world.client.post(
            url, content=_body(fields, bad, raw), headers=headers, follow_redirects=False
        )
        assert sent.status_code == 422, (bad, sent.status_code, sent.text[:300])
        assert case.part.format(id=job) in sent.text, (bad, sent.text[:1000])
        target = where.format(id=job)
        shown = _shown(sent.text, target)
        assert words.lower() in shown.lower(), (bad, shown, sent.text[:5000])
        if f'id="{target}" class="field-error"' in sent.text:  # said beside the field, not again above it
            assert words.lower() not in _shown(sent.text, NOTICE).lower(), (bad, sent.text[:5000])
        if bad in case.kept:
            assert case.kept[bad] in sent.text, (bad, case.kept[bad], sent.text[:5000])
    assert await pg.fetchrow(STATE) == before  # nothing was done


async def test_a_date_or_a_checkbox_value_that_is_not_one_is_an_error_on_its_form(
    world: World, pg: asyncpg.Connection
) -> None:
    url, moved = await _on("/jobs/{later}")(_reschedule)(world)
    before = await pg.fetchrow(STATE)
    sent = await world.client.post(url, data={**moved, "date": "2099-02-31"}, headers=HX)
    assert sent.status_code == 422, sent.text[:300]
    assert _shown(sent.text, f"e-reschedule-{world.later}"), sent.text[:5000]
    assert 'value="2099-02-31"' in sent.text and 'value="09:30"' in sent.text
    # shown as answered, not as htmx kept it (hx-preserve)
    assert f'<details class="reschedule" id="reschedule-{world.later}" open>' in sent.text
    url, fields = await _on("/account")(_email)(world)
    sent = await world.client.post(url, data={**fields, "email": "maybe"})
    assert sent.status_code == 422 and "<h1>Your account</h1>" in sent.text, sent.text[:300]
    assert "tick the box or leave it empty" in _shown(sent.text, "e-email").lower(), sent.text[:5000]
    assert 'name="next" value="/account"' in sent.text
    # a form the answer no longer shows (the job moved on): its error in the notice, not lost
    sent = await world.client.post(
        f"/jobs/{world.failed}/reschedule", data={**moved, "date": "a\x00"}, headers=HX
    )
    assert sent.status_code == 422 and "NUL character" in _shown(sent.text, NOTICE), sent.text[:3000]
    assert await pg.fetchrow(STATE) == before


# --- every POST page route ---------------------------------------------------------------------------

DRIVEN_IN_TEST_FORM_UNSTORABLE_TEXT = {
    "jobs.create",
    "pipelines.create",
    "batches.create",
    "admin.schedules.create",
    "admin.users.create",
    "admin.users.token",
    "admin.controls.limits",
    "auth.login_submit",
    "account.password",
    "account.timezone",
    "account.theme",
    "account.tokens.create",
}
READS_NO_FIELD = {
    "auth.logout",
    "account.tokens.revoke",
    "admin.users.action",
    "admin.users.reset_password",
    "admin.users.held",
    "admin.tokens.revoke",
    "admin.schedules.enable",
    "admin.schedules.delete",
    "admin.alerts.test",
    "pipelines.cancel",
    "batches.retry_failed",
}
"""Buttons whose form posts only the CSRF token: a field sent to them anyway is the input guard's 422."""


def test_every_post_page_route_shows_its_own_errors_or_reads_no_field(make_settings: Any) -> None:
    app = create_app(make_settings(worker_enabled=False))
    handlers: dict[str, Any] = {}
    for route in app.routes:
        if route.path.startswith("/api/"):
            continue
        for handler in getattr(route, "route_handlers", []):
            if "POST" in handler.http_methods:
                handlers[handler.name] = handler
    driven = DRIVEN_IN_TEST_FORM_UNSTORABLE_TEXT | {case.route for case in CASES.values()}
    assert driven | READS_NO_FIELD <= set(handlers), (driven | READS_NO_FIELD) - set(handlers)
    for name, handler in sorted(handlers.items()):
        if name in READS_NO_FIELD:
            assert not handler.opt.get(FORM_CHECKED), name
            assert ".form(" not in inspect.getsource(handler.fn), f"{name} reads its form: give it the rule"
            continue
        assert handler.opt.get(FORM_CHECKED), f"{name} takes a form without FORM_CHECKED (input_guard)"
        assert name in driven, f"{name}: no test posts unstorable text in each of its fields"
