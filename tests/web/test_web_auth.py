"""Sign-in, sign-out, sessions, bearer tokens, guards and CSRF through the HTTP app (case C21)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar import get, post
from litestar.params import JSONBody
from litestar.testing import AsyncTestClient

from app.auth import SESSION_COOKIE, requires_admin
from app.signin import LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP, LOGIN_MAX_FAILURES_PER_IP
from tests.support.webkit import PASSWORD, add_token, add_user, app_client, csrf_from, login

# --- sign-in -------------------------------------------------------------------------------------------


async def test_sign_in_sets_a_session_cookie_and_lands_on_next(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "Ann@Example.com")
    r = await login(client, "ANN@example.com", next_path="/some/page?x=1")
    assert r.status_code == 303
    assert r.headers["location"] == "/some/page?x=1"
    cookie = r.headers["set-cookie"]
    assert f"{SESSION_COOKIE}=" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Secure" not in cookie
    # the session row exists (the 303 committed it) and stores only a hash of the cookie value
    value = client.cookies[SESSION_COOKIE]
    rows = await pg.fetch("SELECT id_hash FROM web_sessions")
    assert len(rows) == 1
    assert rows[0]["id_hash"] != value
    assert len(rows[0]["id_hash"]) == 64
    home = await client.get("/")
    assert home.status_code == 200
    assert "Start a job" in home.text
    assert "ann@example.com" in home.text


async def test_session_cookie_is_secure_when_the_base_url_is_https(make_settings: Any, db_url: str) -> None:
    await add_user(db_url, "ann@example.com")
    settings = make_settings(worker_enabled=False, jobdesk_base_url="https://jobs.example.com")
    async with app_client(settings, base_url="https://testserver.local") as c:
        r = await login(c, "ann@example.com")
        assert r.status_code == 303
        assert "Secure" in r.headers["set-cookie"]


async def test_wrong_password_shows_a_clear_message_next_to_the_form(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    r = await login(client, "ann@example.com", "not the password")
    assert r.status_code == 401
    assert 'role="alert"' in r.text
    assert "Wrong email or password." in r.text
    assert 'value="ann@example.com"' in r.text  # the email is kept
    assert SESSION_COOKIE not in client.cookies
    # unknown email: the same message, so accounts cannot be probed
    r = await login(client, "nobody@example.com", "whatever-password")
    assert r.status_code == 401
    assert "Wrong email or password." in r.text
    assert await pg.fetchval("SELECT count(*) FROM login_attempts WHERE NOT ok") == 2
    assert await pg.fetchval("SELECT count(*) FROM web_sessions") == 0


async def test_what_the_visitor_typed_is_escaped(client: AsyncTestClient) -> None:
    payload = '"><script>alert(1)</script>'
    r = await login(client, payload, "whatever-password", next_path='/x"><svg onload=alert(2)>')
    assert r.status_code == 401
    assert "<script>alert(1)" not in r.text
    assert "<svg onload" not in r.text
    assert "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in r.text


async def test_csrf_cookie_is_http_only_and_lax(client: AsyncTestClient) -> None:
    r = await client.get("/login")
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("csrftoken=")
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie


async def test_empty_form_is_a_400_with_a_message(client: AsyncTestClient) -> None:
    page = await client.get("/login")
    r = await client.post("/login", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 400
    assert "Enter your email and your password." in r.text


async def test_disabled_user_cannot_sign_in(client: AsyncTestClient, db_url: str) -> None:
    await add_user(db_url, "gone@example.com", active=False)
    r = await login(client, "gone@example.com")
    assert r.status_code == 401
    assert "Wrong email or password." in r.text


async def test_sign_in_is_rate_limited_per_email_and_address(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    for _ in range(LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP):
        assert (await login(client, "ann@example.com", "wrong-password")).status_code == 401
    # even the right password is refused now, with the wait in minutes
    r = await login(client, "ann@example.com")
    assert r.status_code == 429
    assert "Too many failed sign-in attempts. Try again in 15 minutes." in r.text
    assert SESSION_COOKIE not in client.cookies
    # the refused attempt was not recorded (it would extend the lock-out)
    assert await pg.fetchval("SELECT count(*) FROM login_attempts") == LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP
    # once the failures are older than the window, sign-in works again
    await pg.execute("UPDATE login_attempts SET at = at - interval '16 minutes'")
    assert (await login(client, "ann@example.com")).status_code == 303


async def test_rate_limit_wait_counts_down_from_the_oldest_counted_failure(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    for _ in range(LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP):
        await login(client, "ann@example.com", "wrong-password")
    await pg.execute("UPDATE login_attempts SET at = at - interval '13 minutes 30 seconds'")
    r = await login(client, "ann@example.com")
    assert r.status_code == 429
    assert "Try again in 2 minutes." in r.text


@pytest.mark.parametrize("skew_minutes", [20, -60])
async def test_sign_in_limits_hold_by_the_database_clock_on_a_skewed_web_host(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, monkeypatch: Any, skew_minutes: int
) -> None:
    """The failures that count, and how long each still counts, are read by one clock: the database's,
    which wrote them. A web host 20 minutes fast read every counted failure as already past its window
    and let the next guess through (the limits did nothing there); one an hour slow told the person to
    wait 75 minutes for a lock that ends in 15."""
    from datetime import UTC, datetime, timedelta

    from app import signin

    class SkewedHost(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz or UTC) + timedelta(minutes=skew_minutes)

    monkeypatch.setattr(signin, "datetime", SkewedHost, raising=False)
    await add_user(db_url, "ann@example.com")
    for _ in range(LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP):
        assert (await login(client, "ann@example.com", "wrong-password")).status_code == 401
    r = await login(client, "ann@example.com")
    assert r.status_code == 429, r.status_code
    assert "Too many failed sign-in attempts. Try again in 15 minutes." in r.text
    assert SESSION_COOKIE not in client.cookies
    await pg.execute("UPDATE login_attempts SET at = at - interval '16 minutes'")
    assert (await login(client, "ann@example.com")).status_code == 303


async def test_sign_in_is_rate_limited_per_address(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    # failures spread over many emails from one address (stuffing); recorded directly to keep it fast
    await pg.executemany(
        "INSERT INTO login_attempts (email, ip, ok) VALUES ($1, $2, false)",
        [(f"u{i}@example.com", "testclient") for i in range(LOGIN_MAX_FAILURES_PER_IP)],
    )
    r = await login(client, "ann@example.com")
    assert r.status_code == 429
    assert "Too many failed sign-in attempts" in r.text
    # another address is not affected
    await pg.execute("UPDATE login_attempts SET ip = '10.0.0.9'")
    assert (await login(client, "ann@example.com")).status_code == 303


async def test_next_is_restricted_to_local_paths(client: AsyncTestClient, db_url: str) -> None:
    await add_user(db_url, "ann@example.com")
    for evil in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"):
        page = await client.get("/login", params={"next": evil})
        assert evil not in page.text
        client.cookies.clear()
    r = await login(client, "ann@example.com", next_path="//evil.example/x")
    assert r.status_code == 303
    assert r.headers["location"] == "/"


async def test_signed_in_visitor_of_login_goes_on(client: AsyncTestClient, db_url: str) -> None:
    await add_user(db_url, "ann@example.com")
    await login(client, "ann@example.com")
    r = await client.get("/login", params={"next": "/jobs"}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/jobs"


# --- sign-out ------------------------------------------------------------------------------------------


async def test_sign_out_invalidates_the_session_server_side(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    await login(client, "ann@example.com")
    old_cookie = client.cookies[SESSION_COOKIE]
    home = await client.get("/")
    assert home.status_code == 200
    assert "Sign out" in home.text
    r = await client.post("/logout", data={"_csrf_token": csrf_from(home.text)}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login"
    assert await pg.fetchval("SELECT count(*) FROM web_sessions") == 0
    # replaying the old cookie (as a thief who copied it would) no longer works
    client.cookies.set(SESSION_COOKIE, old_cookie)
    again = await client.get("/", follow_redirects=False)
    assert again.status_code == 303
    assert again.headers["location"].startswith("/login")


async def test_logout_by_get_is_405(client: AsyncTestClient) -> None:
    r = await client.get("/logout")
    assert r.status_code == 405


async def test_expired_session_is_not_accepted(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    await login(client, "ann@example.com")
    assert (await client.get("/")).status_code == 200
    await pg.execute("UPDATE web_sessions SET expires_at = now() - interval '1 second'")
    assert (await client.get("/", follow_redirects=False)).status_code == 303


async def test_disabling_a_user_ends_their_session(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    await login(client, "ann@example.com")
    await pg.execute("UPDATE users SET is_active = false")
    assert (await client.get("/", follow_redirects=False)).status_code == 303


# --- CSRF (case C21) --------------------------------------------------------------------------------------


async def test_post_without_csrf_token_is_403_and_changes_nothing(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    await login(client, "ann@example.com")
    home = await client.get("/")
    token = csrf_from(home.text)
    # a forged sign-out: cookie present (browser sends it), no token / a wrong token / htmx-style
    for extra in (
        {},
        {"data": {"_csrf_token": "0" * 128}},
        {"headers": {"HX-Request": "true"}},
        {"headers": {"x-csrftoken": token[:-1] + ("1" if token.endswith("0") else "0")}},  # always another
    ):
        r = await client.post("/logout", follow_redirects=False, **extra)
        assert r.status_code == 403, extra
        assert await pg.fetchval("SELECT count(*) FROM web_sessions") == 1
    assert (await client.get("/")).status_code == 200
    # the htmx-style refusal is a small fragment saying what happened
    r = await client.post("/logout", headers={"HX-Request": "true"})
    assert r.text.startswith('<div class="notice notice-error" role="alert">')
    assert "nothing was changed" in r.text
    # the real button's token works, as a form field or as htmx's header
    r = await client.post("/logout", headers={"x-csrftoken": token}, follow_redirects=False)
    assert r.status_code == 303
    assert await pg.fetchval("SELECT count(*) FROM web_sessions") == 0


async def test_login_post_needs_the_csrf_token_too(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    await client.get("/login")  # has the cookie, but posts no token (a cross-site form)
    r = await client.post("/login", data={"email": "ann@example.com", "password": PASSWORD})
    assert r.status_code == 403
    assert await pg.fetchval("SELECT count(*) FROM web_sessions") == 0
    assert await pg.fetchval("SELECT count(*) FROM login_attempts") == 0


# --- API: bearer tokens only --------------------------------------------------------------------------------


async def test_bearer_token_works_on_the_api(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    user = await add_user(db_url, "ann@example.com", admin=True)
    token = await add_token(db_url, user.id)
    r = await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    assert r.json() == {
        "id": user.id,
        "email": "ann@example.com",
        "is_admin": True,
        "timezone": "UTC",
        "theme": "auto",
    }
    row = await pg.fetchrow("SELECT token_hash, prefix, last_used_at FROM api_tokens")
    assert row["token_hash"] != token
    assert token not in row["token_hash"]
    assert token.startswith(row["prefix"])
    assert row["last_used_at"] is not None


@pytest.mark.parametrize("host_skew_minutes", [0, -60])
async def test_token_last_used_at_is_written_at_most_once_a_minute(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, monkeypatch: Any, host_skew_minutes: int
) -> None:
    """Once a minute by the database's clock, which writes ``last_used_at``: on a web host an hour slow
    the token's "last used" stood still for that hour."""
    from datetime import UTC, datetime, timedelta

    from app import tokens

    class SkewedHost(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz or UTC) + timedelta(minutes=host_skew_minutes)

    monkeypatch.setattr(tokens, "datetime", SkewedHost, raising=False)
    user = await add_user(db_url, "ann@example.com")
    token = await add_token(db_url, user.id)
    auth = {"Authorization": f"Bearer {token}"}
    await client.get("/api/me", headers=auth)
    first = await pg.fetchval("SELECT last_used_at FROM api_tokens")
    await client.get("/api/me", headers=auth)
    assert await pg.fetchval("SELECT last_used_at FROM api_tokens") == first  # no write within the minute
    await pg.execute("UPDATE api_tokens SET last_used_at = last_used_at - interval '61 seconds'")
    await client.get("/api/me", headers=auth)
    assert await pg.fetchval("SELECT last_used_at FROM api_tokens") > first


async def test_api_ignores_the_session_cookie(client: AsyncTestClient, db_url: str) -> None:
    await add_user(db_url, "ann@example.com")
    await login(client, "ann@example.com")
    assert (await client.get("/")).status_code == 200  # the cookie is good for pages…
    r = await client.get("/api/me")  # …but never for the API
    assert r.status_code == 401
    assert "Bearer" in r.json()["detail"]


async def test_pages_ignore_bearer_tokens(client: AsyncTestClient, db_url: str) -> None:
    user = await add_user(db_url, "ann@example.com")
    token = await add_token(db_url, user.id)
    r = await client.get("/", headers={"Authorization": f"Bearer {token}"}, follow_redirects=False)
    assert r.status_code == 303


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer jd_not-a-real-token", "Basic YTpi", "Bearer " + "x" * 5000, "jd_abc"],
)
async def test_bad_or_missing_token_is_401_json(client: AsyncTestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    r = await client.get("/api/me", headers=headers)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["www-authenticate"] == "Bearer"
    assert set(r.json()) == {"detail"}
    assert "token" in r.json()["detail"]


async def test_revoked_and_expired_tokens_and_a_disabled_owner_are_refused_each_in_its_words(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    user = await add_user(db_url, "ann@example.com")
    token = await add_token(db_url, user.id)
    auth = {"Authorization": f"Bearer {token}"}
    assert (await client.get("/api/me", headers=auth)).status_code == 200
    await pg.execute("UPDATE users SET is_active = false")
    disabled = await client.get("/api/me", headers=auth)
    assert disabled.status_code == 401
    # it said "create one on your account page": a new token would be refused as well
    assert disabled.json()["detail"] == (
        "This API token's account is disabled: its tokens work again once an administrator enables the account."
    )
    await pg.execute("UPDATE users SET is_active = true")
    # expired and revoked each say so (the holder has the secret: nothing is revealed), in the owner's zone
    await pg.execute("UPDATE users SET timezone = 'Europe/Berlin'")
    await pg.execute("UPDATE api_tokens SET expires_at = '2026-03-01 09:30+00'")
    expired = await client.get("/api/me", headers=auth)
    assert expired.status_code == 401 and expired.headers["www-authenticate"] == "Bearer"
    assert expired.json()["detail"] == (
        "This API token expired on 1 Mar 2026, 10:30 CET. Create a new one on your account page (/account#tokens)."
    )
    await pg.execute("UPDATE api_tokens SET revoked_at = now()")
    revoked = await client.get("/api/me", headers=auth)
    assert revoked.status_code == 401 and revoked.json()["detail"] == (
        "This API token was revoked. Create a new one on your account page (/account#tokens)."
    )
    # a token that does not exist keeps the generic answer
    unknown = await client.get("/api/me", headers={"Authorization": f"Bearer {token[:-4]}AAAA"})
    assert unknown.status_code == 401 and "Missing or invalid API token" in unknown.json()["detail"]


async def test_api_post_needs_no_csrf_token_but_a_bearer(make_settings: Any, db_url: str) -> None:
    @post("/api/test-echo", guards=[], sync_to_thread=False)
    def echo(data: JSONBody[dict[str, Any]]) -> dict[str, Any]:
        return data

    from tests.support.webkit import create_app

    user = await add_user(db_url, "ann@example.com")
    token = await add_token(db_url, user.id)
    app = create_app(make_settings(worker_enabled=False))
    app.register(echo)
    async with AsyncTestClient(app=app) as c:
        r = await c.post("/api/test-echo", json={"a": 1}, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 201
        assert r.json() == {"a": 1}


# --- guards --------------------------------------------------------------------------------------------------


@get("/admin/test-only", guards=[requires_admin], sync_to_thread=False)
def admin_page() -> str:
    return "admin ok"


@get("/api/admin/test-only", guards=[requires_admin], sync_to_thread=False)
def admin_api() -> dict[str, str]:
    return {"ok": "admin"}


async def test_admin_guard(make_settings: Any, db_url: str) -> None:
    from tests.support.webkit import create_app

    ann = await add_user(db_url, "ann@example.com")
    boss = await add_user(db_url, "boss@example.com", admin=True)
    app = create_app(make_settings(worker_enabled=False))
    app.register(admin_page)
    app.register(admin_api)
    async with AsyncTestClient(app=app) as c:
        # anonymous: pages redirect to sign-in with next; API says 401
        r = await c.get("/admin/test-only?tab=1", follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == "/login?next=/admin/test-only%3Ftab%3D1"
        r = await c.get("/admin/test-only", headers={"HX-Request": "true"}, follow_redirects=False)
        assert r.status_code == 401
        assert r.headers["hx-redirect"].startswith("/login")
        assert (await c.get("/api/admin/test-only")).status_code == 401
        # a normal user: 403 (page and JSON)
        await login(c, "ann@example.com")
        r = await c.get("/admin/test-only")
        assert r.status_code == 403
        assert "administrators only" in r.text
        r = await c.get(
            "/api/admin/test-only", headers={"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
        )
        assert r.status_code == 403
        # API words: the client asked for no page
        assert r.json() == {"detail": "Only an administrator can use this API route."}
        # an admin: allowed
        c.cookies.clear()
        await login(c, "boss@example.com")
        r = await c.get("/admin/test-only")
        assert r.status_code == 200
        assert r.text == "admin ok"
        r = await c.get(
            "/api/admin/test-only", headers={"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
        )
        assert r.status_code == 200
