"""Holding a disabled person's waiting jobs, and an admin's release or cancel of them.

A held job stays ``queued`` with ``is_active = false``: the claim takes only active queued rows, so it
never runs, and no status name changes for anything that reads jobs. Holding, releasing and cancelling
are each a compare-and-set over the person's waiting jobs, written with one event per job, in the
caller's transaction (the disable's, for holding), in the one lock order of every multi-row action: the
jobs' pipelines first, in id order, then the jobs, in id order (:func:`pipelines_first`). One ``UPDATE``
over the person's jobs locked them in the order its plan read them, and deadlocked with an action or a
worker that locks in that order. A job that was already running when its owner was
disabled finishes, and is held if it goes back to waiting instead (a retry, a hand-back at a worker's
stop, a rescue: :func:`hold_requeued`); next jobs its processor creates for a disabled owner are held as they are inserted,
and so is a job an admin retries, runs again or reruns for a disabled owner: only a release lets it run.
Cancelling held jobs is :mod:`.held_cancel` (it has a cancel's consequences).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.jobs.queue.common import conn_of, fetch_rows, lock_pipelines, notify_jobs, sql

HELD_MESSAGE = "held: its owner's account was disabled"

# The pipelines of the jobs a hold or a release would take, not locked yet (``:locked``: those it already
# holds).
HOLD_PIPELINES = sql(
    "SELECT DISTINCT pipeline_id FROM jobs "
    "WHERE user_id = :user_id AND status = 'queued' AND is_active AND pipeline_id IS NOT NULL "
    "AND NOT (pipeline_id = ANY(CAST(:locked AS uuid[])))"
)
RELEASE_PIPELINES = sql(
    "SELECT DISTINCT pipeline_id FROM jobs "
    "WHERE user_id = :user_id AND status = 'queued' AND NOT is_active AND pipeline_id IS NOT NULL "
    "AND NOT (pipeline_id = ANY(CAST(:locked AS uuid[])))"
)
# The jobs are locked in id order before any changes (``taken``), and only those whose pipeline is locked
# (``:locked``) or that have none: a job of another pipeline is left to the next round. ``:locked`` NULL:
# the caller holds the pipelines already (a transition's own jobs).
HOLD = sql(
    """
    WITH taken AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE user_id = :user_id AND status = 'queued' AND is_active
          AND (CAST(:ids AS uuid[]) IS NULL OR id = ANY(CAST(:ids AS uuid[])))
          AND (CAST(:locked AS uuid[]) IS NULL OR pipeline_id IS NULL
               OR pipeline_id = ANY(CAST(:locked AS uuid[])))
        ORDER BY id
        FOR UPDATE
    ), held AS (
        UPDATE jobs j SET is_active = false, updated_at = now()
        FROM taken t WHERE j.id = t.id AND j.status = 'queued' AND j.is_active
        RETURNING j.id, j.pipeline_id
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message)
        SELECT id, pipeline_id, 'held', 'queued', 'queued', :actor, :message FROM held
    )
    SELECT count(*) FROM held
    """
)
OWNER_DISABLED = sql("SELECT NOT is_active FROM users WHERE id = :user_id")
RELEASE = sql(
    """
    WITH taken AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE user_id = :user_id AND status = 'queued' AND NOT is_active
          AND (pipeline_id IS NULL OR pipeline_id = ANY(CAST(:locked AS uuid[])))
        ORDER BY id
        FOR UPDATE
    ), released AS (
        UPDATE jobs j SET is_active = true, updated_at = now()
        FROM taken t WHERE j.id = t.id AND j.status = 'queued' AND NOT j.is_active
        RETURNING j.id, j.pipeline_id
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message)
        SELECT id, pipeline_id, 'released', 'queued', 'queued', :actor, 'released by an admin' FROM released
    )
    SELECT count(*) FROM released
    """
)
HELD_COUNTS = sql(
    "SELECT user_id, count(*) AS n FROM jobs WHERE status = 'queued' AND NOT is_active "
    "AND user_id = ANY(CAST(:ids AS int[])) GROUP BY user_id"
)


async def pipelines_first(conn: AsyncConnection, pipelines: Any, change: Any, params: dict[str, Any]) -> int:
    """Lock the pipelines ``pipelines`` reads (those of the person's jobs ``change`` takes), in id order,
    then run ``change`` over the jobs whose pipeline is locked or that have none; again for a job that came
    to be taken meanwhile in a pipeline not read yet (a next job of a step that finished), until none is
    left. Returns how many jobs ``change`` changed in all."""
    locked: list[uuid.UUID] = []
    changed = 0
    first = True
    while True:
        read = {"user_id": params["user_id"], "locked": locked}
        fresh = list((await conn.execute(pipelines, read)).scalars())
        if not fresh and not first:
            return changed
        first = False
        await lock_pipelines(conn, fresh)
        locked = [*locked, *fresh]
        changed += int((await conn.execute(change, {**params, "locked": locked})).scalar_one())


async def hold_user_jobs(db: AsyncConnection | AsyncSession, user_id: int, actor: str) -> int:
    """Hold every waiting job of ``user_id`` (queued, scheduled, waiting for earlier steps); returns how
    many. Jobs running now are left to finish."""
    conn = await conn_of(db)
    params = {"user_id": user_id, "ids": None, "actor": actor, "message": HELD_MESSAGE}
    return await pipelines_first(conn, HOLD_PIPELINES, HOLD, params)


async def hold_if_owner_disabled(conn: AsyncConnection, user_id: int, ids: Sequence[uuid.UUID]) -> int:
    """Hold the jobs ``ids`` that just became waiting when their owner is disabled (a processor's next
    jobs for a job that was running when its owner was disabled; a job an admin retries, with the steps
    the retry re-opens, runs again or reruns); returns how many were held."""
    if not ids or not (await conn.execute(OWNER_DISABLED, {"user_id": user_id})).scalar():
        return 0
    params = {
        "user_id": user_id,
        "ids": list(ids),
        "actor": "system:disabled",
        "message": HELD_MESSAGE,
        "locked": None,  # the caller holds their pipelines: the transition that made them wait
    }
    return int((await conn.execute(HOLD, params)).scalar_one())


OWNERS_DISABLED = sql("SELECT id FROM users WHERE id = ANY(CAST(:ids AS int[])) AND NOT is_active")


async def hold_requeued(conn: AsyncConnection, rows: Sequence[Any]) -> int:
    """Hold the jobs among ``rows`` (a transition's rows: ``id``, ``user_id``, ``status``) that went back
    to waiting while their owner is disabled: a running job is left to finish, but not to start again (a
    retry after a failed attempt, a hand-back at a worker's stop, a rescue); returns how many."""
    owners = {r["user_id"] for r in rows if r["status"] == "queued" and r.get("user_id") is not None}
    if not owners:
        return 0
    disabled = set((await conn.execute(OWNERS_DISABLED, {"ids": sorted(owners)})).scalars())
    held = 0
    for user_id in sorted(disabled):
        ids = [r["id"] for r in rows if r["status"] == "queued" and r.get("user_id") == user_id]
        params = {
            "user_id": user_id,
            "ids": ids,
            "actor": "system:disabled",
            "message": HELD_MESSAGE,
            "locked": None,  # the caller holds their pipelines and the rows themselves
        }
        held += int((await conn.execute(HOLD, params)).scalar_one())
    return held


async def release_user_jobs(db: AsyncConnection | AsyncSession, user_id: int, actor: str) -> int:
    """Let every held job of ``user_id`` run again (an admin's decision); returns how many."""
    conn = await conn_of(db)
    released = await pipelines_first(conn, RELEASE_PIPELINES, RELEASE, {"user_id": user_id, "actor": actor})
    if released:
        await notify_jobs(conn)
    return released


async def held_counts(db: AsyncConnection | AsyncSession, user_ids: Sequence[int]) -> dict[int, int]:
    """Held jobs per user, for the admins' view of users."""
    conn = await conn_of(db)
    rows = await fetch_rows(conn, HELD_COUNTS, {"ids": list(user_ids)})
    return {r["user_id"]: int(r["n"]) for r in rows}
