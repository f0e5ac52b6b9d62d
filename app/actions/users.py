"""Admin actions on accounts: create a user, grant or revoke admin rights, disable or enable an account,
issue or revoke an API token.

Each action takes ``(db, actor, parameters…)`` — ``db`` an ``AsyncSession`` or ``AsyncConnection``
whose transaction the caller commits, ``actor`` the signed-in user (:class:`app.auth.CurrentUser`) —
checks that the actor is an admin, makes the change and writes its audit entry and admin notice inside
one savepoint: a refused or failed action leaves none of the three behind.

Errors: :class:`~app.errors.Forbidden` (not an admin, 403), :class:`~app.errors.NotFound` (404),
:class:`~app.errors.Conflict` (409), :class:`~app.errors.BadInput` (422, naming the field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import RowMapping

from app import auth, users
from app.actions.trail import Db, acting, record_done, record_refused, require_admin
from app.auth import CurrentUser
from app.errors import Conflict

TOKEN_NAME_MAX = 100


@dataclass(frozen=True, slots=True)
class NewUser:
    """A created account; ``password`` is the generated one (show it once), ``None`` when it was given."""

    user: CurrentUser
    password: str | None


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new API token: ``token`` is the plaintext, which is not stored and cannot be shown again."""

    token: str
    token_id: int
    user_id: int
    user_email: str


async def create_user(
    db: Db, actor: Any, *, email: str, password: str = "", is_admin: bool = False, ip: str | None = None
) -> NewUser:
    """Create an account; an empty ``password`` is generated (returned once).

    Raises:
        BadInput: a malformed email or a too-short password. Conflict: the email is taken.
    """
    require_admin(actor, "create users")
    generated = not password
    if generated:
        password = auth.generate_password()
    async with db.begin_nested():
        new = await auth.create_user(db, email, password, is_admin=is_admin)
        await record_done(
            db,
            acting(actor, ip),
            "user.create",
            target_type="user",
            target_ids=[new.id],
            detail={"email": new.email, "admin": is_admin},
        )
    return NewUser(new, password if generated else None)


async def _refuse_own(db: Db, actor: Any, action: str, target: RowMapping, what: str, ip: str | None) -> None:
    """An admin may not lock themselves out: the refusal is audited (the caller commits it) and raised."""
    await record_refused(
        db,
        acting(actor, ip),
        action,
        target_type="user",
        target_ids=[target["id"]],
        reason="it is your own account",
    )
    raise Conflict(f"Nothing changed: you cannot {what}. Ask another admin.")


async def set_admin(db: Db, actor: Any, user_id: int, is_admin: bool, *, ip: str | None = None) -> RowMapping:
    """Grant or revoke admin rights; returns the user as it was before.

    Raises:
        NotFound: no such user. Conflict: revoking your own rights (the refusal stays in the audit trail
        when the caller commits).
    """
    require_admin(actor, "change admin rights")
    target = await users.get_user(db, user_id)
    action = "user.make_admin" if is_admin else "user.revoke_admin"
    if target["id"] == actor.id and not is_admin:
        await _refuse_own(db, actor, action, target, "revoke your own admin rights", ip)
    async with db.begin_nested():
        await users.set_admin(db, target["id"], is_admin)
        await record_done(
            db,
            acting(actor, ip),
            action,
            target_type="user",
            target_ids=[target["id"]],
            detail={"email": target["email"]},
        )
    return target


async def set_active(db: Db, actor: Any, user_id: int, active: bool, *, ip: str | None = None) -> int:
    """Enable or disable an account; returns how many browser sessions disabling ended (the user is
    signed out everywhere; sign-in and API tokens are refused until enabled again).

    Raises:
        NotFound: no such user. Conflict: disabling your own account (audited as refused).
    """
    require_admin(actor, "enable or disable users")
    target = await users.get_user(db, user_id)
    action = "user.enable" if active else "user.disable"
    if target["id"] == actor.id and not active:
        await _refuse_own(db, actor, action, target, "disable your own account", ip)
    async with db.begin_nested():
        ended = await users.set_active(db, target["id"], active)
        detail: dict[str, Any] = {"email": target["email"]}
        if not active:
            detail["sessions_ended"] = ended
        await record_done(
            db, acting(actor, ip), action, target_type="user", target_ids=[target["id"]], detail=detail
        )
    return ended


def token_name(name: str) -> str:
    """A token's label on one line, at most :data:`TOKEN_NAME_MAX` characters, without NUL characters
    (which PostgreSQL text cannot hold)."""
    return " ".join((name or "").replace("\x00", " ").split())[:TOKEN_NAME_MAX]


async def issue_token(
    db: Db, actor: Any, user_id: int, name: str = "", *, ip: str | None = None
) -> IssuedToken:
    """Issue an API token for a user (any user's, admins only).

    Raises:
        NotFound: no such user.
    """
    require_admin(actor, "issue API tokens for users")
    target = await users.get_user(db, user_id)
    label = token_name(name)
    async with db.begin_nested():
        token, token_id = await auth.create_token(db, target["id"], label)
        await record_done(
            db,
            acting(actor, ip),
            "token.create",
            target_type="user",
            target_ids=[target["id"]],
            detail={"token_id": token_id, "name": label, "email": target["email"]},
        )
    return IssuedToken(token, token_id, target["id"], target["email"])


async def revoke_token(db: Db, actor: Any, token_id: int, *, ip: str | None = None) -> None:
    """Revoke any user's live API token.

    Raises:
        NotFound: no such live token.
    """
    require_admin(actor, "revoke other users' API tokens")
    async with db.begin_nested():
        owner = await users.token_owner(db, token_id)
        await auth.revoke_token(db, token_id)
        await record_done(
            db,
            acting(actor, ip),
            "token.revoke",
            target_type="user",
            target_ids=[owner] if owner else [],
            detail={"token_id": token_id},
        )
