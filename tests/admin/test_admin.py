"""The admin console pages: ``/admin`` (workers and queue health,
pause/resume and limits), ``/admin/audit``, ``/admin/users``, ``/admin/schedules``, the job page's
"Reschedule", the "Paused by …" banner, and the admin nav. Access (admin / other user / signed out),
POST-only and CSRF on every action; form errors; the C17 EXPLAIN check of the health poll."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, …)
from app import server
from app.auth import CurrentUser
from app.db import create_engine
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from app.web.admin.health import HEALTH_QUERIES
from tests.support.webkit import HX, add_token, add_user, app_client, csrf_from, login

PAGES = ("/admin", "/admin/health", "/admin/audit", "/admin/users", "/admin/schedules")


async def as_user(client: AsyncTestClient, email: str) -> None:
    client.cookies.clear()
    r = await login(client, email)
    assert r.status_code == 303, r.text


async def post(client: AsyncTestClient, path: str, data: dict[str, Any] | None = None, **kw: Any) -> Any:
    data = dict(data or {})
    data.setdefault("_csrf_token", csrf_from((await client.get("/jobs")).text))
    return await client.post(path, data=data, follow_redirects=False, **kw)


async def enqueue(settings: Settings, user_id: int, type_: str = "test.form", **kw: Any) -> Any:
    engine = create_engine(settings.database_url or "", pool_size=1)
    try:
        async with engine.begin() as conn:
            res = await queue.enqueue(
                conn, NewJob(type=type_, input_data={"name": "Ann"}, user_id=user_id, **kw), settings
            )
        return res.job["id"]
    finally:
        await engine.dispose()


def actions(admin_id: int, other_id: int) -> list[tuple[str, dict[str, str]]]:
    return [
        ("/admin/controls/pause", {"type": "test.form"}),
        ("/admin/controls/resume", {"type": "test.form"}),
        ("/admin/controls/limits", {"type": "test.form", "max_running": "2"}),
        ("/admin/users", {"email": "new@example.com", "password": "long enough pw"}),
        (f"/admin/users/{other_id}/make-admin", {}),
        (
            f"/admin/users/{other_id}/tokens",
            {"name": "ci"},
        ),  # before the disable: no token for a disabled account
        (f"/admin/users/{other_id}/disable", {}),
        (
            "/admin/schedules/new",
            {
                "_cron": "*/5 * * * *",
                "_timezone": "UTC",
                "_target": "type:test.form",
                "name": "x",
                "_enabled": "on",
            },
        ),
    ]


# --- access ---------------------------------------------------------------------------------------------


async def test_pages_and_actions_for_admin_other_user_and_visitor(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    bob = await add_user(db_url, "bob@example.com")
    # signed out: pages redirect to sign-in; actions too (no change)
    for path in PAGES:
        r = await client.get(path, follow_redirects=False)
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/login"), path
    # another user: 403 everywhere, nothing changes
    await as_user(client, "bob@example.com")
    for path in PAGES:
        assert (await client.get(path)).status_code == 403, path
    for path, data in actions(root.id, bob.id):
        assert (await post(client, path, data)).status_code == 403, path
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == 0
    assert await pg.fetchval("SELECT count(*) FROM job_type_controls") == 0
    assert await pg.fetchval("SELECT count(*) FROM users") == 2
    # admin: pages render, nav shows the admin menu
    await as_user(client, "root@example.com")
    for path in PAGES:
        r = await client.get(path)
        assert r.status_code == 200, (path, r.text[:2000])
    nav = (await client.get("/jobs")).text
    for href in (
        "/admin",
        "/admin/jobs",
        "/admin/failed",
        "/admin/schedules",
        "/admin/users",
        "/admin/audit",
        "/admin/alerts",
    ):
        assert f'href="{href}"' in nav
    assert 'href="/admin/users"' not in (await _page_as(client, "bob@example.com", "/jobs"))
    await as_user(client, "root@example.com")
    for path, data in actions(root.id, bob.id):
        r = await post(client, path, data)
        assert r.status_code in (200, 303), (path, r.status_code, r.text[:1500])
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == len(actions(root.id, bob.id))


async def _page_as(client: AsyncTestClient, email: str, path: str) -> str:
    await as_user(client, email)
    return (await client.get(path)).text


async def test_actions_are_post_only_and_need_csrf(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    good = csrf_from((await client.get("/admin")).text)
    for path, data in actions(admin.id, bob.id):
        assert (
            await client.get(
                path + ("?x=1" if path in ("/admin/users", "/admin/schedules/new") else ""),
                follow_redirects=False,
            )
        ).status_code in (405, 200)
        if path not in ("/admin/users", "/admin/schedules/new"):  # those two are GET pages too
            assert (await client.get(path)).status_code == 405, path
        for bad in (
            {},
            {"_csrf_token": "0" * 64},
            {"_csrf_token": good[:-1] + ("1" if good.endswith("0") else "0")},
        ):
            r = await client.post(path, data={**data, **bad}, follow_redirects=False)
            assert r.status_code == 403, (path, bad)
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == 0
    assert await pg.fetchval("SELECT count(*) FROM job_type_controls") == 0
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == 0
    assert await pg.fetchval("SELECT is_admin OR NOT is_active FROM users WHERE id = $1", bob.id) is False


async def test_the_csrf_check_fails_with_csrf_switched_off(
    make_settings: Any, db_url: str, pg: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mechanism-off run: with /admin excluded from Litestar's CSRF check, the forged pause works —
    so the 403 above is the CSRF check's doing."""
    monkeypatch.setattr(server, "CSRF_EXCLUDE", [*server.CSRF_EXCLUDE, "^/admin/"])
    await add_user(db_url, "root@example.com", admin=True)
    async with app_client(make_settings(worker_enabled=False), fresh=True) as c:
        await as_user(c, "root@example.com")
        r = await c.post("/admin/controls/pause", data={"type": "test.form"}, follow_redirects=False)
        assert r.status_code == 303
    assert await pg.fetchval("SELECT paused FROM job_type_controls WHERE type = 'test.form'") is True


# --- health and controls ----------------------------------------------------------------------------------


async def test_health_numbers_on_seeded_data(
    client: AsyncTestClient, admin: CurrentUser, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    for _ in range(3):
        await enqueue(ui_settings, admin.id)
    await pg.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, version, running, listener_connected)"
        " VALUES ('w-1', 'box-a', 42, 4, 'test', 1, true), ('w-gone', 'box-b', 7, 4, 'test', 0, true)"
    )
    await pg.execute("UPDATE workers SET last_seen_at = now() - interval '2 hours' WHERE id = 'w-gone'")
    engine = create_engine(ui_settings.database_url or "", pool_size=1)
    async with engine.begin() as conn:
        running = (await queue.claim(conn, "w-1", 1, 60))[0]["id"]
    await engine.dispose()
    old = await enqueue(ui_settings, admin.id)
    await pg.execute("UPDATE jobs SET run_at = now() - interval '2 hours' WHERE id = $1", old)
    await pg.execute(
        "INSERT INTO throughput_samples (minute, worker_id, completed, failed) VALUES"
        " (date_trunc('minute', now()), 'w-1', 7, 2), (date_trunc('minute', now()) - interval '3 minutes', 'w-1', 5, 0),"
        " (date_trunc('minute', now()) - interval '3 minutes', 'w-2', 4, 1),"
        " (date_trunc('minute', now()) - interval '2 hours', 'w-1', 100, 50)"
    )
    # the failures of the last hour are counted from the jobs (the samples above lag a heartbeat behind)
    await pg.execute(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, started_at,"
        " completed_at) SELECT gen_random_uuid(), 'test.form', 'failed', $1, '{}', 1, 1, now() - d, now() - d"
        " FROM unnest(ARRAY[interval '1 minute', interval '5 minutes', interval '50 minutes',"
        " interval '2 hours', interval '3 hours']) d",
        admin.id,
    )
    r = await client.get("/admin/health", headers=HX)
    assert r.status_code == 200
    html = r.text
    assert '<strong id="stat-workers">1</strong>' in html
    assert "box-a" in html
    assert "box-b" not in html
    assert f'href="/jobs/{running}"' in html  # its running job
    assert '<strong id="stat-waiting">3</strong>' in html  # 4 enqueued, 1 running
    assert '<strong id="stat-oldest">2 h</strong>' in html
    assert '<strong id="stat-failed">3</strong>' in html  # in the last hour, not the 2 before
    assert "16 jobs done and 3 failed in the last hour; busiest minute 10" in html  # the 1 h default
    assert html.count('class="bar-ok"') == 60


async def test_health_poll_queries_use_indexes(
    admin: CurrentUser, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    """Case C17: on a seeded table every query of the health poll avoids a Seq Scan of jobs/job_events."""
    await pg.execute(
        """
        INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, completed_at, run_at)
        SELECT gen_random_uuid(), CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END,
               CASE WHEN i % 50 = 0 THEN 'queued' WHEN i % 7 = 0 THEN 'failed' ELSE 'completed' END,
               $1, '{}', 3,
               CASE WHEN i % 50 = 0 THEN NULL ELSE now() - (i || ' seconds')::interval END, now() - interval '1 minute'
        FROM generate_series(1, 60000) i
        """,
        admin.id,
    )
    await pg.execute(
        "INSERT INTO job_events (job_id, kind, actor, at) SELECT id, 'completed', 'worker:x', completed_at"
        " FROM jobs WHERE completed_at IS NOT NULL"
    )
    await pg.execute("ANALYZE")
    params = {
        "fresh": 60,
        "ids": ["w-1"],
        "minutes": 30,
        "step": 240,
        "origin": datetime.now(UTC) - timedelta(days=7),
    }
    for name, stmt in HEALTH_QUERIES.items():
        sql = str(stmt)
        args = []
        for key in ("fresh", "ids", "minutes", "step", "origin"):
            if f":{key}" in sql:
                args.append(params[key])
                sql = sql.replace(f":{key}", f"${len(args)}")
        plan = "\n".join(r[0] for r in await pg.fetch("EXPLAIN " + sql, *args))
        for table in ("jobs", "job_events"):
            assert f"Seq Scan on {table}" not in plan, (name, plan)


async def test_pause_from_the_console_stops_claiming_and_shows_the_banner(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    job = await enqueue(ui_settings, bob.id)
    r = await post(client, "/admin/controls/pause", {"type": "test.form"}, headers=HX)
    assert r.status_code == 200
    assert "Paused test.form." in r.text
    assert "by root@example.com" in r.text
    engine = create_engine(ui_settings.database_url or "", pool_size=1)
    async with engine.begin() as conn:
        assert await queue.claim(conn, "w", 10, 60) == []
    # the banner on every page listing it: bob's My jobs and the job page, the admin's too
    await as_user(client, "bob@example.com")
    for path in ("/jobs", f"/jobs/{job}"):
        text = (await client.get(path)).text
        assert "are paused" in text, path
        assert "by root@example.com at" in text, path
    await as_user(client, "root@example.com")
    r = await post(client, "/admin/controls/resume", {"type": "test.form"})
    assert r.status_code == 303
    assert "are paused" not in (await client.get(f"/jobs/{job}")).text
    async with engine.begin() as conn:
        assert [j["id"] for j in await queue.claim(conn, "w", 10, 60)] == [job]
    await engine.dispose()
    actions_ = [r["action"] for r in await pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    assert actions_ == ["job_type.pause", "job_type.resume"]
    assert (await post(client, "/admin/controls/pause", {"type": "no.such"})).status_code == 404


async def test_limits_change_is_audited_and_bad_limits_are_field_errors(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    r = await post(
        client, "/admin/controls/limits", {"type": "test.form", "max_running": "3", "max_per_minute": ""}
    )
    assert r.status_code == 303
    row = await pg.fetchrow(
        "SELECT max_running, max_per_minute FROM job_type_controls WHERE type = 'test.form'"
    )
    assert tuple(row) == (3, None)
    entry = await pg.fetchrow("SELECT user_email, action, detail FROM audit_log")
    assert entry["action"] == "job_type.limits"
    assert json.loads(entry["detail"]) == {
        "max_running": 3,
        "max_per_minute": None,
        "max_running_per_user": None,
    }
    page = (await client.get("/admin")).text
    assert "set limits of" in page
    assert "max running 3" in page
    # a long one too: shown again as typed (it was cut to 20 characters beside its error)
    for bad in ("-1", "abc", "100001", "1.5", "1" * 30):
        r = await post(
            client, "/admin/controls/limits", {"type": "test.form", "max_running": bad}, headers=HX
        )
        assert r.status_code == 422, bad
        assert 'class="field-error"' in r.text, bad
        assert f'value="{bad}"' in r.text, bad
    assert await pg.fetchval("SELECT max_running FROM job_type_controls WHERE type = 'test.form'") == 3
    # null removes
    await post(
        client, "/admin/controls/limits", {"type": "test.form", "max_running": "", "max_per_minute": ""}
    )
    assert await pg.fetchval("SELECT max_running FROM job_type_controls WHERE type = 'test.form'") is None


# --- audit --------------------------------------------------------------------------------------------------


async def test_audit_page_lists_filters_and_pages(
    client: AsyncTestClient, admin: CurrentUser, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    job = await enqueue(ui_settings, admin.id, run_at=datetime.now().astimezone() + timedelta(hours=1))
    r = await post(client, f"/jobs/{job}/run-now")
    assert r.status_code == 200
    for _ in range(3):
        await post(client, "/admin/controls/pause", {"type": "test.form"})
    await pg.execute(
        "INSERT INTO audit_log (user_email, action, outcome) SELECT 'other@example.com', 'job_type.resume', 'ok'"
        " FROM generate_series(1, 60)"
    )
    # a "before" that is no entry id (not a bigint) is a 422 naming it, as every list's cursor is
    # (tests/web/test_list_cursors.py), never a 500 nor the newest page as if it were the one asked for
    for before in ("99999999999999999999999", "-5", "abc"):
        r = await client.get(f"/admin/audit?before={before}")
        assert r.status_code == 422 and "is not a position this list gave" in r.text, before
    page = (await client.get("/admin/audit")).text
    assert page.count('<tr id="audit-') == 50
    assert 'id="older"' in page
    page = (await client.get("/admin/audit?user=root@example.com")).text
    assert page.count('<tr id="audit-') == 4
    assert f'href="/jobs/{job}"' in page
    assert "Started a scheduled job now" in page
    page = (await client.get("/admin/audit?action=job_type.pause")).text
    assert page.count('<tr id="audit-') == 3
    # a filter given twice is refused naming it, as the JSON API refuses it, not filtered by one of them
    for query, name in (
        ("user=root@example.com&user=other@example.com", "user"),
        ("action=a&action=b", "action"),
    ):
        r = await client.get(f"/admin/audit?{query}")
        assert r.status_code == 422 and "given more than once; it takes one value" in r.text, query
        assert name in r.text
    # keyset: the second page has the rest
    first = (await client.get("/admin/audit")).text
    older = first.split('id="older"')[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
    second = (await client.get(older)).text
    assert second.count('<tr id="audit-') == 64 - 50
    # the admin's action shows in the job's history with the admin's email
    hist = (await client.get(f"/jobs/{job}")).text
    assert "Rescheduled" in hist
    assert "you" in hist
    await add_user(_db(ui_settings), "ops@example.com", admin=True)
    await as_user(client, "ops@example.com")
    assert "root@example.com" in (await client.get(f"/jobs/{job}")).text


def _db(settings: Settings) -> str:
    return settings.database_url or ""


# --- users --------------------------------------------------------------------------------------------------


async def test_users_create_generated_password_and_form_errors(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    r = await post(client, "/admin/users", {"email": "Ann@Example.com", "password": ""})
    assert r.status_code == 200
    assert "shown only this once" in r.text
    password = r.text.split('id="secret-value" class="secret-value">')[1].split("<")[0]
    assert len(password) >= 12
    assert (await client.get("/admin/users")).text.count(password) == 0  # shown once
    client.cookies.clear()
    assert (await login(client, "ann@example.com", password)).status_code == 303
    await as_user(client, "root@example.com")
    for data, field, words in (
        ({"email": "not-an-email", "password": "long enough"}, "email", "like you@example.com"),
        ({"email": "x@example.com", "password": "short"}, "password", "at least 8"),
        ({"email": "ann@example.com", "password": "long enough"}, "email", "already exists"),
    ):
        r = await post(client, "/admin/users", data)
        assert r.status_code == 422, data
        assert f'id="e-{field}" class="field-error"' in r.text, data
        assert words in r.text.lower() or words in r.text
    assert await pg.fetchval("SELECT count(*) FROM users") == 2


async def test_disable_blocks_sign_in_and_tokens_and_self_protection(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    token = await add_token(db_url, bob.id)
    async with app_client(ui_settings) as other:
        await as_user(other, "bob@example.com")
        assert (await other.get("/jobs")).status_code == 200
        r = await post(client, f"/admin/users/{bob.id}/disable")
        assert r.status_code == 303
        assert (await other.get("/jobs", follow_redirects=False)).status_code == 303  # session ended
        assert await pg.fetchval("SELECT count(*) FROM web_sessions WHERE user_id = $1", bob.id) == 0
        other.cookies.clear()
        assert (await login(other, "bob@example.com")).status_code != 303
        api = await other.get("/api/jobs", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 401
        await post(client, f"/admin/users/{bob.id}/enable")
        api = await other.get("/api/jobs", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 200
    # self-protection
    for action in ("revoke-admin", "disable"):
        r = await post(client, f"/admin/users/{admin.id}/{action}")
        assert r.status_code == 409
        assert "you cannot" in r.text
    assert tuple(await pg.fetchrow("SELECT is_admin, is_active FROM users WHERE id = $1", admin.id)) == (
        True,
        True,
    )
    refused = await pg.fetch("SELECT outcome FROM audit_log WHERE outcome <> 'ok'")
    assert len(refused) == 2
    # make admin / revoke, issue and revoke a token
    assert (await post(client, f"/admin/users/{bob.id}/make-admin")).status_code == 303
    assert await pg.fetchval("SELECT is_admin FROM users WHERE id = $1", bob.id) is True
    assert (await post(client, f"/admin/users/{bob.id}/revoke-admin")).status_code == 303
    r = await post(client, f"/admin/users/{bob.id}/tokens", {"name": "<b>ci</b>"})
    new_token = r.text.split('id="secret-value" class="secret-value">')[1].split("<")[0]
    assert new_token.startswith("jd_")
    assert "<b>ci</b>" not in r.text
    tid = await pg.fetchval("SELECT id FROM api_tokens WHERE name = '<b>ci</b>'")
    assert (await post(client, f"/admin/tokens/{tid}/revoke")).status_code == 303
    api = await client.get("/api/jobs", headers={"Authorization": f"Bearer {new_token}"})
    assert api.status_code == 401


# --- schedules ------------------------------------------------------------------------------------------------


async def test_schedules_create_list_enable_delete_and_form_errors(
    client: AsyncTestClient, admin: CurrentUser, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    good = {
        "_cron": "0 9 * * 1-5",
        "_timezone": "Europe/Berlin",
        "_target": "type:test.form",
        "name": "Ann",
        "_owner": "root@example.com",
        "_enabled": "on",
        "_name": "Morning",
    }
    bad_cases = [
        ({"_cron": "every day"}, "_cron", "five fields"),
        ({"_cron": "61 * * * *"}, "_cron", "out of range: minutes run from 0 to 59"),
        ({"_cron": "0 0 L * *"}, "_cron", "&#39;L&#39; is not taken"),
        ({"_cron": "0 0 * * 5#3"}, "_cron", "&#39;#&#39; is not taken"),
        ({"_cron": "0 0 ? * mon"}, "_cron", "&#39;?&#39; is not taken"),
        ({"_timezone": "Mars/Olympus"}, "_timezone", "unknown time zone"),
        ({"_target": "type:no.such"}, "_target", "Choose a job type"),
        ({"_target": ""}, "_target", "Choose a job type"),
        ({"name": ""}, "name", "Fill this in"),
        ({"copies": "0"}, "copies", "at least 1"),
        ({"_owner": "ghost@example.com"}, "_owner", "No user"),
    ]
    for change, field, words in bad_cases:
        r = await post(client, "/admin/schedules/new", {**good, **change})
        assert r.status_code == 422, (change, r.text[:500])
        error = r.text.split(f'id="e-{field}" class="field-error">')[1].split("</small>")[0]
        assert words in error, (change, error)
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    r = await post(client, "/admin/schedules/new", good)
    assert r.status_code == 303
    row = await pg.fetchrow("SELECT id, enabled, next_fire_at, user_id FROM schedules")
    assert row["enabled"]
    assert row["next_fire_at"] is not None
    assert row["user_id"] == admin.id
    assert (
        await post(client, "/admin/schedules/new", good)
    ).status_code == 422  # name taken, not overwritten
    page = (await client.get("/admin/schedules")).text
    assert "Morning" in page
    assert "0 9 * * 1-5" in page
    assert "Europe/Berlin" in page
    assert "not yet" in page
    assert (await post(client, f"/admin/schedules/{row['id']}/disable")).status_code == 303
    assert await pg.fetchval("SELECT enabled FROM schedules") is False
    assert (await post(client, f"/admin/schedules/{row['id']}/enable")).status_code == 303
    # a code-defined one cannot be deleted
    await pg.execute("UPDATE schedules SET source = 'code'")
    r = await post(client, f"/admin/schedules/{row['id']}/delete")
    assert r.status_code == 409
    assert "defined in code" in r.text
    await pg.execute("UPDATE schedules SET source = 'ui'")
    assert (await post(client, f"/admin/schedules/{row['id']}/delete")).status_code == 303
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    acts = [
        r["action"] for r in await pg.fetch("SELECT action FROM audit_log WHERE outcome = 'ok' ORDER BY id")
    ]
    assert acts == ["schedule.create", "schedule.disable", "schedule.enable", "schedule.delete"]
    assert (await post(client, "/admin/schedules/not-a-uuid/enable")).status_code == 404


# --- the job page: reschedule ------------------------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posix/Europe/Berlin", "right/UTC"])
async def test_run_at_and_reschedule_take_only_the_zones_schedules_and_the_account_take(
    client: AsyncTestClient, admin: CurrentUser, ui_settings: Settings, pg: asyncpg.Connection, zone: str
) -> None:
    """zoneinfo opens these files, and the job form's "Run at" and Reschedule took them (303, the job
    created or moved), while schedules and the account refused them: "localtime" is whichever zone the
    web host is set to, right/ zones count leap seconds. Every form now keeps to the picker's zones."""
    when = {"date": "2099-01-02", "time": "09:30"}
    r = await post(
        client,
        "/jobs/new/test.form",
        {"name": "Ann", "_run_at_date": when["date"], "_run_at_time": when["time"], "_run_at_tz": zone},
    )
    assert r.status_code == 422
    assert f"Choose a time zone from the list: {zone!r} is not one." in html.unescape(r.text)
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    job = await enqueue(ui_settings, admin.id)
    before = await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", job)
    r = await post(client, f"/jobs/{job}/reschedule", {**when, "tz": zone}, headers=HX)
    assert r.status_code == 422
    assert "Choose a time zone from the list" in r.text
    assert await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", job) == before
    r = await post(client, "/account/timezone", {"timezone": zone})
    assert r.status_code == 422


async def test_reschedule_from_the_job_page(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    job = await enqueue(ui_settings, bob.id)
    page = (await client.get(f"/jobs/{job}")).text
    assert 'id="act-reschedule"' in page
    r = await post(
        client,
        f"/jobs/{job}/reschedule",
        {"date": "2099-01-02", "time": "09:30", "tz": "Europe/Berlin"},
        headers=HX,
    )
    assert r.status_code == 200
    assert "Rescheduled" in r.text
    assert (
        await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", job)
    ).isoformat() == "2099-01-02T08:30:00+00:00"
    assert await pg.fetchval("SELECT action FROM audit_log") == "job.reschedule"
    for bad in (
        {"date": "2000-01-01", "time": "09:00", "tz": "UTC"},
        {"date": "", "time": "", "tz": "UTC"},
        {"date": "2099-01-01", "time": "09:00", "tz": "Nowhere/City"},
    ):
        r = await post(client, f"/jobs/{job}/reschedule", bad, headers=HX)
        assert r.status_code == 422, bad
        assert "Nothing changed" in r.text, bad
    await as_user(client, "bob@example.com")
    assert 'id="act-reschedule"' not in (await client.get(f"/jobs/{job}")).text
    r = await post(client, f"/jobs/{job}/reschedule", {"date": "2099-01-03", "time": "09:30", "tz": "UTC"})
    assert r.status_code == 403
