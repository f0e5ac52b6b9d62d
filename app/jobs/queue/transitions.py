"""People's actions on a job: cancel, retry, run again, approve, reject, rerun, reschedule, delete.

Each locks the job row, checks who may do it and from which status (:mod:`app.jobs.states`), then
changes it with a compare-and-set and writes its event, in the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import BadInput, Conflict, Forbidden
from app.files import DELETE_JOB_OUTPUTS
from app.jobs.error_text import retry_refusal, retry_refusal_kind
from app.jobs.fanout import unwrap_literals
from app.jobs.graph import has_refs, resolve_refs
from app.jobs.payload import cap_text
from app.jobs.queue.cancelled import check_not_cancelled
from app.jobs.queue.common import (
    JOB_COLUMNS,
    Principal,
    actor_of,
    add_event,
    conn_of,
    get_job,
    lock_job,
    lock_pipelines,
    notify_cancel,
    notify_jobs,
    sql,
)
from app.jobs.queue.consequences import consequences
from app.jobs.queue.fanouts import GATES_OF
from app.jobs.queue.holds import hold_if_owner_disabled
from app.jobs.queue.new_jobs import Enqueued, NewJob, enqueue
from app.jobs.queue.owner_rule import check_owner_may_have, check_reopened_may_have, owner_is_admin
from app.jobs.queue.pipelines import mark_removed, refresh_pipelines
from app.jobs.rows import JobRow, job_row
from app.jobs.run_at import check_run_at
from app.jobs.states import Actor, Status, label, not_cancellable, not_in, sources
from app.jobs.types import (
    USER_MAX_PRIORITY,
    PermanentError,
    priority_refusal,
    registry,
)
from app.settings import Settings

CANCEL_QUEUED = sql(
    """
    UPDATE jobs SET status = 'cancelled', is_active = false, completed_at = now(), updated_at = now(),
        error_message = :message
    WHERE id = :id AND status = ANY(CAST(:from AS text[]))
    RETURNING id, pipeline_id, status, type, user_id, title, step_key
    """
)
REQUEST_CANCEL = sql(
    """
    UPDATE jobs SET is_active = false, updated_at = now()
    WHERE id = :id AND status = 'in_progress' AND is_active
    RETURNING id, pipeline_id, status, locked_by
    """
)


def _cancel_refused(row: JobRow) -> Conflict:
    reason = not_cancellable(row["status"], is_active=row["is_active"])
    status = "cancelling" if row["status"] == Status.IN_PROGRESS else row["status"]
    return Conflict(f"Cannot cancel job {row['id']}: {reason}.", extra={"status": status, "reason": reason})


async def cancel(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal, *, reason: str | None = None
) -> JobRow:
    """Cancel a job (owner or admin).

    ``queued``/``waiting_approval`` → ``cancelled`` at once (dependents cancelled too). ``in_progress`` →
    ``is_active = false`` ("Cancelling…") and a NOTIFY to its worker, which stops it and records
    ``cancelled``; from then on the worker's completion can no longer win. Returns the job row after.

    Raises:
        NotFound: unknown or another user's job.
        Conflict: the job has already finished, or a cancel is already pending
            (:func:`app.jobs.states.not_cancellable` says which, in the page's words).
    """
    conn = await conn_of(db)
    row = await lock_job(conn, job_id, principal)
    actor = actor_of(principal)
    message = (
        f"cancelled by {'an admin' if principal.is_admin and row['user_id'] != principal.id else 'its owner'}"
    )
    if reason:
        message += f": {reason}"
    if row["status"] == Status.IN_PROGRESS:
        if not row["is_active"]:
            raise _cancel_refused(row)
        await conn.execute(REQUEST_CANCEL, {"id": row["id"]})
        await add_event(conn, row, "cancel_requested", actor, message=message)
        await notify_cancel(conn, row["id"])
        return await get_job(conn, row["id"])
    allowed = [s.value for s in sources(Status.CANCELLED, Actor.ADMIN if principal.is_admin else Actor.OWNER)]
    if row["status"] not in allowed:
        raise _cancel_refused(row)
    await lock_pipelines(conn, [row["pipeline_id"]])
    changed = (
        (await conn.execute(CANCEL_QUEUED, {"id": row["id"], "from": allowed, "message": cap_text(message)}))
        .mappings()
        .all()
    )
    for r in changed:
        await add_event(
            conn, r, "cancelled", actor, from_status=row["status"], to_status="cancelled", message=message
        )
    await consequences(conn, changed, actor)
    return await get_job(conn, row["id"])


RETRY_FAILED = sql(
    f"""
    UPDATE jobs SET status = 'queued', attempts = 0, run_at = now(), completed_at = NULL, updated_at = now(),
        is_active = true, error_message = NULL, result_data = NULL, progress = NULL, progress_message = NULL
    WHERE id = :id AND status = 'failed'
    RETURNING {JOB_COLUMNS}
    """
)
REOPEN_BLOCKED = sql(
    f"""
    WITH reopened AS (
        UPDATE jobs c
        SET status = 'queued', completed_at = NULL, blocked_by = NULL, error_message = NULL, attempts = 0,
            is_active = true, run_at = now(), updated_at = now(),
            pending_parents = (
                SELECT count(*) FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
                WHERE d.job_id = c.id AND p.status <> 'completed'
            ) + {GATES_OF.format(job="c")}
        WHERE c.blocked_by = :id AND c.status = 'cancelled'
        RETURNING c.id, c.pipeline_id, c.pending_parents
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'reopened', 'cancelled', 'queued', :actor,
               'upstream job retried; waiting for it again', jsonb_build_object('upstream', CAST(:id AS uuid))
        FROM reopened
    )
    SELECT * FROM reopened
    """
)


async def retry(db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal) -> JobRow:
    """Manually retry a ``failed`` job (its owner or an admin, as :data:`app.jobs.states.TRANSITIONS` says).

    Rule: the job goes back to ``queued`` with ``attempts = 0`` — a fresh budget of ``max_attempts`` —
    so the processor really runs again; its earlier attempts and errors stay in its event history. Jobs
    that were cancelled because this one failed (``blocked_by``) are re-opened and wait for it again
    (as the README's "Pipelines" describes); each must be work its owner may have in the queue now, or
    nothing is retried (:func:`app.jobs.queue.owner_rule.check_reopened_may_have`). A double click retries once: the second gets 409 "not failed".

    Raises:
        NotFound: unknown id, or another user's job for a non-admin.
        Forbidden: the state machine does not let this person retry (see ``TRANSITIONS``).
        Conflict: the job is not ``failed`` (names its status); or a retry could not succeed
            (:func:`app.jobs.error_text.retry_refusal` says why and what to do instead); or it is a step
            of a pipeline a person cancelled (:func:`app.jobs.queue.cancelled.check_not_cancelled`).
    """
    conn = await conn_of(db)
    row = await lock_job(conn, job_id, principal)
    if Status.FAILED not in sources(Status.QUEUED, Actor.ADMIN if principal.is_admin else Actor.OWNER):
        raise Forbidden("Only an admin can retry a failed job.")
    if row["status"] != Status.FAILED:
        reason = not_in(row["status"], "failed", is_active=row["is_active"])
        raise Conflict(
            f"Cannot retry job {row['id']}: {reason}.", extra={"status": row["status"], "reason": reason}
        )
    refusal = retry_refusal(row)
    if refusal is not None:
        raise Conflict(
            f"Cannot retry job {row['id']}: {refusal}.", extra={"retry_refused": retry_refusal_kind(row)}
        )
    await check_not_cancelled(conn, row, "retry")
    await check_owner_may_have(conn, row, principal, "retried")
    await check_reopened_may_have(conn, row, principal)
    await lock_pipelines(conn, [row["pipeline_id"]])
    updated = (await conn.execute(RETRY_FAILED, {"id": row["id"]})).mappings().first()
    if updated is None:  # lost a race with another retry
        raise Conflict(f"Cannot retry job {row['id']}: it is no longer failed.")
    actor = actor_of(principal)
    await add_event(
        conn,
        updated,
        "retried",
        actor,
        from_status="failed",
        to_status="queued",
        message="manual retry with a fresh attempt budget",
        data={"previous_attempts": row["attempts"], "previous_error": cap_text(row["error_message"], 2000)},
    )
    reopened = (await conn.execute(REOPEN_BLOCKED, {"id": row["id"], "actor": actor})).all()
    await hold_if_owner_disabled(conn, row["user_id"], [row["id"], *(r.id for r in reopened)])
    await notify_jobs(conn)
    if row["pipeline_id"]:
        await refresh_pipelines(conn, [row["pipeline_id"]])
    return await get_job(conn, row["id"])


PARENT_RESULTS = sql(
    """
    SELECT COALESCE(p.step_key, p.id::text) AS key, p.result_data
    FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
    WHERE d.job_id = :id
    """
)


async def _priority_for_owner(conn: AsyncConnection, row: JobRow, principal: Principal) -> int:
    """The new job is the owner's, so the owner must be allowed to submit its type now
    (:func:`app.jobs.queue.owner_rule.check_owner_may_have`): an admin's "run again" of a person's
    diagnostic or internal job (a template's step) would give that person a job they could not start
    themselves, and a demoted admin's of their own admins-only job too. Returns the new job's priority:
    the job's, but at most :data:`~app.jobs.types.USER_MAX_PRIORITY` when the owner is not an admin
    (:func:`app.jobs.types.priority_refusal`; a job may have a higher one from before that rule, or from
    a processor), since nobody chose a priority to refuse here.

    Raises:
        Forbidden: the type is for admins and the owner is not one.
    """
    await check_owner_may_have(conn, row, principal, "run again", in_place=False)
    priority = int(row["priority"])
    if priority_refusal(False, priority) is None or await owner_is_admin(conn, row, principal):
        return priority
    return min(priority, USER_MAX_PRIORITY)


async def run_again(
    db: AsyncConnection | AsyncSession,
    job_id: Any,
    principal: Principal,
    settings: Settings,
    *,
    request_id: str | None = None,
) -> Enqueued:
    """A new job with the same type and input as ``job_id`` ("Run again", owner or admin); a step's
    ``{"$ref": …}`` values are the values its parents gave it.
    The new job belongs to the original owner and starts with a fresh attempt budget.

    Raises:
        NotFound: unknown or another user's job.
        Forbidden: a diagnostic or internal type, and the owner is not an admin.
        BadInput: the type is no longer registered or the input no longer validates.
    """
    conn = await conn_of(db)
    row = await get_job(conn, job_id, principal)
    priority = await _priority_for_owner(conn, row, principal)
    input_data = await _input_as_it_ran(conn, row)
    _check_needs_no_parents(row, input_data)
    result = await enqueue(
        conn,
        NewJob(
            type=row["type"],
            input_data=input_data,
            user_id=row["user_id"],
            priority=priority,
            max_attempts=row["max_attempts"],
            title=row["title"],
            request_id=request_id,
        ),
        settings,
        actor=actor_of(principal),
    )
    if await hold_if_owner_disabled(conn, row["user_id"], [result.job["id"]]):
        result = Enqueued(job=await get_job(conn, result.job["id"]), created=result.created)
    await add_event(
        conn,
        row,
        "run_again",
        actor_of(principal),
        message=f"run again as job {result.job['id']}",
        data={"new_job": str(result.job["id"])},
    )
    return result


def _check_needs_no_parents(row: JobRow, data: Any) -> None:
    """A step that works on what the steps before it give it (a contact sheet of their thumbnails)
    cannot be copied into a job on its own, which has no steps before it. The type's own rule
    (:meth:`~app.jobs.types.ProcessorSpec.parents_supply`, the one the queue applies at every
    submission) decides; the words are this path's: nobody is filling in a form here.

    Raises:
        BadInput: naming the fields only the steps before it could fill.
    """
    spec = registry.get(row["type"])
    needed = spec.parents_supply(data) if spec is not None else []
    if not needed:
        return
    what = " and ".join(f"'{name}'" for name in needed)
    message = (
        f"This step cannot run again as a new job on its own: the steps before it in its pipeline gave it "
        f"what it works on ({what} was left for them to fill), and a job on its own has no steps before "
        "it. To do it again, start its pipeline again."
    )
    raise BadInput(message, errors={"input_data": message})


async def _input_as_it_ran(conn: AsyncConnection, row: JobRow) -> Any:
    """The job's input with each ``{"$ref": …}`` read from its parents' results, as the worker reads them
    when the step runs: the new job runs on its own, with no parents to read them from.

    Raises:
        BadInput: a parent's result does not hold what the input reads (the parent did not finish, or
            it is gone).
    """
    data = row["input_data"]
    if not has_refs(data):
        return unwrap_literals(data)  # data an item put in stays data in the job on its own
    rows = (await conn.execute(PARENT_RESULTS, {"id": row["id"]})).mappings()
    try:
        return resolve_refs(data, {r["key"]: r["result_data"] for r in rows})
    except PermanentError as exc:
        # worded for the job page's notice as much as the API: no field name in front of the sentence
        message = f"This step reads its parents' results, which cannot give it its input any more: {exc}"
        raise BadInput(message, errors={"input_data": message}) from None


RESCHEDULE = sql(
    f"""
    UPDATE jobs SET run_at = COALESCE(:run_at, now()), updated_at = now()
    WHERE id = :id AND status = 'queued'
    RETURNING {JOB_COLUMNS}
    """
)


WAITED_FOR = sql(
    """
    SELECT COALESCE(p.step_key, CAST(p.id AS text)) AS key FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
    WHERE d.job_id = :id AND p.status <> 'completed'
    ORDER BY p.step_key, p.id LIMIT 6
    """
)


def not_waiting(row: JobRow, done: str) -> str:
    """Why a job that no longer waits cannot be ``done`` ("run now", "rescheduled"), with its status in
    the words its page shows ("Running", "Done"): the one sentence the API's 409, the page's notice
    ("Nothing changed: …") and the audit entry give, as :func:`_run_now_refusal`'s are."""
    return f"this job is {label(row['status'], is_active=row['is_active'])}, not waiting, so it cannot be {done}."


async def _run_now_refusal(conn: AsyncConnection, row: JobRow) -> str | None:
    """Why "run now" cannot start this waiting job, or ``None``. Its due time is only one of the things
    a claim waits for (:mod:`app.jobs.queue.claims`): a step whose earlier steps have not completed, and
    a job held because its owner was disabled, would stay where they are with the time moved — an answer
    of "it will start" that nothing follows. A later due time (``reschedule``) still means something for
    them, so only "now" is refused."""
    if row["pending_parents"] > 0:
        keys = list((await conn.execute(WAITED_FOR, {"id": row["id"]})).scalars())
        named = ", ".join(f"“{k}”" for k in keys[:5]) + (" and more" if len(keys) > 5 else "")
        # a for_each step not yet expanded has no job row to name: its gate is counted all the same
        return (
            f"this step waits for earlier steps: {named}. It runs once they have completed."
            if keys
            else "this step waits for earlier steps. It runs once they have completed."
        )
    if not row["is_active"]:
        return "this job is held because its owner's account is disabled. Release it first."
    return None


DUE_NOW = sql("SELECT CAST(:run_at AS timestamptz) <= now()")


async def _unchanged_due_time(conn: AsyncConnection, row: JobRow, run_at: datetime | None) -> str | None:
    """Why moving the job's due time to ``run_at`` (``None``: now) would change nothing, or ``None``. Run
    now of a job already due only moved its due time later, behind the jobs due meanwhile (claims take
    the earlier due time first), and both that and a reschedule to the moment it has were audited "ok":
    an admin action that changes nothing is a "Nothing changed" refusal, as a second pause is."""
    if run_at is None:
        if (await conn.execute(DUE_NOW, {"run_at": row["run_at"]})).scalar():
            # without a period: the refusal and the page's notice end the sentence
            return (
                "this job is already due, so it cannot be run sooner: a worker starts it when one is free "
                "(and its type is not paused)"
            )
        return None
    if run_at == row["run_at"]:
        return "this job already waits until that moment, so it was not rescheduled"
    return None


async def reschedule(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal, run_at: datetime | None
) -> JobRow:
    """Move a waiting job's due time (``None`` = run now). Admins only.

    Raises:
        BadInput: ``run_at`` that is no due time (:func:`app.jobs.run_at.check_run_at`). NotFound /
            Forbidden. Conflict: the job is not waiting; or, to run now, it waits for earlier steps or is
            held (:func:`_run_now_refusal`); or its due time would not change (:func:`_unchanged_due_time`).
    """
    check_run_at(run_at)
    conn = await conn_of(db)
    row = await lock_job(conn, job_id, principal)
    if not principal.is_admin:
        raise Forbidden("Only an admin can reschedule a job.")
    if row["status"] != Status.QUEUED:
        raise Conflict(not_waiting(row, "run now" if run_at is None else "rescheduled"))
    if run_at is None and (why := await _run_now_refusal(conn, row)):
        raise Conflict(why)
    if why := await _unchanged_due_time(conn, row, run_at):
        # "Nothing changed" in the API's answer too, as every admin no-op says it (the page's notice
        # puts it before the reason)
        raise Conflict(f"Nothing changed: {why}.", extra={"reason": why})
    found = (await conn.execute(RESCHEDULE, {"id": row["id"], "run_at": run_at})).mappings().first()
    assert found is not None, "the row is locked and queued"
    updated = job_row(found)
    await add_event(
        conn,
        updated,
        "rescheduled",
        actor_of(principal),
        message="run now" if run_at is None else f"run at {run_at.isoformat()}",
        data={"from": row["run_at"].isoformat(), "to": updated["run_at"].isoformat()},
    )
    await notify_jobs(conn)
    return updated


DELETE_JOB = sql("DELETE FROM jobs WHERE id = :id RETURNING id")


async def delete(db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal) -> list[Any]:
    """Delete a job that is not running (admins): its dependents are cancelled first with the reason
    "upstream … was removed", so nothing waits on a missing job. The files it produced go with it, in
    the same transaction (:data:`app.files.DELETE_JOB_OUTPUTS`: not the uploads its input names), so they
    stop counting against the owner's storage; returns their ids, whose bytes the caller removes after
    commit (:func:`app.files.remove_after_commit`).

    Raises:
        NotFound / Forbidden. Conflict: the job is running (cancel it first).
    """
    conn = await conn_of(db)
    row = await lock_job(conn, job_id, principal)
    if not principal.is_admin:
        raise Forbidden("Only an admin can delete a job.")
    if row["status"] == Status.IN_PROGRESS:
        raise Conflict(f"Cannot delete job {row['id']}: it is running; cancel it first.")
    await lock_pipelines(conn, [row["pipeline_id"]])
    if row["pipeline_id"]:
        await mark_removed(conn, row["pipeline_id"], row["status"])
    # Mark it as gone for the cascade's reason, then cascade, then delete.
    await conn.execute(CASCADE_CANCEL_REMOVED, {"id": row["id"], "actor": actor_of(principal)})
    outputs = list((await conn.execute(DELETE_JOB_OUTPUTS, {"job_id": row["id"]})).scalars())
    await conn.execute(DELETE_JOB, {"id": row["id"]})
    if row["pipeline_id"]:
        await refresh_pipelines(conn, [row["pipeline_id"]])
    return outputs


CASCADE_CANCEL_REMOVED = sql(
    """
    WITH RECURSIVE down(id) AS (
        SELECT job_id FROM job_dependencies WHERE depends_on = :id
        UNION
        SELECT d.job_id FROM job_dependencies d JOIN down ON d.depends_on = down.id
    ), gone AS (SELECT type FROM jobs WHERE id = :id), upd AS (
        UPDATE jobs j
        SET status = 'cancelled', completed_at = now(), updated_at = now(), blocked_by = :id,
            error_message = 'upstream ' || (SELECT type FROM gone) || ' ' || :id || ' was removed'
        FROM down
        WHERE j.id = down.id AND j.status = 'queued'
        RETURNING j.id, j.pipeline_id, j.error_message
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'cancelled', 'queued', 'cancelled', :actor, error_message,
               jsonb_build_object('upstream', CAST(:id AS uuid))
        FROM upd
    )
    SELECT count(*) FROM upd
    """
)
