"""Notices to owners, written by the queue in the same transaction as the transition that causes them
(like the alert outbox rows of :mod:`app.jobs.outbox`): a person's own standalone job finished or failed,
their pipeline finished or failed, or a step of theirs waits for approval. Steps inside a pipeline do
not notify one by one: the pipeline's own notice stands for them.

Alike notices of one person within a short window fold into one row (``count``), so a failing batch of
500 is one notice and one e-mail. Folding takes the row with ``FOR UPDATE SKIP LOCKED``: a transition
never waits for another transaction's notice — at worst a second row starts. A row is ``email_due``
when its owner chose e-mail (``users.email_notifications``); :mod:`app.notifications` reads and sends.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.payload import storable_text

GROUP_SECS = 60.0
"""Alike notices of one person this close together fold into one."""

JOB_COMPLETED = "job_completed"
JOB_FAILED = "job_failed"
PIPELINE_COMPLETED = "pipeline_completed"
PIPELINE_FAILED = "pipeline_failed"
APPROVAL_WAITING = "approval_waiting"
KINDS = (JOB_COMPLETED, JOB_FAILED, PIPELINE_COMPLETED, PIPELINE_FAILED, APPROVAL_WAITING)

_ONE = {
    JOB_COMPLETED: "Your job “{}” has finished.",
    JOB_FAILED: "Your job “{}” failed.",
    PIPELINE_COMPLETED: "Your pipeline “{}” has finished.",
    PIPELINE_FAILED: "Your pipeline “{}” failed.",
    APPROVAL_WAITING: "“{}” waits for your approval.",
}
_MANY = {
    JOB_COMPLETED: "%s of your jobs have finished.",
    JOB_FAILED: "%s of your jobs failed.",
    PIPELINE_COMPLETED: "%s of your pipelines have finished.",
    PIPELINE_FAILED: "%s of your pipelines failed.",
    APPROVAL_WAITING: "%s steps wait for your approval.",
}

FOLD = text(
    """
    WITH target AS (
        SELECT id FROM notifications
        WHERE user_id = :user AND kind = :kind AND read_at IS NULL AND emailed_at IS NULL
          AND at > now() - make_interval(secs => :window)
        ORDER BY id DESC LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE notifications n
    SET count = n.count + :n, at = now(), job_id = NULL, pipeline_id = NULL,
        text = format(:many, n.count + :n)
    FROM target WHERE n.id = target.id
    RETURNING n.id
    """
)
INSERT = text(
    """
    INSERT INTO notifications (user_id, kind, job_id, pipeline_id, text, count, email_due)
    SELECT :user, :kind, :job, :pipeline, :text, :n, u.email_notifications FROM users u WHERE u.id = :user
    """
)
OWNERS = text("SELECT id, user_id, title, type FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))")
FINISHED_PIPELINES = text(
    """
    SELECT p.id, p.user_id, p.name, p.status FROM pipelines p
    WHERE p.id = ANY(CAST(:ids AS uuid[])) AND p.status IN ('completed', 'failed') AND p.finished_at = now()
      AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.pipeline_id = p.id AND n.at = now())
    """
)


def _title(row: Any) -> str:
    return str(row.get("title") or row.get("name") or row.get("type") or "")[:200]


async def record(
    conn: AsyncConnection, items: Sequence[tuple[str, Any]], *, window: float = GROUP_SECS
) -> None:
    """Write notices for ``items`` — ``(kind, row)`` with ``user_id``, ``id`` (a job's, or a pipeline's
    for pipeline kinds) and a title — folded per person and kind."""
    groups: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for kind, row in items:
        if row.get("user_id") is not None:
            groups[(int(row["user_id"]), kind)].append(row)
    for (user, kind), rows in sorted(groups.items()):
        n = len(rows)
        params = {"user": user, "kind": kind, "n": n, "window": window, "many": _MANY[kind]}
        if (await conn.execute(FOLD, params)).first() is not None:
            continue
        one = rows[0]
        is_pipeline = kind.startswith("pipeline_")
        await conn.execute(
            INSERT,
            {
                "user": user,
                "kind": kind,
                "n": n,
                "job": None if n > 1 or is_pipeline else one["id"],
                "pipeline": (one["id"] if is_pipeline else one.get("pipeline_id")) if n == 1 else None,
                "text": storable_text(_ONE[kind].format(_title(one)) if n == 1 else _MANY[kind] % n),
            },
        )


async def record_transitions(conn: AsyncConnection, changed: Sequence[Any], pipelines: set[Any]) -> None:
    """The notices a batch of job transitions causes (called after the pipelines were derived again)."""
    items: list[tuple[str, Any]] = []
    missing = []
    for row in changed:
        status = row["status"]
        standalone = row.get("pipeline_id") is None
        if status == "waiting_approval" or (standalone and status in ("completed", "failed")):
            if row.get("user_id") is None:
                missing.append(row)
            else:
                items.append((_job_kind(status), row))
    if missing:
        found = (await conn.execute(OWNERS, {"ids": [r["id"] for r in missing]})).mappings().all()
        by_id = {r["id"]: r for r in found}
        for row in missing:
            if row["id"] in by_id:
                items.append(
                    (_job_kind(row["status"]), {**by_id[row["id"]], "pipeline_id": row.get("pipeline_id")})
                )
    if pipelines:
        done = (await conn.execute(FINISHED_PIPELINES, {"ids": list(pipelines)})).mappings().all()
        items += [(PIPELINE_COMPLETED if p["status"] == "completed" else PIPELINE_FAILED, p) for p in done]
    if items:
        await record(conn, items)


def _job_kind(status: str) -> str:
    return {"completed": JOB_COMPLETED, "failed": JOB_FAILED}.get(status, APPROVAL_WAITING)
