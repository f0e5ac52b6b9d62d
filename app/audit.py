"""The audit trail: every admin action and control change — who, what, which jobs, when, outcome.
Written in the same transaction as the action, so an entry exists exactly
when the action committed. Shown on ``/admin/audit``; actions on a job also appear in that job's own
history, because :mod:`app.jobs.queue` writes a ``job_events`` row naming the admin (``user:<id>``).
Details and outcomes are made storable (:mod:`app.jobs.payload`) so an entry cannot fail its action.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.jobs.payload import json_text, storable_text

INSERT = text(
    """
    INSERT INTO audit_log (user_id, user_email, action, target_type, target_ids, count, outcome, detail, ip)
    VALUES (:user_id, :email, :action, :target_type, CAST(CAST(:target_ids AS text) AS jsonb), :count, :outcome,
            CAST(CAST(:detail AS text) AS jsonb), :ip)
    RETURNING id, at
    """
)
MAX_IDS = 1000
"""At most this many target ids are stored per entry (``count`` keeps the true number)."""


async def record(
    db: AsyncConnection | AsyncSession,
    *,
    user: Any,
    action: str,
    target_type: str | None = None,
    target_ids: Sequence[Any] = (),
    count: int | None = None,
    outcome: str = "ok",
    detail: dict[str, Any] | None = None,
    ip: str | None = None,
) -> RowMapping:
    """Append one entry. ``user`` has ``id`` and ``email`` (e.g. :class:`app.auth.CurrentUser`);
    ``action`` is a short verb phrase (``job.cancel``, ``job.retry``, ``jobs.bulk_retry``,
    ``job_type.pause``, ``user.make_admin``…); ``outcome`` is ``ok`` or a short reason it was refused."""
    conn = await db.connection() if isinstance(db, AsyncSession) else db
    ids = [str(i) for i in target_ids]
    return (
        (
            await conn.execute(
                INSERT,
                {
                    "user_id": getattr(user, "id", None),
                    "email": getattr(user, "email", "system"),
                    "action": action,
                    "target_type": target_type,
                    "target_ids": json_text(ids[:MAX_IDS]) if ids else None,
                    "count": len(ids) if count is None else count,
                    "outcome": storable_text(outcome),
                    "detail": json_text(detail) if detail else None,
                    "ip": ip,
                },
            )
        )
        .mappings()
        .one()
    )


LIST = text(
    """
    SELECT id, at, user_id, user_email, action, target_type, target_ids, count, outcome, detail, ip
    FROM audit_log
    WHERE (CAST(:before AS bigint) IS NULL OR id < :before)
      AND (CAST(:action AS text) IS NULL OR action = :action)
      AND (CAST(:email AS text) IS NULL OR user_email = :email)
    ORDER BY id DESC LIMIT :limit
    """
)


async def entries(
    db: AsyncConnection | AsyncSession,
    *,
    before: int | None = None,
    limit: int = 50,
    action: str | None = None,
    user_email: str | None = None,
) -> list[RowMapping]:
    """Newest first, keyset-paginated by ``before`` (an entry id), walking ``ix_audit_log_id_desc``;
    optionally only one ``action`` and/or one admin's ``user_email``."""
    conn = await db.connection() if isinstance(db, AsyncSession) else db
    params = {"before": before, "limit": limit, "action": action or None, "email": user_email or None}
    return list((await conn.execute(LIST, params)).mappings().all())
