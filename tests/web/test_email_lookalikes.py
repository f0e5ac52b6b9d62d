"""An address that differs from an account's only by Unicode compatibility forms (fullwidth
``ａｌｉｃｅ``) or by case is that account's address (:mod:`app.emails`): creating it again is refused
as "already exists" on every path that creates accounts (the admins' page, ``jobdesk create-user``), it
signs in as the same person (and its failures count against that person's sign-in limits), and every
lookup by address finds that person. Stored addresses are migrated to their key (migration 0025); two
accounts that now collide are both kept and named, never a failed migration."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app import audit as audit_log
from app import auth, demo, signin
from app.actions import schedules as schedule_actions
from app.db import asyncpg_dsn, create_engine, run_migrations
from app.emails import email_key
from app.errors import RateLimited
from app.jobs import approvals
from tests.support.cli import assert_clean_failure, run
from tests.support.webkit import PASSWORD, add_token, csrf, login, sign_in_as

ALICE = "alice@example.com"
FULLWIDTH = "ａｌｉｃｅ＠ｅｘａｍｐｌｅ．ｃｏｍ"
LOOKALIKES = (FULLWIDTH, "ＡＬＩＣＥ@example.com", "Alice@EXAMPLE.com", " ａｌｉｃｅ@example.com ")


async def test_a_lookalike_is_the_same_account_on_the_page_at_sign_in_and_in_lookups(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)

    async def create(email: str) -> str:
        data = {"_csrf_token": await csrf(client), "email": email, "password": PASSWORD}
        return (await client.post("/admin/users", data=data)).text

    await create(ALICE)
    for email in LOOKALIKES:
        assert f"A user with the email {ALICE} already exists." in await create(email), email
    assert await pg.fetchval("SELECT count(*) FROM users WHERE email <> 'root@example.com'") == 1
    # a new address is stored as its key
    await create("Ｂｏｂ@Example.com")
    assert await pg.fetchval("SELECT email FROM users WHERE email LIKE 'b%'") == "bob@example.com"
    # and so in the audit trail, whose filter by address finds the admin by a look-alike
    created = "SELECT user_email, detail->>'email' FROM audit_log WHERE action = 'user.create' ORDER BY id"
    assert [tuple(r) for r in await pg.fetch(created)][-1] == ("root@example.com", "bob@example.com")
    trail = (await client.get("/admin/audit", params={"user": "ＲＯＯＴ@example.com"})).text
    assert "bob@example.com" in trail and "No entry matches" not in trail
    alice_id = await pg.fetchval("SELECT id FROM users WHERE email = $1", ALICE)

    # sign-in: a lookalike signs in as alice; its failures are alice's
    client.cookies.clear()
    assert (await login(client, FULLWIDTH, "wrong password")).status_code != 303
    failed = "SELECT array_agg(DISTINCT email) FROM login_attempts WHERE NOT ok"
    assert await pg.fetchval(failed) == [ALICE]
    for email in LOOKALIKES:
        client.cookies.clear()
        r = await login(client, email)
        assert r.status_code == 303, (email, r.text)
    assert await pg.fetchval("SELECT count(*) FROM web_sessions WHERE user_id = $1", alice_id) == len(
        LOOKALIKES
    )

    # lookups by address: the command line's, a schedule's owner, a step's approvers, the demo's
    async with engine.begin() as conn:
        for email in LOOKALIKES:
            assert (await auth.get_user_by_email(conn, email)).id == alice_id
            assert (await schedule_actions.owner_of(conn, admin, email)).id == alice_id
            assert (await demo._demo_user(engine, email))["id"] == alice_id
        spec = approvals.parse_step({"requires_approval": True, "approvers": list(LOOKALIKES)}, "steps[0]")
        assert spec is not None and spec.approvers == (ALICE,)
        rule = await approvals.resolve(conn, spec, admin.id, "steps[0]")
        assert rule.user_ids == frozenset({alice_id})
    # the admins' jobs filter by owner
    await sign_in_as(client, db_url, "root2@example.com", admin=True)
    page = (await client.get("/admin/jobs", params={"owner": FULLWIDTH})).text
    assert "No user has this e-mail address." not in page


async def test_the_command_line_refuses_a_lookalike_and_finds_the_account_by_it(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection
) -> None:
    assert run(tmp_path, "create-user", ALICE, DATABASE_URL=db_url).returncode == 0
    assert_clean_failure(
        run(tmp_path, "create-user", FULLWIDTH, DATABASE_URL=db_url),
        f"A user with the email {ALICE} already exists.",
    )
    issued = run(tmp_path, "create-token", "ＡＬＩＣＥ@example.com", DATABASE_URL=db_url)
    assert issued.returncode == 0, issued.stderr
    assert await pg.fetchval("SELECT count(*) FROM users") == 1
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == 1


async def test_the_migration_keys_stored_addresses_and_keeps_both_of_a_colliding_pair(
    fresh_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await run_migrations(fresh_db_url, "0024")
    pg = await asyncpg.connect(asyncpg_dsn(fresh_db_url))
    try:
        stored = [
            ALICE,
            "ａｌｉｃｅ@example.com",
            "ｃａｒｏｌ@example.com",
            "straße@example.de",
            "dave@example.com",
        ]
        ids = [
            await pg.fetchval("INSERT INTO users (email, password_hash) VALUES ($1, 'x') RETURNING id", e)
            for e in stored
        ]
        with caplog.at_level(logging.WARNING):
            await run_migrations(fresh_db_url)
        rows = dict(await pg.fetch("SELECT id, email FROM users"))
        assert [rows[i] for i in ids] == [
            ALICE,
            "ａｌｉｃｅ@example.com",  # its key is taken: kept as it was, named in a warning
            "carol@example.com",
            "strasse@example.de",
            "dave@example.com",
        ]
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "'ａｌｉｃｅ@example.com'" in warned[0] and ALICE in warned[0], warned
    finally:
        await pg.close()


def test_the_key_of_a_key_is_itself_and_lower_case() -> None:
    # what is stored is looked up again by the same rule, and meets the table's lower-case check
    from app.emails import folded

    for cp in range(0x10000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        key = folded(f"a{chr(cp)}@example.com")
        assert folded(key) == key and key.lower() == key, hex(cp)


async def test_the_migration_keys_sign_in_attempts_and_the_addresses_in_the_audit_trail(
    fresh_db_url: str,
) -> None:
    """Migration 0026: the sign-in attempts and audit entries written before 0025, in the forms the
    addresses then had, are counted and found by the key as new ones are: the sign-in limits count a
    fullwidth address's failures against the account, and ``/admin/audit``'s filter by address finds an
    admin's entries. An address an account kept at 0025 (its key was another's) stays with that account."""
    await run_migrations(fresh_db_url, "0025")
    pg = await asyncpg.connect(asyncpg_dsn(fresh_db_url))
    try:
        boss = await pg.fetchval(
            "INSERT INTO users (email, password_hash, is_admin) VALUES ('strasse@example.de', 'x', true) "
            "RETURNING id"
        )
        # kept at 0025: its key is alice's
        kept = await pg.fetchval(
            "INSERT INTO users (email, password_hash) VALUES ('ａｌｉｃｅ@example.com', 'x') RETURNING id"
        )
        await pg.fetchval("INSERT INTO users (email, password_hash) VALUES ($1, 'x') RETURNING id", ALICE)
        # five failures typed fullwidth from one address: the per-address lock, under the old form
        for _ in range(signin.LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP):
            await pg.execute(
                "INSERT INTO login_attempts (email, ip, ok) VALUES ($1, '192.0.2.1', false)",
                "ｃａｒｏｌ＠ｅｘａｍｐｌｅ．ｃｏｍ",
            )
        await pg.execute(
            "INSERT INTO login_attempts (email, ip, ok) VALUES ('dave@example.com', '192.0.2.2', false)"
        )
        entry = (
            "INSERT INTO audit_log (user_id, user_email, action, target_type, outcome, detail) "
            "VALUES ($1, $2, $3, 'user', 'ok', CAST($4 AS jsonb))"
        )
        await pg.execute(
            entry, boss, "straße@example.de", "user.create", '{"email": "Ｃａｒｏｌ@example.com"}'
        )
        await pg.execute(
            entry, boss, "straße@example.de", "schedule.create", '{"owner": "straße@example.de"}'
        )
        await pg.execute(
            entry, kept, "ａｌｉｃｅ@example.com", "account.theme", '{"email": "ａｌｉｃｅ@example.com"}'
        )
        await pg.execute(entry, None, "command line", "user.unlock", '{"email": ["not", "an address"]}')

        await run_migrations(fresh_db_url)

        attempts = await pg.fetch("SELECT DISTINCT email FROM login_attempts ORDER BY email")
        assert [r["email"] for r in attempts] == ["carol@example.com", "dave@example.com"]
        audit = await pg.fetch("SELECT user_email, detail::text AS detail FROM audit_log ORDER BY id")
        assert [(r["user_email"], json.loads(r["detail"])) for r in audit] == [
            ("strasse@example.de", {"email": "carol@example.com"}),
            ("strasse@example.de", {"owner": "strasse@example.de"}),
            ("ａｌｉｃｅ@example.com", {"email": "ａｌｉｃｅ@example.com"}),  # its account's address
            ("command line", {"email": ["not", "an address"]}),
        ]
    finally:
        await pg.close()
    # what the app does with them: the lock-out counts the old failures, the filter finds the entries
    engine = create_engine(fresh_db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            with pytest.raises(RateLimited):
                await signin.check_rate_limit(conn, signin.clean_email("Carol@example.com"), "192.0.2.1")
            found = await audit_log.entries(conn, user_email=email_key("Straße@example.de"))
        assert [e["action"] for e in found] == ["schedule.create", "user.create"]
    finally:
        await engine.dispose()


async def test_lock_outs_belong_to_the_account_they_were_counted_for_when_two_addresses_collide(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """An account that kept its address at migration 0025 (its key is another account's) is never signed
    in to by it: every failure typed as either address is counted under the key, which is the other
    account's. So the lock-out is the other account's alone: ``/admin/users`` shows it on that account
    only, and unlocking the one that kept its address forgets nothing of the other's (it was "Nothing
    changed", and the other account was unlocked behind the admin's back)."""
    boss = await sign_in_as(client, db_url, "root@example.com", admin=True)
    bearer = {"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
    alice = await pg.fetchval("INSERT INTO users (email, password_hash) VALUES ($1, 'x') RETURNING id", ALICE)
    kept = await pg.fetchval(
        "INSERT INTO users (email, password_hash) VALUES ('ａｌｉｃｅ@example.com', 'x') RETURNING id"
    )
    await pg.execute(
        "INSERT INTO login_attempts (email, ip, ok) SELECT $1, '192.0.2.' || i, false FROM generate_series(1, $2) i",
        email_key(FULLWIDTH),
        signin.LOGIN_MAX_FAILURES_PER_EMAIL,
    )
    page = (await client.get("/admin/users")).text
    assert f'id="locked-{alice}"' in page and f'id="locked-{kept}"' not in page

    refused = await client.post(f"/api/users/{kept}/unlock", headers=bearer)
    assert refused.status_code == 409, refused.text
    assert "no failed sign-ins" in refused.json()["detail"]
    assert (
        await pg.fetchval("SELECT count(*) FROM login_attempts WHERE NOT ok")
        == signin.LOGIN_MAX_FAILURES_PER_EMAIL
    )
    page = (await client.get("/admin/users")).text
    assert f'id="locked-{alice}"' in page, "the other account's lock-out was lifted"

    unlocked = await client.post(f"/api/users/{alice}/unlock", headers=bearer)
    assert unlocked.status_code == 200, unlocked.text
    assert await pg.fetchval("SELECT count(*) FROM login_attempts WHERE NOT ok") == 0
