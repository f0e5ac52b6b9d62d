"""Attacks on sign-in, CSRF and error pages, tried through a real ``jobdesk serve`` on loopback as an
attacker would: a CSRF pair from another session or another local page, a burst of concurrent password
guesses, a rotating ``X-Forwarded-For``, a stranger locking out the real person, and a job owner reading
the server's traceback."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient

from app.db import asyncpg_dsn, create_engine
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from app.signin import (
    LOGIN_MAX_FAILURES_PER_EMAIL,
    LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP,
    LOGIN_MAX_FAILURES_PER_IP,
)
from tests.support.cli import assert_clean_failure
from tests.support.cli import run as run_cli
from tests.support.webkit import PASSWORD, add_token, add_user, app_client, csrf_from, login, running_server

SESSION = "jobdesk_session"
CSRF = "csrftoken"


def _sign_in(base: str, email: str) -> tuple[str, str, str]:
    """Sign in with a fresh client; return the session cookie, the CSRF token of the signed-in pages and
    the ``csrftoken`` cookie the browser then holds."""
    with httpx.Client(base_url=base) as c:
        page = c.get("/login")
        r = c.post("/login", data={"email": email, "password": PASSWORD, "_csrf_token": csrf_from(page.text)})
        assert r.status_code == 303, r.text[:300]
        token = csrf_from(c.get("/admin/users" if email.startswith("boss") else "/jobs").text)
        return c.cookies[SESSION], token, c.cookies[CSRF]


def _post(base: str, path: str, session: str, cookie: str, token: str | None, **kw: Any) -> httpx.Response:
    """A POST as a browser sends it: the session cookie, whatever ``csrftoken`` cookie it holds, a token."""
    headers = {"Cookie": f"{SESSION}={session}; {CSRF}={cookie}"}
    data = {"_csrf_token": token} if token is not None else {}
    with httpx.Client(base_url=base) as c:
        return c.post(path, headers={**headers, **kw.pop("headers", {})}, data=data, **kw)


# --- CSRF ---------------------------------------------------------------------------------------------------


def test_a_csrf_pair_from_another_session_or_page_does_not_work_on_an_admin_session(
    db_url: str, tmp_path: Path
) -> None:
    asyncio.run(add_user(db_url, "boss@example.com", admin=True))
    bob = asyncio.run(add_user(db_url, "bob@example.com"))
    make_admin = f"/admin/users/{bob.id}/make-admin"
    with running_server(db_url, tmp_path / "data") as base:
        # an anonymous visitor's valid pair — what a page on another local port can obtain and plant,
        # since cookies are not kept apart by port
        with httpx.Client(base_url=base) as anon:
            anon_token = csrf_from(anon.get("/login").text)
            anon_cookie = anon.cookies[CSRF]
        boss_session, boss_token, boss_cookie = _sign_in(base, "boss@example.com")
        bob_session, bob_token, _ = _sign_in(base, "bob@example.com")
        for cookie, token in ((anon_cookie, anon_token), (bob_token, bob_token), (anon_cookie, boss_token)):
            r = _post(base, make_admin, boss_session, cookie, token)
            assert r.status_code == 403, (cookie, token, r.status_code)
            r = _post(base, make_admin, boss_session, cookie, None, headers={"x-csrftoken": token})
            assert r.status_code == 403
        assert asyncio.run(_is_admin(db_url, bob.id)) is False
        # the admin's own page's token (and cookie, which follows the session's token) works
        assert boss_cookie == boss_token
        r = _post(base, make_admin, boss_session, boss_token, boss_token)
        assert r.status_code == 303
        assert asyncio.run(_is_admin(db_url, bob.id)) is True
        # every sign-in starts with a new token; the previous session's is refused on the new one
        new_session, new_token, _ = _sign_in(base, "boss@example.com")
        assert new_token != boss_token
        assert _post(base, "/logout", new_session, boss_token, boss_token).status_code == 403
        assert _post(base, "/logout", new_session, new_token, new_token).status_code == 303
        assert bob_session  # bob's session is untouched by all this


async def _is_admin(db_url: str, user_id: int) -> bool:
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        return bool(await conn.fetchval("SELECT is_admin FROM users WHERE id = $1", user_id))
    finally:
        await conn.close()


async def _fetch(db_url: str, sql: str, *args: Any) -> list[Any]:
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


# --- sign-in limits -----------------------------------------------------------------------------------------


async def _guess_concurrently(base: str, email: str, n: int) -> list[int]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        token = csrf_from((await c.get("/login")).text)
        data = {"email": email, "password": "wrong password", "_csrf_token": token}
        answers = await asyncio.gather(*(c.post("/login", data=data) for _ in range(n)))
    return [r.status_code for r in answers]


def test_concurrent_wrong_passwords_check_no_more_passwords_than_the_limit(
    db_url: str, tmp_path: Path
) -> None:
    asyncio.run(add_user(db_url, "ann@example.com"))
    # at the real hash's cost, so that the guesses are checked side by side, as an attacker's would be
    with running_server(db_url, tmp_path / "data", real_hashing=True) as base:
        statuses = asyncio.run(_guess_concurrently(base, "ann@example.com", 40))
    checked = asyncio.run(_fetch(db_url, "SELECT ok FROM login_attempts WHERE email = 'ann@example.com'"))
    assert len(checked) == LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP, len(checked)  # one row per password checked
    assert statuses.count(401) == LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP
    assert statuses.count(429) == 40 - LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP


def test_x_forwarded_for_is_believed_only_from_listed_proxies(db_url: str, tmp_path: Path) -> None:
    with running_server(db_url, tmp_path / "data") as base, httpx.Client(base_url=base) as c:
        token = csrf_from(c.get("/login").text)
        statuses = []
        for i in range(LOGIN_MAX_FAILURES_PER_IP + 3):
            r = c.post(
                "/login",
                data={"email": f"u{i}@example.com", "password": "wrong password", "_csrf_token": token},
                headers={"X-Forwarded-For": f"203.0.113.{i + 1}"},
            )
            statuses.append(r.status_code)
    assert statuses[:LOGIN_MAX_FAILURES_PER_IP] == [401] * LOGIN_MAX_FAILURES_PER_IP
    assert statuses[LOGIN_MAX_FAILURES_PER_IP:] == [429] * 3
    ips = {r["ip"] for r in asyncio.run(_fetch(db_url, "SELECT DISTINCT ip FROM login_attempts"))}
    assert ips == {"127.0.0.1"}
    # behind a proxy that is listed, its header names the client
    with running_server(db_url, tmp_path / "data2", FORWARDED_ALLOW_IPS="127.0.0.1") as base:
        with httpx.Client(base_url=base) as c:
            token = csrf_from(c.get("/login").text)
            c.post(
                "/login",
                data={"email": "x@example.com", "password": "wrong password", "_csrf_token": token},
                headers={"X-Forwarded-For": "203.0.113.99"},
            )
    rows = asyncio.run(_fetch(db_url, "SELECT ip FROM login_attempts WHERE email = 'x@example.com'"))
    assert [r["ip"] for r in rows] == ["203.0.113.99"]


@pytest.fixture
async def client(make_settings: Any) -> Any:
    async with app_client(make_settings(worker_enabled=False)) as c:
        yield c


async def _fail_from(pg: asyncpg.Connection, email: str, ips: list[str]) -> None:
    await pg.executemany(
        "INSERT INTO login_attempts (email, ip, ok) VALUES ($1, $2, false)", [(email, ip) for ip in ips]
    )


async def test_a_stranger_guessing_locks_only_their_own_address_out(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    await _fail_from(pg, "ann@example.com", ["203.0.113.9"] * (LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP + 3))
    assert (await login(client, "ann@example.com")).status_code == 303  # ann, from her own address


async def test_guessing_from_many_addresses_locks_the_account_until_an_admin_unlocks_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com")
    await add_user(db_url, "boss@example.com", admin=True)
    ips = [f"203.0.113.{i % 200}" for i in range(LOGIN_MAX_FAILURES_PER_EMAIL)]
    await _fail_from(pg, "ann@example.com", ips)
    r = await login(client, "ann@example.com")
    assert r.status_code == 429 and "ask an administrator to unlock it" in r.text
    client.cookies.clear()
    await login(client, "boss@example.com")
    page = await client.get("/admin/users")
    assert f'id="locked-{ann.id}"' in page.text and f'id="unlock-{ann.id}"' in page.text
    r = await client.post(f"/admin/users/{ann.id}/unlock", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 200 and f"{LOGIN_MAX_FAILURES_PER_EMAIL} failed attempts forgotten" in r.text
    assert f'id="unlock-{ann.id}"' not in r.text
    entry = await pg.fetchrow("SELECT action, user_email, target_ids, detail FROM audit_log")
    assert entry["action"] == "user.unlock" and entry["user_email"] == "boss@example.com"
    assert '"failures_cleared": 30' in entry["detail"]
    client.cookies.clear()
    assert (await login(client, "ann@example.com")).status_code == 303


async def test_the_api_unlocks_for_admins_only(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com")
    boss = await add_user(db_url, "boss@example.com", admin=True)
    await _fail_from(pg, "ann@example.com", ["203.0.113.1"] * 7)
    as_ann = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    as_boss = {"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
    assert (await client.post(f"/api/users/{ann.id}/unlock", headers=as_ann)).status_code == 403
    assert (await client.post(f"/api/users/{ann.id}/unlock")).status_code == 401
    for missing in (999, 2**40):
        assert (await client.post(f"/api/users/{missing}/unlock", headers=as_boss)).status_code == 404
    r = await client.post(f"/api/users/{ann.id}/unlock", headers=as_boss)
    assert r.status_code == 200
    assert r.json() == {"id": ann.id, "email": "ann@example.com", "failures_cleared": 7}
    assert await pg.fetchval("SELECT count(*) FROM login_attempts") == 0
    assert (
        await pg.fetchval("SELECT count(*) FROM audit_log WHERE action = 'user.unlock' AND outcome = 'ok'")
        == 1
    )
    # the unknown ids are refusals on the trail, as every refused admin action is
    refused = "SELECT count(*) FROM audit_log WHERE action = 'user.unlock' AND outcome LIKE 'refused: %'"
    assert await pg.fetchval(refused) == 2


def test_the_command_line_unlocks(db_url: str, tmp_path: Path) -> None:
    asyncio.run(add_user(db_url, "ann@example.com"))
    asyncio.run(_insert_failures(db_url, "ann@example.com", 6))
    result = run_cli(tmp_path, "unlock-user", "Ann@Example.com", DATABASE_URL=db_url)
    assert result.returncode == 0, result.stderr
    assert "ann@example.com can sign in again: 6 failed attempts forgotten." in result.stdout
    rows = asyncio.run(_fetch(db_url, "SELECT user_email, action FROM audit_log"))
    assert [(r["user_email"], r["action"]) for r in rows] == [("command line", "user.unlock")]
    assert not asyncio.run(_fetch(db_url, "SELECT 1 FROM login_attempts"))
    assert_clean_failure(
        run_cli(tmp_path, "unlock-user", "nobody@example.com", DATABASE_URL=db_url), "No user with the email"
    )


async def _insert_failures(db_url: str, email: str, n: int) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        await _fail_from(conn, email, ["203.0.113.5"] * n)
    finally:
        await conn.close()


# --- tracebacks -------------------------------------------------------------------------------------------


async def _failing_job(db_url: str, settings: Settings, owner: int) -> str:
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            job = NewJob(type="fail", input_data={"message": "disk on fire"}, user_id=owner, max_attempts=1)
            return str((await queue.enqueue(conn, job, settings)).job["id"])
    finally:
        await engine.dispose()


def _wait_failed(base: str, job_id: str, bearer: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = httpx.get(f"{base}/api/jobs/{job_id}", headers=bearer).json()
        if job["status"] == "failed":
            return job
        time.sleep(0.3)
    raise AssertionError(f"the job did not fail in time: {job}")


def test_owners_read_the_error_in_words_and_only_admins_the_traceback(
    db_url: str, tmp_path: Path, settings: Settings
) -> None:
    ann = asyncio.run(add_user(db_url, "ann@example.com"))
    boss = asyncio.run(add_user(db_url, "boss@example.com", admin=True))
    as_ann = {"Authorization": f"Bearer {asyncio.run(add_token(db_url, ann.id))}"}
    as_boss = {"Authorization": f"Bearer {asyncio.run(add_token(db_url, boss.id))}"}
    job_id = asyncio.run(_failing_job(db_url, settings, ann.id))
    with running_server(db_url, tmp_path / "data", WORKER_ENABLED="true") as base:
        full = _wait_failed(base, job_id, as_boss)["error_message"]
        assert "Traceback (most recent call last)" in full and 'File "/' in full
        owner_view = httpx.get(f"{base}/api/jobs/{job_id}", headers=as_ann).json()
        assert owner_view["error_message"] == "Disk on fire"  # in words: no exception type, no traceback
        events = httpx.get(f"{base}/api/jobs/{job_id}/events", headers=as_ann).json()
        assert events and not any("Traceback" in (e["message"] or "") for e in events)
        admin_events = httpx.get(f"{base}/api/jobs/{job_id}/events", headers=as_boss).json()
        assert any("Traceback" in (e["message"] or "") for e in admin_events)
        for email, sees_traceback in (("ann@example.com", False), ("boss@example.com", True)):
            with httpx.Client(base_url=base) as c:
                page = c.get("/login")
                c.post(
                    "/login", data={"email": email, "password": PASSWORD, "_csrf_token": csrf_from(page.text)}
                )
                for url in (f"/jobs/{job_id}", f"/jobs/{job_id}/status"):
                    html = c.get(url, headers={"HX-Request": "true"} if "status" in url else {}).text
                    assert "disk on fire" in html.lower(), (email, url)
                    assert ("Traceback" in html) is sees_traceback, (email, url)
                    assert ("File &#34;/" in html or 'File "/' in html) is sees_traceback, (email, url)
