"""Admin actions on job types: pause, resume, and the concurrency and rate limits.

Each action takes ``(db, actor, job type, …)`` — ``db`` an ``AsyncSession`` or ``AsyncConnection``
whose transaction the caller commits, ``actor`` the signed-in user or an
:class:`~app.actions.trail.Actor` — checks that the actor is an admin, makes the change through
:mod:`app.controls` and writes its audit entry and admin notice (:mod:`app.actions.trail`), all inside
one savepoint. The admin pages and the JSON API both call these, so either leaves the same record.
``*`` (:data:`app.controls.ALL_TYPES`) pauses or resumes every type.

Errors: :class:`~app.errors.Forbidden` (403), :class:`~app.errors.NotFound` (an unknown job type, 404),
:class:`~app.errors.Conflict` (a change that changes nothing: pausing a paused type, resuming one that
is not paused, limits set to what they are; 409 "Nothing changed", nothing written, as a schedule's
edit that changes nothing writes nothing), :class:`~app.errors.BadInput` (a limit out of range, or limits
for ``*``; 422 naming the field). Each refusal is audited as refused.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import RowMapping

from app import controls
from app.actions.trail import Db, acting, auditing_refusals, record_done, require_admin
from app.errors import Conflict
from app.jobs.types import cut_type


def type_label(job_type: str) -> str:
    """``job_type`` in words: ``*`` is "every job type"."""
    return "every job type" if job_type == controls.ALL_TYPES else job_type


async def _check_paused(db: Db, job_type: str) -> None:
    """Raises:
    Conflict: ``job_type`` is not paused on its own, so resuming it would change nothing.
    """
    rows = await controls.controls(db)
    own = rows.get(job_type)
    if own is not None and own["paused"]:
        return
    every = rows.get(controls.ALL_TYPES)
    if job_type != controls.ALL_TYPES and every is not None and every["paused"]:
        raise Conflict(
            f"Nothing changed: {job_type} is not paused on its own; every job type is paused. "
            "Resume every job type (*) to lift that pause."
        )
    if job_type == controls.ALL_TYPES:
        raise Conflict("Nothing changed: job types are not paused all at once (*).")
    raise Conflict(f"Nothing changed: {job_type} is not paused.")


async def _set_paused(db: Db, actor: Any, job_type: str, paused: bool, ip: str | None) -> RowMapping:
    require_admin(actor, "pause or resume job types")
    who = acting(actor, ip)
    action = "job_type.pause" if paused else "job_type.resume"
    async with auditing_refusals(db, who, action, target_type="job_type", target_ids=[cut_type(job_type)]):
        async with db.begin_nested():
            if not paused:
                controls.check_type(job_type)
                await _check_paused(db, job_type)
            row = await controls.set_paused(db, job_type, paused, who.user)
            if row is None:
                # a no-op is refused and writes nothing: who paused it and when stay on record
                raise Conflict(
                    f"Nothing changed: {type_label(job_type)} is already "
                    + ("paused." if paused else "running, not paused.")
                )
            await record_done(db, who, action, target_type="job_type", target_ids=[job_type])
    return row


async def pause(db: Db, actor: Any, job_type: str, *, ip: str | None = None) -> RowMapping:
    """Pause ``job_type``: its jobs are still accepted, none is claimed until it is resumed. Returns the
    type's control row.

    Raises:
        Conflict: the type is paused already (nothing is written; audited as refused).
    """
    return await _set_paused(db, actor, job_type, True, ip)


async def resume(db: Db, actor: Any, job_type: str, *, ip: str | None = None) -> RowMapping:
    """Resume ``job_type`` (``*``: lift the pause of every type) and wake idle workers.

    Raises:
        Conflict: the type is not paused (nothing is written; audited as refused).
    """
    return await _set_paused(db, actor, job_type, False, ip)


async def set_limits(
    db: Db,
    actor: Any,
    job_type: str,
    *,
    max_running: int | None,
    max_per_minute: int | None,
    max_running_per_user: int | None = None,
    ip: str | None = None,
) -> RowMapping:
    """Set (``None`` removes) how many jobs of ``job_type`` run at once (in all, and of one person) and
    start per minute, across all workers; applies at the next claim.

    Raises:
        Conflict: the limits are these already (nothing is written; audited as refused). BadInput: a limit
        out of range, or limits for ``*`` (audited as refused, as every refusal is).
    """
    require_admin(actor, "change job type limits")
    who = acting(actor, ip)
    async with auditing_refusals(
        db, who, "job_type.limits", target_type="job_type", target_ids=[cut_type(job_type)]
    ):
        async with db.begin_nested():
            row = await controls.set_limits(
                db,
                job_type,
                max_running=max_running,
                max_per_minute=max_per_minute,
                max_running_per_user=max_running_per_user,
                admin=who.user,
            )
            if row is None:
                raise Conflict(f"Nothing changed: the limits of {job_type} are these already.")
            await record_done(
                db,
                who,
                "job_type.limits",
                target_type="job_type",
                target_ids=[job_type],
                detail={
                    "max_running": row["max_running"],
                    "max_per_minute": row["max_per_minute"],
                    "max_running_per_user": row["max_running_per_user"],
                },
            )
    return row
