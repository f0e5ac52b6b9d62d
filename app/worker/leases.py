"""Lease renewal: the worker's side task that keeps the leases of its jobs alive.

Every tick (at most 1 s) it checks, durably, whether a cancel was requested for a running job —
NOTIFY is only the fast path, and a lost notification must not lose the cancel. Every
``heartbeat_secs`` (a third of the visibility timeout by default) it renews the lease of every job the
worker holds in one statement, stops jobs whose lease was taken away, and refreshes the worker's row
(its heartbeat). It also writes progress reports that were held back. Renewal goes on during a graceful
shutdown until every outcome is recorded, so a job that finishes during the drain is not rescued under
the worker's feet.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import is_transient
from app.jobs import queue
from app.settings import Settings
from app.worker.completer import Tally
from app.worker.executor import PROGRESS_MIN_INTERVAL_SECS, RunningJob
from app.worker.faults import first_line


class LeaseHolder(Protocol):
    """What lease renewal needs of its worker."""

    id: str
    settings: Settings
    engine: AsyncEngine
    lease_secs: float
    running: dict[uuid.UUID, RunningJob]
    held: dict[uuid.UUID, RunningJob]
    tally: Tally
    stopping: bool
    debug: bool
    log: Any
    last_beat: float

    @property
    def listening(self) -> bool: ...

    def request_cancel(self, job_id: uuid.UUID) -> None: ...

    def lost(self, job_ids: set[uuid.UUID]) -> None: ...

    async def flush_progress(self, job: RunningJob) -> None: ...


class LeaseRenewal:
    """The ``leases`` side task of a worker: :meth:`run` until cancelled."""

    def __init__(self, worker: LeaseHolder) -> None:
        self.worker = worker
        self.enabled = True
        """Tests switch this off to show that without lease renewal a long job runs twice. The worker's
        heartbeat is still written."""

    async def run(self) -> None:
        worker = self.worker
        heartbeat = worker.settings.heartbeat_secs
        tick = min(1.0, heartbeat)
        last_renewal = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            try:
                if time.monotonic() - last_renewal >= heartbeat:
                    await self.renew_once()
                    last_renewal = time.monotonic()
                elif worker.running:
                    await self.check_cancels()
                await self.flush_progress()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                worker.log.warning("lease upkeep failed: database unavailable", error=first_line(exc))

    async def check_cancels(self) -> None:
        """The durable check for cancel requests of running jobs."""
        worker = self.worker
        async with worker.engine.connect() as conn:
            cancelled = await queue.cancel_requested(conn, worker.id, list(worker.running))
        for job_id in cancelled:
            worker.request_cancel(job_id)

    async def flush_progress(self) -> None:
        """Write progress reports that were coalesced and not written since."""
        for job in list(self.worker.running.values()):
            if (
                job.progress_pending is not None
                and time.monotonic() - job.progress_at >= PROGRESS_MIN_INTERVAL_SECS
            ):
                await self.worker.flush_progress(job)

    async def renew_once(self) -> None:
        """Renew the leases of held jobs and write the worker's heartbeat, in one transaction; then stop
        the jobs whose lease is gone and pass on cancel requests found on the way."""
        worker = self.worker
        held = list(worker.held)
        tally = worker.tally
        completed, failed = tally.unsent_completed, tally.unsent_failed
        async with worker.engine.begin() as conn:
            report = None
            if held and self.enabled:
                report = await queue.heartbeat(conn, worker.id, held, worker.lease_secs)
            await queue.touch_worker(
                conn,
                worker.id,
                running=len(worker.running),
                stopping=worker.stopping,
                listener_connected=worker.listening,
                completed=completed,
                failed=failed,
            )
        tally.sent(completed, failed)
        worker.last_beat = time.monotonic()
        if report is None:
            return
        if worker.debug:
            worker.log.debug("leases renewed", renewed=len(report.renewed), lost=len(report.lost))
        for job_id in report.cancelled:
            worker.request_cancel(job_id)
        if report.lost:
            worker.lost(set(report.lost))
