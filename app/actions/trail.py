"""Who acts, who may, and the record an admin's action leaves: one audit entry (:mod:`app.audit`,
shown on ``/admin/audit``) and one admin notice (:func:`app.jobs.outbox.record_admin_action`, delivered
to the alert channels).

Both rows are written in the caller's transaction, so they exist exactly when the action committed.
An admin's refused action (the job had moved on, an admin tried to lock themselves out, a field that
cannot be taken, an unknown target, a change that would change nothing) is audited once with the reason
and no notice, whatever refused it (:func:`auditing_refusals`; a page's own form check that refuses
before the action is asked: :func:`refused_form`); a request's answer keeps that entry although it is an
error (:data:`KEEP_REFUSAL`); the ``jobdesk`` commands run through :func:`committed`, which does the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app import audit
from app.errors import AppError, BadInput, Forbidden
from app.jobs import outbox

T = TypeVar("T")

Db = AsyncConnection | AsyncSession
"""Where an action writes: a session or a connection whose transaction the caller commits."""

OUTCOME_MAX = 300
"""Characters of a refusal's reason kept in the audit entry's outcome."""

KEEP_REFUSAL = "jobdesk_keep_refusal"
"""Key in a session's ``info``: the transaction holds a refusal's audit entry, so the request's answer
commits it although the answer is an error (4xx); :mod:`app.web.commits` reads it. Without it, an error
answer rolls back, and the refusal's entry with it."""


@dataclass(frozen=True)
class Actor:
    """The person acting and the request's context: ``user`` has ``id``, ``email``, ``is_admin``;
    ``settings`` are the app's settings (``None`` where the action needs none); ``ip`` and
    ``request_id`` go into the audit entry and the job's events."""

    user: Any
    settings: Any = None
    ip: str | None = None
    request_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return bool(getattr(self.user, "is_admin", False))


def acting(who: Any, ip: str | None = None) -> Actor:
    """``who`` as an :class:`Actor`: an actor as it is, a signed-in user with the request's ``ip``."""
    return who if isinstance(who, Actor) else Actor(who, ip=ip)


def require_admin(actor: Any, what: str) -> None:
    """Raises:
    Forbidden: ``actor`` (an :class:`Actor` or a user) is nobody or not an admin; the message names
    ``what`` was refused.
    """
    user = actor.user if isinstance(actor, Actor) else actor
    if user is None or not getattr(user, "is_admin", False):
        raise Forbidden(f"Only administrators may {what}.")


async def _connection(db: Db) -> AsyncConnection:
    return await db.connection() if isinstance(db, AsyncSession) else db


async def record_done(
    db: Db,
    actor: Actor,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    count: int | None = None,
    outcome: str = "ok",
    detail: dict[str, Any] | None = None,
) -> None:
    """An admin's completed action: the audit entry and the admin notice (nothing for non-admins).
    ``target_type`` (``job``, ``pipeline``, ``job_type``, ``user``, ``schedule``) and ``target_ids`` say
    what it acted on, in both."""
    if not actor.is_admin:
        return
    n = len(target_ids) if count is None else count
    await audit.record(
        db,
        user=actor.user,
        action=action,
        target_type=target_type,
        target_ids=target_ids,
        count=n,
        outcome=outcome,
        detail=detail,
        ip=actor.ip,
    )
    await outbox.record_admin_action(
        await _connection(db),
        admin_email=actor.user.email,
        action=action,
        count=n,
        job_ids=target_ids if target_type == "job" else (),
        target_type=target_type,
        targets=target_ids,
        outcome=outcome,
        detail=detail,
    )


async def record_by_owner(
    db: Db,
    actor: Actor,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    count: int | None = None,
) -> None:
    """A person's action on their own work that is audited although they are not an admin (no notice:
    admins are not alerted about owners looking after their own work)."""
    await audit.record(
        db,
        user=actor.user,
        action=action,
        target_type=target_type,
        target_ids=target_ids,
        count=len(target_ids) if count is None else count,
        outcome="ok",
        ip=actor.ip,
    )


async def record_refused(
    db: Db,
    actor: Actor,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    reason: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """An admin's action that changed nothing: audited with the reason, no notice, and ``count`` 0 (what the
    action did: nothing; what it was asked to act on is in ``target_ids``). A request's session is marked
    for the answer to commit the entry (:data:`KEEP_REFUSAL`), whatever error status it has."""
    if not actor.is_admin:
        return
    await audit.record(
        db,
        user=actor.user,
        action=action,
        target_type=target_type,
        target_ids=target_ids,
        count=0,
        outcome=f"refused: {reason}"[:OUTCOME_MAX],
        detail=detail,
        ip=actor.ip,
    )
    if isinstance(db, AsyncSession):
        db.info[KEEP_REFUSAL] = True


async def committed(engine: AsyncEngine, action: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run ``action`` in one transaction of its own, outside a request (the ``jobdesk`` commands), as a
    request's answer runs it: committed when it succeeds, and when it raises after recording a refusal
    (:data:`KEEP_REFUSAL`), so that a refused command stays in the audit trail as the same refusal on a
    page does; rolled back otherwise. The error is raised on."""
    async with AsyncSession(engine, expire_on_commit=False) as session:
        try:
            result = await action(session)
        except BaseException:
            if session.info.pop(KEEP_REFUSAL, False):
                await session.commit()
            else:
                await session.rollback()
            raise
        await session.commit()
        return result


@asynccontextmanager
async def auditing_refusals(
    db: Db,
    actor: Actor,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    words: Callable[[AppError], str] | None = None,
) -> AsyncIterator[None]:
    """Audit as refused (:func:`record_refused`) any :class:`~app.errors.AppError` the block raises — a
    409, a 429 of the owner's limits, a 422 about any field, a 413, a 404 (an unknown type or id), a 403 —
    and raise it on. One rule for every admin action and every path: whatever an admin asked for and
    did not get leaves one ``refused: …`` entry. An error already audited by an inner block is not written
    again (blocks nest: an action's whole body and the savepoint of its change). Wrap the block's own
    savepoint, so that the entry is written after what the action began is undone. ``words`` gives the
    reason in words (the error's message by default)."""
    try:
        yield
    except AppError as exc:
        await refused_once(
            db, actor, action, exc, target_type=target_type, target_ids=target_ids, words=words
        )
        raise


_AUDITED = "_jobdesk_audited"
"""Attribute set on an error whose refusal is in the trail, so that an outer block does not write it again."""


async def refused_once(
    db: Db,
    actor: Actor,
    action: str,
    exc: AppError,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    words: Callable[[AppError], str] | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Audit ``exc`` as the refusal of ``action`` unless it is audited already. A page whose own form
    check refuses before the action is called goes through here too, with the same words the action's
    refusal would have."""
    if getattr(exc, _AUDITED, False):
        return
    await record_refused(
        db,
        actor,
        action,
        target_type=target_type,
        target_ids=target_ids,
        reason=_reason(exc, words),
        detail=detail,
    )
    setattr(exc, _AUDITED, True)


def audited(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised in place of (``raise … from``, or within ``except``), is
    on the trail already (:func:`refused_once`)."""
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, _AUDITED, False):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reason(exc: AppError, words: Callable[[AppError], str] | None) -> str:
    return words(exc) if words is not None else exc.detail


async def refused_form(
    db: Db,
    actor: Actor,
    action: str,
    errors: Mapping[str, str],
    *,
    target_type: str,
    target_ids: Sequence[Any],
) -> None:
    """A page's form for ``action`` that its own checks refused before the action could be asked (text
    that cannot be a number, a target that is not offered): audited as the action's refusal of the same
    fields would be, so that a refusal leaves one entry whichever path it came by."""
    problem = BadInput("; ".join(f"{k}: {v}" for k, v in errors.items()) or "the form cannot be taken")
    await refused_once(db, actor, action, problem, target_type=target_type, target_ids=target_ids)
