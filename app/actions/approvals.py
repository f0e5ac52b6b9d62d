"""Approving and rejecting steps, for everyone the step names: the decision itself (through
:func:`app.actions.jobs.perform`, so the audit and notice are the same as on the job page), the steps a
person may decide (their own list and ``GET /api/approvals``), the admins' inbox of every waiting step,
and the signed one-click link that alerts and e-mails carry.

Who may decide is :func:`app.jobs.approvals.refusal` — asked here to offer buttons, and by the queue,
with the job row locked, to decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import jobs as job_actions
from app.actions.jobs import ActionOutcome
from app.actions.trail import Actor
from app.errors import BadInput, Forbidden, NotFound
from app.jobs import approvals, decisions, queue
from app.jobs.approvals import link, link_problem, link_token
from app.jobs.cursors import Cursor, moment_cursor, page_of, read_cursor

__all__ = [
    "Page",
    "decide",
    "inbox",
    "link",
    "link_problem",
    "link_token",
    "mine",
    "record_of",
    "refusal",
    "step_for",
]

PAGE = 25
"""Rows per page of the inbox and of a person's list."""

# --- who may decide -----------------------------------------------------------------------------------


def refusal(user: Any, row: Mapping[str, Any]) -> str | None:
    """Why ``user`` may not decide the step ``row`` (with ``user_id`` and the rule's columns
    ``user_ids``, ``admins``, ``owner``, ``approvals_needed``), or ``None``."""
    return approvals.refusal(
        approvals.rule_from(row), user_id=user.id, is_admin=bool(user.is_admin), owner_id=row["user_id"]
    )


async def decide(
    db: AsyncSession, actor: Actor, job_id: Any, decision: str, comment: str | None = None
) -> ActionOutcome:
    """Approve (``comment`` optional) or reject (``comment`` is the reason, required) one step.

    Raises:
        NotFound / Forbidden (not one of its approvers) / BadInput (no reason for a rejection).
    """
    if decision == "approve":
        return await job_actions.perform(db, actor, "approve", job_id, comment=comment)
    if decision == "reject":
        return await job_actions.perform(db, actor, "reject", job_id, reason=comment or "")
    raise BadInput.field("decision", 'must be "approve" or "reject"')


# --- the steps waiting ------------------------------------------------------------------------------

_WAITING = """
    SELECT j.id, j.status, j.type, j.title, j.step_key, j.pipeline_id, j.user_id, j.updated_at AS waiting_since,
           j.result_data, u.email AS owner_email, p.name AS pipeline_name,
           r.approvers, r.user_ids, r.admins, r.owner, r.approvals_needed,
           (SELECT count(*) FROM job_approvals a WHERE a.job_id = j.id AND a.decision = 'approved') AS approvals
    FROM jobs j
    JOIN users u ON u.id = j.user_id
    LEFT JOIN pipelines p ON p.id = j.pipeline_id
    LEFT JOIN job_approval_rules r ON r.job_id = j.id
    WHERE j.status = 'waiting_approval'
      {after}
      {mine}
    ORDER BY j.updated_at, j.id
    LIMIT :limit
"""
# A coarse pre-filter on the rule's columns, so that a person's list reads only steps that name them;
# the exact rule (the submitter, a legacy step) is :func:`refusal`, applied to each row.
_MINE = """
      AND ((r.job_id IS NULL AND :is_admin) OR :uid = ANY(r.user_ids) OR (r.admins AND :is_admin)
           OR (r.owner AND j.user_id = :uid))
"""
# Two statements each, so that a later page starts its index range at the cursor rather than filtering.
_AFTER = "AND (j.updated_at, j.id) > (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid))"
INBOX = {False: text(_WAITING.format(after="", mine="")), True: text(_WAITING.format(after=_AFTER, mine=""))}
MINE = {
    False: text(_WAITING.format(after="", mine=_MINE)),
    True: text(_WAITING.format(after=_AFTER, mine=_MINE)),
}
ONE = text(_WAITING.format(after="", mine="AND j.id = :id").replace("j.status = 'waiting_approval'", "true"))
MY_DECISIONS = text(
    "SELECT job_id FROM job_approvals WHERE user_id = :uid AND job_id = ANY(CAST(:ids AS uuid[]))"
)
WAITING_COUNT = text("SELECT count(*) FROM jobs WHERE status = 'waiting_approval'")


@dataclass
class Page:
    """One page of waiting steps, oldest first; ``after`` is the keyset of the next page (or ``None``)."""

    rows: list[dict[str, Any]]
    after: str | None


def _cursor(row: Mapping[str, Any]) -> str:
    return moment_cursor(row["waiting_since"], row["id"])


def _shaped(user: Any, row: Mapping[str, Any], decided: set[Any]) -> dict[str, Any]:
    out = dict(row)
    out["approvals_needed"] = row["approvals_needed"] or 1
    out["approvers"] = list(row["approvers"] or ["admins"])
    out["refusal"] = refusal(user, row)
    out["decided"] = row["id"] in decided
    out["waiting"] = row["status"] == "waiting_approval"
    out["may_decide"] = out["refusal"] is None and not out["decided"] and out["waiting"]
    return out


async def _page(db: AsyncSession, user: Any, statements: Any, after: str | None, limit: int) -> Page:
    after_at, after_id = read_cursor(after, Cursor.WAITING) or (None, None)
    statement = statements[after_at is not None]
    params = {"after_at": after_at, "after_id": after_id, "limit": limit + 1, "uid": user.id}
    params["is_admin"] = bool(user.is_admin)
    rows, after_last = page_of(
        [dict(r) for r in (await db.execute(statement, params)).mappings()], limit, _cursor
    )
    ids = [r["id"] for r in rows]
    decided = set((await db.execute(MY_DECISIONS, {"uid": user.id, "ids": ids})).scalars()) if ids else set()
    shaped = [_shaped(user, r, decided) for r in rows]
    return Page(shaped, after_last)


async def inbox(db: AsyncSession, admin: Any, *, after: str | None = None, limit: int = PAGE) -> Page:
    """Every step waiting for a decision, oldest first (admins), each with whether this admin may
    decide it. Reads ``ix_jobs_waiting_approval`` in keyset order, whatever the size of ``jobs``.

    Raises:
        Forbidden: not an admin. BadInput: a bad ``after``.
    """
    if not admin.is_admin:
        raise Forbidden("Only administrators may see every step waiting for approval.")
    return await _page(db, admin, INBOX, after, limit)


MINE_READS = 8
"""Pages of waiting steps one page of a person's list reads at most to fill itself."""


async def mine(db: AsyncSession, user: Any, *, after: str | None = None, limit: int = PAGE) -> Page:
    """The steps ``user`` may decide now (not those they already approved), oldest first, ``limit`` to a
    page. The query's pre-filter lets through steps the exact rule refuses (the submitter's own, one
    already approved): those are left out and the page reads on until it is full, so that it is never
    short, or empty ("Nothing waits for your decision"), while later steps wait for them. After
    :data:`MINE_READS` reads it stops, shorter, with ``after`` at the last step read so that the next page
    goes on from there."""
    found: list[dict[str, Any]] = []
    cursor = after
    for _ in range(MINE_READS):
        page = await _page(db, user, MINE, cursor, limit)
        found += [r for r in page.rows if r["may_decide"]]
        if len(found) > limit or page.after is None:
            rows, after_next = page_of(found, limit, _cursor)
            return Page(rows, after_next)
        cursor = page.after
    return Page(found, cursor)


async def waiting_count(db: AsyncSession) -> int:
    """How many steps wait for a decision (the partial index; for ``/admin``)."""
    return int((await db.execute(WAITING_COUNT)).scalar_one())


async def step_for(db: AsyncSession, user: Any, job_id: Any) -> dict[str, Any]:
    """One step as its approver's page shows it, with the decisions so far.

    Raises:
        NotFound: unknown id, or a step ``user`` may not decide and may not otherwise see (neither its
        owner nor an admin): one answer for both, so that ids cannot be probed.
    """
    jid = job_actions.parse_id(job_id)
    row = (await db.execute(ONE, {"id": jid, "limit": 1})).mappings().first()
    if row is None:
        raise NotFound(f"No job with id {jid}.")
    # a stranger gets the unknown id's answer; one who may see the job sees why they may not decide
    if isinstance(queue.decision_refusal(row, approvals.rule_from(row), user), NotFound):
        raise NotFound(f"No job with id {jid}.")
    decided = set((await db.execute(MY_DECISIONS, {"uid": user.id, "ids": [jid]})).scalars())
    step = _shaped(user, dict(row), decided)
    step["decisions"] = await decisions.decisions_of(db, jid)
    step["described"] = await approvals.described(await db.connection(), jid)
    return step


async def record_of(db: AsyncSession, job_id: Any) -> dict[str, Any]:
    """What the job page shows of a step that requires approval: its approvers as written
    (``described``, ``None`` for any admin) and every decision so far (``decisions``)."""
    return {
        "described": await approvals.described(await db.connection(), job_id),
        "decisions": await decisions.decisions_of(db, job_id),
    }


async def may_decide(db: AsyncSession, user: Any, job_id: Any, owner_id: int) -> bool:
    """Whether ``user`` gets Approve / Reject for the waiting step (its rule, and not already approved
    by them); the decision checks again."""
    conn = await db.connection()
    rule = await approvals.rule_of(conn, job_id)
    if approvals.refusal(rule, user_id=user.id, is_admin=bool(user.is_admin), owner_id=owner_id):
        return False
    return not (await db.execute(MY_DECISIONS, {"uid": user.id, "ids": [job_id]})).first()
