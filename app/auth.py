"""Accounts: passwords, users, browser sessions, and the guards built on them. API tokens are
:mod:`app.tokens`.

Rules:

* Passwords are hashed with argon2id (argon2-cffi's defaults); emails are stored lower-cased.
* API tokens are random; only their SHA-256 is stored (:func:`secret_digest`, as a session's), with a
  short display prefix (:mod:`app.tokens`).
* A person whose password an administrator reset (``users.must_change_password``) is sent from every
  page to the account's password form until they choose a new one (:data:`MUST_CHANGE_OPEN`); their API
  tokens are not affected.
* A browser session is a random token in an HttpOnly, SameSite=Lax cookie (``Secure`` when
  ``JOBDESK_BASE_URL`` is https); the ``web_sessions`` row holds its SHA-256, so deleting the row signs
  the browser out server-side.
* Paths under ``/api/`` authenticate ONLY with ``Authorization: Bearer <token>`` (never the cookie, so
  the API needs no CSRF token); every other path ONLY with the session cookie.
* Sign-in itself — the password check and its limits over ``login_attempts`` — is :mod:`app.signin`.
* Disabled users (``is_active = false``) can neither sign in nor use their tokens or sessions.

Functions that take ``db`` accept an ``AsyncConnection`` or an ``AsyncSession`` and never commit: the
caller owns the transaction, so an account change commits together with its audit entry.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.db import read_rows
from app.emails import MAX_LENGTH as MAX_EMAIL_LENGTH
from app.emails import NOT_TYPABLE, email_key, folded
from app.errors import BadInput, Conflict, Forbidden, NotFound, Unauthorized

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers.base import BaseRouteHandler
    from litestar.types import Scope

Db = AsyncConnection | AsyncSession

SESSION_COOKIE = "jobdesk_session"
API_PREFIX = "/api/"

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024
"""Longest password one may set; a longer one matches no account (:func:`verify_password`) and is not
hashed: argon2 over megabytes of text took seconds of CPU per sign-in attempt."""
# a local part, then a domain of at least two dot-separated labels (``a@b`` reaches no one outside the
# machine it was typed on); no spaces, control characters or a second ``@``
_EMAIL_RE = re.compile(r"^[^@\s\x00-\x1f\x7f]+@(?:[^@\s\x00-\x1f\x7f.]+\.)+[^@\s\x00-\x1f\x7f.]+$")

_hasher = PasswordHasher()


@functools.cache
def dummy_hash() -> str:
    """Verified against when the email is unknown, so a wrong email costs as much time as a wrong
    password. Made on first use, not at import: hashing takes ~50 ms (seconds on a busy machine), and
    the worker and the command line import this module without signing anyone in. The web server makes
    it at start-up (:func:`app.server.create_app`), so the first unknown email is not slower either."""
    return _hasher.hash("jobdesk-dummy-password")


@dataclass(frozen=True, slots=True)
class CurrentUser:
    """The signed-in person of a request (``request.user``); ``None`` there means anonymous.

    ``timezone`` is an IANA name (e.g. ``Europe/Berlin``) used to show times; ``theme`` is ``auto``
    (the browser's ``prefers-color-scheme``), ``light`` or ``dark``; ``must_change_password`` is set by an
    administrator's password reset until the person chooses a new password; ``token_id`` is the API
    token the request came with (``None``: a browser session, the command line, a schedule's owner).
    """

    id: int
    email: str
    is_admin: bool
    timezone: str = "UTC"
    theme: str = "auto"
    must_change_password: bool = False
    token_id: int | None = None


#: The columns :func:`user_of` reads, for every query that builds a :class:`CurrentUser`.
USER_COLUMNS = "u.id, u.email, u.is_admin, u.timezone, u.theme, u.must_change_password"


def user_of(row: Any) -> CurrentUser:
    """A :class:`CurrentUser` from a row (or mapping) holding :data:`USER_COLUMNS`."""
    m = row if isinstance(row, dict) else row._mapping
    return CurrentUser(
        m["id"], m["email"], m["is_admin"], m["timezone"], m["theme"], bool(m["must_change_password"])
    )


# --- passwords ----------------------------------------------------------------------------------------


def hash_password(password: str) -> str:
    """argon2id hash (PHC string) of ``password``. CPU-heavy (~50 ms): call it off the event loop."""
    return _hasher.hash(password)


def password_needs_rehash(password_hash: str) -> bool:
    """Whether ``password_hash`` was made with weaker parameters than today's (rehash it at sign-in)."""
    return _hasher.check_needs_rehash(password_hash)


def verify_password(password_hash: str, password: str) -> bool:
    """Whether ``password`` matches ``password_hash``; a malformed hash counts as no match, and so does a
    password longer than any that can be set (:data:`MAX_PASSWORD_LENGTH`), without hashing it."""
    if len(password) > MAX_PASSWORD_LENGTH:
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def generate_password() -> str:
    """A random password for ``jobdesk create-user`` without ``--password-stdin`` (16 URL-safe chars)."""
    return secrets.token_urlsafe(12)


_NOT_TYPABLE = NOT_TYPABLE


def normalize_email(email: str) -> str:
    """``email`` as it is stored: its key (:mod:`app.emails`: NFKC, case-folded, stripped), so that an
    address differing only by compatibility forms or case from a stored one is the same account.

    Raises:
        BadInput: (field ``email``) empty, longer than 254 characters, not ``something@domain.tld``
        (a domain of at least two labels, none empty), or holding an invisible format character, a NUL
        or a lone surrogate.
    """
    value = folded(email or "")
    if not value:
        raise BadInput.field("email", "Enter an email address.")
    if _NOT_TYPABLE.search(value):
        # A command-line argument whose bytes are not UTF-8 arrives as lone surrogates, which the
        # database cannot store (the pages refuse them before they get here).
        raise BadInput.field(
            "email", "An email address cannot hold a NUL character or a byte that is not UTF-8 text."
        )
    if len(value) > MAX_EMAIL_LENGTH:
        # its real length, as every refused length is named: the form shows the address whole
        raise BadInput.field(
            "email", f"is {len(value):,} characters long; at most {MAX_EMAIL_LENGTH} are allowed"
        )
    if not _EMAIL_RE.match(value):
        raise BadInput.field("email", "Enter an email address like you@example.com.")
    if any(unicodedata.category(ch) == "Cf" for ch in value):
        # Invisible format characters (a right-to-left override, a zero-width space) let one address
        # pose as another on every page and message that names it; no mail system needs them.
        raise BadInput.field(
            "email", "An email address cannot hold invisible characters (direction marks, zero-width spaces)."
        )
    return value


def check_password_rules(password: str) -> None:
    """Raises:
    BadInput: (field ``password``) shorter than :data:`MIN_PASSWORD_LENGTH` characters, longer than
    :data:`MAX_PASSWORD_LENGTH`, or holding a NUL
    character or a lone surrogate: the sign-in form refuses those, so such a password could never be
    used (the admin's user form, which checks its own fields, and the CLI let one through).
    """
    if len(password) < MIN_PASSWORD_LENGTH:
        raise BadInput.field("password", f"Use at least {MIN_PASSWORD_LENGTH} characters.")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise BadInput.field(
            "password", f"Use at most {MAX_PASSWORD_LENGTH:,} characters (this one has {len(password):,})."
        )
    if _NOT_TYPABLE.search(password):
        raise BadInput.field(
            "password", "Remove the NUL character or lone surrogate: signing in would refuse it."
        )


def secret_digest(value: str) -> str:
    """How a session or API token is stored and looked up: its SHA-256 in hex (the secret itself is never
    stored)."""
    return hashlib.sha256(value.encode()).hexdigest()


# --- users --------------------------------------------------------------------------------------------


async def create_user(db: Db, email: str, password: str, *, is_admin: bool = False) -> CurrentUser:
    """Insert a user; return it.

    Raises:
        BadInput: malformed email or too-short password.
        Conflict: a user with this email exists (compared by its key, :mod:`app.emails`: a look-alike in
            compatibility forms or another case is the same address).
    """
    email = normalize_email(email)
    check_password_rules(password)
    password_hash = await asyncio.to_thread(hash_password, password)
    row = (
        await db.execute(
            text(
                "INSERT INTO users (email, password_hash, is_admin) VALUES (:email, :hash, :admin) "
                "ON CONFLICT (email) DO NOTHING RETURNING id, email, is_admin, timezone, theme, "
                "must_change_password"
            ),
            {"email": email, "hash": password_hash, "admin": is_admin},
        )
    ).first()
    if row is None:
        raise Conflict(f"A user with the email {email} already exists.")
    return user_of(row)


async def get_user_by_email(db: Db, email: str) -> CurrentUser:
    """The active or disabled user with this email.

    Raises:
        NotFound: no such user.
    """
    wanted = email_key(email)
    row = (
        await db.execute(
            text(f"SELECT {USER_COLUMNS} FROM users u WHERE u.email = :email"),
            {"email": wanted},
        )
    ).first()
    if row is None:
        raise NotFound(f"No user with the email {wanted}.")
    return user_of(row)


async def any_user_exists(db: Db) -> bool:
    """Whether at least one user exists (the home page's first-run hint)."""
    return bool((await db.execute(text("SELECT EXISTS (SELECT 1 FROM users)"))).scalar())


# --- browser sessions ------------------------------------------------------------------------------------


async def create_session(
    db: Db, user_id: int, *, max_age: timedelta, ip: str | None = None, user_agent: str | None = None
) -> str:
    """Create a ``web_sessions`` row lasting ``max_age``; return the cookie value (random, 43 chars)."""
    token = secrets.token_urlsafe(32)
    await db.execute(
        text(
            "INSERT INTO web_sessions (id_hash, user_id, expires_at, ip, user_agent) "
            "VALUES (:hash, :user_id, now() + make_interval(secs => :secs), :ip, :ua)"
        ),
        {
            "hash": secret_digest(token),
            "user_id": user_id,
            "secs": max_age.total_seconds(),
            "ip": ip,
            "ua": (user_agent or "")[:500] or None,
        },
    )
    return token


async def end_other_sessions(db: Db, user_id: int, keep_hash: str | None) -> int:
    """Delete every session of ``user_id`` except the one whose id hash is ``keep_hash``; return how many
    ended. API tokens are a separate credential and are left alone."""
    ended = await db.execute(
        text(
            "WITH d AS (DELETE FROM web_sessions WHERE user_id = :user_id "
            "AND id_hash IS DISTINCT FROM :keep RETURNING 1) SELECT count(*) FROM d"
        ),
        {"user_id": user_id, "keep": keep_hash},
    )
    return int(ended.scalar_one())


async def password_hash_of(db: Db, user_id: int) -> str | None:
    """The stored password hash of ``user_id`` (``None``: no such user)."""
    return (
        await db.execute(text("SELECT password_hash FROM users WHERE id = :id"), {"id": user_id})
    ).scalar()


async def set_password(db: Db, user_id: int, password: str, *, must_change: bool = False) -> None:
    """Store a new password for ``user_id``; ``must_change`` makes the person choose another one at their
    next sign-in (an administrator's reset).

    Raises:
        BadInput: (field ``password``) too short.
    """
    check_password_rules(password)
    password_hash = await asyncio.to_thread(hash_password, password)
    await db.execute(
        text("UPDATE users SET password_hash = :h, must_change_password = :must WHERE id = :id"),
        {"h": password_hash, "must": must_change, "id": user_id},
    )


async def delete_session(db: Db, token: str) -> None:
    """Delete the session whose cookie value is ``token`` (sign-out); unknown tokens are ignored."""
    await db.execute(text("DELETE FROM web_sessions WHERE id_hash = :hash"), {"hash": secret_digest(token)})


_SESSION_USER = text(
    f"SELECT {USER_COLUMNS} "
    "FROM web_sessions s JOIN users u ON u.id = s.user_id "
    "WHERE s.id_hash = :hash AND s.expires_at > now() AND u.is_active"
)


async def user_for_session(engine: AsyncEngine, token: str) -> CurrentUser | None:
    """The active user of the unexpired session ``token``, or ``None``. One primary-key lookup, in
    autocommit on the asyncpg connection (:func:`app.db.read_rows`): it runs on every page request."""
    if not token or len(token) > 200:
        return None
    rows = await read_rows(engine, _SESSION_USER, {"hash": secret_digest(token)})
    if not rows:
        return None
    return user_of(dict(rows[0]))


async def prune_auth_rows(db: Db, *, attempts_older_than: timedelta = timedelta(days=1)) -> int:
    """Delete expired sessions and old sign-in attempts; return the number of rows removed.

    Meant for the periodic pruner; nothing else deletes these rows.
    """
    sessions = await db.execute(
        text(
            "WITH d AS (DELETE FROM web_sessions WHERE expires_at <= now() RETURNING 1) SELECT count(*) FROM d"
        )
    )
    attempts = await db.execute(
        text(
            "WITH d AS (DELETE FROM login_attempts WHERE at < now() - make_interval(secs => :secs) RETURNING 1) "
            "SELECT count(*) FROM d"
        ),
        {"secs": attempts_older_than.total_seconds()},
    )
    return int(sessions.scalar_one()) + int(attempts.scalar_one())


# --- guards (the middleware that finds the user is app.web.auth_middleware) --------------------------------

PASSWORD_FORM = "/account#password"
"""The account page's password form, where a person whose password an administrator reset is sent."""


def session_hash_of(scope: Scope) -> str | None:
    """The ``web_sessions.id_hash`` of the request's signed-in session, or ``None`` (anonymous, API)."""
    return scope.get("state", {}).get("session_hash") if scope.get("user") is not None else None


class LoginRequired(Unauthorized):
    """401 raised by :func:`requires_user`. Pages turn it into a redirect to ``/login?next=…``; the API
    into JSON ``{"detail": …}``; htmx requests into an ``HX-Redirect``."""

    def __init__(self, detail: str, *, next_path: str = "/") -> None:
        super().__init__(detail)
        self.next_path = next_path


def login_url(next_path: str = "/") -> str:
    """``/login`` with ``next`` set to a local path (anything else is dropped)."""
    next_path = safe_next(next_path)
    return "/login" if next_path == "/" else "/login?next=" + quote(next_path, safe="/")


def safe_next(value: str | None) -> str:
    """``value`` when it is a local path (``/…`` but not ``//…`` or ``/\\…``), else ``/``: keeps the
    sign-in redirect from sending people to another site."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(ch in value for ch in "\r\n\t") or len(value) > 2000:
        return "/"
    return value


# The guards are coroutines although they do no I/O: Litestar runs a plain function guard in a worker
# thread, a thread hop on every request (measured: about 10 % of the server's time on POST /api/jobs).


async def requires_user(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: a signed-in user is required.

    Raises:
        LoginRequired: anonymous (API: 401 JSON; pages: redirect to the sign-in page).
    """
    if connection.scope.get("user") is None:
        if connection.scope["path"].startswith(API_PREFIX):
            refusal = connection.scope.get("state", {}).get("token_refusal")
            if refusal:  # a token that exists, refused: why (revoked, expired, account disabled)
                raise LoginRequired(refusal)
            raise LoginRequired(
                "Missing or invalid API token: send the header 'Authorization: Bearer <token>' "
                "(create one on your account page, /account#tokens)."
            )
        next_path = connection.scope["path"]
        qs = connection.scope.get("query_string", b"")
        if qs:
            next_path += "?" + qs.decode("latin-1")
        raise LoginRequired("Please sign in.", next_path=next_path)


async def requires_admin(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """Guard: a signed-in admin is required.

    Raises:
        LoginRequired: anonymous.
        Forbidden: signed in but not an admin (403).
    """
    await requires_user(connection, handler)
    if not connection.scope["user"].is_admin:
        # an API client reads this too: it asked for no page, so the words name what it did ask for
        if connection.scope["path"].startswith(API_PREFIX):
            raise Forbidden("Only an administrator can use this API route.")
        raise Forbidden("This page is for administrators only.")
