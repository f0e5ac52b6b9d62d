"""Completions of standalone jobs in one statement: the worker's most frequent write.

A job outside any pipeline that completes (and does not wait for an approval) causes only this: its row
and ``completed`` event, one fewer pending parent for each job that depends on it (a NOTIFY when one
became claimable), and its owner's "finished" notice, folded with the owner's recent unread one (the
job's name in it set apart in its own direction by ``jobdesk_isolated``, as :func:`notices.one_text`
does).
:data:`COMPLETE_STANDALONE` writes all of that in one statement, so a batch of such completions is one
round trip and, run on its own (autocommit), one commit: what :func:`app.jobs.queue.finish` does for the
same batch in a transaction of five or more statements.

Its guard is :func:`app.jobs.queue.finish`'s (this worker's lease, the claim as fencing token, not
cancelled) plus "no pipeline, no approval". An outcome it does not apply — a cancel was requested, the
lease was lost, the job waits for an approval — is left to :func:`app.jobs.queue.finish`, which knows
what each of those means.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from app.formatting import turning_class
from app.jobs import notices
from app.jobs.payload import storable_json
from app.jobs.queue.common import fetch_rows, sql
from app.jobs.queue.outcomes import FinishReport, Outcome, OutcomeKind

# ``released``: the dependents of the completed jobs, through the same function as
# app.jobs.queue.consequences.RELEASE_DEPENDENTS, whose own snapshot sees a dependency committed while
# this statement waited for a parent's row (this statement's snapshot predates it). ``target``: each
# owner's newest unread notice of the kind within the folding window, skipped when another transaction
# holds it (a new notice starts then), as notices.FOLD does.
COMPLETE_STANDALONE = sql(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:results AS text[]), CAST(:claims AS int[]))
            AS t(id, result, claim)
    ), upd AS (
        UPDATE jobs j
        SET status = 'completed', result_data = input.result::jsonb, completed_at = now(), updated_at = now(),
            locked_by = NULL, lease_expires_at = NULL, progress = 1, error_message = NULL
        FROM input
        WHERE j.id = input.id AND j.status = 'in_progress' AND j.locked_by = :worker AND j.is_active
          AND j.pipeline_id IS NULL AND NOT j.requires_approval
          AND (input.claim IS NULL OR j.claims = input.claim)
        RETURNING j.id, j.user_id, j.title, j.type
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor)
        SELECT id, NULL, 'completed', 'in_progress', 'completed', :actor FROM upd
    ), released AS MATERIALIZED (
        -- after the rows above are written and locked, with a snapshot of its own (see the function)
        SELECT jobdesk_release_dependents(ARRAY(SELECT id FROM upd)) AS notified
    ), owners AS (
        SELECT user_id, count(*) AS n, (array_agg(id ORDER BY id))[1] AS job_id,
               left((array_agg(COALESCE(NULLIF(title, ''), CAST(CAST(:titles AS text) AS jsonb) ->> type, type) ORDER BY id))[1], 200) AS title
        FROM upd GROUP BY user_id
    ), target AS (
        SELECT o.user_id, o.n, t.id FROM owners o CROSS JOIN LATERAL (
            SELECT id FROM notifications
            WHERE user_id = o.user_id AND kind = :kind AND read_at IS NULL AND emailed_at IS NULL
              AND at > now() - make_interval(secs => :window)
            ORDER BY id DESC LIMIT 1
            FOR UPDATE SKIP LOCKED
        ) t
    ), folded AS (
        UPDATE notifications n
        SET count = n.count + target.n, at = now(), job_id = NULL, pipeline_id = NULL,
            text = format(:many, n.count + target.n)
        FROM target WHERE n.id = target.id
    ), fresh AS (
        INSERT INTO notifications (user_id, kind, job_id, pipeline_id, text, count, email_due)
        SELECT o.user_id, :kind, CASE WHEN o.n = 1 THEN o.job_id END, NULL,
               CASE WHEN o.n = 1 THEN format(:one, jobdesk_isolated(o.title, :turning)) ELSE format(:many, o.n) END, o.n, u.email_notifications
        FROM owners o JOIN users u ON u.id = o.user_id
        WHERE o.user_id NOT IN (SELECT user_id FROM target)
    )
    SELECT upd.id, released.notified FROM upd CROSS JOIN released
    """
)


def standalone(outcomes: Sequence[Outcome]) -> bool:
    """Whether :func:`complete_standalone` can take every one of ``outcomes``: completions of jobs outside
    pipelines that asked for no next jobs."""
    return bool(outcomes) and all(
        o.kind == OutcomeKind.COMPLETED and o.pipeline_id is None and not o.next_jobs for o in outcomes
    )


async def complete_standalone(
    conn: AsyncConnection, worker_id: str, outcomes: Sequence[Outcome]
) -> FinishReport:
    """Apply the completions of :func:`standalone` ``outcomes`` in one statement (on an autocommit
    connection, its own transaction). The report names the jobs completed; an outcome it leaves out was
    not applied and belongs to :func:`app.jobs.queue.finish`."""
    params = {
        "ids": [o.job_id for o in outcomes],
        "results": [storable_json(o.result) or "null" for o in outcomes],
        "claims": [o.claim for o in outcomes],
        "worker": worker_id,
        "actor": f"worker:{worker_id}",
        "kind": notices.JOB_COMPLETED,
        "window": notices.GROUP_SECS,
        "one": notices.sql_format(notices.JOB_COMPLETED, many=False),
        "many": notices.sql_format(notices.JOB_COMPLETED, many=True),
        "titles": notices.type_titles(),
        "turning": turning_class(),
    }
    rows = await fetch_rows(conn, COMPLETE_STANDALONE, params)
    done: dict[uuid.UUID, str] = {r["id"]: "completed" for r in rows}
    return FinishReport(status=done, notify=bool(rows and rows[0]["notified"]))


RECORDED_EARLIER = sql(
    """
    SELECT j.id, j.status
    FROM unnest(CAST(:ids AS uuid[]), CAST(:claims AS int[])) AS input(id, claim)
    JOIN jobs j ON j.id = input.id AND j.claims = input.claim
    JOIN LATERAL (
        SELECT actor, to_status FROM job_events
        WHERE job_id = j.id AND to_status IS NOT NULL ORDER BY id DESC LIMIT 1
    ) e ON e.actor = :actor AND e.to_status = j.status
    WHERE j.status <> 'in_progress'
    """
)


async def recorded_earlier(
    conn: AsyncConnection, worker_id: str, outcomes: Sequence[Outcome]
) -> dict[uuid.UUID, str]:
    """Of ``outcomes`` that a write did not apply, those this worker's earlier write of the same claim
    had applied, by job id with the status it left: a write whose COMMIT went through while its answer
    was lost, then written again, finds its job no longer in progress. Told apart from a lease lost
    (the job rescued, run elsewhere, cancelled by someone else) by the job's last change of status:
    this worker's, at this claim. One read, made only for outcomes a write left out."""
    fenced = [o for o in outcomes if o.claim is not None]
    if not fenced:
        return {}
    params = {
        "ids": [o.job_id for o in fenced],
        "claims": [o.claim for o in fenced],
        "actor": f"worker:{worker_id}",
    }
    return {r["id"]: r["status"] for r in await fetch_rows(conn, RECORDED_EARLIER, params)}
