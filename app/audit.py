"""The audit trail: every admin action and control change — who, what, which jobs, when, outcome.
Written in the same transaction as the action, so an entry exists exactly
when the action committed. Shown on ``/admin/audit``; actions on a job also appear in that job's own
history, because :mod:`app.jobs.queue` writes a ``job_events`` row naming the admin (``user:<id>``).
Details and outcomes are made storable (:mod:`app.jobs.payload`) so an entry cannot fail its action.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Words:
    """What an action reads as on ``/admin/audit``: ``what`` ("Cancelled a pipeline"), and, when an entry's
    ``count`` counts something other than its targets (the jobs a pipeline's cancel stopped, the rows a
    batch's retry put back), that thing in the singular and the plural ("job stopped", "jobs stopped")."""

    what: str
    counted: tuple[str, str] | None = None

    def count_words(self, count: int) -> str | None:
        """``count`` in words when it counts something other than the targets ("2 jobs stopped")."""
        if self.counted is None:
            return None
        return f"{count} {self.counted[0] if count == 1 else self.counted[1]}"


ACTIONS: dict[str, Words] = {
    "job.cancel": Words("Cancelled a job"),
    "job.retry": Words("Retried a job"),
    "job.run_again": Words("Ran a job again"),
    "job.approve": Words("Approved a step"),
    "job.reject": Words("Rejected a step"),
    "job.rerun": Words("Sent a step back to run again"),
    "job.run_now": Words("Started a scheduled job now"),
    "job.reschedule": Words("Rescheduled a job"),
    "job.delete": Words("Deleted a job"),
    "jobs.bulk_retry": Words("Retried jobs in bulk"),
    "jobs.bulk_cancel": Words("Cancelled jobs in bulk"),
    "jobs.bulk": Words("Asked for a bulk action on jobs, not retry or cancel (or not known)"),
    "pipeline.cancel": Words("Cancelled a pipeline", ("job stopped", "jobs stopped")),
    "batch.retry_failed": Words("Retried a batch's failed rows", ("row retried", "rows retried")),
    "job_type.pause": Words("Paused a job type"),
    "job_type.resume": Words("Resumed a job type"),
    "job_type.limits": Words("Changed limits"),
    "user.create": Words("Created a user"),
    "user.make_admin": Words("Made an admin"),
    "user.revoke_admin": Words("Revoked admin rights"),
    "user.disable": Words("Disabled a user"),
    "user.enable": Words("Enabled a user"),
    "user.unlock": Words("Unlocked a user's sign-in"),
    "user.reset_password": Words("Reset a user's password"),
    "user.release_jobs": Words("Released a user's held jobs", ("job released", "jobs released")),
    "user.cancel_jobs": Words("Cancelled a user's held jobs", ("job cancelled", "jobs cancelled")),
    "token.create": Words("Issued an API token"),
    "token.revoke": Words("Revoked an API token"),
    "account.password": Words("Changed their own password"),
    "account.timezone": Words("Changed their own time zone"),
    "account.theme": Words("Changed their own colours"),
    "account.email_notifications": Words("Changed their own e-mail choice for notices"),
    "account.token_create": Words("Created their own API token"),
    "account.token_revoke": Words("Revoked their own API token"),
    "schedule.create": Words("Created a schedule"),
    "schedule.enable": Words("Enabled a schedule"),
    "schedule.disable": Words("Disabled a schedule"),
    "schedule.update": Words("Edited a schedule"),
    "schedule.delete": Words("Deleted a schedule"),
    "alerts.test": Words("Sent a test alert"),
}
"""Every action the trail records, in words: the page's "What" column and its Action filter's choices.
An action written anywhere in ``app/`` must be here (``tests/admin/test_audit_words.py`` reads every
call that records one), so a new action cannot reach the page as a bare code."""


def is_refusal(outcome: Any) -> bool:
    """Whether an entry's ``outcome`` says the action was refused (a bulk action's "2 done, 0 skipped" worked)."""
    return str(outcome or "").startswith("refused")


def counted_words(action: str, count: Any, outcome: Any) -> str | None:
    """An entry's ``count`` in words when its action counts something other than its targets ("2 jobs
    released"); nothing for a refusal: it did nothing, so it counted nothing (entries refused before
    refusals were written with ``count`` 0 hold their targets' number there)."""
    words = ACTIONS.get(action)
    if words is None or is_refusal(outcome):
        return None
    return words.count_words(int(count or 0))


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
