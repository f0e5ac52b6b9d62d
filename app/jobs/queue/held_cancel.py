"""An admin's cancel of a disabled person's held jobs (see :mod:`.holds`), with a cancel's consequences."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.jobs.queue.common import conn_of, fetch_rows, lock_pipelines, sql
from app.jobs.queue.consequences import consequences

# The pipelines of the person's held jobs not locked yet (``:locked``: those this cancel already holds).
HELD_PIPELINES = sql(
    "SELECT DISTINCT pipeline_id FROM jobs "
    "WHERE user_id = :user_id AND status = 'queued' AND NOT is_active AND pipeline_id IS NOT NULL "
    "AND NOT (pipeline_id = ANY(CAST(:locked AS uuid[])))"
)
# Only the held jobs whose pipeline this cancel has locked (or that have none): a job held in another
# pipeline after the pipelines were read is left to the next round, which locks its pipeline first. The
# jobs are locked in id order (``taken``) before any changes, as every multi-row action locks them.
CANCEL_HELD = sql(
    """
    WITH taken AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE user_id = :user_id AND status = 'queued' AND NOT is_active
          AND (pipeline_id IS NULL OR pipeline_id = ANY(CAST(:locked AS uuid[])))
        ORDER BY id
        FOR UPDATE
    ), cancelled AS (
        UPDATE jobs j SET status = 'cancelled', completed_at = now(), updated_at = now(),
            error_message = 'cancelled by an admin while held (its owner''s account was disabled)'
        FROM taken t WHERE j.id = t.id AND j.status = 'queued' AND NOT j.is_active
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key, j.error_message
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message)
        SELECT id, pipeline_id, 'cancelled', 'queued', 'cancelled', :actor, error_message FROM cancelled
    )
    SELECT * FROM cancelled
    """
)


@dataclass(frozen=True)
class Cancelled:
    """What cancelling a person's held jobs did: ``count`` jobs cancelled (their dependents too)."""

    count: int
    ids: list[uuid.UUID]


async def cancel_user_jobs(db: AsyncConnection | AsyncSession, user_id: int, actor: str) -> Cancelled:
    """Cancel every held job of ``user_id`` (an admin's decision), with the consequences of a cancel:
    dependents cancelled, pipelines' statuses derived again."""
    conn = await conn_of(db)
    locked: list[uuid.UUID] = []
    changed: list[dict[str, Any]] = []
    # One lock order, a pipeline before its jobs: the pipelines read are locked before any job of theirs
    # changes, and a job held meanwhile in a pipeline not read (a next job of a disabled owner's) is
    # cancelled in a further round, once its pipeline is locked too.
    first = True
    while True:
        params = {"user_id": user_id, "locked": locked}
        fresh = [r["pipeline_id"] for r in await fetch_rows(conn, HELD_PIPELINES, params)]
        if not fresh and not first:
            break
        first = False
        await lock_pipelines(conn, fresh)
        locked = [*locked, *fresh]
        changed.extend(
            await fetch_rows(conn, CANCEL_HELD, {"user_id": user_id, "actor": actor, "locked": locked})
        )
    if changed:
        await consequences(conn, changed, actor)
    return Cancelled(len(changed), [r["id"] for r in changed])
