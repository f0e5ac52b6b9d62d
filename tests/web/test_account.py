"""The account page (/account): password change, time zone, theme, personal API tokens; the browser's
zone taken at the first sign-in; an administrator's password reset and what it makes the person do."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient

from app.auth import create_session
from app.db import create_engine
from tests.support.webkit import HX, PASSWORD, add_token, add_user, csrf_from, login, sign_in_as

NEW_PASSWORD = "a much better passphrase"


async def _csrf(client: AsyncTestClient) -> str:
    return csrf_from((await client.get("/account")).text)


async def _post(client: AsyncTestClient, path: str, **data: str) -> Any:
    return await client.post(path, data={**data, "_csrf_token": await _csrf(client)}, follow_redirects=False)


async def _other_session(db_url: str, user_id: int) -> str:
    from datetime import timedelta

    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            return await create_session(conn, user_id, max_age=timedelta(hours=1))
    finally:
        await engine.dispose()


async def test_password_change_signs_out_the_other_sessions_only(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    await _other_session(db_url, ann.id)
    token = await add_token(db_url, ann.id)
    assert await pg.fetchval("SELECT count(*) FROM web_sessions WHERE user_id = $1", ann.id) == 2

    wrong = await _post(
        client,
        "/account/password",
        current_password="nope nope",
        password=NEW_PASSWORD,
        password_repeat=NEW_PASSWORD,
    )
    assert wrong.status_code == 422
    assert 'id="e-current_password"' in wrong.text and "not your current password" in wrong.text
    differ = await _post(
        client,
        "/account/password",
        current_password=PASSWORD,
        password=NEW_PASSWORD,
        password_repeat="something else",
    )
    assert differ.status_code == 422 and 'id="e-password_repeat"' in differ.text
    short = await _post(
        client, "/account/password", current_password=PASSWORD, password="short", password_repeat="short"
    )
    assert short.status_code == 422 and 'id="e-password"' in short.text
    assert await pg.fetchval("SELECT count(*) FROM web_sessions WHERE user_id = $1", ann.id) == 2

    ok = await _post(
        client,
        "/account/password",
        current_password=PASSWORD,
        password=NEW_PASSWORD,
        password_repeat=NEW_PASSWORD,
    )
    assert ok.status_code == 303, ok.text
    assert ok.headers["location"] == "/account"  # the notice is a flash, not in the link
    # this browser stays signed in, the other session is gone, the API token still works
    assert await pg.fetchval("SELECT count(*) FROM web_sessions WHERE user_id = $1", ann.id) == 1
    page = await client.get("/account", follow_redirects=False)
    assert page.status_code == 200
    assert "1 other session signed out" in page.text
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})).status_code == 200
    assert (
        await pg.fetchval(
            "SELECT count(*) FROM audit_log WHERE action = 'account.password' AND user_id = $1", ann.id
        )
        == 1
    )
    client.cookies.clear()
    assert (await login(client, "ann@example.com", PASSWORD)).status_code == 401
    assert (await login(client, "ann@example.com", NEW_PASSWORD)).status_code == 303


async def _sign_in_with_zone(client: AsyncTestClient, email: str, zone: str) -> Any:
    page = await client.get("/login")
    assert 'name="timezone"' in page.text and "data-browser-zone" in page.text
    return await client.post(
        "/login",
        data={"email": email, "password": PASSWORD, "timezone": zone, "_csrf_token": csrf_from(page.text)},
        follow_redirects=False,
    )


async def test_first_sign_in_stores_the_browser_zone_and_times_show_its_abbreviation(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "ann@example.com")
    await add_user(db_url, "bob@example.com")
    # junk is ignored (the zone stays the default)
    assert (await _sign_in_with_zone(client, "bob@example.com", "Mars/Olympus_Mons")).status_code == 303
    assert await pg.fetchval("SELECT timezone FROM users WHERE email = 'bob@example.com'") == "UTC"

    client.cookies.clear()
    assert (await _sign_in_with_zone(client, "ann@example.com", "Europe/Copenhagen")).status_code == 303
    row = await pg.fetchrow("SELECT timezone, last_sign_in_at FROM users WHERE email = 'ann@example.com'")
    assert row["timezone"] == "Europe/Copenhagen" and row["last_sign_in_at"] is not None
    ann_id = await pg.fetchval("SELECT id FROM users WHERE email = 'ann@example.com'")
    await add_token(db_url, ann_id)
    page = (await client.get("/account")).text
    assert re.search(r"\d\d:\d\d (CET|CEST)</td>", page), "token times are shown in the person's zone"
    assert 'value="Europe/Copenhagen"' in page

    # a later sign-in from a browser elsewhere does not overwrite the zone
    client.cookies.clear()
    assert (await _sign_in_with_zone(client, "ann@example.com", "America/New_York")).status_code == 303
    assert await pg.fetchval("SELECT timezone FROM users WHERE id = $1", ann_id) == "Europe/Copenhagen"


async def test_time_zone_and_theme_are_saved_and_junk_is_a_field_error(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/account")
    assert '<html lang="en">' in page.text  # auto: no data-theme, the CSS follows prefers-color-scheme
    assert 'href="/schema"' in page.text
    assert "block notifications" not in page.text
    # the zone picker is searchable (a datalist) and has every zone, common ones first
    options = re.findall(r'<option value="([^"]+)">', page.text)
    assert options[0] == "UTC" and options.index("Europe/Copenhagen") < options.index("Africa/Abidjan")
    assert len(options) > 400 and "Pacific/Kiritimati" in options

    bad = await _post(client, "/account/timezone", timezone="Europe/Nowhere")
    assert bad.status_code == 422 and 'id="e-timezone"' in bad.text and 'value="Europe/Nowhere"' in bad.text
    good = await _post(client, "/account/timezone", timezone="Europe/Copenhagen")
    assert good.status_code == 303
    assert (
        await pg.fetchval("SELECT timezone FROM users WHERE email = 'ann@example.com'") == "Europe/Copenhagen"
    )
    # "Run later" starts in the person's zone, in the same searchable picker
    await pg.execute("UPDATE users SET is_admin = true WHERE email = 'ann@example.com'")
    form = (await client.get("/jobs/new/sleep")).text
    assert 'id="run-at-tz" name="_run_at_tz" value="Europe/Copenhagen" list="run-at-tz-zones"' in form
    await pg.execute("UPDATE users SET is_admin = false WHERE email = 'ann@example.com'")

    assert (await _post(client, "/account/theme", theme="purple")).status_code == 422
    assert (await _post(client, "/account/theme", theme="dark")).status_code == 303
    assert '<html lang="en" data-theme="dark">' in (await client.get("/jobs")).text
    assert (await _post(client, "/account/theme", theme="light")).status_code == 303
    assert '<html lang="en" data-theme="light">' in (await client.get("/")).text
    # choosing what is already chosen changes nothing: said so, and not in the trail
    same = await _post(client, "/account/theme", theme="light")
    assert same.status_code == 303
    assert "already light: nothing changed" in (await client.get("/account")).text
    assert (await _post(client, "/account/timezone", timezone="Europe/Copenhagen")).status_code == 303
    assert "already shown in Europe/Copenhagen: nothing changed" in (await client.get("/account")).text
    actions = await pg.fetch("SELECT action FROM audit_log WHERE user_email = 'ann@example.com' ORDER BY id")
    assert [a["action"] for a in actions] == ["account.timezone", "account.theme", "account.theme"]


async def test_the_e_mail_switch_shows_the_saved_choice_and_that_no_mail_server_is_set(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    # the account page showed the switch off whatever was saved, so a person who had switched it on saw
    # it off, and it never said that this server sends no e-mail (SMTP_HOST unset)
    await sign_in_as(client, db_url, "ann@example.com")
    switch = re.compile(r'<input type="checkbox" name="email" value="on" role="switch"( checked)?>')
    page = (await client.get("/account")).text
    assert switch.search(page).group(1) is None
    assert "no mail server set up (SMTP_HOST)" in page
    saved = await _post(client, "/notifications/email", email="on", next="/account")
    assert saved.status_code == 303 and saved.headers["location"] == "/account"
    assert await pg.fetchval("SELECT email_notifications FROM users WHERE email = 'ann@example.com'") is True
    assert switch.search((await client.get("/account")).text).group(1) == " checked"


async def test_personal_tokens_shown_once_work_expire_and_are_revoked(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await add_user(db_url, "bob@example.com")
    bob_token_id = await pg.fetchval("SELECT id FROM users WHERE email = 'bob@example.com'")
    await add_token(db_url, bob_token_id)
    await sign_in_as(client, db_url, "ann@example.com")

    assert (await _post(client, "/account/tokens", name="  ", expires_in_days="")).status_code == 422
    bad_days = await _post(client, "/account/tokens", name="export", expires_in_days="-3")
    assert bad_days.status_code == 422 and 'id="e-expires_in_days"' in bad_days.text

    made = await _post(client, "/account/tokens", name="nightly export", expires_in_days="30")
    assert made.status_code == 200
    token = re.search(r'id="secret-value" class="secret-value">(jd_[^<]+)<', made.text).group(1)
    assert 'data-copy="secret-value"' in made.text
    assert token not in (await client.get("/account")).text  # shown once
    auth = {"Authorization": f"Bearer {token}"}
    assert (await client.get("/api/me", headers=auth)).json()["email"] == "ann@example.com"
    row = await pg.fetchrow(
        "SELECT id, expires_at - created_at AS valid FROM api_tokens WHERE name = 'nightly export'"
    )
    assert row["valid"].days in (29, 30)

    # expired: refused by the API, marked on the page
    await pg.execute(
        "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1", row["id"]
    )
    assert (await client.get("/api/me", headers=auth)).status_code == 401
    assert "expired" in (await client.get("/account")).text
    await pg.execute("UPDATE api_tokens SET expires_at = now() + interval '1 day' WHERE id = $1", row["id"])
    assert (await client.get("/api/me", headers=auth)).status_code == 200

    # someone else's token is not found; one's own is revoked
    other = await _post(client, f"/account/tokens/{bob_token_id}/revoke")
    assert other.status_code == 404
    revoked = await _post(client, f"/account/tokens/{row['id']}/revoke")
    assert revoked.status_code == 303
    assert (await client.get("/api/me", headers=auth)).status_code == 401
    actions = [r["action"] for r in await pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    assert actions == ["account.token_create", "account.token_revoke"]


async def test_admin_reset_password_makes_the_person_choose_a_new_one(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    bob_token = await add_token(db_url, bob.id)
    await _other_session(db_url, bob.id)
    admin = await sign_in_as(client, db_url, "admin@example.com", admin=True)
    users_page = await client.get("/admin/users")
    csrf = csrf_from(users_page.text)
    assert f'id="reset-password-{bob.id}"' in users_page.text
    assert f'id="reset-password-{admin.id}"' not in users_page.text
    own = await client.post(f"/admin/users/{admin.id}/reset-password", data={"_csrf_token": csrf})
    assert own.status_code == 409

    reset = await client.post(f"/admin/users/{bob.id}/reset-password", data={"_csrf_token": csrf})
    assert reset.status_code == 200
    one_time = re.search(r'id="secret-value" class="secret-value">([^<]+)<', reset.text).group(1)
    assert 'data-copy="secret-value"' in reset.text and f'id="must-change-{bob.id}"' in reset.text
    assert await pg.fetchval("SELECT count(*) FROM web_sessions WHERE user_id = $1", bob.id) == 0
    entry = await pg.fetchrow(
        "SELECT outcome, detail FROM audit_log WHERE action = 'user.reset_password' ORDER BY id DESC LIMIT 1"
    )
    assert entry["outcome"] == "ok" and one_time not in entry["detail"]

    client.cookies.clear()
    signed_in = await login(client, "bob@example.com", one_time, next_path="/jobs")
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/account#password"
    for path in ("/", "/jobs", "/admin/users"):
        r = await client.get(path, follow_redirects=False)
        assert (r.status_code, r.headers.get("location")) == (303, "/account#password"), path
    r = await client.get("/jobs", headers=HX, follow_redirects=False)
    assert r.headers.get("hx-redirect") == "/account#password"
    page = await client.get("/account")
    assert page.status_code == 200 and 'id="must-change"' in page.text and 'id="token-form"' not in page.text
    # the API is not the browser session: the person's tokens keep working
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {bob_token}"})).status_code == 200

    done = await _post(
        client,
        "/account/password",
        current_password=one_time,
        password=NEW_PASSWORD,
        password_repeat=NEW_PASSWORD,
    )
    assert done.status_code == 303
    assert (await client.get("/jobs", follow_redirects=False)).status_code == 200
    assert not await pg.fetchval("SELECT must_change_password FROM users WHERE id = $1", bob.id)


async def test_users_list_shows_last_sign_in_and_pages_past_500(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "aaa-admin@example.com", admin=True)
    await pg.execute(
        "INSERT INTO users (email, password_hash) SELECT 'user' || lpad(n::text, 4, '0') || '@example.com', 'x' "
        "FROM generate_series(1, 520) n"
    )
    first = await client.get("/admin/users")
    assert first.status_code == 200
    assert first.text.count('<tr id="user-') == 500
    assert f'id="last-sign-in-{admin.id}"' in first.text and "last signed in" in first.text
    assert "never signed in" in first.text
    nxt = re.search(r'id="users-next" rel="next"', first.text)
    assert nxt
    href = (
        re.search(r'<a href="(/admin/users\?after=[^"]+)" id="users-next"', first.text)
        .group(1)
        .replace("&amp;", "&")
    )
    second = await client.get(href)
    assert second.text.count('<tr id="user-') == 21
    assert "user0520@example.com" in second.text and "user0499@example.com" in first.text
    assert "user0499@example.com" not in second.text
    assert 'id="users-next"' not in second.text


def test_only_zone_names_a_picker_offers_are_taken_from_outside() -> None:
    from app.formatting import COMMON_ZONES, known_zone, zone_names

    names = zone_names()
    assert names[: len(COMMON_ZONES)] == COMMON_ZONES and len(set(names)) == len(names) > 400
    assert known_zone("Europe/Copenhagen") == "Europe/Copenhagen"
    for junk in (
        "localtime",
        "Factory",
        "posix/Europe/Berlin",
        "../../etc/passwd",
        "Mars/Base",
        "",
        None,
        "UTC\x00",
    ):
        assert known_zone(junk) is None, junk


async def test_a_token_name_with_a_direction_override_does_not_turn_the_words_after_it(
    client: AsyncTestClient, db_url: str
) -> None:
    """The answer's notice "API token “…” created." and the label above the secret set the name apart
    (FSI … PDI): left open, U+202E in the name reversed "” created." after it."""
    await sign_in_as(client, db_url, "ann@example.com")
    made = await _post(client, "/account/tokens", name="\u202enightly", expires_in_days="")
    assert made.status_code == 200
    assert "API token “\u2068\u202enightly\u202c\u2069” created." in made.text
    assert "Your new API token “\u2068\u202enightly\u202c\u2069”" in made.text


async def test_a_value_refused_for_its_length_is_shown_again_as_typed_not_cut_to_the_limit(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """The token forms (the account page's and an admin's for a user) and the admin's new-user form
    showed a value refused for its length cut to that length: "must be at most 100 characters (it has
    150)" beside a field holding 100, which a second press then took, cut, without a word."""
    from html import unescape

    def shown(page: str, field: str) -> str:
        match = re.search(rf'<input[^>]*name="{field}"[^>]*value="([^"]*)"', page)
        assert match, field
        return unescape(match.group(1))

    await sign_in_as(client, db_url, "ann@example.com", admin=True)
    name = "n" * 150
    mine = await _post(client, "/account/tokens", name=name, expires_in_days="12345678901")
    assert mine.status_code == 422
    assert shown(mine.text, "name") == name
    assert shown(mine.text, "expires_in_days") == "12345678901"
    bob = await add_user(db_url, "bob@example.com")
    theirs = await _post(client, f"/admin/users/{bob.id}/tokens", name=name)
    assert theirs.status_code == 422
    assert shown(theirs.text, "name") == name
    email = "e" * 300 + "@example.com"
    user = await _post(client, "/admin/users", email=email, password="")
    assert user.status_code == 422
    assert shown(user.text, "email") == email
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == 0


async def test_a_token_expires_days_after_it_is_made_by_the_database_clock_on_a_skewed_host(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, monkeypatch: Any
) -> None:
    """A token asked for one day lives one day by the clock that refuses it (the database's ``now()``),
    whatever the clock of the web host that made it: a host three days slow handed out a one-day token
    already expired (the page showed it as new, every request with it was a 401), and a fast one a token
    that outlived its day by three."""
    from datetime import UTC, datetime, timedelta

    from app.actions import account as account_actions

    await sign_in_as(client, db_url, "ann@example.com")
    for skew in (timedelta(days=-3), timedelta(days=3)):

        class SkewedHost(datetime):
            off = skew

            @classmethod
            def now(cls, tz: Any = None) -> Any:
                return datetime.now(tz or UTC) + cls.off

        monkeypatch.setattr(account_actions, "datetime", SkewedHost)
        name = f"skew {skew.days}"
        made = await _post(client, "/account/tokens", name=name, expires_in_days="1")
        assert made.status_code == 200, made.text[-500:]
        token = re.search(r'id="secret-value" class="secret-value">(jd_[^<]+)<', made.text).group(1)
        me = await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200, (skew, me.text)
        left = await pg.fetchval("SELECT expires_at - now() FROM api_tokens WHERE name = $1", name)
        assert timedelta(hours=23) < left <= timedelta(days=1), (skew, left)
