"""Who decided an approval step, and when: each person's decision with its comment (``job_approvals``),
and the words both the page and the API use when someone comes too late ("already approved by
ann@example.com at …").

The decision is read from the job's events (:func:`app.jobs.queue.transitions.approve` and its siblings
write one naming the admin); :func:`decision_words` is the one place the sentence is built, with the
time in ISO 8601 (the API) or in a person's time zone as the pages show times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.formatting import format_localtime, zone
from app.jobs.states import label

DONE_WORDS = {"approved": "approved", "rejected": "rejected", "rerun_requested": "sent back to run again"}
"""An approval event's kind as a past participle."""


@dataclass(frozen=True)
class Decision:
    """An earlier decision on a step: ``kind`` (``approved``, ``rejected``, ``rerun_requested``), ``by``
    (the admin's e-mail address; ``user 3`` once the account is gone) and ``at`` (the event's time)."""

    kind: str
    by: str
    at: datetime


def decided_by(actor: str, email: str | None) -> str:
    """The person behind an event's ``actor`` (``user:3``), by e-mail when the account still exists."""
    if email:
        return email
    kind, _, rest = actor.partition(":")
    return f"user {rest}" if kind == "user" and rest else "Jobdesk"


def decision_words(decision: Decision, timezone: str | None = None) -> str:
    """``already approved by ann@example.com at 2026-11-29T19:25:04+00:00`` — with ``timezone`` (an
    IANA name, a person's setting) the time reads as on the pages: ``29 Nov 2026, 20:25 CET``."""
    done = DONE_WORDS.get(decision.kind, decision.kind.replace("_", " "))
    if timezone is None:
        at = decision.at.astimezone(UTC).isoformat(timespec="seconds")
    else:
        at = format_localtime(decision.at, zone(timezone))
    return f"already {done} by {decision.by} at {at}"


# --- each person's decision on a step (``job_approvals``) --------------------------------------------

RECORD = text(
    """
    INSERT INTO job_approvals (job_id, user_id, decision, comment) VALUES (:job_id, :user_id, :decision, :comment)
    ON CONFLICT (job_id, user_id) DO NOTHING
    RETURNING at
    """
)
APPROVALS_SO_FAR = text("SELECT count(*) FROM job_approvals WHERE job_id = :id AND decision = 'approved'")
FORGET = text("DELETE FROM job_approvals WHERE job_id = :id")
DECISIONS_OF = text(
    """
    SELECT a.decision, a.comment, a.at, a.user_id, u.email
    FROM job_approvals a LEFT JOIN users u ON u.id = a.user_id
    WHERE a.job_id = :id ORDER BY a.at, a.id
    """
)


async def record(
    conn: AsyncConnection, job_id: Any, user_id: int, decision: str, comment: str | None
) -> bool:
    """Keep one person's decision (``approved``/``rejected``); ``False`` when they had already decided
    (one person never counts twice)."""
    params = {"job_id": job_id, "user_id": user_id, "decision": decision, "comment": comment or None}
    return (await conn.execute(RECORD, params)).first() is not None


async def approvals_so_far(conn: AsyncConnection, job_id: Any) -> int:
    return int((await conn.execute(APPROVALS_SO_FAR, {"id": job_id})).scalar_one())


async def forget(conn: AsyncConnection, job_id: Any) -> None:
    """A step sent back to run again starts its approvals afresh (its events keep the history)."""
    await conn.execute(FORGET, {"id": job_id})


async def decisions_of(db: AsyncConnection | AsyncSession, job_id: Any) -> list[dict[str, Any]]:
    """Every person's decision on the step, oldest first: ``decision``, ``comment``, ``at``, ``by``."""
    conn = await db.connection() if isinstance(db, AsyncSession) else db
    rows = (await conn.execute(DECISIONS_OF, {"id": job_id})).mappings().all()
    return [
        {
            "decision": r["decision"],
            "comment": r["comment"],
            "at": r["at"],
            "by": r["email"] or (f"user {r['user_id']}" if r["user_id"] else "a deleted account"),
        }
        for r in rows
    ]


DECIDER_FIELDS = ("id", "type", "title", "step_key", "pipeline_id", "status")
"""What a decision's answer tells someone who may decide a step but may not see its job (a named
approver who is neither its owner nor an admin): the step as their list of steps names it, never its
input, result or error, which only its owner and admins may read."""


def decider_view(row: Any, message: str) -> dict[str, Any]:
    """The answer to a decision for someone who may not see the job: :data:`DECIDER_FIELDS` of the
    decided ``row``, its status in plain words, and ``message`` (what the decision did)."""
    view = {k: row[k] for k in DECIDER_FIELDS}
    view["status_label"] = label(row["status"], is_active=row.get("is_active", True))
    view["message"] = message
    return view
