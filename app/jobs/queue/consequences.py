"""What a job's transition causes, in the same transaction: dependents released (a parent completed) or
cancelled (a parent failed or was cancelled), ``for_each`` steps expanded once their parents completed,
the pipeline's status derived again, and alert outbox rows and owners' notices written."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs import notices, outbox
from app.jobs.queue.common import fetch_rows, sql
from app.jobs.queue.fanouts import expand_ready
from app.jobs.queue.pipelines import refresh_pipelines
from app.jobs.rows import Fetched
from app.jobs.states import Status

Changed = Fetched
"""A job row a transition returned: at least ``id``, ``status`` and ``pipeline_id`` (failures and
approvals also ``type``, ``user_id``, ``title``, ``step_key`` for their alerts)."""

# One fewer pending parent for each dependent of the completed jobs, in a function of the schema
# (migrations/versions/0012_release_dependents.py) so that it reads the dependencies with a snapshot taken
# after the caller's writes: a dependency committed while the completion waited for the parent's row is
# counted. It locks the dependents in id order (completions of parents that share children queue behind
# each other instead of deadlocking) and sends the NOTIFY when one became claimable.
RELEASE_DEPENDENTS = sql("SELECT jobdesk_release_dependents(CAST(:ids AS uuid[])) AS notified")

CASCADE_CANCEL = sql(
    """
    WITH RECURSIVE down(id) AS (
        SELECT job_id FROM job_dependencies WHERE depends_on = ANY(CAST(:ids AS uuid[]))
        UNION
        SELECT d.job_id FROM job_dependencies d JOIN down ON d.depends_on = down.id
    ), cause AS (
        SELECT DISTINCT ON (dd.id) dd.id AS job_id, p.id AS cause_id, p.type AS cause_type, p.status AS cause_status
        FROM down dd
        JOIN LATERAL (
            WITH RECURSIVE up(id) AS (
                SELECT depends_on FROM job_dependencies WHERE job_id = dd.id
                UNION
                SELECT d.depends_on FROM job_dependencies d JOIN up ON d.job_id = up.id
            )
            SELECT j.id, j.type, j.status FROM jobs j JOIN up ON up.id = j.id WHERE j.id = ANY(CAST(:ids AS uuid[]))
        ) p ON true
        ORDER BY dd.id, p.id
    ), upd AS (
        UPDATE jobs j
        SET status = 'cancelled', completed_at = now(), updated_at = now(), blocked_by = cause.cause_id,
            error_message = 'upstream ' || cause.cause_type || ' ' || cause.cause_id || ' ' ||
                            CASE WHEN cause.cause_status = 'cancelled' THEN 'was cancelled'
                                 WHEN cause.cause_status = 'failed' THEN 'failed'
                                 ELSE 'was removed' END
        FROM cause
        WHERE j.id = cause.job_id AND j.status = 'queued'
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key, j.error_message,
                  cause.cause_id
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'cancelled', 'queued', 'cancelled', :actor, error_message,
               jsonb_build_object('upstream', cause_id)
        FROM upd
    )
    SELECT * FROM upd
    """
)


def _pipelines_of(rows: Iterable[Changed]) -> set[uuid.UUID]:
    return {r["pipeline_id"] for r in rows if r.get("pipeline_id") is not None}


async def _release_dependents(conn: AsyncConnection, completed: list[uuid.UUID]) -> bool:
    """One fewer pending parent for each dependent of ``completed``; NOTIFY if one became claimable.
    Returns whether a NOTIFY was sent."""
    [row] = await fetch_rows(conn, RELEASE_DEPENDENTS, {"ids": completed})
    return bool(row["notified"])


async def _cancel_dependents(conn: AsyncConnection, dead: list[uuid.UUID]) -> set[uuid.UUID]:
    """Cancel every waiting job downstream of ``dead`` (failed or cancelled) jobs, naming the upstream
    cause. Returns the pipelines of the jobs cancelled."""
    cascaded = (
        (await conn.execute(CASCADE_CANCEL, {"ids": dead, "actor": "system:pipeline"})).mappings().all()
    )
    return _pipelines_of(cascaded)


async def consequences(
    conn: AsyncConnection,
    changed: Sequence[Changed],
    actor: str,
    extra_pipelines: set[uuid.UUID] | None = None,
) -> bool:
    """Release or cancel dependents, derive pipeline statuses and record alerts for ``changed`` rows.
    ``extra_pipelines`` are refreshed too (those that got a processor's next jobs). Returns whether a
    NOTIFY was sent."""
    notified = False
    completed = [r["id"] for r in changed if r["status"] == Status.COMPLETED]
    dead = [r["id"] for r in changed if r["status"] in (Status.FAILED, Status.CANCELLED)]
    pipelines = _pipelines_of(changed) | (extra_pipelines or set())
    if completed:
        notified = await _release_dependents(conn, completed)
        in_pipelines = [r["id"] for r in changed if r["status"] == Status.COMPLETED and r.get("pipeline_id")]
        if in_pipelines:
            expansion = await expand_ready(conn, in_pipelines)
            notified |= expansion.notified
            pipelines |= expansion.pipelines
            dead += expansion.failed
    if dead:
        pipelines |= await _cancel_dependents(conn, dead)
    failed_standalone = [r for r in changed if r["status"] == Status.FAILED and r.get("pipeline_id") is None]
    if failed_standalone:
        await outbox.record_job_failures(conn, failed_standalone)
    approvals = [r for r in changed if r["status"] == Status.WAITING_APPROVAL]
    if approvals:
        await outbox.record_approvals(conn, approvals)
    if pipelines:
        await refresh_pipelines(conn, pipelines)
    await notices.record_transitions(conn, changed, pipelines)
    return notified


async def consequences_of_lost_jobs(conn: AsyncConnection, rows: Sequence[Changed]) -> None:
    """Dependents and pipelines of jobs the sweep failed (lease lost on their last attempt), whose alert
    is the sweep's own ``rescued`` kind rather than a job failure."""
    pipelines = _pipelines_of(rows) | await _cancel_dependents(conn, [r["id"] for r in rows])
    if pipelines:
        await refresh_pipelines(conn, pipelines)
    await notices.record_transitions(conn, rows, pipelines)
