"""Sign-in: the password check, and the limits that keep password guessing slow without letting a
stranger lock the real person out.

Failed attempts (``login_attempts`` rows with ``ok = false``) are counted over :data:`LOGIN_WINDOW`:

* per email **and** client address: :data:`LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP`. This is the lock a
  guesser meets: their address is refused for that account, while the account's owner, elsewhere,
  still signs in;
* per email, from every address together: :data:`LOGIN_MAX_FAILURES_PER_EMAIL`, a ceiling for guessing
  spread over many addresses. It locks the account for everyone until the window has passed or an
  administrator unlocks it (:func:`unlock`: ``/admin/users``, ``POST /api/users/{id}/unlock``,
  ``jobdesk unlock-user``);
* per client address, over every email: :data:`LOGIN_MAX_FAILURES_PER_IP` (credential stuffing).

The client address is the connection's peer. Behind a reverse proxy, ``jobdesk serve`` takes it from
``X-Forwarded-For`` only when the proxy's address is listed in ``FORWARDED_ALLOW_IPS``; otherwise anyone
could name a new address on each attempt.

Each attempt first reserves its place: under transaction-scoped advisory locks on its email and its
address, it counts the recent failures and, when under every limit, records itself as a failure and
commits — before any password is checked. A right password then marks that row ``ok``. So concurrent
attempts can never check more passwords than the limits allow, and the locks are held for a few short
statements, not for the ~50 ms of argon2. A refused attempt is not recorded (it would extend the lock).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.auth import (
    USER_COLUMNS,
    CurrentUser,
    Db,
    dummy_hash,
    email_key,
    hash_password,
    password_needs_rehash,
    user_of,
    verify_password,
)
from app.errors import RateLimited, Unauthorized
from app.formatting import known_zone

#: Failures are counted over this window …
LOGIN_WINDOW = timedelta(minutes=15)
#: … at most this many for one email from one address …
LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP = 5
#: … this many for one email from all addresses together …
LOGIN_MAX_FAILURES_PER_EMAIL = 30
#: … and this many from one address over all emails.
LOGIN_MAX_FAILURES_PER_IP = 20

TOO_MANY = "Too many failed sign-in attempts. Try again in {wait}."
ACCOUNT_LOCKED = (
    "Too many failed sign-in attempts for this account. Try again in {wait}, or ask an administrator "
    "to unlock it."
)

# Newest failures first, served by ix_login_attempts_email_at / ix_login_attempts_ip_at. Each row says how
# long it still counts (``left``) by the database's clock, the one that wrote ``at`` and decides which rows
# count: the web host's clock, minutes fast, would end a lock that still holds (15 minutes fast, at once).
_RECENT_FAILURES = {
    scope: text(
        "SELECT EXTRACT(EPOCH FROM at + make_interval(secs => :secs) - now()) AS left "
        f"FROM login_attempts WHERE {where} AND NOT ok "
        "AND at > now() - make_interval(secs => :secs) ORDER BY at DESC LIMIT :limit"
    )
    for scope, where in (
        ("email_ip", "email = :email AND ip = :ip"),
        ("email", "email = :email"),
        ("ip", "ip = :ip"),
    )
}
# Always the email's lock first, then the address's: every attempt takes them in one order, so two
# attempts never wait for each other in a cycle.
_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")
_RESERVE = text("INSERT INTO login_attempts (email, ip, ok) VALUES (:email, :ip, false) RETURNING id")
_USER = text(f"SELECT {USER_COLUMNS}, u.password_hash, u.is_active FROM users u WHERE u.email = :email")
# The first sign-in takes the browser's zone while the account still has the default one: a zone chosen
# on the account page (or by an earlier sign-in) is never overwritten.
_SIGNED_IN = text(
    "UPDATE users SET last_sign_in_at = now(), timezone = CASE WHEN last_sign_in_at IS NULL "
    "AND timezone = 'UTC' AND CAST(:zone AS text) IS NOT NULL THEN :zone ELSE timezone END "
    "WHERE id = :id RETURNING timezone"
)
_SUCCEEDED = text("UPDATE login_attempts SET ok = true WHERE id = :id")
_REHASH = text("UPDATE users SET password_hash = :h WHERE id = :id")
_UNLOCK = text(
    "WITH d AS (DELETE FROM login_attempts WHERE email = :email AND NOT ok RETURNING 1) SELECT count(*) FROM d"
)
_LOCKED = text(
    """
    WITH per_ip AS (
        SELECT email, ip, count(*) AS n FROM login_attempts
        WHERE email = ANY(CAST(:emails AS text[])) AND NOT ok AND at > now() - make_interval(secs => :secs)
        GROUP BY email, ip
    )
    SELECT email, sum(n) AS failures FROM per_ip GROUP BY email
    HAVING sum(n) >= :per_email OR max(n) >= :per_email_ip
    """
)


def clean_email(email: str | None) -> str:
    """``email`` as it is looked up and counted (:func:`app.auth.email_key`)."""
    return email_key(email)


async def _wait_seconds(db: Db, scope: str, email: str, ip: str, limit: int) -> float:
    """Seconds until fewer than ``limit`` failures remain in the window for ``scope`` (0: allowed)."""
    params = {"email": email, "ip": ip, "secs": LOGIN_WINDOW.total_seconds(), "limit": limit}
    rows = (await db.execute(_RECENT_FAILURES[scope], params)).all()
    if len(rows) < limit:
        return 0.0
    return max(0.0, float(rows[-1].left))


def _minutes(seconds: float) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes} minute" if minutes == 1 else f"{minutes} minutes"


async def check_rate_limit(db: Db, email: str, ip: str) -> None:
    """Raises:
    RateLimited: one of the limits in the module docstring is reached; the message says how many
        minutes to wait (and, when the whole account is locked, that an administrator can unlock it).
    """
    account = await _wait_seconds(db, "email", email, ip, LOGIN_MAX_FAILURES_PER_EMAIL)
    if account > 0:
        raise RateLimited(ACCOUNT_LOCKED.format(wait=_minutes(account)))
    wait = max(
        await _wait_seconds(db, "email_ip", email, ip, LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP),
        await _wait_seconds(db, "ip", email, ip, LOGIN_MAX_FAILURES_PER_IP),
    )
    if wait > 0:
        raise RateLimited(TOO_MANY.format(wait=_minutes(wait)))


async def _reserve(engine: AsyncEngine, email: str, ip: str) -> int:
    """Check the limits and record the attempt as a failure, serialised per email and per address."""
    async with engine.begin() as conn:
        await conn.execute(_LOCK, {"key": "jobdesk sign-in email " + email})
        await conn.execute(_LOCK, {"key": "jobdesk sign-in ip " + ip})
        await check_rate_limit(conn, email, ip)
        return int((await conn.execute(_RESERVE, {"email": email, "ip": ip})).scalar_one())


async def sign_in(
    engine: AsyncEngine, email: str, password: str, ip: str, browser_zone: str | None = None
) -> CurrentUser:
    """Check ``email``/``password`` from the client address ``ip``; return the user. A success records
    the time of the sign-in and, at the first one, stores ``browser_zone`` (the browser's IANA zone, ignored
    unless zoneinfo knows it) as the person's zone when theirs is still the default.

    Raises:
        RateLimited: too many recent failures (see the module docstring); nothing is recorded.
        Unauthorized: unknown email, wrong password or disabled account — one message for all three,
            so accounts cannot be probed.
    """
    email = clean_email(email)
    attempt = await _reserve(engine, email, ip)
    async with engine.connect() as conn:
        row = (await conn.execute(_USER, {"email": email})).first()
    stored = row.password_hash if row is not None else dummy_hash()
    ok = await asyncio.to_thread(verify_password, stored, password or "")
    if row is None or not ok or not row.is_active:
        raise Unauthorized("Wrong email or password.")
    new_hash = await asyncio.to_thread(hash_password, password) if password_needs_rehash(stored) else None
    async with engine.begin() as conn:
        await conn.execute(_SUCCEEDED, {"id": attempt})
        if new_hash is not None:
            await conn.execute(_REHASH, {"h": new_hash, "id": row.id})
        zone = (await conn.execute(_SIGNED_IN, {"id": row.id, "zone": known_zone(browser_zone)})).scalar_one()
    return replace(user_of(row), timezone=zone)


async def unlock(db: Db, stored_email: str) -> int:
    """Forget every failed sign-in of the account whose address is ``stored_email`` (from any client
    address), so its owner may sign in at once; returns how many were forgotten. The caller commits (with
    its audit entry).

    ``stored_email`` is the account's address exactly as stored, never keyed here: a failure is counted
    under the key of the address typed, and is the failure of the account that sign-in would have found —
    the one whose stored address *is* that key (:func:`sign_in`). An account that kept another form at
    migration 0025, because its key was another account's, has none: keying its address named the other
    account's failures, and unlocking it lifted the other account's lock-out."""
    return int((await db.execute(_UNLOCK, {"email": stored_email})).scalar_one())


async def locked_emails(db: Db, emails: list[str]) -> dict[str, int]:
    """``{email: failures in the window}`` for those of ``emails`` (accounts' stored addresses, compared
    exactly, as :func:`unlock` does) that a limit now refuses — for every address (the ceiling) or for at
    least one (the per-address lock)."""
    if not emails:
        return {}
    params = {
        "emails": emails,
        "secs": LOGIN_WINDOW.total_seconds(),
        "per_email": LOGIN_MAX_FAILURES_PER_EMAIL,
        "per_email_ip": LOGIN_MAX_FAILURES_PER_EMAIL_AND_IP,
    }
    return {r.email: int(r.failures) for r in (await db.execute(_LOCKED, params)).all()}
