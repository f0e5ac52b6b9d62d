"""Accounts: passwords, API tokens, browser sessions, sign-in rate limiting, and the request middleware
and guards built on them.

Rules:

* Passwords are hashed with argon2id (argon2-cffi's defaults); emails are stored lower-cased.
* API tokens are random; only their SHA-256 is stored, with a short display prefix. The plaintext is
  returned once, by :func:`create_token`.
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
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.db import read_rows
from app.errors import BadInput, Conflict, Forbidden, NotFound, Unauthorized

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers.base import BaseRouteHandler
    from litestar.types import ASGIApp, Receive, Scope, Send

Db = AsyncConnection | AsyncSession

SESSION_COOKIE = "jobdesk_session"
TOKEN_PREFIX = "jd_"
API_PREFIX = "/api/"

#: ``api_tokens.last_used_at`` is written at most this often per token, so API traffic does not
#: turn every request into a write.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)

MIN_PASSWORD_LENGTH = 8
_EMAIL_RE = re.compile(r"^[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f]+$")

_hasher = PasswordHasher()
#: Verified against when the email is unknown, so a wrong email costs as much time as a wrong password.
DUMMY_HASH = _hasher.hash("jobdesk-dummy-password")


@dataclass(frozen=True, slots=True)
class CurrentUser:
    """The signed-in person of a request (``request.user``); ``None`` there means anonymous.

    ``timezone`` is an IANA name (e.g. ``Europe/Berlin``) used to show times.
    """

    id: int
    email: str
    is_admin: bool
    timezone: str = "UTC"


# --- passwords ----------------------------------------------------------------------------------------


def hash_password(password: str) -> str:
    """argon2id hash (PHC string) of ``password``. CPU-heavy (~50 ms): call it off the event loop."""
    return _hasher.hash(password)


def password_needs_rehash(password_hash: str) -> bool:
    """Whether ``password_hash`` was made with weaker parameters than today's (rehash it at sign-in)."""
    return _hasher.check_needs_rehash(password_hash)


def verify_password(password_hash: str, password: str) -> bool:
    """Whether ``password`` matches ``password_hash``; a malformed hash counts as no match."""
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def generate_password() -> str:
    """A random password for ``jobdesk create-user`` without ``--password-stdin`` (16 URL-safe chars)."""
    return secrets.token_urlsafe(12)


def normalize_email(email: str) -> str:
    """``email`` stripped and lower-cased.

    Raises:
        BadInput: (field ``email``) empty, longer than 254 characters, or not ``something@domain``.
    """
    value = (email or "").strip().lower()
    if not value:
        raise BadInput.field("email", "Enter an email address.")
    if len(value) > 254 or not _EMAIL_RE.match(value):
        raise BadInput.field("email", "Enter an email address like you@example.com.")
    return value


def check_password_rules(password: str) -> None:
    """Raises:
    BadInput: (field ``password``) shorter than :data:`MIN_PASSWORD_LENGTH` characters.
    """
    if len(password) < MIN_PASSWORD_LENGTH:
        raise BadInput.field("password", f"Use at least {MIN_PASSWORD_LENGTH} characters.")


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# --- users --------------------------------------------------------------------------------------------


async def create_user(db: Db, email: str, password: str, *, is_admin: bool = False) -> CurrentUser:
    """Insert a user; return it.

    Raises:
        BadInput: malformed email or too-short password.
        Conflict: a user with this email (compared lower-cased) exists.
    """
    email = normalize_email(email)
    check_password_rules(password)
    password_hash = await asyncio.to_thread(hash_password, password)
    row = (
        await db.execute(
            text(
                "INSERT INTO users (email, password_hash, is_admin) VALUES (:email, :hash, :admin) "
                "ON CONFLICT (email) DO NOTHING RETURNING id, email, is_admin, timezone"
            ),
            {"email": email, "hash": password_hash, "admin": is_admin},
        )
    ).first()
    if row is None:
        raise Conflict(f"A user with the email {email} already exists.")
    return CurrentUser(row.id, row.email, row.is_admin, row.timezone)


async def get_user_by_email(db: Db, email: str) -> CurrentUser:
    """The active or disabled user with this email.

    Raises:
        NotFound: no such user.
    """
    wanted = (email or "").replace("\x00", "\ufffd").strip().lower()[:254]
    row = (
        await db.execute(
            text("SELECT id, email, is_admin, timezone FROM users WHERE email = :email"),
            {"email": wanted},
        )
    ).first()
    if row is None:
        raise NotFound(f"No user with the email {wanted}.")
    return CurrentUser(row.id, row.email, row.is_admin, row.timezone)


async def any_user_exists(db: Db) -> bool:
    """Whether at least one user exists (the home page's first-run hint)."""
    return bool((await db.execute(text("SELECT EXISTS (SELECT 1 FROM users)"))).scalar())


# --- API tokens ----------------------------------------------------------------------------------------


async def create_token(db: Db, user_id: int, name: str = "") -> tuple[str, int]:
    """Create an API token for ``user_id``; return ``(plaintext, token_id)``.

    The plaintext (``jd_`` + 43 URL-safe chars) is not stored and cannot be shown again; the row keeps
    its SHA-256 and a display prefix (the first 10 characters).
    """
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = (
        await db.execute(
            text(
                "INSERT INTO api_tokens (user_id, name, prefix, token_hash) "
                "VALUES (:user_id, :name, :prefix, :hash) RETURNING id"
            ),
            {"user_id": user_id, "name": name, "prefix": token[:10], "hash": _sha256(token)},
        )
    ).scalar_one()
    return token, token_id


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


_TOKEN_USER = text(
    "SELECT t.id AS token_id, t.last_used_at, u.id, u.email, u.is_admin, u.timezone "
    "FROM api_tokens t JOIN users u ON u.id = t.user_id "
    "WHERE t.token_hash = :hash AND t.revoked_at IS NULL AND u.is_active"
)
_TOKEN_TOUCH = text(
    "UPDATE api_tokens SET last_used_at = now() WHERE id = :id "
    "AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => :secs))"
)


async def user_for_token(engine: AsyncEngine, token: str) -> CurrentUser | None:
    """The active user owning the live API token ``token``, or ``None``.

    One indexed lookup (``api_tokens.token_hash`` is unique); ``last_used_at`` is updated at most once
    per :data:`TOKEN_TOUCH_INTERVAL` in a separate short transaction.
    """
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    async with engine.connect() as conn:
        row = (await conn.execute(_TOKEN_USER, {"hash": _sha256(token)})).first()
    if row is None:
        return None
    now = datetime.now(UTC)
    if row.last_used_at is None or now - row.last_used_at >= TOKEN_TOUCH_INTERVAL:
        async with engine.begin() as conn:
            await conn.execute(
                _TOKEN_TOUCH, {"id": row.token_id, "secs": TOKEN_TOUCH_INTERVAL.total_seconds()}
            )
    return CurrentUser(row.id, row.email, row.is_admin, row.timezone)


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
            "hash": _sha256(token),
            "user_id": user_id,
            "secs": max_age.total_seconds(),
            "ip": ip,
            "ua": (user_agent or "")[:500] or None,
        },
    )
    return token


async def delete_session(db: Db, token: str) -> None:
    """Delete the session whose cookie value is ``token`` (sign-out); unknown tokens are ignored."""
    await db.execute(text("DELETE FROM web_sessions WHERE id_hash = :hash"), {"hash": _sha256(token)})


_SESSION_USER = text(
    "SELECT u.id, u.email, u.is_admin, u.timezone "
    "FROM web_sessions s JOIN users u ON u.id = s.user_id "
    "WHERE s.id_hash = :hash AND s.expires_at > now() AND u.is_active"
)


async def user_for_session(engine: AsyncEngine, token: str) -> CurrentUser | None:
    """The active user of the unexpired session ``token``, or ``None``. One primary-key lookup, in
    autocommit on the asyncpg connection (:func:`app.db.read_rows`): it runs on every page request."""
    if not token or len(token) > 200:
        return None
    rows = await read_rows(engine, _SESSION_USER, {"hash": _sha256(token)})
    if not rows:
        return None
    row = rows[0]
    return CurrentUser(row["id"], row["email"], row["is_admin"], row["timezone"])


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


# --- middleware and guards --------------------------------------------------------------------------------


def _bearer(scope: Scope) -> str | None:
    for key, value in scope["headers"]:
        if key == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def _cookie(scope: Scope, name: str) -> str | None:
    prefix = name + "="
    for key, value in scope["headers"]:
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                part = part.strip()
                if part.startswith(prefix):
                    return part[len(prefix) :]
    return None


class AuthenticationMiddleware(ASGIMiddleware):
    """Sets ``scope["user"]`` (``request.user``) to a :class:`CurrentUser` or ``None`` (anonymous), and
    the request state's ``session_hash`` to the signed-in session's id hash (CSRF tokens are bound to it:
    :func:`session_hash_of`).

    ``/api/…`` requests: only ``Authorization: Bearer <token>``; other requests: only the session cookie
    (so API calls need no CSRF token, and a page can never act through the API with the browser's cookie).
    Never rejects a request itself: the guards below do. Static files and health probes are skipped.
    At most one indexed query per request.
    """

    scopes = (ScopeType.HTTP,)
    skip_prefixes = ("/static/", "/healthz", "/readyz", "/schema")

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        scope["user"] = None
        scope["auth"] = None
        state = scope.setdefault("state", {})
        state["session_hash"] = None
        path = scope["path"]
        if not path.startswith(self.skip_prefixes):
            engine: AsyncEngine = scope["litestar_app"].state.engine
            if path.startswith(API_PREFIX):
                token = _bearer(scope)
                if token:
                    scope["user"] = await user_for_token(engine, token)
                    scope["auth"] = "token"
            else:
                cookie = _cookie(scope, SESSION_COOKIE)
                if cookie:
                    scope["user"] = await user_for_session(engine, cookie)
                    scope["auth"] = "session"
                    if scope["user"] is not None:
                        state["session_hash"] = _sha256(cookie)
        await next_app(scope, receive, send)


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


def requires_user(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: a signed-in user is required.

    Raises:
        LoginRequired: anonymous (API: 401 JSON; pages: redirect to the sign-in page).
    """
    if connection.scope.get("user") is None:
        if connection.scope["path"].startswith(API_PREFIX):
            raise LoginRequired(
                "Missing or invalid API token: send the header 'Authorization: Bearer <token>' "
                "(create one with `jobdesk create-token EMAIL`)."
            )
        next_path = connection.scope["path"]
        qs = connection.scope.get("query_string", b"")
        if qs:
            next_path += "?" + qs.decode("latin-1")
        raise LoginRequired("Please sign in.", next_path=next_path)


def requires_admin(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """Guard: a signed-in admin is required.

    Raises:
        LoginRequired: anonymous.
        Forbidden: signed in but not an admin (403).
    """
    requires_user(connection, handler)
    if not connection.scope["user"].is_admin:
        raise Forbidden("This page is for administrators only.")
