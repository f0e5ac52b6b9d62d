"""Admin actions on a disabled person's held jobs: release them (they run) or cancel them.

Disabling an account holds its waiting jobs (:func:`app.actions.users.set_active`); enabling it again
does not release them, so nothing runs that an admin did not decide on. Each action is audited and
announced like the other admin actions, and a release or cancel with nothing held changes nothing
(409, audited as refused: a request's answer keeps that entry, :data:`app.actions.trail.KEEP_REFUSAL`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import users
from app.actions.trail import Db, acting, auditing_refusals, record_done, require_admin
from app.errors import Conflict
from app.jobs import queue

ACTIONS = {"release-jobs": "user.release_jobs", "cancel-jobs": "user.cancel_jobs"}
"""The per-user buttons and API paths (``/users/{id}/<name>``) and the audit action of each."""


@dataclass(frozen=True)
class HeldOutcome:
    """What releasing or cancelling did: ``count`` jobs, and the message in words."""

    user_id: int
    email: str
    count: int
    message: str


async def _apply(db: Db, name: str, user_id: int, who: str) -> int:
    if name == "release-jobs":
        return await queue.release_user_jobs(db, user_id, who)
    return (await queue.cancel_user_jobs(db, user_id, who)).count


async def act_on_held(db: Db, actor: Any, user_id: int, name: str, *, ip: str | None = None) -> HeldOutcome:
    """Release (``release-jobs``) or cancel (``cancel-jobs``) every held job of ``user_id``.

    Raises:
        Forbidden: not an admin. NotFound: no such user. Conflict: no held jobs (audited as refused).
        ValueError: an unknown ``name``.
    """
    if name not in ACTIONS:
        raise ValueError(f"unknown action {name!r}")
    require_admin(actor, "release or cancel held jobs")
    target = await users.get_user(db, user_id)
    who = acting(actor, ip)
    async with (
        auditing_refusals(db, who, ACTIONS[name], target_type="user", target_ids=[target["id"]]),
        db.begin_nested(),
    ):
        count = await _apply(db, name, target["id"], queue.actor_of(who.user))
        if not count:
            raise Conflict(f"Nothing changed: {target['email']} has no held jobs.")
        await record_done(
            db,
            who,
            ACTIONS[name],
            target_type="user",
            target_ids=[target["id"]],
            count=count,
            detail={"email": target["email"], "jobs": count},
        )
    plural = "s" if count != 1 else ""
    done = "released: they will run" if name == "release-jobs" else "cancelled"
    return HeldOutcome(
        target["id"], target["email"], count, f"{count} held job{plural} of {target['email']} {done}."
    )
