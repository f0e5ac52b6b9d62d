"""A person's own account: change their password, their time zone, colour theme and e-mail choice for
notices, create and revoke their own API tokens.

Each action takes ``(db, actor, parameters…)`` — ``db`` an ``AsyncSession`` or ``AsyncConnection`` whose
transaction the caller commits, ``actor`` the signed-in user (:class:`app.auth.CurrentUser`) — acts on
the actor's own account only, and writes its audit entry (for every person, not only admins) in the same
savepoint as the change. The page (``/account``) and the JSON API (``/api/me…``) both call these.

Errors: :class:`~app.errors.BadInput` (422, naming the field), :class:`~app.errors.NotFound` (404: not
one of the actor's live tokens), :class:`~app.errors.Forbidden` (403: nobody signed in; a token's
request creating or revoking a token).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text

from app import audit, auth, notifications, tokens
from app.actions.trail import Db
from app.errors import BadInput, Forbidden
from app.formatting import known_zone

THEMES = ("auto", "light", "dark")
"""``auto`` follows the browser's ``prefers-color-scheme``."""
MAX_TOKEN_DAYS = 3650
"""A token's expiry is at most this many days ahead."""


@dataclass(frozen=True, slots=True)
class PasswordChanged:
    """A changed password and how many other browser sessions it signed out."""

    sessions_ended: int


@dataclass(frozen=True, slots=True)
class OwnToken:
    """A new API token of the actor: ``token`` is the plaintext, shown once and never stored."""

    token: str
    token_id: int
    name: str
    prefix: str
    expires_at: datetime | None


def _signed_in(actor: Any) -> Any:
    if actor is None or getattr(actor, "id", None) is None:
        raise Forbidden("Sign in to change your account.")
    return actor


async def _audit(db: Db, actor: Any, action: str, ip: str | None, detail: dict[str, Any]) -> None:
    await audit.record(
        db, user=actor, action=action, target_type="user", target_ids=[actor.id], detail=detail, ip=ip
    )


async def change_password(
    db: Db,
    actor: Any,
    *,
    current: str,
    new: str,
    repeat: str | None = None,
    keep_session: str | None = None,
    ip: str | None = None,
) -> PasswordChanged:
    """Replace the actor's password after checking the current one. Every OTHER browser session of theirs
    is signed out (the one whose id hash is ``keep_session`` stays); API tokens are left alone. Clears
    the "must change" mark an administrator's reset set.

    Raises:
        BadInput: (field ``current_password``) wrong current password; (``password``) too short or
            the same as the current one; (``password_repeat``) the two new ones differ.
    """
    user = _signed_in(actor)
    stored = await auth.password_hash_of(db, user.id)
    if not current or stored is None or not await asyncio.to_thread(auth.verify_password, stored, current):
        raise BadInput.field("current_password", "This is not your current password.")
    if repeat is not None and new != repeat:
        raise BadInput.field("password_repeat", "The two new passwords differ.")
    if new == current:
        raise BadInput.field("password", "Choose a password different from the current one.")
    try:
        auth.check_password_rules(new)
    except BadInput as exc:
        raise BadInput.field("password", exc.errors.get("password", exc.detail)) from None
    async with db.begin_nested():
        await auth.set_password(db, user.id, new)
        ended = await auth.end_other_sessions(db, user.id, keep_session)
        await _audit(db, user, "account.password", ip, {"sessions_ended": ended})
    return PasswordChanged(ended)


@dataclass(frozen=True)
class Setting:
    """A setting as it now is, and whether this request changed it: one already so is not written and
    not audited (as a schedule enabled again is not), so the trail lists only real changes."""

    value: str
    changed: bool


async def set_timezone(db: Db, actor: Any, name: str, *, ip: str | None = None) -> Setting:
    """Set the actor's time zone (an IANA name zoneinfo knows); returns it, unwritten and unaudited when
    it already was.

    Raises:
        BadInput: (field ``timezone``) unknown zone.
    """
    user = _signed_in(actor)
    zone_name = known_zone((name or "").strip())
    if zone_name is None:
        raise BadInput.field("timezone", "Choose a time zone from the list, e.g. Europe/Copenhagen.")
    if zone_name == user.timezone:
        return Setting(zone_name, changed=False)
    async with db.begin_nested():
        await db.execute(
            text("UPDATE users SET timezone = :z WHERE id = :id"), {"z": zone_name, "id": user.id}
        )
        await _audit(db, user, "account.timezone", ip, {"from": user.timezone, "to": zone_name})
    return Setting(zone_name, changed=True)


async def set_theme(db: Db, actor: Any, theme: str, *, ip: str | None = None) -> Setting:
    """Set the actor's colour theme (:data:`THEMES`); returns it, unwritten and unaudited when it
    already was.

    Raises:
        BadInput: (field ``theme``) not one of :data:`THEMES`.
    """
    user = _signed_in(actor)
    if theme not in THEMES:
        raise BadInput.field("theme", "Choose automatic, light or dark.")
    if theme == user.theme:
        return Setting(theme, changed=False)
    async with db.begin_nested():
        await db.execute(text("UPDATE users SET theme = :t WHERE id = :id"), {"t": theme, "id": user.id})
        await _audit(db, user, "account.theme", ip, {"from": user.theme, "to": theme})
    return Setting(theme, changed=True)


async def set_email_notifications(db: Db, actor: Any, on: bool, *, ip: str | None = None) -> bool:
    """Choose whether the actor's notices are also e-mailed; returns whether this changed it. A choice
    already so is not written and not audited, as with the time zone and theme. The account page, the
    ``/notifications`` page and ``PUT /api/me/notifications`` all call this, so each change is audited.
    """
    user = _signed_in(actor)
    wanted = bool(on)
    before = await notifications.email_choice(db, user.id)
    if before == wanted:
        return False
    async with db.begin_nested():
        await notifications.set_email_choice(db, user.id, wanted)
        await _audit(db, user, "account.email_notifications", ip, {"from": before, "to": wanted})
    return True


def token_days(days: int | None) -> int | None:
    """The number of days a new token is to stay valid (``None``: until revoked), checked. The moment it
    expires is taken from the database's clock when the token is stored (:func:`app.tokens.create_token`),
    the clock that refuses it once past: a web host whose clock is off by a day would otherwise hand out
    a one-day token already expired, or one that lives a day longer than asked.

    Raises:
        BadInput: (field ``expires_in_days``) not between 1 and :data:`MAX_TOKEN_DAYS`.
    """
    if days is None:
        return None
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_TOKEN_DAYS:
        raise BadInput.field(
            "expires_in_days", f"Give a number of days from 1 to {MAX_TOKEN_DAYS}, or leave it empty."
        )
    return days


async def create_token(
    db: Db, actor: Any, name: str, *, expires_in_days: int | None = None, ip: str | None = None
) -> OwnToken:
    """Create an API token for the actor, valid for ``expires_in_days`` days (``None``: until revoked).

    Raises:
        Forbidden: the actor acts through an API token (:func:`app.tokens.require_signed_in_browser`).
        BadInput: (field ``name``) empty name; (``expires_in_days``) see :func:`token_days`.
    """
    user = _signed_in(actor)
    tokens.require_signed_in_browser(user)
    label = tokens.token_name(name)
    if not label:
        raise BadInput.field("name", "Name the token after the program that will use it.")
    days = token_days(expires_in_days)
    async with db.begin_nested():
        token, token_id, expires_at = await tokens.create_token(db, user.id, label, expires_in_days=days)
        await _audit(
            db,
            user,
            "account.token_create",
            ip,
            {
                "token_id": token_id,
                "name": label,
                "expires_at": expires_at.isoformat() if expires_at else None,
            },
        )
    return OwnToken(token, token_id, label, token[:10], expires_at)


async def revoke_token(db: Db, actor: Any, token_id: int, *, ip: str | None = None) -> None:
    """Revoke one of the actor's own live tokens.

    Raises:
        Forbidden: the actor acts through an API token (:func:`app.tokens.require_signed_in_browser`).
        NotFound: no such live token of theirs (another person's token is not found either).
    """
    user = _signed_in(actor)
    tokens.require_signed_in_browser(user)
    async with db.begin_nested():
        await tokens.revoke_token(db, token_id, user_id=user.id)
        await _audit(db, user, "account.token_revoke", ip, {"token_id": token_id})
