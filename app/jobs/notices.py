"""Notices to people, written by the queue in the same transaction as the transition that causes them
(like the alert outbox rows of :mod:`app.jobs.outbox`): a person's own standalone job finished, failed
or was cancelled, their pipeline finished, failed or was cancelled — a cancel only when someone else
(an admin) or the system did it, never when the owner did it themselves — and a step waits for the
approval of the people who may decide it (:func:`app.jobs.approvals.refusal`: the named approvers,
every admin for ``admins``, the submitter for ``owner``), again at each reminder. Steps inside a
pipeline do not notify their owner one by one: the pipeline's own notice stands for them.

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

from app.formatting import isolated
from app.jobs.approvals import may_decide, rule_from
from app.jobs.payload import json_text, storable_text
from app.jobs.types import registry

GROUP_SECS = 60.0
"""Alike notices of one person this close together fold into one."""

JOB_COMPLETED = "job_completed"
JOB_FAILED = "job_failed"
JOB_CANCELLED = "job_cancelled"
PIPELINE_COMPLETED = "pipeline_completed"
PIPELINE_FAILED = "pipeline_failed"
PIPELINE_CANCELLED = "pipeline_cancelled"
APPROVAL_WAITING = "approval_waiting"
APPROVAL_REMINDER = "approval_reminder"
KINDS = (
    JOB_COMPLETED,
    JOB_FAILED,
    JOB_CANCELLED,
    PIPELINE_COMPLETED,
    PIPELINE_FAILED,
    PIPELINE_CANCELLED,
    APPROVAL_WAITING,
    APPROVAL_REMINDER,
)

_ONE = {
    JOB_COMPLETED: "Your job “{}” has finished.",
    JOB_FAILED: "Your job “{}” failed.",
    JOB_CANCELLED: "Your job “{}” was cancelled.",
    PIPELINE_COMPLETED: "Your pipeline “{}” has finished.",
    PIPELINE_FAILED: "Your pipeline “{}” failed.",
    PIPELINE_CANCELLED: "Your pipeline “{}” was cancelled.",
    APPROVAL_WAITING: "“{}” waits for your approval.",
    APPROVAL_REMINDER: "Reminder: “{}” still waits for your approval.",
}
_MANY = {
    JOB_COMPLETED: "%s of your jobs have finished.",
    JOB_FAILED: "%s of your jobs failed.",
    JOB_CANCELLED: "%s of your jobs were cancelled.",
    PIPELINE_COMPLETED: "%s of your pipelines have finished.",
    PIPELINE_FAILED: "%s of your pipelines failed.",
    PIPELINE_CANCELLED: "%s of your pipelines were cancelled.",
    APPROVAL_WAITING: "%s steps wait for your approval.",
    APPROVAL_REMINDER: "Reminder: %s steps still wait for your approval.",
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
# Who cancelled: the newest cancel by a person (a running job's is its cancel request: the worker that
# stops it writes the ``cancelled`` event under its own name); none means the system did it.
_CANCELLED_BY = """(SELECT e.actor FROM job_events e WHERE e.{of} AND e.kind IN ('cancelled', 'cancel_requested')
                      AND e.actor LIKE 'user:%' ORDER BY e.id DESC LIMIT 1)"""
CANCELLED_JOBS = text(
    f"""
    SELECT j.id, j.user_id, j.title, j.type, j.pipeline_id, {_CANCELLED_BY.format(of="job_id = j.id")} AS cancelled_by
    FROM jobs j WHERE j.id = ANY(CAST(:ids AS uuid[])) AND j.status = 'cancelled'
    """
)
FINISHED_PIPELINES = text(
    f"""
    SELECT p.id, p.user_id, p.name, p.status,
           CASE WHEN p.status = 'cancelled' THEN {_CANCELLED_BY.format(of="pipeline_id = p.id")} END AS cancelled_by
    FROM pipelines p
    WHERE p.id = ANY(CAST(:ids AS uuid[])) AND p.status IN ('completed', 'failed', 'cancelled')
      AND p.finished_at = now()
      AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.pipeline_id = p.id AND n.at = now())
    """
)
# The people who might decide each step: the active admins, the owner and the named approvers; the rule
# itself (:func:`app.jobs.approvals.refusal`) then says who of them may.
APPROVERS = text(
    """
    SELECT j.id, j.user_id AS owner_id, j.title, j.type, j.pipeline_id,
           r.user_ids, r.admins, r.owner, r.approvals_needed, u.id AS user_id, u.is_admin
    FROM jobs j
    LEFT JOIN job_approval_rules r ON r.job_id = j.id
    JOIN users u ON u.is_active
                AND (u.is_admin OR u.id = j.user_id OR u.id = ANY(COALESCE(r.user_ids, CAST('{}' AS int[]))))
    WHERE j.id = ANY(CAST(:ids AS uuid[]))
    ORDER BY j.id, u.id
    """
)


def sql_format(kind: str, *, many: bool) -> str:
    """The text of a ``kind`` notice as a template for SQL's ``format()`` (one ``%s``: the title, or the
    count when ``many``), for statements that write notices themselves."""
    if many:
        return _MANY[kind]
    return _ONE[kind].replace("%", "%%").replace("{}", "%s")


def one_text(kind: str, title: str) -> str:
    """The text of a lone ``kind`` notice naming ``title``, set apart in its own direction
    (:func:`app.formatting.isolated`): a name holding U+202E would otherwise reverse the words after it in
    the e-mail and wherever the text is shown as it is. A statement that writes the text in SQL passes the
    title through ``jobdesk_isolated`` (migration 0023) with :func:`app.formatting.turning_class`."""
    return _ONE[kind].format(isolated(title))


def type_titles() -> str:
    """Every registered type's title by type name, as JSON text: for a notice written in SQL, where a job
    without a title of its own is named by its type's title (:func:`_title`)."""
    return json_text({spec.type: spec.title for spec in registry.all() if spec.title})


def _title(row: Any) -> str:
    """A job's own title, else its type's title (as its page and My jobs show it), else the type name; a
    pipeline's name."""
    named = row.get("title") or row.get("name")
    if not named and row.get("type"):
        spec = registry.get(row["type"])
        named = (spec.title if spec is not None else None) or row["type"]
    return str(named or "")[:200]


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
                "text": storable_text(one_text(kind, _title(one)) if n == 1 else _MANY[kind] % n),
            },
        )


async def record_transitions(conn: AsyncConnection, changed: Sequence[Any], pipelines: set[Any]) -> None:
    """The notices a batch of job transitions causes (called after the pipelines were derived again)."""
    items: list[tuple[str, Any]] = []
    missing = []
    cancelled = []
    waiting = []
    for row in changed:
        status = row["status"]
        standalone = row.get("pipeline_id") is None
        if status == "waiting_approval":
            waiting.append(row["id"])
        elif standalone and status == "cancelled":
            cancelled.append(row["id"])
        elif standalone and status in ("completed", "failed"):
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
    if cancelled:
        rows = (await conn.execute(CANCELLED_JOBS, {"ids": cancelled})).mappings().all()
        items += [(JOB_CANCELLED, r) for r in rows if not _by_owner(r)]
    if pipelines:
        done = (await conn.execute(FINISHED_PIPELINES, {"ids": list(pipelines)})).mappings().all()
        items += [(_PIPELINE_KIND[p["status"]], p) for p in done if not _by_owner(p)]
    if waiting:
        items += await _approval_items(conn, waiting, APPROVAL_WAITING)
    if items:
        await record(conn, items)


async def record_approval_requests(conn: AsyncConnection, job_ids: Sequence[Any], *, reminder: bool) -> None:
    """Tell each person who may decide the steps ``job_ids`` that they wait (``reminder``: still wait,
    after a whole ``approval_timeout``)."""
    items = await _approval_items(conn, job_ids, APPROVAL_REMINDER if reminder else APPROVAL_WAITING)
    if items:
        await record(conn, items)


async def _approval_items(conn: AsyncConnection, job_ids: Sequence[Any], kind: str) -> list[tuple[str, Any]]:
    rows = (await conn.execute(APPROVERS, {"ids": list(job_ids)})).mappings().all()
    return [
        (kind, r)
        for r in rows
        if may_decide(rule_from(r), user_id=r["user_id"], is_admin=r["is_admin"], owner_id=r["owner_id"])
    ]


def _by_owner(row: Any) -> bool:
    """Whether the owner cancelled it themselves (no notice then); ``cancelled_by`` is empty unless cancelled."""
    return row["cancelled_by"] is not None and row["cancelled_by"] == f"user:{row['user_id']}"


_PIPELINE_KIND = {"completed": PIPELINE_COMPLETED, "failed": PIPELINE_FAILED, "cancelled": PIPELINE_CANCELLED}


def _job_kind(status: str) -> str:
    return {"completed": JOB_COMPLETED, "failed": JOB_FAILED}.get(status, APPROVAL_WAITING)
