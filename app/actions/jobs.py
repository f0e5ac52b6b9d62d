"""A person's actions on one job: cancel, retry, run again, approve, reject, rerun, run now,
reschedule and delete (submitting one is :mod:`app.actions.submissions`).

Who may do what is decided here (:data:`WHO_MAY`); the change is made through :mod:`app.jobs.queue`
(the only writer of ``jobs.status``) inside a savepoint; an admin's action writes its audit entry and
admin notice in the same transaction (:mod:`app.actions.trail`). A job that moved on (already
finished, no longer waiting) is not an error here: the outcome says "Nothing changed: …" with status
409, and an admin's refusal is audited, whatever refused it (the request's answer keeps that entry:
:data:`app.actions.trail.KEEP_REFUSAL`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import controls
from app.actions import quotas, trail
from app.actions.submissions import check_run_at
from app.actions.trail import Actor, auditing_refusals, record_by_owner, record_done
from app.errors import AppError, Conflict, Forbidden, NotFound
from app.files import FileStore, remove_after_commit
from app.jobs import queue
from app.jobs.decisions import Decision, decider_view, decision_words
from app.jobs.error_text import retry_refusal
from app.jobs.permanence import permanent_among
from app.jobs.states import LIVE, TERMINAL, Status
from app.jobs.types import owner_refusal, priority_lowered
from app.processors import registry

OWNER = "owner or admin"
ADMIN = "admin"
ACTIONS = ("cancel", "retry", "run-again", "approve", "reject", "rerun", "run-now")
"""The actions offered as buttons (``reschedule`` and ``delete`` take more than a click)."""
WHO_MAY = {
    "cancel": OWNER,
    "run-again": OWNER,
    "retry": OWNER,
    "approve": ADMIN,
    "reject": ADMIN,
    "rerun": ADMIN,
    "run-now": ADMIN,
    "reschedule": ADMIN,
    "delete": ADMIN,
}
FORBIDDEN = {
    "approve": "Only an admin can approve a step.",
    "reject": "Only an admin can reject a step.",
    "rerun": "Only an admin can rerun a step.",
    "run-now": "Only an admin can start a scheduled job early.",
    "reschedule": "Only an admin can reschedule a job.",
    "delete": "Only an admin can delete a job.",
}
OWNER_AUDITED = frozenset({"retry"})
"""Owners' actions that leave an audit entry too (no admin notice): a retry spends the worker time and
attempts of a job that had already failed, so who asked for it is on record."""
DECIDED_BY_RULE = ("approve", "reject")
"""Who may approve or reject is the step's own rule (:func:`app.jobs.approvals.refusal`), which the
queue asks with the job row locked: a named approver need not be an admin or the owner."""
OWNER_OF = text("SELECT user_id, type FROM jobs WHERE id = :id")
REQUEUES = ("retry", "run-again")
"""The owner's actions that put the job's work in their queue again: offered only for a type they may
have there now (:func:`app.jobs.types.owner_refusal`)."""


@dataclass
class ActionOutcome:
    """What an action did: ``ok``; ``message`` in plain words; ``status_code`` (200, or 409 when nothing
    changed because the job had moved on); the job's id and row after the action; for "run again" the
    new job (``new_job_id``, ``new_job``); for a refusal the queue's :class:`Conflict` (``conflict``)."""

    action: str
    ok: bool
    message: str
    status_code: int
    job_id: uuid.UUID
    new_job_id: uuid.UUID | None = None
    row: Mapping[Any, Any] | None = None
    new_job: Mapping[Any, Any] | None = None
    conflict: Conflict | None = None
    decider_view: dict[str, Any] | None = None
    """For a decision by someone who may not see the job (a named approver), what they are told of it
    (:func:`app.jobs.decisions.decider_view`); ``row`` is then ``None``."""


def parse_id(value: Any, what: str = "job") -> uuid.UUID:
    """The id, or :class:`NotFound` (the same answer as an unknown id)."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(f"No {what} with id {str(value)[:64]!r}.") from None


def allowed(user: Any, action: str, row: Mapping[Any, Any]) -> bool:
    """Whether ``user`` may ask for ``action`` on the job ``row`` (owner or admin, per :data:`WHO_MAY`;
    "run again" also needs a type the user may submit). Used for buttons; the action checks again.

    "Retry" is not offered when :func:`app.jobs.error_text.retry_refusal` gives a reason (the rule the
    queue's retry refuses by): a job whose input does not fit its type would fail the same way again; a
    job's page offers "Edit and resubmit" instead."""
    if action == "retry" and retry_refusal(row) is not None:
        return False
    if action in ("retry", "rerun") and row.get("pipeline_cancelled"):
        return False  # a list's column (:data:`app.jobs.queue.IN_CANCELLED_PIPELINE`): the queue refuses it
    if user.is_admin:
        return True
    if WHO_MAY[action] == ADMIN or row["user_id"] != user.id:
        return False
    if action in REQUEUES:
        # the queue's rule for the owner as they are now (:mod:`app.jobs.queue.owner_rule`); whether code
        # chose the type of a job put back in place is read there, here only guessed from the row
        spec = registry.get(row["type"])
        coded = action == "retry" and (row.get("pipeline_id") or row.get("created_by_job")) is not None
        return spec is not None and owner_refusal(user.is_admin, spec, coded=coded) is None
    return True


RETRY_WARNING = (
    "It failed with an error that trying again does not fix by itself, so it stopped without using its "
    "other tries. Retry runs it again with the same input: it will most likely fail the same way unless "
    "what it depends on has changed."
)
"""What a retry of a job that failed permanently will do, said beside its Retry button. The retry is
allowed (a page that was missing may be back, a refused address let in); a job whose input does not
fit is the one a retry cannot help, and :func:`allowed` offers none for it."""
RETRY_WARNING_CONFIRM = (
    "This job failed with an error a retry does not fix by itself: with the same input it will most "
    "likely fail the same way. Retry it anyway?"
)


def retry_many_warning(permanent: int, of_rows: bool = False) -> str:
    """What a retry of many jobs (a bulk retry, a failed group, a batch's failed rows) says when
    ``permanent`` of them failed permanently (:func:`failed_for_good`), as one job's
    :data:`RETRY_WARNING` does; empty when none did."""
    if not permanent:
        return ""
    noun = ("row" if of_rows else "job") if permanent == 1 else ("rows" if of_rows else "jobs")
    return (
        f"{permanent:,} {noun} of these failed with an error that trying again does not fix by itself: "
        f"with the same input {'it' if permanent == 1 else 'they'} will most likely fail the same way."
    )


async def failed_for_good(db: AsyncSession, rows: list[Mapping[Any, Any]]) -> set[Any]:
    """The ids among ``rows`` (job rows, or a pipeline's steps with ``job_id``) that failed with a
    permanent error (``PermanentError``, a refused plan of next jobs): a retry's button says what it
    will do (:data:`RETRY_WARNING`). Asked only of failed rows."""
    return await permanent_among(
        db, [r.get("job_id", r.get("id")) for r in rows if r.get("status") == Status.FAILED]
    )


def retry_offered(user: Any, row: Mapping[Any, Any]) -> bool:
    """Whether a page offers ``user`` "Retry" on ``row``: the queue retries a failed job only, and
    :func:`allowed` says who may and which failures a retry cannot help. The one rule for the job page,
    a pipeline's steps and the admin list."""
    return row["status"] == Status.FAILED and allowed(user, "retry", row)


async def requeues_refused(db: AsyncSession, user: Any, job: Mapping[Any, Any]) -> frozenset[str]:
    """Which of "retry", "run-again" and "rerun" the queue's owner rule
    (:func:`app.jobs.queue.requeue_refusal`, the one those actions ask) would refuse ``user`` on ``job``
    (a row with its ``id``, ``status``, ``type``, ``user_id``, ``pipeline_id`` and ``created_by_job``) now:
    a page offers no button its action refuses — an admin looking at a demoted admin's diagnostic job, a
    failed step whose retry would re-open a step its owner may not have. Asked only for the actions its
    status allows."""
    status = job["status"]
    asks: list[tuple[str, bool, bool]] = []
    if status == Status.FAILED:
        asks.append(("retry", True, True))
    if status in TERMINAL:
        asks.append(("run-again", False, False))
    if status == Status.WAITING_APPROVAL:
        asks.append(("rerun", True, False))
    if not asks:
        return frozenset()
    conn = await queue.conn_of(db)
    refused = set()
    for action, in_place, reopens in asks:
        if await queue.requeue_refusal(conn, job, user, in_place=in_place, reopens=reopens) is not None:
            refused.add(action)
    return frozenset(refused)


def listed_owner(user: Any, user_id: int | None) -> int | None:
    """Whose jobs a list shows ``user``: an admin's ``user_id`` (``None``: everyone's), a plain person's
    own. A plain person naming someone else is refused, not answered with their own jobs as if the
    parameter had been read.

    Raises:
        Forbidden: a person who is not an admin asked for another person's jobs.
    """
    if user.is_admin:
        return user_id
    if user_id is not None and user_id != user.id:
        raise Forbidden(
            f"Only an administrator can list another person's jobs; leave out user_id (or give your own,"
            f" {user.id}) for yours."
        )
    return int(user.id)


async def authorize(db: AsyncSession, user: Any, action: str, jid: uuid.UUID) -> None:
    """Admins may do every action on every job; others only :data:`OWNER` actions on their own jobs.

    Raises:
        NotFound: another user's or an unknown job, for a non-admin (one answer for both).
        Forbidden: an admin action asked for by the owner. (Whether the owner may have the job's type
        in the queue again is the queue's rule, asked by retry, run again and rerun themselves:
        :mod:`app.jobs.queue.owner_rule`.)
    """
    if user.is_admin or action in DECIDED_BY_RULE:
        return
    row = (await db.execute(OWNER_OF, {"id": jid})).mappings().first()
    if row is None or row["user_id"] != user.id:
        raise NotFound(f"No job with id {jid}.")
    if WHO_MAY[action] == ADMIN:
        raise Forbidden(FORBIDDEN[action])


# --- one job's actions ------------------------------------------------------------------------------------

Call = Callable[[AsyncSession, Actor, uuid.UUID, dict[str, Any]], Awaitable[tuple[Any, Any]]]


async def _cancel(db: AsyncSession, actor: Actor, jid: uuid.UUID, kw: dict[str, Any]) -> tuple[Any, Any]:
    return await queue.cancel(db, jid, actor.user), None


async def _retry(db: AsyncSession, actor: Actor, jid: uuid.UUID, kw: dict[str, Any]) -> tuple[Any, Any]:
    # A retried job (and the dependents it re-opens) waits again: within its owner's limits whoever
    # retries it, as a batch's "Retry failed rows" is, or failed jobs retried one by one would pass them.
    owner = await _owner(db, actor, jid)
    counted = await quotas.before_requeue(db, actor.user, owner, actor.settings)
    row = await queue.retry(db, jid, actor.user)
    await quotas.after_requeue(db, owner, actor.settings, counted)
    await quotas.count_retry(db, actor.user, owner, actor.settings)
    return row, None


async def _owner(db: AsyncSession, actor: Actor, jid: uuid.UUID) -> Any:
    """Whose limits an action putting the job (or a copy of it) in the queue is held to: its owner's."""
    row = (await db.execute(OWNER_OF, {"id": jid})).mappings().first()
    if row is None:
        raise NotFound(f"No job with id {jid}.")
    return await quotas.owner_of(db, actor.user, int(row["user_id"]))


async def _run_again(db: AsyncSession, actor: Actor, jid: uuid.UUID, kw: dict[str, Any]) -> tuple[Any, Any]:
    # The new job is the owner's, so it is within the owner's limits, whoever asks for it.
    owner = await _owner(db, actor, jid)
    counted = await quotas.before_requeue(db, actor.user, owner, actor.settings)
    result = await queue.run_again(db, jid, actor.user, actor.settings, request_id=actor.request_id)
    await quotas.after_submit(db, owner, actor.settings, 1, counted)
    return await queue.get_job(db, jid, actor.user), result.job


async def _approve(db: AsyncSession, actor: Actor, jid: uuid.UUID, kw: dict[str, Any]) -> tuple[Any, Any]:
    return await queue.approve(db, jid, actor.user, comment=kw.get("comment")), None


async def _reject(db: AsyncSession, actor: Actor, jid: uuid.UUID, kw: dict[str, Any]) -> tuple[Any, Any]:
    return await queue.reject(db, jid, actor.user, kw.get("reason") or ""), None


async def _rerun(db: AsyncSession, actor: Actor, jid: uuid.UUID, kw: dict[str, Any]) -> tuple[Any, Any]:
    # A rerun puts a step waiting for approval (which waits to run no more) back in its owner's queue:
    # within the owner's waiting limit, as a retry is.
    owner = await _owner(db, actor, jid)
    counted = await quotas.before_requeue(db, actor.user, owner, actor.settings)
    row = await queue.rerun(db, jid, actor.user)
    await quotas.after_requeue(db, owner, actor.settings, counted)
    return row, None


async def _reschedule(db: AsyncSession, actor: Actor, jid: uuid.UUID, kw: dict[str, Any]) -> tuple[Any, Any]:
    await check_run_at(db, kw.get("run_at"))
    return await queue.reschedule(db, jid, actor.user, kw.get("run_at")), None


AUDIT_ACTIONS = {
    "cancel": "job.cancel",
    "retry": "job.retry",
    "run-again": "job.run_again",
    "approve": "job.approve",
    "reject": "job.reject",
    "rerun": "job.rerun",
    "run-now": "job.run_now",
    "reschedule": "job.reschedule",
}
"""The audit trail's name of each action (each has words in :data:`app.audit.ACTIONS`)."""

CALLS: dict[str, Call] = {
    "cancel": _cancel,
    "retry": _retry,
    "run-again": _run_again,
    "approve": _approve,
    "reject": _reject,
    "rerun": _rerun,
    "run-now": _reschedule,
    "reschedule": _reschedule,
}


def ok_message(
    action: str, row: Mapping[Any, Any], new_job: Mapping[Any, Any] | None = None, *, paused: bool = False
) -> str:
    """The plain-words answer to an action that changed something; for "run again", also when the new
    job's priority is lower than the old one's (the queue's rule for a non-admin owner); for "run now",
    whether its type is ``paused`` (then its due time is now, but no worker takes it until the type is
    resumed: "it will start as soon as a worker is free" would not come true)."""
    if action == "run-now" and paused:
        return (
            "Its due time is now, but its type is paused: it waits until an admin resumes the type, "
            "then starts as soon as a worker is free."
        )
    if action == "run-again" and new_job is not None:
        lowered = priority_lowered(row.get("priority"), new_job.get("priority"))
        return "Started again as a new job." + (f" {lowered}" if lowered else "")
    if action == "approve" and row["status"] == Status.WAITING_APPROVAL:
        return "Your approval is recorded. The step waits for the other approvals it needs."
    if action == "cancel":
        if row["status"] == Status.IN_PROGRESS:
            return "Stopping the job. It will show as Cancelled once it has stopped."
        return "Cancelled."
    return {
        "retry": f"Retrying: the job is waiting to run again with a fresh set of {row['max_attempts']} attempts.",
        "run-again": "Started again as a new job.",
        "approve": "Approved. The steps after it can run now.",
        "reject": "Rejected. Steps that depend on it were cancelled.",
        "rerun": "This step will run again, then wait for approval again.",
        "run-now": "It will start as soon as a worker is free.",
        "reschedule": "Rescheduled: it now waits until the time shown.",
    }[action]


def conflict_words(exc: Conflict, action: str, timezone: str | None = None) -> str:
    """A :class:`Conflict` from the queue as "Nothing changed: …" in plain words; a decision already
    taken names who took it and when (in ``timezone``, the person's own)."""
    extra = exc.extra or {}
    decided = extra.get("decided")
    if isinstance(decided, Decision):
        return f"Nothing changed: this step was {decision_words(decided, timezone or 'UTC')}."
    reason = extra.get("reason")
    if isinstance(reason, str):
        # the queue's own reason (:func:`app.jobs.states.not_in`, :func:`~app.jobs.states.not_cancellable`),
        # the words the API's 409 gives after "Cannot <action> job …: "
        return f"Nothing changed: {reason}."
    return "Nothing changed: " + exc.detail


def _detail(
    action: str, row: Mapping[Any, Any], new_job: Any, reason: str | None, comment: str | None = None
) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    if reason:
        detail["reason"] = reason[:2000]
    if comment:
        detail["comment"] = comment[:2000]
    if new_job is not None:
        detail["new_job"] = str(new_job["id"])
    if action == "reschedule" and row.get("run_at") is not None:
        detail["run_at"] = row["run_at"].isoformat()
    return detail


async def perform(
    db: AsyncSession,
    actor: Actor,
    action: str,
    job_id: Any,
    *,
    reason: str | None = None,
    run_at: datetime | None = None,
    comment: str | None = None,
) -> ActionOutcome:
    """Carry out one job ``action`` (one of :data:`ACTIONS`, or ``reschedule`` with an aware ``run_at``)
    in the caller's transaction, with its audit entry and admin notice when an admin acts.

    Raises:
        NotFound: unknown or another user's job. Forbidden: an owner asking for an admin action.
        BadInput: ``reject`` without a reason; ``run-again`` of a type that no longer validates; a
        ``run_at`` without a UTC offset. ValueError: an unknown ``action``.
    """
    if action not in CALLS:
        raise ValueError(f"unknown job action {action!r}")
    audit_action = AUDIT_ACTIONS[action]
    async with auditing_refusals(db, actor, audit_action, target_type="job", target_ids=[str(job_id)[:64]]):
        jid = parse_id(job_id)
        await authorize(db, actor.user, action, jid)
    timezone = getattr(actor.user, "timezone", None)

    def words(exc: AppError) -> str:
        return conflict_words(exc, action, timezone) if isinstance(exc, Conflict) else exc.detail

    try:
        # Every refusal once the action has started is audited: a job that moved on (409, answered
        # below), the owner's limits (429), an input that no longer fits its type, a time without an
        # offset (422)…
        async with auditing_refusals(
            db, actor, audit_action, target_type="job", target_ids=[jid], words=words
        ):
            async with db.begin_nested():
                row, new_job = await CALLS[action](
                    db, actor, jid, {"reason": reason, "run_at": run_at, "comment": comment}
                )
    except Conflict as exc:
        return ActionOutcome(action, False, words(exc), 409, jid, conflict=exc)
    detail = _detail(action, row, new_job, reason, comment)
    await record_done(db, actor, audit_action, target_type="job", target_ids=[jid], detail=detail or None)
    if action in OWNER_AUDITED and not actor.is_admin:
        await record_by_owner(db, actor, audit_action, target_type="job", target_ids=[jid])
    new_id = new_job["id"] if new_job is not None else None
    paused = action == "run-now" and bool(await controls.paused_for(db, [row["type"]]))
    message = ok_message(action, row, new_job, paused=paused)
    if not queue.may_see(row, actor.user):
        # a named approver decides a step whose job they may not read: no caller can answer with it
        view = decider_view(row, message)
        return ActionOutcome(action, True, message, 200, jid, new_id, None, None, decider_view=view)
    return ActionOutcome(action, True, message, 200, jid, new_id, row, new_job)


async def refuse_form(
    db: AsyncSession, actor: Actor, action: str, job_id: Any, errors: dict[str, str]
) -> uuid.UUID:
    """A page's form for ``action`` that its own checks refused (text that cannot be taken, a moment
    that cannot be read): after the permission check the action itself makes first (so it tells no one
    more than the action would), audited as the action's refusal; returns the job's id."""
    audit_action = AUDIT_ACTIONS[action]
    async with auditing_refusals(db, actor, audit_action, target_type="job", target_ids=[str(job_id)[:64]]):
        jid = parse_id(job_id)
        await authorize(db, actor.user, action, jid)
    await trail.refused_form(db, actor, audit_action, errors, target_type="job", target_ids=[jid])
    return jid


async def delete(db: AsyncSession, actor: Actor, job_id: Any) -> None:
    """Delete a finished or waiting job (admins), audited like the other actions (a refusal too: the
    caller's answer keeps its entry). The files the job produced are deleted with it, their bytes once
    the caller's transaction commits.

    Raises:
        NotFound / Forbidden. Conflict: the job is running (cancel it first).
    """
    async with auditing_refusals(db, actor, "job.delete", target_type="job", target_ids=[str(job_id)[:64]]):
        jid = parse_id(job_id)
        await authorize(db, actor.user, "delete", jid)
    async with auditing_refusals(db, actor, "job.delete", target_type="job", target_ids=[jid]):
        async with db.begin_nested():
            outputs = await queue.delete(db, jid, actor.user)
    if actor.settings is not None:
        remove_after_commit(db, FileStore(actor.settings.files_dir), outputs)
    await record_done(db, actor, "job.delete", target_type="job", target_ids=[jid])


def live(row: Mapping[Any, Any]) -> bool:
    """Whether the job has not finished yet."""
    return row["status"] in LIVE
