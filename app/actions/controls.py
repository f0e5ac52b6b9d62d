"""Admin actions on job types: pause, resume, and the concurrency and rate limits.

Each action takes ``(db, actor, job type, …)`` — ``db`` an ``AsyncSession`` or ``AsyncConnection``
whose transaction the caller commits, ``actor`` the signed-in user — checks that the actor is an admin,
makes the change through :mod:`app.controls` (which writes the audit entry with it) and adds the admin
notice, all inside one savepoint. ``*`` (:data:`app.controls.ALL_TYPES`) pauses or resumes every type.

Errors: :class:`~app.errors.Forbidden` (403), :class:`~app.errors.NotFound` (an unknown job type, 404),
:class:`~app.errors.BadInput` (a limit out of range, or limits for ``*``; 422 naming the field).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import RowMapping

from app import controls
from app.actions.admin_trail import Db, notify, require_admin


async def _set_paused(db: Db, actor: Any, job_type: str, paused: bool, ip: str | None) -> RowMapping:
    require_admin(actor, "pause or resume job types")
    async with db.begin_nested():
        row = await controls.set_paused(db, job_type, paused, actor, ip=ip)
        action = "job_type.pause" if paused else "job_type.resume"
        await notify(db, actor, action, target_type="job_type", target_ids=[job_type])
    return row


async def pause(db: Db, actor: Any, job_type: str, *, ip: str | None = None) -> RowMapping:
    """Pause ``job_type``: its jobs are still accepted, none is claimed until it is resumed. Returns the
    type's control row."""
    return await _set_paused(db, actor, job_type, True, ip)


async def resume(db: Db, actor: Any, job_type: str, *, ip: str | None = None) -> RowMapping:
    """Resume ``job_type`` (``*``: lift the pause of every type) and wake idle workers."""
    return await _set_paused(db, actor, job_type, False, ip)


async def set_limits(
    db: Db,
    actor: Any,
    job_type: str,
    *,
    max_running: int | None,
    max_per_minute: int | None,
    ip: str | None = None,
) -> RowMapping:
    """Set (``None`` removes) how many jobs of ``job_type`` run at once and start per minute, across all
    workers; applies at the next claim."""
    require_admin(actor, "change job type limits")
    async with db.begin_nested():
        row = await controls.set_limits(
            db, job_type, max_running=max_running, max_per_minute=max_per_minute, admin=actor, ip=ip
        )
        await notify(
            db,
            actor,
            "job_type.limits",
            target_type="job_type",
            target_ids=[job_type],
            detail={"max_running": row["max_running"], "max_per_minute": row["max_per_minute"]},
        )
    return row
