"""API tokens: creating, listing and revoking them, finding the person a request's token belongs to, and
the rule that a token cannot hand out a lasting credential (the accounts they belong to are
:mod:`app.auth`).

Tokens are random; only their SHA-256 is stored, with a short display prefix. The plaintext is returned
once, by :func:`create_token`. A token may expire (``expires_at``); from then on it is refused like a
revoked one. The 401 of a token that exists says why it was refused (revoked, expired and when, its
account disabled): its holder has the secret, so this reveals nothing; an unknown token gets the
generic 401.

Functions that take ``db`` accept an ``AsyncConnection`` or an ``AsyncSession`` and never commit.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.auth import USER_COLUMNS, CurrentUser, Db, secret_digest, user_of
from app.db import read_rows, write_rows
from app.errors import BadInput, Conflict, Forbidden, NotFound
from app.formatting import format_localtime, zone
from app.jobs.input_words import value_shown
from app.jobs.payload import check_text

TOKEN_PREFIX = "jd_"

#: ``api_tokens.last_used_at`` is written at most this often per token, so API traffic does not
#: turn every request into a write.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)

TOKEN_NAME_MAX = 100


def token_name(name: Any) -> str:
    """A token's label on one line (runs of white space become one space).

    Raises:
        BadInput: on ``name``: not text, text PostgreSQL cannot store (a NUL, a lone surrogate), or longer
        than :data:`TOKEN_NAME_MAX` characters — refused like any other name, not altered or cut.
    """
    if name is None:
        return ""
    if not isinstance(name, str):
        raise BadInput.field("name", f"must be text, not {value_shown(name)}")
    check_text(name, "name")
    label = " ".join(name.split())
    if len(label) > TOKEN_NAME_MAX:
        raise BadInput.field("name", f"must be at most {TOKEN_NAME_MAX:,} characters (it has {len(label):,})")
    return label


async def create_token(
    db: Db, user_id: int, name: str = "", *, expires_in_days: int | None = None
) -> tuple[str, int, datetime | None]:
    """Create an API token for ``user_id``; return ``(plaintext, token_id, expires_at)``. ``expires_in_days``
    days after it is stored (when given) the token is refused like a revoked one: that moment is the
    database's ``now()`` plus the days, the clock :data:`_TOKEN_USER` compares it with, never the web
    host's, whose clock may be off.

    The plaintext (``jd_`` + 43 URL-safe chars) is not stored and cannot be shown again; the row keeps
    its SHA-256 and a display prefix (the first 10 characters).

    Raises:
        Conflict: the account is disabled (or gone): every request with the token would be refused, so
        handing it out (on the command line, by an admin) would only mislead whoever receives it.
    """
    name = token_name(name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    # The account is checked in the insert itself, so an account disabled meanwhile gets no token either.
    made = (
        await db.execute(
            text(
                "INSERT INTO api_tokens (user_id, name, prefix, token_hash, expires_at) "
                "SELECT id, :name, :prefix, :hash, now() + make_interval(days => CAST(:days AS integer)) "
                "FROM users WHERE id = :user_id AND is_active RETURNING id, expires_at"
            ),
            {
                "user_id": user_id,
                "name": name,
                "prefix": token[:10],
                "hash": secret_digest(token),
                "days": expires_in_days,
            },
        )
    ).first()
    if made is None:
        raise Conflict(
            "This account is disabled: an API token for it would be refused. Enable the account first."
        )
    return token, made.id, made.expires_at


_USER_TOKENS = text(
    "SELECT id, name, prefix, created_at, last_used_at, expires_at, "
    "(expires_at IS NOT NULL AND expires_at <= now()) AS expired "
    "FROM api_tokens WHERE user_id = :user_id AND revoked_at IS NULL ORDER BY id DESC"
)


async def user_tokens(db: Db, user_id: int) -> list[dict[str, Any]]:
    """The user's tokens that are not revoked (expired ones included, marked ``expired``), newest first,
    without secrets: ``id, name, prefix, created_at, last_used_at, expires_at, expired``."""
    return [dict(r) for r in (await db.execute(_USER_TOKENS, {"user_id": user_id})).mappings()]


async def revoke_token(db: Db, token_id: int, *, user_id: int | None = None) -> None:
    """Revoke a token (its owner's, when ``user_id`` is given).

    Raises:
        NotFound: no such live token (or not this user's).
    """
    if not 0 < token_id < 2**31:  # an integer column: a larger id names no token
        raise NotFound("No such API token.")
    revoked = (
        await db.execute(
            text(
                "UPDATE api_tokens SET revoked_at = now() WHERE id = :id AND revoked_at IS NULL "
                "AND (CAST(:user_id AS integer) IS NULL OR user_id = :user_id) RETURNING id"
            ),
            {"id": token_id, "user_id": user_id},
        )
    ).first()
    if revoked is None:
        raise NotFound("No such API token.")


# Revoked and expired tokens are found too, so that their holder is told which (they hold the secret:
# saying so reveals nothing); an unknown token gets the generic answer.
# ``touch``: whether ``last_used_at`` is due to be written again, judged by the database's clock that wrote
# it (a web host an hour slow never found it a minute old, and "last used" stood still for that hour).
_TOKEN_USER = text(
    f"SELECT t.id AS token_id, t.last_used_at, t.revoked_at IS NOT NULL AS revoked, t.expires_at, "
    f"t.expires_at <= now() AS expired, u.is_active, {USER_COLUMNS}, "
    "(t.last_used_at IS NULL OR t.last_used_at < now() - make_interval(secs => :secs)) AS touch "
    "FROM api_tokens t JOIN users u ON u.id = t.user_id "
    "WHERE t.token_hash = :hash"
)

DISABLED_ACCOUNT = (
    "This API token's account is disabled: its tokens work again once an administrator enables the account."
)
"""Why a live token was refused (``scope["state"]["token_refusal"]``, the 401's words): its account is
disabled. The 401 says so, instead of asking its owner to create a token that would be refused as well."""
REVOKED = "This API token was revoked. Create a new one on your account page (/account#tokens)."
_TOKEN_TOUCH = text(
    "UPDATE api_tokens SET last_used_at = now() WHERE id = :id "
    "AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => :secs))"
)


def expired_words(expires_at: datetime, timezone: str | None) -> str:
    """The 401's words for an expired token: when it expired, in its owner's time zone."""
    when = format_localtime(expires_at, zone(timezone))
    return f"This API token expired on {when}. Create a new one on your account page (/account#tokens)."


async def token_holder(engine: AsyncEngine, token: str) -> CurrentUser | str | None:
    """The active user owning the live (not revoked, not expired) API token ``token``; the words of the
    401 when the token exists but was revoked (:data:`REVOKED`), has expired (:func:`expired_words`) or
    its account is disabled (:data:`DISABLED_ACCOUNT`); ``None`` for a token that does not exist.

    One indexed lookup (``api_tokens.token_hash`` is unique), in autocommit on the asyncpg connection
    (:func:`app.db.read_rows`: one round trip instead of ``BEGIN``, the lookup and ``ROLLBACK``, on every
    API request); ``last_used_at`` is updated at most once per :data:`TOKEN_TOUCH_INTERVAL`, by one
    autocommit statement of its own.
    """
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    secs = TOKEN_TOUCH_INTERVAL.total_seconds()
    rows = await read_rows(engine, _TOKEN_USER, {"hash": secret_digest(token), "secs": secs})
    if not rows:
        return None
    row = rows[0]
    if row["revoked"]:
        return REVOKED
    if row["expired"]:
        return expired_words(row["expires_at"], row["timezone"])
    if not row["is_active"]:
        return DISABLED_ACCOUNT
    if row["touch"]:
        await write_rows(engine, _TOKEN_TOUCH, {"id": row["token_id"], "secs": secs})
    return replace(user_of(row), token_id=row["token_id"])


TOKENS_FROM_THE_PAGE = (
    "API tokens are created and revoked on your account page (/account), signed in with your password: "
    "a token cannot make or revoke tokens."
)


RESETS_FROM_THE_PAGE = (
    "Passwords are reset on the users page (/admin/users), signed in with your password: "
    "a request made with an API token cannot reset a password."
)


def require_signed_in_browser(actor: Any, refusal: str = TOKENS_FROM_THE_PAGE) -> None:
    """Acts that hand out a lasting credential need a browser session, whatever the path: a request made
    with a token may not. Otherwise a stolen token could mint one that never expires (then revoke the
    stolen one), or reset another person's password (an admin's too) and sign in as them, and its
    owner's revocation or the stolen token's expiry would no longer end the access. ``refusal`` says
    where to do it instead.

    Raises:
        Forbidden: the actor acts through an API token.
    """
    # an action's Actor carries the person in ``user``: its own ``token_id`` is none, and was let through
    person = getattr(actor, "user", actor)
    if getattr(person, "token_id", None) is not None:
        raise Forbidden(refusal)
