"""What every admin action leaves behind, besides its change: who may take it (admins only), the audit
entry (:mod:`app.audit`, shown on ``/admin/audit``) and the admin notice
(:func:`app.jobs.outbox.record_admin_action`, delivered to the alert channels) — both written in the
caller's transaction, so they exist exactly when the change committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app import audit
from app.errors import Forbidden
from app.jobs import outbox

Db = AsyncConnection | AsyncSession


def require_admin(actor: Any, what: str) -> None:
    """Raises:
    Forbidden: ``actor`` is nobody or not an admin; the message names ``what`` was refused.
    """
    if actor is None or not getattr(actor, "is_admin", False):
        raise Forbidden(f"Only administrators may {what}.")


async def _connection(db: Db) -> AsyncConnection:
    return await db.connection() if isinstance(db, AsyncSession) else db


async def notify(
    db: Db,
    actor: Any,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    detail: dict[str, Any] | None = None,
) -> None:
    """The admin notice of one action on ``target_ids`` (job types, users, schedules)."""
    await outbox.record_admin_action(
        await _connection(db),
        admin_email=actor.email,
        action=action,
        count=len(target_ids),
        detail={"target_type": target_type, "targets": [str(t) for t in target_ids][:20], **(detail or {})},
    )


async def record(
    db: Db,
    actor: Any,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    detail: dict[str, Any] | None = None,
    ip: str | None = None,
) -> None:
    """The audit entry and the admin notice of an action that changed something."""
    await audit.record(
        db,
        user=actor,
        action=action,
        target_type=target_type,
        target_ids=target_ids,
        detail=detail,
        ip=ip,
    )
    await notify(db, actor, action, target_type=target_type, target_ids=target_ids, detail=detail)


async def refused(
    db: Db,
    actor: Any,
    action: str,
    *,
    target_type: str,
    target_ids: Sequence[Any],
    reason: str,
    ip: str | None,
) -> None:
    """The audit entry of an action refused for a reason worth keeping (no notice: nothing changed)."""
    await audit.record(
        db,
        user=actor,
        action=action,
        target_type=target_type,
        target_ids=target_ids,
        outcome=f"refused: {reason}"[:300],
        ip=ip,
    )
