"""A new person's e-mail address needs a domain of at least two labels: ``a@b`` was accepted (web form,
CLI), an account no e-mail could reach. The one rule is :func:`app.auth.normalize_email`, which
:func:`app.auth.create_user` — every way a user is made — goes through."""

from __future__ import annotations

import pytest

from app.auth import create_user, normalize_email
from app.db import create_engine
from app.errors import BadInput


async def refused_by_create_user(email: str, db_url: str) -> None:
    """``email`` is refused by :func:`create_user` too, the way every account is made."""
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            with pytest.raises(BadInput):
                await create_user(conn, email, "a long enough password")
    finally:
        await engine.dispose()


@pytest.mark.parametrize("email", ["a@b", "a@b.", "a@.b", "a@b..c", "a@@b.c", "a b@c.d"])
async def test_an_address_without_a_real_domain_is_refused(email: str, db_url: str) -> None:
    with pytest.raises(BadInput) as caught:
        normalize_email(email)
    assert caught.value.errors["email"] == "Enter an email address like you@example.com."
    await refused_by_create_user(email, db_url)


def test_ordinary_addresses_pass() -> None:
    for email in ("ann@example.com", "A.B+c@mail.example.co.uk", "x@xn--bcher-kva.example"):
        assert normalize_email(email) == email.lower()


@pytest.mark.parametrize("hidden", ["\u202e", "\u200b", "\u2066", "\u00ad", "\ufeff"])
async def test_an_address_holding_an_invisible_character_is_refused(hidden: str, db_url: str) -> None:
    """A direction override (U+202E) reverses the words after an address on every page and message that
    names it, and a zero-width space makes a look-alike of another person's: refused at the one rule."""
    email = f"ann{hidden}@example.com"
    with pytest.raises(BadInput) as caught:
        normalize_email(email)
    assert caught.value.errors["email"].startswith("An email address cannot hold invisible characters")
    await refused_by_create_user(email, db_url)
