"""Who acts, and the record an admin's action leaves: one audit entry and one admin notice.

Both rows are written in the caller's transaction, so they exist exactly when the action committed.
An admin's refused action (the job had moved on) is audited with the reason and no notice; the caller
commits to keep that entry although nothing else changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.jobs import outbox

OUTCOME_MAX = 300
"""Characters of a refusal's reason kept in the audit entry's outcome."""


@dataclass(frozen=True)
class Actor:
    """The person acting and the request's context: ``user`` has ``id``, ``email``, ``is_admin``;
    ``settings`` are the app's settings; ``ip`` and ``request_id`` go into the audit entry and the job's
    events."""

    user: Any
    settings: Any
    ip: str | None = None
    request_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return bool(getattr(self.user, "is_admin", False))


async def record_done(
    db: AsyncSession,
    actor: Actor,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    count: int | None = None,
    outcome: str = "ok",
    detail: dict[str, Any] | None = None,
) -> None:
    """An admin's completed action: the audit entry and the admin notice (nothing for non-admins)."""
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
        await db.connection(),
        admin_email=actor.user.email,
        action=action,
        count=n,
        job_ids=target_ids if target_type == "job" else (),
        outcome=outcome,
        detail=detail,
    )


async def record_refused(
    db: AsyncSession, actor: Actor, action: str, *, target_type: str, target_ids: Sequence[Any], reason: str
) -> None:
    """An admin's action that changed nothing: audited with the reason, no notice."""
    if not actor.is_admin:
        return
    await audit.record(
        db,
        user=actor.user,
        action=action,
        target_type=target_type,
        target_ids=target_ids,
        outcome=f"refused: {reason}"[:OUTCOME_MAX],
        ip=actor.ip,
    )
