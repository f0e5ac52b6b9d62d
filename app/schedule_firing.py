"""Firing due schedules: the worker's sweep (:class:`app.worker.maintenance.ScheduleFiring`) calls
:func:`fire_due` in its transaction.

Each due time fires exactly once however many workers run: the sweep takes the schedule row with
``FOR UPDATE SKIP LOCKED`` and moves ``next_fire_at`` in the same transaction as the enqueue, and each job
carries the idempotency key ``schedule:<id>:<fire time>``. After downtime only the latest missed time
fires, unless ``catch_up`` is set (then each missed time, at most :data:`app.cron.MAX_CATCH_UP`). A paused
type does not pile up a schedule's jobs: while the previous fire still waits in a paused type, due times
pass without a new job.

A schedule the sweep disables — its target is no longer valid, or its owner may no longer start it
(:func:`app.schedules.owner_refusal`) — has no person behind it: the sweep records an admin notice from
``system`` naming the reason (:func:`app.jobs.outbox.record_admin_action`), in the same transaction.
The schedule rows themselves (create, change, enable, delete) are :mod:`app.schedules`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from app import pipelines, quotas
from app.cron import fire_times, fired_title
from app.errors import AppError, BadInput, RateLimited, is_refusal
from app.jobs import outbox, queue
from app.jobs.queue import NewJob
from app.schedules import SCHEDULE_COLUMNS, owner_refusal
from app.settings import Settings

DUE_SCHEDULES = text(
    f"""
    SELECT {SCHEDULE_COLUMNS}, now() AS db_now,
           (SELECT u.is_admin FROM users u WHERE u.id = schedules.user_id) AS owner_is_admin,
           (SELECT u.is_active FROM users u WHERE u.id = schedules.user_id) AS owner_is_active
    FROM schedules
    WHERE enabled AND next_fire_at <= now()
    ORDER BY next_fire_at LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)
ADVANCE = text(
    """
    UPDATE schedules SET next_fire_at = :next, last_fire_at = :fired, last_job_id = :job_id,
        last_pipeline_id = :pipeline_id, updated_at = now()
    WHERE id = :id
    """
)


class _Full(Exception):
    """A firing that would take its owner above the waiting limit; the message is the skip's reason."""


async def _fire(conn: AsyncConnection, row: RowMapping, at: datetime, settings: Settings) -> dict[str, Any]:
    """Start the schedule's job (idempotent per fire time) or pipeline for fire time ``at``."""
    if row["job_type"]:
        result = await queue.enqueue(
            conn,
            NewJob(
                type=row["job_type"],
                input_data=row["input_data"],
                user_id=row["user_id"],
                idempotency_key=f"schedule:{row['id']}:{at.isoformat()}",
                title=fired_title(row["name"], at),
            ),
            settings,
            actor=f"schedule:{row['id']}",
        )
        return {
            "schedule": row["name"],
            "fired_at": at,
            "job_id": result.job["id"],
            "created": result.created,
        }
    p = await pipelines.create_from_template(
        conn, row["template"], row["input_data"], user_id=row["user_id"], settings=settings
    )
    return {"schedule": row["name"], "fired_at": at, "pipeline_id": p["id"]}


ADVANCE_ONLY = text("UPDATE schedules SET next_fire_at = :next, updated_at = now() WHERE id = :id")
DISABLE_INVALID = text(
    "UPDATE schedules SET enabled = false, next_fire_at = NULL, updated_at = now() WHERE id = :id"
)


async def _disable(conn: AsyncConnection, row: RowMapping, reason: str) -> None:
    """Disable a schedule the sweep may not fire any more. No person acts, so there is no audit entry:
    the admins get a notice from ``system`` naming the schedule and the reason."""
    await conn.execute(DISABLE_INVALID, {"id": row["id"]})
    await outbox.record_admin_action(
        conn,
        admin_email="system",
        action="schedule.disable",
        count=1,
        target_type="schedule",
        targets=[row["id"]],
        outcome=reason[:500],
        detail={"name": row["name"]},
    )


async def _skip(conn: AsyncConnection, row: RowMapping, at: datetime, nxt: datetime, reason: str) -> None:
    """Skip this firing (the owner's waiting jobs are at their limit): the schedule moves on to its next
    time, and the admins get a notice from ``system`` naming the reason."""
    await conn.execute(ADVANCE_ONLY, {"id": row["id"], "next": nxt})
    await outbox.record_admin_action(
        conn,
        admin_email="system",
        action="schedule.skip",
        count=1,
        target_type="schedule",
        targets=[row["id"]],
        outcome=reason[:500],
        detail={"name": row["name"], "fire_time": at.isoformat()},
    )


HELD_BY_PAUSE = text(
    """
    SELECT EXISTS (
        SELECT 1 FROM jobs j
        WHERE (j.id = CAST(:job_id AS uuid) OR j.pipeline_id = CAST(:pipeline_id AS uuid))
          AND j.status = 'queued' AND j.attempts = 0
          AND EXISTS (SELECT 1 FROM job_type_controls c WHERE c.paused AND c.type IN (j.type, '*'))
    )
    """
)
TYPE_PAUSED = text("SELECT EXISTS (SELECT 1 FROM job_type_controls WHERE paused AND type IN (:type, '*'))")


async def _held_by_pause(conn: AsyncConnection, row: RowMapping) -> bool:
    """Whether the schedule's previous fire has not started because its type is paused: its job, or a
    step of its pipeline, still waits for its first attempt in a paused type."""
    if row["last_job_id"] is None and row["last_pipeline_id"] is None:
        return False
    params = {"job_id": row["last_job_id"], "pipeline_id": row["last_pipeline_id"]}
    return bool((await conn.execute(HELD_BY_PAUSE, params)).scalar())


async def fire_due(conn: AsyncConnection, settings: Settings, *, limit: int = 50) -> list[dict[str, Any]]:
    """Fire every due schedule once (called by the worker's sweep loop, in the caller's transaction).

    Returns ``[{"schedule": name, "fired_at": …, "job_id"|"pipeline_id": …}]``. A schedule whose target
    became invalid (type removed, input no longer valid) or whose owner may no longer start it is
    disabled, with an admin notice naming the reason, rather than failing the sweep; so is one whose
    owner's account is disabled. A firing that would take its owner above ``USER_MAX_WAITING_JOBS``
    (all of a pipeline's steps counted) is skipped (the schedule moves on to its next time) with an
    admin notice.

    A paused type does not pile up a schedule's jobs: while the previous fire's job (or a step of its
    pipeline) waits in a paused type, the due times pass without a new job, so at most one fire per
    schedule waits and a resume starts one job, not one per missed time.
    """
    rows = (await conn.execute(DUE_SCHEDULES, {"limit": limit})).mappings().all()
    fired: list[dict[str, Any]] = []
    for row in rows:
        try:
            times, nxt = fire_times(
                row["cron"], row["timezone"], row["next_fire_at"], row["db_now"], row["catch_up"]
            )
        except BadInput as exc:
            # A stored zone or cron this host cannot read (a zone its time-zone database lacks, a row
            # stored under older rules): raised out of the sweep, it stopped the worker, on every start.
            await _disable(conn, row, f"its times can no longer be computed: {exc.detail}")
            continue
        refused = owner_refusal(row)
        if refused is not None:
            await _disable(conn, row, refused)
            continue
        if await _held_by_pause(conn, row):
            await conn.execute(ADVANCE_ONLY, {"id": row["id"], "next": nxt})
            continue
        if len(times) > 1 and row["job_type"]:
            if (await conn.execute(TYPE_PAUSED, {"type": row["job_type"]})).scalar():
                times = times[-1:]  # a catch-up into a paused type: one waiting job, not a pile
        before = await quotas.schedule_waiting(conn, settings, row["user_id"], bool(row["owner_is_admin"]))
        full = quotas.schedule_refusal(settings, before)
        if full is not None:
            await _skip(conn, row, times[-1], nxt, full)
            continue
        try:
            async with conn.begin_nested():
                these = [await _fire(conn, row, at, settings) for at in times]
                # A pipeline's steps (or catch-up times) are known only once fired: over the limit with
                # them, the firing is rolled back and skipped, as a person's submission of it is refused.
                if before is not None:
                    after = await quotas.waiting(conn, row["user_id"])
                    full = quotas.schedule_refusal(settings, before, after)
                    if full is not None:
                        raise _Full(full)
        except _Full as exc:
            await _skip(conn, row, times[-1], nxt, str(exc))
            continue
        except RateLimited as exc:
            await _skip(conn, row, times[-1], nxt, exc.detail)
            continue
        except AppError as exc:
            # Any refusal of the submission (a bad field, an input over a limit lowered since, a target
            # the owner may not start), not only a BadInput: an uncaught one rolled back the whole sweep
            # on every pass, so this schedule stayed due and none after it fired again.
            if not is_refusal(exc):
                raise
            await _disable(conn, row, f"its target is no longer valid: {exc.detail}")
            continue
        fired.extend(these)
        last = these[-1] if these else {}
        params = {
            "id": row["id"],
            "next": nxt,
            "fired": times[-1],
            "job_id": last.get("job_id"),
            "pipeline_id": last.get("pipeline_id"),
        }
        await conn.execute(ADVANCE, params)
    return fired
