"""The leases a worker holds, and the checks on its running jobs that run in its event loop.

* :class:`HeldJobs` — the jobs whose lease the worker holds (running, plus finished ones whose outcome is
  not recorded yet), with, for each, when its lease was last renewed by the worker's own clock. It is
  shared with the lease keeper's thread (:mod:`app.worker.keeper`), which renews those leases on its own
  connection, so a lock guards it.
* :class:`JobChecks` — the worker's ``checks`` side task: every second it checks, durably, whether a cancel
  was requested for a running job (NOTIFY is only the fast path, and a lost notification must not lose
  the cancel) and writes progress reports that were held back.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import is_transient
from app.jobs import queue
from app.settings import Settings
from app.silence import answered_within
from app.worker.executor import PROGRESS_MIN_INTERVAL_SECS, RunningJob
from app.worker.faults import first_line


@dataclass
class Lease:
    """One held lease. ``renewed_at`` is the monotonic time at which the statement that last set its
    expiry (the claim, then each renewal) was sent: the database's clock read that statement later, so
    ``renewed_at + lease_secs`` is never after the moment the database considers the lease expired."""

    claim: int
    """The claim this lease is of (the job's ``claims`` as the claim returned it): the renewal's fence."""
    renewed_at: float
    expiry_acted: bool = False
    """Whether the worker was already told this lease is about to run out."""


def idle_in_transaction_ms(settings: Settings) -> int:
    """``idle_in_transaction_session_timeout`` for the worker's own connections: the configured one
    (``DB_IDLE_IN_TRANSACTION_TIMEOUT_MS``), but at most half the lease. A worker host cut off in the
    middle of a transaction (a renewal, an outcome) leaves its rows locked until the server ends that
    transaction, and the rescue, due when the lease runs out, skips or waits for locked rows: with a lease
    shorter than the configured timeout, the jobs were rescued that much late (behind PgBouncer the
    cut-off client's transaction is not even noticed by TCP). A worker's transactions are a few statements
    in a row, so half a lease is far more than any of them idles. 0 (off) stays off."""
    configured = settings.db_idle_in_transaction_timeout_ms
    if not configured:
        return 0
    return max(1, min(configured, int(settings.worker_visibility_timeout_secs * 500)))


class HeldJobs(dict[uuid.UUID, RunningJob]):
    """The worker's held jobs by id, with their :class:`Lease`; safe to read from the lease keeper's
    thread through :meth:`leases` and :meth:`renewed`."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._leases: dict[uuid.UUID, Lease] = {}

    def __setitem__(self, job_id: uuid.UUID, job: RunningJob) -> None:
        with self._lock:
            super().__setitem__(job_id, job)
            self._leases[job_id] = Lease(claim=job.row["claims"], renewed_at=job.claim_sent)

    def __delitem__(self, job_id: uuid.UUID) -> None:
        with self._lock:
            super().__delitem__(job_id)
            self._leases.pop(job_id, None)

    def pop(self, job_id: uuid.UUID, default: Any = None) -> Any:
        with self._lock:
            self._leases.pop(job_id, None)
            return super().pop(job_id, default)

    def jobs(self) -> list[RunningJob]:
        """A copy of the held jobs (for another thread: the stop watch's hand-back)."""
        with self._lock:
            return list(self.values())

    def leases(self) -> dict[uuid.UUID, Lease]:
        """A copy of the held leases (id → lease)."""
        with self._lock:
            return {job_id: Lease(**vars(lease)) for job_id, lease in self._leases.items()}

    def renewed(self, job_ids: Iterable[uuid.UUID], sent_at: float) -> None:
        """The leases of ``job_ids`` were renewed by a statement sent at ``sent_at`` (monotonic)."""
        with self._lock:
            for job_id in job_ids:
                lease = self._leases.get(job_id)
                if lease is not None and sent_at > lease.renewed_at:
                    lease.renewed_at = sent_at
                    lease.expiry_acted = False

    def running_out(self, deadline: float) -> dict[uuid.UUID, int]:
        """Held jobs whose lease was last renewed before ``deadline`` and that were not reported yet, each
        with the claim its lease is of; each is reported once per renewal."""
        out = {}
        with self._lock:
            for job_id, lease in self._leases.items():
                if lease.renewed_at <= deadline and not lease.expiry_acted:
                    lease.expiry_acted = True
                    out[job_id] = lease.claim
        return out


class CheckHost(Protocol):
    """What :class:`JobChecks` needs of its worker."""

    id: str
    engine: AsyncEngine
    running: dict[uuid.UUID, RunningJob]
    log: Any

    def request_cancel(self, job_id: uuid.UUID) -> None: ...

    async def flush_progress(self, job: RunningJob) -> None: ...


class JobChecks:
    """The ``checks`` side task of a worker: :meth:`run` until cancelled."""

    def __init__(self, worker: CheckHost, *, tick: float = 1.0, answer_secs: float | None = None) -> None:
        self.worker = worker
        self.tick = tick
        self.answer_secs = answer_secs

    async def run(self) -> None:
        worker = self.worker
        while True:
            await asyncio.sleep(self.tick)
            try:
                if worker.running:
                    await self.check_cancels()
                await self.flush_progress()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                worker.log.warning("job checks failed: database unavailable", error=first_line(exc))

    async def check_cancels(self) -> None:
        """The durable check for cancel requests of running jobs."""
        worker = self.worker
        # Bounded as every wait of the worker's is: on a connection gone silent (a pooler or a proxy in
        # between keeps the TCP connection alive) this task waited for ever, and looked for no cancel again.
        async with answered_within(worker.engine.connect(), self.answer_secs) as conn:
            running = {job_id: job.row["claims"] for job_id, job in list(worker.running.items())}
            cancelled = await queue.cancel_requested(conn, worker.id, running)
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
