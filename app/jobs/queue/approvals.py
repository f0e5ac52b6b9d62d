"""Decisions on a step that waits for approval: approve (counting distinct approvers), reject, send back
to run again, and the rejection of a step nobody decided in time.

Who may decide is :func:`app.jobs.approvals.refusal`, asked here with the job row locked; each
person's decision is kept in ``job_approvals`` (:mod:`app.jobs.decisions`) and every status change is a
compare-and-set with its event, in the caller's transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import BadInput, Conflict, Forbidden, NotFound
from app.jobs import approvals, decisions, notices, outbox
from app.jobs.decisions import Decision, decided_by, decision_words
from app.jobs.payload import blank, cap_text, check_text
from app.jobs.queue.cancelled import check_not_cancelled
from app.jobs.queue.common import (
    GET_JOB_FOR_UPDATE,
    JOB_COLUMNS,
    Principal,
    actor_of,
    add_event,
    conn_of,
    lock_job,
    lock_job_row,
    lock_pipelines,
    may_see,
    notify_jobs,
    parse_job_id,
    sql,
)
from app.jobs.queue.consequences import consequences
from app.jobs.queue.holds import hold_if_owner_disabled
from app.jobs.queue.owner_rule import check_owner_may_have
from app.jobs.queue.pipelines import refresh_pipelines
from app.jobs.rows import JobRow, job_row
from app.jobs.states import Status, not_in

APPROVE = sql(
    f"""
    UPDATE jobs SET status = 'completed', completed_at = now(), updated_at = now()
    WHERE id = :id AND status = 'waiting_approval'
    RETURNING {JOB_COLUMNS}
    """
)
REJECT = sql(
    f"""
    UPDATE jobs SET status = 'failed', completed_at = now(), updated_at = now(), error_message = :message
    WHERE id = :id AND status = 'waiting_approval'
    RETURNING {JOB_COLUMNS}
    """
)
RERUN = sql(
    f"""
    UPDATE jobs SET status = 'queued', run_at = now(), attempts = 0, updated_at = now(), result_data = NULL,
        progress = NULL, progress_message = NULL
    WHERE id = :id AND status = 'waiting_approval'
    RETURNING {JOB_COLUMNS}
    """
)
LAST_DECISION = sql(
    """
    SELECT e.kind, e.actor, e.at, u.email
    FROM job_events e
    LEFT JOIN users u ON u.id = CASE WHEN e.actor ~ '^user:[0-9]{1,9}$' THEN substr(e.actor, 6)::int END
    WHERE e.job_id = :id AND e.kind IN ('approved', 'rejected', 'rerun_requested')
    ORDER BY e.id DESC LIMIT 1
    """
)


async def _decision_conflict(conn: AsyncConnection, row: JobRow, action: str) -> Conflict:
    """The refusal of a second decision: names the earlier one, who made it and when (``decided``
    carries it as a :class:`~app.jobs.decisions.Decision`, so that a page can word it in its own way)."""
    last = (await conn.execute(LAST_DECISION, {"id": row["id"]})).mappings().first()
    if last:
        decided = Decision(last["kind"], decided_by(last["actor"], last["email"]), last["at"])
        return Conflict(
            f"Cannot {action} job {row['id']}: it was {decision_words(decided)}.",
            extra={"status": row["status"], "decision": last["kind"], "decided": decided},
        )
    reason = not_in(row["status"], "waiting for approval", is_active=row["is_active"])
    return Conflict(
        f"Cannot {action} job {row['id']}: {reason}.", extra={"status": row["status"], "reason": reason}
    )


def decision_refusal(
    row: Any, rule: approvals.Rule | None, principal: Principal
) -> NotFound | Forbidden | None:
    """Why ``principal`` may not decide the step ``row`` (with its ``id`` and ``user_id``) under ``rule``,
    as the error to raise, or ``None`` when they may. Someone the step does not name and who may not see
    the job (:func:`~app.jobs.queue.common.may_see`) gets the answer an unknown id gets, so that the ids of
    other people's steps cannot be probed; someone who may see it is told why they may not decide."""
    why = approvals.refusal(rule, user_id=principal.id, is_admin=principal.is_admin, owner_id=row["user_id"])
    if why is None:
        return None
    if not may_see(row, principal):
        return NotFound(f"No job with id {row['id']}.")
    return Forbidden(why)


async def _decide(
    conn: AsyncConnection, job_id: Any, principal: Principal, action: str
) -> tuple[JobRow, approvals.Rule | None]:
    """The step locked, once :func:`app.jobs.approvals.refusal` lets ``principal`` decide it."""
    jid = parse_job_id(job_id)
    found = await lock_job_row(conn, jid)
    if found is None:
        raise NotFound(f"No job with id {jid}.")
    row = job_row(found)
    rule = await approvals.rule_of(conn, row["id"])
    refused = decision_refusal(row, rule, principal)
    if refused is not None:
        raise refused
    if row["status"] != Status.WAITING_APPROVAL:
        raise await _decision_conflict(conn, row, action)
    await lock_pipelines(conn, [row["pipeline_id"]])
    return row, rule


async def _record(
    conn: AsyncConnection, row: JobRow, principal: Principal, decision: str, comment: str | None, needed: int
) -> None:
    """Keep this person's decision; refuse a second one from the same person."""
    if not await decisions.record(conn, row["id"], principal.id, decision, comment):
        so_far = await decisions.approvals_so_far(conn, row["id"])
        more = needed - so_far
        action = "approve" if decision == "approved" else "reject"
        raise Conflict(
            f"Cannot {action} job {row['id']}: you have already approved it; it waits for "
            f"{more} more approval{'s' if more != 1 else ''} from other people.",
            extra={"already_decided": True},
        )


def _comment(comment: str | None) -> str | None:
    comment = (comment or "").strip()
    if not comment:
        return None
    if len(comment) > REJECT_REASON_MAX:
        raise BadInput.field(
            "comment", f"must be at most {REJECT_REASON_MAX:,} characters (it has {len(comment):,})"
        )
    check_text(comment, "comment")
    return comment


async def approve(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal, *, comment: str | None = None
) -> JobRow:
    """Approve a step waiting for approval. Once ``approvals_needed`` distinct people have approved it
    (one, for a step without named approvers) it → ``completed`` and its dependents are released;
    before that the approval is recorded and the step keeps waiting.

    Raises:
        NotFound: unknown id, or a step that neither names ``principal`` nor is theirs to see
            (:func:`decision_refusal`: the same answer).
        Forbidden: one who may see the job but is not one of the step's approvers
            (:func:`app.jobs.approvals.refusal`).
        Conflict: not ``waiting_approval`` (names the earlier decision and who made it), or this
            person has already approved it.
        BadInput: a comment too long or not storable.
    """
    comment = _comment(comment)
    conn = await conn_of(db)
    row, rule = await _decide(conn, job_id, principal, "approve")
    needed = rule.approvals_needed if rule else 1
    await _record(conn, row, principal, "approved", comment, needed)
    so_far = await decisions.approvals_so_far(conn, row["id"])
    if so_far < needed:
        await add_event(
            conn,
            row,
            "approval_recorded",
            actor_of(principal),
            message=f"approved ({so_far} of {needed})" + (f": {comment}" if comment else ""),
            data={"approvals": so_far, "needed": needed},
        )
        return row
    found = (await conn.execute(APPROVE, {"id": row["id"]})).mappings().first()
    assert found is not None, "the row is locked and waiting for approval"
    updated = job_row(found)
    await add_event(
        conn,
        updated,
        "approved",
        actor_of(principal),
        from_status="waiting_approval",
        to_status="completed",
        message=comment,
        data={"approvals": so_far, "needed": needed} if needed > 1 else None,
    )
    await consequences(conn, [updated], actor_of(principal))
    return updated


REJECT_REASON_MAX = 2000
"""A rejection's reason is shown to the owner; the form's field allows as much."""


async def reject(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal, reason: str
) -> JobRow:
    """Reject a step waiting for approval: → ``failed`` with the reason; dependents cancelled.

    Raises:
        BadInput: an empty reason (or one of invisible characters only, :func:`~app.jobs.payload.blank`),
            or longer than :data:`REJECT_REASON_MAX` characters (the form's limit).
        NotFound / Forbidden / Conflict: as :func:`approve`.
    """
    reason = (reason or "").strip()
    if blank(reason):  # only invisible characters say no more than nothing
        raise BadInput.field("reason", "say why the result is rejected")
    if len(reason) > REJECT_REASON_MAX:
        raise BadInput.field(
            "reason", f"must be at most {REJECT_REASON_MAX:,} characters (it has {len(reason):,})"
        )
    check_text(reason, "reason")
    conn = await conn_of(db)
    row, rule = await _decide(conn, job_id, principal, "reject")
    # The refusal of one who has already approved counts the approvals still missing against the
    # step's own rule: with 1 here, a step needing 2 said it "waits for 0 more approvals".
    await _record(conn, row, principal, "rejected", reason, rule.approvals_needed if rule else 1)
    message = cap_text(f"rejected: {reason}")
    found = (await conn.execute(REJECT, {"id": row["id"], "message": message})).mappings().first()
    assert found is not None, "the row is locked and waiting for approval"
    updated = job_row(found)
    await add_event(
        conn,
        updated,
        "rejected",
        actor_of(principal),
        from_status="waiting_approval",
        to_status="failed",
        message=message,
    )
    await consequences(conn, [updated], actor_of(principal))
    return updated


async def rerun(db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal) -> JobRow:
    """Ask for a fresh run of a step waiting for approval: → ``queued`` (that step only).

    Raises:
        NotFound / Forbidden: not visible / not an admin. Conflict: as :func:`approve`; or a step of a
            pipeline a person cancelled (:func:`app.jobs.queue.cancelled.check_not_cancelled`).
    """
    conn = await conn_of(db)
    row = await lock_job(conn, job_id, principal)
    if not principal.is_admin:
        raise Forbidden("Only an admin can rerun a step.")
    if row["status"] != Status.WAITING_APPROVAL:
        raise await _decision_conflict(conn, row, "rerun")
    await check_not_cancelled(conn, row, "rerun")
    await check_owner_may_have(conn, row, principal, "rerun")
    await lock_pipelines(conn, [row["pipeline_id"]])
    await decisions.forget(conn, row["id"])
    found = (await conn.execute(RERUN, {"id": row["id"]})).mappings().first()
    assert found is not None, "the row is locked and waiting for approval"
    updated = job_row(found)
    await add_event(
        conn,
        updated,
        "rerun_requested",
        actor_of(principal),
        from_status="waiting_approval",
        to_status="queued",
    )
    # Only a release lets a disabled person's work run: a step waiting for approval was not held at the
    # disable (it was not waiting to run), so the rerun that puts it back in the queue holds it, as a
    # retry or a run again does.
    if await hold_if_owner_disabled(conn, row["user_id"], [row["id"]]):
        found = (await conn.execute(GET_JOB_FOR_UPDATE, {"id": row["id"]})).mappings().first()
        assert found is not None, "the row is locked"
        updated = job_row(found)
    await notify_jobs(conn)
    if row["pipeline_id"]:
        await refresh_pipelines(conn, [row["pipeline_id"]])
    return updated


# --- steps nobody decided in time ----------------------------------------------------------------------

TIMED_OUT = sql(
    f"""
    SELECT {", ".join("j." + c for c in JOB_COLUMNS.split(", "))}, r.on_timeout, r.timeout_seconds
    FROM jobs j JOIN job_approval_rules r ON r.job_id = j.id
    WHERE j.status = 'waiting_approval' AND r.timeout_seconds IS NOT NULL
      AND CASE
        WHEN r.on_timeout <> 'remind' THEN j.updated_at + make_interval(secs => r.timeout_seconds)
        WHEN r.reminded_at IS NULL OR r.reminded_at < j.updated_at
          THEN j.updated_at + make_interval(secs => GREATEST(r.timeout_seconds, :min_remind))
        ELSE r.reminded_at
          + GREATEST(make_interval(secs => GREATEST(r.timeout_seconds, :min_remind)), r.reminded_at - j.updated_at)
      END <= now()
    ORDER BY j.updated_at, j.id
    LIMIT :limit
    FOR UPDATE OF j SKIP LOCKED
    """
)
REJECT_TIMED_OUT = sql(
    f"""
    UPDATE jobs SET status = 'failed', completed_at = now(), updated_at = now(), error_message = :message
    WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'waiting_approval'
    RETURNING {JOB_COLUMNS}
    """
)
LOCK_FREE_PIPELINES = sql(
    "SELECT id FROM pipelines WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE SKIP LOCKED"
)
REMINDED = sql("UPDATE job_approval_rules SET reminded_at = now() WHERE job_id = ANY(CAST(:ids AS uuid[]))")
TIMEOUT_ACTOR = "system:approval_timeout"
TIMEOUT_BATCH = 200


def _seconds_words(seconds: int) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


async def expire_approvals(conn: AsyncConnection) -> dict[str, list[Any]]:
    """Steps that waited ``approval_timeout`` without a decision: those with ``on_approval_timeout:
    reject`` → ``failed`` (dependents cancelled), those with ``remind`` get one more ``approval_needed``
    alert, and a reminder notice to each person who may decide them. The first reminder comes after
    the timeout (at least :data:`~app.jobs.approvals.MIN_REMIND_TIMEOUT`, also for rules stored before
    that minimum), each later one after as long as the step had waited at the one before (T, 2T, 4T…):
    a step nobody decides sends a few reminders a year, not one per period forever, whatever its
    rule says. Rows another sweep holds are skipped (``SKIP LOCKED``). Returns the ids of
    ``{"rejected": […], "reminded": […]}``.
    """
    due = (
        (await conn.execute(TIMED_OUT, {"limit": TIMEOUT_BATCH, "min_remind": approvals.MIN_REMIND_TIMEOUT}))
        .mappings()
        .all()
    )
    rejecting = [r for r in due if r["on_timeout"] == "reject"]
    reminding = [r for r in due if r["on_timeout"] == "remind"]
    rejected: list[JobRow] = []
    if rejecting:
        # The steps are locked already, so their pipelines are taken only if free: a person's action
        # locks a step's pipeline before the step (:func:`~app.jobs.queue.common.lock_job_row`), and
        # waiting here for one that is deciding or cancelling this step would be a deadlock. A step
        # whose pipeline is busy is left to the next sweep.
        ids = sorted({r["pipeline_id"] for r in rejecting if r["pipeline_id"]}, key=str)
        free = set((await conn.execute(LOCK_FREE_PIPELINES, {"ids": ids})).scalars()) if ids else set()
        rejecting = [r for r in rejecting if r["pipeline_id"] is None or r["pipeline_id"] in free]
    for r in rejecting:
        message = f"rejected: no decision within {_seconds_words(r['timeout_seconds'])}"
        found = (
            (await conn.execute(REJECT_TIMED_OUT, {"ids": [r["id"]], "message": message})).mappings().first()
        )
        if found is None:
            continue
        updated = job_row(found)
        await add_event(
            conn,
            updated,
            "rejected",
            TIMEOUT_ACTOR,
            from_status="waiting_approval",
            to_status="failed",
            message=message,
        )
        rejected.append(updated)
    if rejected:
        await consequences(conn, rejected, TIMEOUT_ACTOR)
    if reminding:
        await conn.execute(REMINDED, {"ids": [r["id"] for r in reminding]})
        await outbox.record_approvals(conn, reminding, reminder=True)
        await notices.record_approval_requests(conn, [r["id"] for r in reminding], reminder=True)
        for r in reminding:
            await add_event(conn, r, "approval_reminder", TIMEOUT_ACTOR, message="approvers reminded")
    return {"rejected": [r["id"] for r in rejected], "reminded": [r["id"] for r in reminding]}
