"""Admin console actions through app.actions: every change made on the admin pages leaves exactly one
audit entry and one admin notice (``alert_outbox`` kind ``admin_action``); a refused one leaves its audit
entry and no notice; the actions refuse non-admins themselves; and no value typed into the schedule,
user or sign-in forms (huge numbers, deep nesting, NaN, NUL characters, lone surrogates, very long text,
out-of-range ids) answers 500."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text

import tests.support.forms  # noqa: F401  (registers test.form, …)
from app import server
from app.actions import controls as control_actions
from app.actions import schedules as schedule_actions
from app.actions import users as user_actions
from app.auth import CurrentUser
from app.db import create_engine
from app.errors import Conflict, Forbidden
from app.settings import Settings
from tests.support.jobsteps import failed_job
from tests.support.webkit import add_user, csrf_from


async def post(client: AsyncTestClient, path: str, data: dict[str, Any] | None = None) -> Any:
    data = dict(data or {})
    data.setdefault("_csrf_token", csrf_from((await client.get("/admin/users")).text))
    return await client.post(path, data=data, follow_redirects=False)


async def trail(pg: asyncpg.Connection) -> tuple[list[str], list[str]]:
    """The audit actions and the admin notices' actions, oldest first."""
    audits = [r["action"] for r in await pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    notices = [
        r["payload"]
        for r in await pg.fetch(
            "SELECT payload->>'action' AS payload FROM alert_outbox WHERE kind = 'admin_action' ORDER BY id"
        )
    ]
    return audits, notices


SCHEDULE = {
    "_name": "Nightly",
    "_cron": "0 3 * * *",
    "_timezone": "UTC",
    "_target": "type:test.form",
    "name": "Ann",
    "_enabled": "on",
}


async def test_each_control_and_schedule_change_writes_one_audit_entry_and_one_admin_notice(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    steps: list[tuple[str, dict[str, str], str]] = [
        ("/admin/controls/pause", {"type": "test.form"}, "job_type.pause"),
        ("/admin/controls/resume", {"type": "test.form"}, "job_type.resume"),
        ("/admin/controls/pause", {"type": "*"}, "job_type.pause"),
        ("/admin/controls/limits", {"type": "test.form", "max_running": "2"}, "job_type.limits"),
        ("/admin/schedules/new", SCHEDULE, "schedule.create"),
        ("/admin/schedules/{id}/disable", {}, "schedule.disable"),
        ("/admin/schedules/{id}/enable", {}, "schedule.enable"),
        ("/admin/schedules/{id}/delete", {}, "schedule.delete"),
    ]
    schedule_id = None
    for path, data, action in steps:
        before = await trail(pg)
        r = await post(client, path.format(id=schedule_id), data)
        assert r.status_code in (200, 303), (path, r.status_code, r.text[:500])
        audits, notices = await trail(pg)
        assert audits == [*before[0], action], path
        assert notices == [*before[1], action], path
        if schedule_id is None:
            schedule_id = await pg.fetchval("SELECT id FROM schedules")
    notice = await pg.fetchval(
        "SELECT payload FROM alert_outbox WHERE payload->>'action' = 'job_type.limits'"
    )
    assert '"admin": "root@example.com"' in notice
    assert '"targets": ["test.form"]' in notice
    # a refused change (a code-defined schedule cannot be deleted) leaves its refusal, and no notice
    await post(client, "/admin/schedules/new", SCHEDULE)
    await pg.execute("UPDATE schedules SET source = 'code'")
    before = await trail(pg)
    sid = await pg.fetchval("SELECT id FROM schedules")
    assert (await post(client, f"/admin/schedules/{sid}/delete")).status_code == 409
    assert await trail(pg) == ([*before[0], "schedule.delete"], before[1])


async def test_each_user_change_writes_one_audit_entry_and_one_notice_and_a_refusal_no_notice(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    steps: list[tuple[str, dict[str, str], str]] = [
        ("/admin/users", {"email": "ann@example.com", "password": "long enough pw"}, "user.create"),
        (f"/admin/users/{bob.id}/make-admin", {}, "user.make_admin"),
        (f"/admin/users/{bob.id}/revoke-admin", {}, "user.revoke_admin"),
        (f"/admin/users/{bob.id}/disable", {}, "user.disable"),
        (f"/admin/users/{bob.id}/enable", {}, "user.enable"),
        (f"/admin/users/{bob.id}/tokens", {"name": "ci"}, "token.create"),
        ("/admin/tokens/{token}/revoke", {}, "token.revoke"),
    ]
    for path, data, action in steps:
        if "{token}" in path:
            path = path.format(token=await pg.fetchval("SELECT id FROM api_tokens"))
        before = await trail(pg)
        r = await post(client, path, data)
        assert r.status_code in (200, 303), (path, r.status_code, r.text[:500])
        assert await trail(pg) == ([*before[0], action], [*before[1], action]), path
    before = await trail(pg)
    assert (await post(client, f"/admin/users/{admin.id}/disable")).status_code == 409
    audits, notices = await trail(pg)
    assert audits == [*before[0], "user.disable"]
    assert notices == before[1]
    assert await pg.fetchval("SELECT outcome FROM audit_log ORDER BY id DESC LIMIT 1") == (
        "refused: Nothing changed: you cannot disable your own account. Ask another admin."
    )


async def test_actions_refuse_a_non_admin_themselves(
    ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    """The API routes call the same actions: the admin check does not depend on the page's guard."""
    bob = await add_user(db_url, "bob@example.com")
    engine = create_engine(db_url, pool_size=1)
    calls = [
        lambda c: control_actions.pause(c, bob, "test.form"),
        lambda c: control_actions.set_limits(c, bob, "test.form", max_running=1, max_per_minute=None),
        lambda c: schedule_actions.create_schedule(
            c, bob, cron="* * * * *", job_type="test.form", input_data={"name": "x"}, settings=ui_settings
        ),
        lambda c: user_actions.create_user(c, bob, email="x@example.com", password="long enough pw"),
        lambda c: user_actions.set_admin(c, bob, bob.id, True),
        lambda c: user_actions.issue_token(c, bob, bob.id, "mine"),
    ]
    try:
        for call in calls:
            async with engine.begin() as conn:
                with pytest.raises(Forbidden):
                    await call(conn)
    finally:
        await engine.dispose()
    assert await trail(pg) == ([], [])
    assert await pg.fetchval("SELECT count(*) FROM job_type_controls") == 0


BAD_INPUT = [
    '{"name": ' + "9" * 5000 + "}",  # more digits than int() converts
    '{"name": -' + "1" * 4301 + "}",
    '{"name": ' + "[" * 5000 + "]" * 5000 + "}",  # deeper than the parser goes
    '{"a": ' * 3000 + "1" + "}" * 3000,
    '{"name": NaN}',
    '{"name": Infinity}',
    '{"name": 1e999}',
    '{"name": "\\ud800"}',  # a lone surrogate
    '{"name": "a\\u0000b"}',
    '{"name\\u0000": "x"}',
    '{"name": "' + "x" * 100_001 + '"}',
    "\x00",
    '{"name": "Ann"',
    "[]",
    "null",
    "1" * 5000,
]
"""Bad text in the schedule form's JSON control (``test.form``'s ``extra``, a ``dict[str, int]``)."""


@pytest.mark.parametrize("raw", BAD_INPUT, ids=range(len(BAD_INPUT)))
async def test_any_bad_input_json_in_the_schedule_form_is_a_form_error(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection, raw: str
) -> None:
    r = await post(client, "/admin/schedules/new", {**SCHEDULE, "extra": raw})
    assert r.status_code == 422, r.text[:1000]
    assert 'id="e-extra" class="field-error"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0


@pytest.mark.parametrize(
    "change",
    [
        {"_cron": "0 3 * * *\x00"},
        {"_cron": "1," * 5000 + "2 * * * *"},
        {"_timezone": "Europe/Berlin\x00"},
        {"_timezone": "a" * 300},
        {"_timezone": "../../etc/passwd"},
        {"_name": "x\x00y"},
        {"_name": "x" * 5000},
        {"_owner": "a\x00@example.com"},
        {"_owner": "x" * 5000},
        {"_target": "type:\x00"},
        {"_target": "template:" + "x" * 5000},
        {"name": "a\x00b"},
    ],
    ids=range(12),
)
async def test_any_bad_value_in_the_schedule_form_is_a_form_error(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection, change: dict[str, str]
) -> None:
    r = await post(client, "/admin/schedules/new", {**SCHEDULE, **change})
    assert r.status_code == 422, r.text[:1000]
    assert 'class="field-error"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0


async def test_nul_characters_and_huge_ids_in_user_and_sign_in_forms_are_not_server_errors(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    r = await post(client, "/admin/users", {"email": "a\x00@example.com", "password": "long enough pw"})
    assert r.status_code == 422
    assert 'id="e-email" class="field-error"' in r.text
    r = await post(client, f"/admin/users/{bob.id}/tokens", {"name": "c\x00i"})
    assert r.status_code == 422 and 'id="e-name" class="field-error">Contains a NUL character' in r.text
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == 0
    for path in ("/admin/users/99999999999/disable", "/admin/tokens/99999999999/revoke"):
        assert (await post(client, path)).status_code == 404, path
    for field in ("action", "user", "before"):
        r = await client.get(f"/admin/audit?{field}=a%00b")
        assert r.status_code == 422 and f"<strong>{field}</strong>: contains a NUL" in r.text, field
    client.cookies.clear()
    page = await client.get("/login")
    r = await client.post(
        "/login",
        data={"email": "bob\x00@example.com", "password": "x", "_csrf_token": csrf_from(page.text)},
        follow_redirects=False,
    )
    assert r.status_code == 422 and 'id="e-email" class="field-error">Contains a NUL' in r.text
    assert await pg.fetchval("SELECT count(*) FROM login_attempts WHERE email LIKE 'bob%'") == 0


async def test_a_value_the_database_cannot_hold_is_classified_as_bad_input(
    ui_settings: Settings, db_url: str
) -> None:
    """Whatever path lets such a value through, the answer is a 422 naming the problem, not a 500."""
    engine = create_engine(db_url, pool_size=1)
    errors = []
    try:
        for sql, value in (
            ("SELECT CAST(:v AS text)", "a\x00b"),
            ("SELECT CAST(:v AS text)", "\ud800"),
            ("SELECT 1 WHERE 1 = :v", 2**40),
        ):
            async with engine.connect() as conn:
                with pytest.raises(Exception) as caught:
                    await conn.execute(text(sql), {"v": value})
                errors.append(caught.value)
    finally:
        await engine.dispose()
    for exc in errors:
        status, detail, _errors, _headers = server._classify(exc, ui_settings)
        assert (status, detail) == (422, server.UNSTORABLE_MESSAGE), exc


@pytest.mark.parametrize("bad", ["abc", "3 jobs", "-1", "1e3", "0", "2001", "100000000000"])
async def test_an_expected_count_no_confirmation_shows_is_refused_not_read_as_no_cap(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: Any,
    ui_settings: Settings,
    pg: asyncpg.Connection,
    bad: str,
) -> None:
    """``expected`` (the count the confirmation showed) caps a bulk action; one that is not a whole
    number was read as none, so the action went over every matching job, however many had come since,
    and one out of the range a confirmation shows (0, over the bulk limit) was taken as it came."""
    for _ in range(2):
        await failed_job(engine, ui_settings, admin.id, "boom", type_="test.form")
    sent = [
        ("/admin/jobs/bulk", {"action": "retry", "scope": "filter", "status": "failed", "expected": bad}),
        ("/admin/failed/retry", {"type": "test.form", "signature": "boom", "expected": bad}),
    ]
    for url, data in sent:
        r = await post(client, url, data)
        assert r.status_code == 422, (url, r.status_code)
        assert "expected" in r.text and "go back and confirm again" in r.text, (url, r.text[:1000])
        assert "from 1 to 2,000" in r.text and "(field &#39;expected&#39;)" in r.text, (url, r.text[:1000])
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 2
    # each refusal is on the trail, and nothing was done
    outcomes = [r["outcome"] for r in await pg.fetch("SELECT outcome FROM audit_log")]
    assert len(outcomes) == 2 and all(o.startswith("refused: ") for o in outcomes), outcomes


async def test_a_checkbox_sent_with_a_value_no_box_sends_is_an_error_beside_it(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    r = await post(client, "/admin/users", {"email": "bob@example.com", "is_admin": "maybe"})
    assert r.status_code == 422
    assert 'id="e-is_admin" class="field-error">Tick the box or leave it empty.' in r.text
    assert 'value="bob@example.com"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM users WHERE email = 'bob@example.com'") == 0
    for box in ("_enabled", "_catch_up"):
        r = await post(client, "/admin/schedules/new", {**SCHEDULE, box: "maybe"})
        assert r.status_code == 422, box
        assert f'id="e-{box}" class="field-error">Tick the box or leave it empty.' in r.text, box
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    r = await post(client, "/admin/users", {"email": "bob@example.com", "is_admin": "on"})
    assert r.status_code == 200
    assert await pg.fetchval("SELECT is_admin FROM users WHERE email = 'bob@example.com'") is True


async def test_user_actions_take_an_actor_as_they_take_a_signed_in_user(
    db_url: str, pg: asyncpg.Connection
) -> None:
    """``set_active`` (and ``set_admin``, ``reset_password``) read ``actor.id``: given an
    :class:`~app.actions.trail.Actor`, as :func:`~app.actions.trail.acting` and ``require_admin`` take, they
    raised AttributeError; and an Actor holding a token's user passed the browser-session check."""
    from app.actions.trail import Actor

    root = await add_user(db_url, "root@example.com", admin=True)
    bob = await add_user(db_url, "bob@example.com")
    me = Actor(CurrentUser(root.id, root.email, True))
    by_token = Actor(CurrentUser(root.id, root.email, True, token_id=1))
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            assert await user_actions.set_active(conn, me, bob.id, False) == 0
        async with engine.begin() as conn:
            with pytest.raises(Conflict, match="your own account"):
                await user_actions.set_active(conn, me, root.id, False)
        async with engine.begin() as conn:
            with pytest.raises(Conflict, match="your own admin rights"):
                await user_actions.set_admin(conn, me, root.id, False)
        async with engine.begin() as conn:
            with pytest.raises(Forbidden):
                await user_actions.reset_password(conn, by_token, bob.id)
    finally:
        await engine.dispose()
    assert await pg.fetchval("SELECT is_active FROM users WHERE id = $1", bob.id) is False
