"""Admin actions on accounts: create a user, grant or revoke admin rights, disable or enable an account,
unlock its sign-in, reset its password, issue or revoke an API token.

Each action takes ``(db, actor, parameters…)`` — ``db`` an ``AsyncSession`` or ``AsyncConnection``
whose transaction the caller commits, ``actor`` the signed-in user (:class:`app.auth.CurrentUser`) —
checks that the actor is an admin, makes the change and writes its audit entry and admin notice inside
one savepoint. A refusal once the target is known — your own account, a credential asked for with a
token, a taken email, a malformed one, an unknown user, a change that would change nothing (409 "Nothing
changed") — is audited as refused, on every path, by one helper (:func:`app.actions.trail.auditing_refusals`).

Errors: :class:`~app.errors.Forbidden` (not an admin, 403), :class:`~app.errors.NotFound` (404),
:class:`~app.errors.Conflict` (409), :class:`~app.errors.BadInput` (422, naming the field).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import RowMapping

from app import auth, signin, tokens, users
from app.actions.trail import Db, acting, auditing_refusals, record_done, require_admin
from app.auth import CurrentUser
from app.errors import Conflict, NotFound
from app.jobs import queue
from app.tokens import token_name


@dataclass(frozen=True, slots=True)
class NewUser:
    """A created account; ``password`` is the generated one (show it once), ``None`` when it was given."""

    user: CurrentUser
    password: str | None


@dataclass(frozen=True, slots=True)
class CommandLine:
    """The actor of ``jobdesk`` commands: whoever can run them on the server is trusted as an admin; the
    audit trail and the admin notice name the command line instead of an account."""

    id: None = None
    email: str = "command line"
    is_admin: bool = True


COMMAND_LINE = CommandLine()


@dataclass(frozen=True, slots=True)
class Unlocked:
    """An unlocked account and how many failed sign-ins were forgotten."""

    user_id: int
    email: str
    cleared: int


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
    who = acting(actor, ip)
    async with (
        auditing_refusals(db, who, "user.create", target_type="user", target_ids=[]),
        db.begin_nested(),
    ):
        new = await auth.create_user(db, email, password, is_admin=is_admin)
        await record_done(
            db,
            who,
            "user.create",
            target_type="user",
            target_ids=[new.id],
            detail={"email": new.email, "admin": is_admin},
        )
    return NewUser(new, password if generated else None)


def _person(actor: Any) -> Any:
    """The account acting, whether ``actor`` is a signed-in user or an :class:`~app.actions.trail.Actor`
    holding one (as :func:`acting` and :func:`require_admin` take either): its ``id`` decides "your own
    account", its ``token_id`` whether it acts through an API token."""
    return acting(actor).user


def _refuse_own(what: str) -> None:
    """An admin may not lock themselves out (raised inside the action's audited block, which records it)."""
    raise Conflict(f"Nothing changed: you cannot {what}. Ask another admin.")


async def _user_or_none(db: Db, user_id: int) -> RowMapping | None:
    """The user ``user_id``, or ``None``: an action that refuses a token's request does so before it says
    whether the id exists (raising :class:`~app.errors.NotFound` after that refusal)."""
    try:
        return await users.get_user(db, user_id)
    except NotFound:
        return None


def _audited(db: Db, actor: Any, action: str, target: Any, ip: str | None) -> Any:
    """The audited block of an action on the user ``target`` (a row, or the id asked for when no user has
    it: the refusal names what the admin asked for)."""
    ids = [target["id"] if isinstance(target, Mapping) else target]
    return auditing_refusals(db, acting(actor, ip), action, target_type="user", target_ids=ids)


def _unchanged(what: str) -> None:
    """A change that would leave the account as it is: refused like every other no-op of an admin action
    (409, audited as refused), never recorded as done."""
    raise Conflict(f"Nothing changed: {what}.")


async def set_admin(db: Db, actor: Any, user_id: int, is_admin: bool, *, ip: str | None = None) -> RowMapping:
    """Grant or revoke admin rights; returns the user as it was before.

    Raises:
        NotFound: no such user. Conflict: revoking your own rights (the refusal stays in the audit trail
        when the caller commits).
    """
    require_admin(actor, "change admin rights")
    action = "user.make_admin" if is_admin else "user.revoke_admin"
    async with _audited(db, actor, action, user_id, ip):
        target = await users.get_user(db, user_id)
    async with _audited(db, actor, action, target, ip), db.begin_nested():
        target = await users.get_user(db, target["id"], lock=True)  # as it is once ours to change
        if target["id"] == _person(actor).id and not is_admin:
            _refuse_own("revoke your own admin rights")
        if bool(target["is_admin"]) == is_admin:
            _unchanged(f"{target['email']} is {'already' if is_admin else 'not'} an admin")
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
    signed out everywhere; sign-in and API tokens are refused until enabled again). Disabling also
    holds the user's waiting jobs in the same transaction (each with its ``held`` event); enabling
    does not release them: an admin releases or cancels them (:mod:`app.actions.held_jobs`).

    Raises:
        NotFound: no such user. Conflict: disabling your own account (audited as refused).
    """
    require_admin(actor, "enable or disable users")
    action = "user.enable" if active else "user.disable"
    async with _audited(db, actor, action, user_id, ip):
        target = await users.get_user(db, user_id)
    async with _audited(db, actor, action, target, ip), db.begin_nested():
        target = await users.get_user(db, target["id"], lock=True)  # as it is once ours to change
        if target["id"] == _person(actor).id and not active:
            _refuse_own("disable your own account")
        if bool(target["is_active"]) == active:
            _unchanged(f"{target['email']} is already {'enabled' if active else 'disabled'}")
        ended = await users.set_active(db, target["id"], active)
        detail: dict[str, Any] = {"email": target["email"]}
        if not active:
            detail["sessions_ended"] = ended
            detail["jobs_held"] = await queue.hold_user_jobs(
                db, target["id"], queue.actor_of(acting(actor).user)
            )
        await record_done(
            db, acting(actor, ip), action, target_type="user", target_ids=[target["id"]], detail=detail
        )
    return ended


async def unlock_sign_in(db: Db, actor: Any, user_id: int, *, ip: str | None = None) -> Unlocked:
    """Lift the sign-in limits on an account at once: its failed sign-ins from every address are forgotten
    (:func:`app.signin.unlock`).

    Raises:
        NotFound: no such user.
    """
    require_admin(actor, "unlock sign-in")
    async with _audited(db, actor, "user.unlock", user_id, ip):
        target = await users.get_user(db, user_id)
    async with _audited(db, actor, "user.unlock", target, ip), db.begin_nested():
        cleared = await signin.unlock(db, target["email"])
        if not cleared:
            _unchanged(f"{target['email']} has no failed sign-ins to forget")
        await record_done(
            db,
            acting(actor, ip),
            "user.unlock",
            target_type="user",
            target_ids=[target["id"]],
            detail={"email": target["email"], "failures_cleared": cleared},
        )
    return Unlocked(target["id"], target["email"], cleared)


@dataclass(frozen=True, slots=True)
class PasswordReset:
    """A reset password: ``password`` is the one-time password (show it once; it is not stored)."""

    user_id: int
    email: str
    password: str
    sessions_ended: int


async def reset_password(db: Db, actor: Any, user_id: int, *, ip: str | None = None) -> PasswordReset:
    """Give a user a generated one-time password that they must change at their next sign-in (until then
    every page sends them to their account's password form). Their browser sessions end; their API
    tokens keep working (a separate credential, revoked on its own). Only from a signed-in browser.

    Raises:
        Forbidden: not an admin, or acting through an API token (the one-time password is a credential
        that outlives the token). NotFound: no such user. Conflict: your own account (change it on your
        account page; audited as refused).
    """
    require_admin(actor, "reset passwords")
    target = await _user_or_none(db, user_id)
    async with _audited(db, actor, "user.reset_password", target or user_id, ip), db.begin_nested():
        tokens.require_signed_in_browser(_person(actor), tokens.RESETS_FROM_THE_PAGE)
        if target is None:
            target = await users.get_user(db, user_id)  # raises NotFound, audited as the refusal it is
        if target["id"] == _person(actor).id:
            _refuse_own("reset your own password here (change it on your account page)")
        password = auth.generate_password()
        await auth.set_password(db, target["id"], password, must_change=True)
        ended = await auth.end_other_sessions(db, target["id"], None)
        await record_done(
            db,
            acting(actor, ip),
            "user.reset_password",
            target_type="user",
            target_ids=[target["id"]],
            detail={"email": target["email"], "sessions_ended": ended},
        )
    return PasswordReset(target["id"], target["email"], password, ended)


async def issue_token(
    db: Db, actor: Any, user_id: int, name: str = "", *, ip: str | None = None
) -> IssuedToken:
    """Issue an API token for a user (any user's, admins only).

    Raises:
        NotFound: no such user.
    """
    require_admin(actor, "issue API tokens for users")
    target = await _user_or_none(db, user_id)
    async with _audited(db, actor, "token.create", target or user_id, ip), db.begin_nested():
        tokens.require_signed_in_browser(_person(actor))
        if target is None:
            target = await users.get_user(db, user_id)  # raises NotFound, audited as the refusal it is
        label = token_name(name)
        token, token_id, _ = await tokens.create_token(db, target["id"], label)
        await record_done(
            db,
            acting(actor, ip),
            "token.create",
            target_type="user",
            target_ids=[target["id"]],
            detail={"token_id": token_id, "name": label, "email": target["email"]},
        )
    return IssuedToken(token, token_id, target["id"], target["email"])


async def issue_token_by_email(
    db: Db, actor: Any, email: str, name: str = "", *, ip: str | None = None
) -> IssuedToken:
    """:func:`issue_token` for the user who signs in with ``email`` (the command line names people by
    their email): an unknown email is refused, and audited, as an unknown id is.

    Raises:
        NotFound: no user has that email.
    """
    require_admin(actor, "issue API tokens for users")
    async with auditing_refusals(db, acting(actor, ip), "token.create", target_type="user", target_ids=[]):
        user = await auth.get_user_by_email(db, email)
    return await issue_token(db, actor, user.id, name, ip=ip)


async def revoke_token(db: Db, actor: Any, token_id: int, *, ip: str | None = None) -> None:
    """Revoke any user's live API token.

    Raises:
        NotFound: no such live token.
    """
    require_admin(actor, "revoke other users' API tokens")
    owner = await users.token_owner(db, token_id)
    async with (
        auditing_refusals(
            db, acting(actor, ip), "token.revoke", target_type="user", target_ids=[owner] if owner else []
        ),
        db.begin_nested(),
    ):
        tokens.require_signed_in_browser(_person(actor))
        await tokens.revoke_token(db, token_id)
        await record_done(
            db,
            acting(actor, ip),
            "token.revoke",
            target_type="user",
            target_ids=[owner] if owner else [],
            detail={"token_id": token_id},
        )
