"""Finishing: a worker's outcomes for the jobs it holds, applied as a batch in the caller's transaction.

Each write is guarded by ``status = 'in_progress' AND locked_by = <worker>`` (a rescued job's stale
worker changes nothing) and by the claim the outcome belongs to (``claims``, never reset: a late outcome
of an earlier claim of the same worker changes nothing either), and completions and failures also by ``is_active``: once a cancel is
accepted, a late success or failure cannot overwrite it — the job goes to ``cancelled`` instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.payload import cap_text, storable_json
from app.jobs.queue.common import JOBS_CHANNEL, fetch_rows, lock_pipelines, sql
from app.jobs.queue.consequences import Changed, consequences
from app.jobs.queue.holds import hold_requeued
from app.jobs.queue.pipelines import insert_next_jobs
from app.jobs.types import NextJob
from app.settings import Settings


class OutcomeKind(StrEnum):
    """How a worker's attempt at a job ended."""

    COMPLETED = "completed"
    """The processor succeeded: ``completed``, or ``waiting_approval`` for a step that needs approval."""
    FAILED = "failed"
    """The attempt failed: retried later while attempts remain (``queued``), else ``failed``."""
    CANCELLED = "cancelled"
    """The worker stopped the job after a cancel request: ``cancelled``."""
    RELEASED = "released"
    """The worker is shutting down: back to ``queued`` without counting the attempt."""


OutcomeKindName = Literal["completed", "failed", "cancelled", "released"]
"""An :class:`OutcomeKind` by its value, as callers may write it."""


@dataclass
class Outcome:
    """A worker's result for one job it holds.

    ``kind`` (an :class:`OutcomeKind`; its string value is accepted too): ``completed`` (``result`` =
    JSON text of result_data), ``failed`` (``error``; retried after ``delay`` seconds while attempts
    remain unless ``permanent``), ``cancelled`` or ``released``. ``next_jobs`` are jobs a processor
    asked for, created only if the completion wins.
    """

    job_id: uuid.UUID
    kind: OutcomeKind | OutcomeKindName
    result: str | None = None
    error: str | None = None
    permanent: bool = False
    delay: float = 0.0
    message: str | None = None
    next_jobs: list[NextJob] = field(default_factory=list)
    pipeline_id: uuid.UUID | None = None
    claim: int | None = None
    """The claim this outcome belongs to (the job's ``claims`` as its claim returned it): the fencing
    token. When set, the outcome is applied only if the job is still at that claim, so the late outcome
    of a claim whose lease was lost cannot end a newer claim of the same job — even one the same worker
    made, after a retry or a rerun set ``attempts`` back to where it was (``claims`` is never set back)."""

    def __post_init__(self) -> None:
        self.kind = OutcomeKind(self.kind)


@dataclass
class FinishReport:
    """What :func:`finish` did: final status per job id, and ``lost`` ids whose write lost its race
    (rescued, or finished by someone else). A completion that lost to a cancel request moves the job to
    ``cancelled`` instead and is reported as such. ``notify``: a NOTIFY was sent (a job became
    claimable)."""

    status: dict[uuid.UUID, str] = field(default_factory=dict)
    lost: set[uuid.UUID] = field(default_factory=set)
    notify: bool = False


COMPLETE_MANY = sql(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:results AS text[]), CAST(:claims AS int[]))
            AS t(id, result, claim)
    ), upd AS (
        UPDATE jobs j
        SET status = CASE WHEN j.requires_approval THEN 'waiting_approval' ELSE 'completed' END,
            result_data = input.result::jsonb,
            completed_at = CASE WHEN j.requires_approval THEN NULL ELSE now() END,
            updated_at = now(), locked_by = NULL, lease_expires_at = NULL, progress = 1, error_message = NULL
        FROM input
        WHERE j.id = input.id AND j.status = 'in_progress' AND j.locked_by = :worker AND j.is_active
          AND (input.claim IS NULL OR j.claims = input.claim)
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor)
        SELECT id, pipeline_id, status, 'in_progress', status, :actor FROM upd
    )
    SELECT id, pipeline_id, status, type, user_id, title, step_key FROM upd
    """
)

FAIL_MANY = sql(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:errors AS text[]), CAST(:permanent AS boolean[]),
                             CAST(:delays AS float8[]), CAST(:claims AS int[])) AS t(id, error, permanent, delay, claim)
    ), upd AS (
        UPDATE jobs j
        SET status = CASE WHEN input.permanent OR j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
            run_at = CASE WHEN input.permanent OR j.attempts >= j.max_attempts THEN j.run_at
                          ELSE now() + make_interval(secs => input.delay) END,
            completed_at = CASE WHEN input.permanent OR j.attempts >= j.max_attempts THEN now() ELSE NULL END,
            error_message = input.error, updated_at = now(), locked_by = NULL, lease_expires_at = NULL
        FROM input
        WHERE j.id = input.id AND j.status = 'in_progress' AND j.locked_by = :worker AND j.is_active
          AND (input.claim IS NULL OR j.claims = input.claim)
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key, j.attempts, j.max_attempts,
                  j.run_at, j.error_message, input.permanent
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, CASE WHEN status = 'failed' THEN 'failed' ELSE 'retry_scheduled' END,
               'in_progress', status, :actor, error_message,
               jsonb_build_object('attempt', attempts, 'max_attempts', max_attempts,
                                  'next_run_at', CASE WHEN status = 'queued' THEN run_at END,
                                  -- an error retrying does not fix: a retry's button says so
                                  'permanent', permanent AND status = 'failed')
        FROM upd
    )
    SELECT * FROM upd
    """
)

CANCEL_ACK_MANY = sql(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:claims AS int[])) AS t(id, claim)
    ), upd AS (
        UPDATE jobs j
        SET status = 'cancelled', completed_at = now(), updated_at = now(), locked_by = NULL,
            lease_expires_at = NULL, error_message = COALESCE(:message, j.error_message)
        FROM input
        WHERE j.id = input.id AND j.status = 'in_progress' AND j.locked_by = :worker
          AND (input.claim IS NULL OR j.claims = input.claim)
          AND (NOT CAST(:only_inactive AS boolean) OR NOT j.is_active)
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message)
        SELECT id, pipeline_id, 'cancelled', 'in_progress', 'cancelled', :actor, :message FROM upd
    )
    SELECT * FROM upd
    """
)

# A job whose cancel was requested (``NOT is_active``) is not handed back: the cancel was accepted, and
# ``queued`` with the cancel flag is a held job ("Held"), which no worker claims and nobody had held.
# The stop ended it, so it ends ``cancelled``, as the rescue ends such a job whose worker was lost.
RELEASE_MANY = sql(
    f"""
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:claims AS int[])) AS t(id, claim)
    ), upd AS (
        UPDATE jobs j
        SET status = CASE WHEN j.is_active THEN 'queued' ELSE 'cancelled' END,
            attempts = CASE WHEN j.is_active THEN GREATEST(j.attempts - 1, 0) ELSE j.attempts END,
            run_at = CASE WHEN j.is_active THEN now() ELSE j.run_at END,
            completed_at = CASE WHEN j.is_active THEN NULL ELSE now() END,
            error_message = CASE WHEN j.is_active THEN j.error_message ELSE :cancelled END,
            updated_at = now(), locked_by = NULL, lease_expires_at = NULL
        FROM input
        WHERE j.id = input.id AND j.status = 'in_progress' AND j.locked_by = :worker
          AND (input.claim IS NULL OR j.claims = input.claim)
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message)
        SELECT id, pipeline_id, CASE WHEN status = 'queued' THEN 'released' ELSE 'cancelled' END,
               'in_progress', status, :actor, CASE WHEN status = 'queued' THEN :message ELSE :cancelled END
        FROM upd
    ), notify AS (SELECT pg_notify('{JOBS_CHANNEL}', '') FROM upd WHERE status = 'queued' LIMIT 1)
    SELECT upd.*, (SELECT count(*) FROM notify) AS notified FROM upd
    """
)
RELEASED_CANCELLED = "cancelled; its worker stopped before the job did"
"""The error of a job released while its cancel was pending (it ends ``cancelled``)."""

UNRECEIVED = sql(
    """
    SELECT id, pipeline_id, claims FROM jobs
    WHERE status = 'in_progress' AND locked_by = :worker AND NOT (id = ANY(CAST(:known AS uuid[])))
    """
)


@dataclass
class _Batch:
    """One :func:`finish` call: who writes, and what its steps changed so far."""

    conn: AsyncConnection
    worker_id: str
    settings: Settings
    changed: list[Changed] = field(default_factory=list)
    cancel_instead: list[Outcome] = field(default_factory=list)
    """Completions and failures whose write lost: acknowledged as cancels if a cancel is what they lost to
    (at their own claim)."""
    extra_pipelines: set[uuid.UUID] = field(default_factory=set)

    @property
    def actor(self) -> str:
        return f"worker:{self.worker_id}"

    async def write(self, statement: Any, params: dict[str, Any], *, fast: bool = True) -> list[Changed]:
        """Run one guarded write of this worker's; its rows count as changed. ``fast``: straight on
        asyncpg (the completion and failure statements, the hot path), else through SQLAlchemy."""
        params = {**params, "worker": self.worker_id, "actor": self.actor}
        rows: list[Changed]
        if fast:
            rows = list(await fetch_rows(self.conn, statement, params))
        else:
            rows = list((await self.conn.execute(statement, params)).mappings().all())
        self.changed.extend(rows)
        return rows


async def _complete(batch: _Batch, done: list[Outcome]) -> None:
    """Completions, then the next jobs of those that won (in the same transaction)."""
    rows = await batch.write(
        COMPLETE_MANY,
        {
            "ids": [o.job_id for o in done],
            "results": [storable_json(o.result) or "null" for o in done],
            "claims": [o.claim for o in done],
        },
    )
    won = {r["id"]: r for r in rows}
    batch.cancel_instead.extend(o for o in done if o.job_id not in won)
    for o in done:
        if o.job_id in won and o.next_jobs:
            pipeline_id = await insert_next_jobs(batch.conn, won[o.job_id], o.next_jobs, batch.settings)
            batch.extra_pipelines.add(pipeline_id)


async def _fail(batch: _Batch, failed: list[Outcome]) -> None:
    """Failed attempts: retried after their delay while attempts remain, else ``failed``."""
    rows = await batch.write(
        FAIL_MANY,
        {
            "ids": [o.job_id for o in failed],
            "errors": [cap_text(o.error) or "failed" for o in failed],
            "permanent": [o.permanent for o in failed],
            "delays": [max(0.0, float(o.delay)) for o in failed],
            "claims": [o.claim for o in failed],
        },
    )
    won = {r["id"] for r in rows}
    batch.cancel_instead.extend(o for o in failed if o.job_id not in won)


async def _acknowledge_cancels(batch: _Batch, cancelled: list[Outcome]) -> None:
    """The worker's cancel acknowledgements; then a completion or failure that lost its write becomes
    one too, but only when a cancel request is what it lost to (not a newer claim, not another
    owner)."""
    message = next((o.message for o in cancelled if o.message), None) or "cancelled while running"
    for acks, only_inactive in ((cancelled, False), (batch.cancel_instead, True)):
        if acks:
            params = {
                "ids": [o.job_id for o in acks],
                "claims": [o.claim for o in acks],
                "message": cap_text(message),
                "only_inactive": only_inactive,
            }
            await batch.write(CANCEL_ACK_MANY, params, fast=False)


async def _release(batch: _Batch, released: list[Outcome]) -> bool:
    """Jobs handed back at shutdown (``queued`` again, the attempt not counted; ``cancelled`` when a cancel
    was requested), each only at the claim its outcome belongs to: the late release of a claim whose
    lease was lost must not hand back a newer claim of the same job, even one this worker made (the
    attempt taken back here is one reason the attempt number cannot tell them apart). Returns whether
    a NOTIFY was sent."""
    if not released:
        return False
    message = released[0].message or "released: worker shutting down"
    params = {
        "ids": [o.job_id for o in released],
        "claims": [o.claim for o in released],
        "message": cap_text(message),
        "cancelled": RELEASED_CANCELLED,
    }
    rows = await batch.write(RELEASE_MANY, params, fast=False)
    return any(r["notified"] for r in rows)


async def finish(
    conn: AsyncConnection, worker_id: str, outcomes: Sequence[Outcome], settings: Settings
) -> FinishReport:
    """Apply a batch of a worker's outcomes in the caller's transaction (one transaction per batch).

    Consequences run in the same transaction: dependents released or cancelled, processor-created
    next jobs inserted, pipeline status derived, alerts recorded.
    """
    report = FinishReport()
    if not outcomes:
        return report
    await lock_pipelines(conn, (o.pipeline_id for o in outcomes))
    by_kind: dict[OutcomeKind, list[Outcome]] = {kind: [] for kind in OutcomeKind}
    for o in outcomes:
        by_kind[OutcomeKind(o.kind)].append(o)
    batch = _Batch(conn, worker_id, settings)
    if by_kind[OutcomeKind.COMPLETED]:
        await _complete(batch, by_kind[OutcomeKind.COMPLETED])
    if by_kind[OutcomeKind.FAILED]:
        await _fail(batch, by_kind[OutcomeKind.FAILED])
    await _acknowledge_cancels(batch, by_kind[OutcomeKind.CANCELLED])
    report.notify = await _release(batch, by_kind[OutcomeKind.RELEASED])
    await hold_requeued(conn, batch.changed)  # a retry or a hand-back of a disabled owner's job waits held
    for r in batch.changed:
        report.status[r["id"]] = r["status"]
    report.lost = {o.job_id for o in outcomes} - set(report.status)
    notified = await consequences(conn, batch.changed, batch.actor, batch.extra_pipelines)
    report.notify = notified or report.notify
    return report


async def release_unreceived(
    conn: AsyncConnection, worker_id: str, known: Sequence[uuid.UUID], message: str, settings: Settings
) -> FinishReport:
    """A stopping worker hands back the jobs locked by it that it never received: a claim of its took them
    but its answer never came (cancelled at the stop, or lost with its connection), so they never started.
    ``known``: every job the worker received and has not settled (buffered, running, outcome unrecorded,
    or given up after it started); those are the normal stop's. Call it only once no claim of the worker's
    can still commit. Each job is released by :func:`finish` at the claim read here (``queued`` again,
    the attempt not counted, a ``released`` event), fenced as every release is."""
    rows = (await conn.execute(UNRECEIVED, {"worker": worker_id, "known": list(known)})).mappings().all()
    outcomes = [
        Outcome(
            r["id"],
            OutcomeKind.RELEASED,
            message=message,
            pipeline_id=r["pipeline_id"],
            claim=r["claims"],
        )
        for r in rows
    ]
    return await finish(conn, worker_id, outcomes, settings)
