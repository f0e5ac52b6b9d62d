"""Passwords have a longest length (:data:`app.auth.MAX_PASSWORD_LENGTH`): setting a longer one is an
error beside the field (a form, the admins' user form, the CLI all go through one rule), and signing in
with one is a failed sign-in answered without hashing it — argon2 over a 20 MB password took seconds of
CPU per attempt. The sign-in and password forms refuse a field they have not, as the other forms do."""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app import auth
from app.errors import BadInput
from tests.support.webkit import PASSWORD, csrf_from, sign_in_as

LONG = "p" * (auth.MAX_PASSWORD_LENGTH + 1)


async def _post(client: AsyncTestClient, path: str, **data: str) -> Any:
    token = csrf_from((await client.get("/account" if path.startswith("/account") else "/login")).text)
    return await client.post(path, data={**data, "_csrf_token": token}, follow_redirects=False)


@pytest.mark.usefixtures("real_password_hashing")  # "not hashed" means something only at a hash's real cost
def test_the_rule_refuses_a_password_over_the_limit() -> None:
    auth.check_password_rules("p" * auth.MAX_PASSWORD_LENGTH)
    with pytest.raises(BadInput) as caught:
        auth.check_password_rules(LONG)
    assert caught.value.errors["password"] == "Use at most 1,024 characters (this one has 1,025)."
    stored = auth.hash_password("p" * 10)
    started = time.monotonic()
    assert not auth.verify_password(stored, "p" * 20_000_000)
    assert time.monotonic() - started < 0.1  # not hashed


async def test_the_password_form_says_so_beside_the_field(client: AsyncTestClient, db_url: str) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    r = await _post(
        client, "/account/password", current_password=PASSWORD, password=LONG, password_repeat=LONG
    )
    assert r.status_code == 422 and 'id="e-password"' in r.text, r.text[-2000:]
    assert "Use at most 1,024 characters (this one has 1,025)." in r.text
    r = await _post(
        client,
        "/account/password",
        current_password=PASSWORD,
        password="a much better passphrase",
        password_repeat="a much better passphrase",
        is_admin="1",
    )
    assert r.status_code == 422 and "This form has no field &#39;is_admin&#39;" in r.text, r.text[-2000:]


@pytest.mark.usefixtures("real_password_hashing")
async def test_signing_in_with_an_over_long_password_fails_without_hashing(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    client.cookies.clear()
    started = time.monotonic()
    r = await _post(client, "/login", email="ann@example.com", password="p" * 1_000_000)
    assert r.status_code == 401 and "Wrong email or password." in r.text
    assert time.monotonic() - started < 1.5
    failed = "SELECT count(*) FROM login_attempts WHERE NOT ok"
    assert await pg.fetchval(failed) == 1  # counted like any failure
    r = await _post(client, "/login", email="ann@example.com", password=PASSWORD, junk="x" * 100)
    assert r.status_code == 422 and "This form has no field &#39;junk&#39;; you were not signed in" in r.text
    r = await _post(client, "/login", email="ann@example.com", password=PASSWORD)
    assert r.status_code == 303


async def test_the_admins_create_user_form_says_the_longest_password(
    client: AsyncTestClient, db_url: str
) -> None:
    """The account page said "at most 1,024 characters"; the admins' form to create a user, which takes
    a password through the same rule, said only the shortest."""
    await sign_in_as(client, db_url, "boss@example.com", admin=True)
    page = (await client.get("/admin/users")).text
    help_text = page.split('id="h-password"', 1)[1].split("</small>", 1)[0]
    assert (
        f"At least {auth.MIN_PASSWORD_LENGTH} and at most {auth.MAX_PASSWORD_LENGTH:,} characters."
        in help_text
    )
