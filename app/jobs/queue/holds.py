"""Holding a disabled person's waiting jobs, and an admin's release or cancel of them.

A held job stays ``queued`` with ``is_active = false``: the claim takes only active queued rows, so it
never runs, and no status name changes for anything that reads jobs. Holding, releasing and cancelling
are each one compare-and-set over the person's waiting jobs, written with one event per job, in the
caller's transaction (the disable's, for holding). A job that was already running when its owner was
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

from app.jobs.queue.common import conn_of, fetch_rows, notify_jobs, sql

HELD_MESSAGE = "held: its owner's account was disabled"

HOLD = sql(
    """
    WITH held AS (
        UPDATE jobs SET is_active = false, updated_at = now()
        WHERE user_id = :user_id AND status = 'queued' AND is_active
          AND (CAST(:ids AS uuid[]) IS NULL OR id = ANY(CAST(:ids AS uuid[])))
        RETURNING id, pipeline_id
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
    WITH released AS (
        UPDATE jobs SET is_active = true, updated_at = now()
        WHERE user_id = :user_id AND status = 'queued' AND NOT is_active
        RETURNING id, pipeline_id
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


async def hold_user_jobs(db: AsyncConnection | AsyncSession, user_id: int, actor: str) -> int:
    """Hold every waiting job of ``user_id`` (queued, scheduled, waiting for earlier steps); returns how
    many. Jobs running now are left to finish."""
    conn = await conn_of(db)
    params = {"user_id": user_id, "ids": None, "actor": actor, "message": HELD_MESSAGE}
    return int((await conn.execute(HOLD, params)).scalar_one())


async def hold_if_owner_disabled(conn: AsyncConnection, user_id: int, ids: Sequence[uuid.UUID]) -> int:
    """Hold the jobs ``ids`` that just became waiting when their owner is disabled (a processor's next
    jobs for a job that was running when its owner was disabled; a job an admin retries, with the steps
    the retry re-opens, runs again or reruns); returns how many were held."""
    if not ids or not (await conn.execute(OWNER_DISABLED, {"user_id": user_id})).scalar():
        return 0
    params = {"user_id": user_id, "ids": list(ids), "actor": "system:disabled", "message": HELD_MESSAGE}
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
        params = {"user_id": user_id, "ids": ids, "actor": "system:disabled", "message": HELD_MESSAGE}
        held += int((await conn.execute(HOLD, params)).scalar_one())
    return held


async def release_user_jobs(db: AsyncConnection | AsyncSession, user_id: int, actor: str) -> int:
    """Let every held job of ``user_id`` run again (an admin's decision); returns how many."""
    conn = await conn_of(db)
    released = int((await conn.execute(RELEASE, {"user_id": user_id, "actor": actor})).scalar_one())
    if released:
        await notify_jobs(conn)
    return released


async def held_counts(db: AsyncConnection | AsyncSession, user_ids: Sequence[int]) -> dict[int, int]:
    """Held jobs per user, for the admins' view of users."""
    conn = await conn_of(db)
    rows = await fetch_rows(conn, HELD_COUNTS, {"ids": list(user_ids)})
    return {r["user_id"]: int(r["n"]) for r in rows}
