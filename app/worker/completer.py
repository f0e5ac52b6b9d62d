"""Recording outcomes: the completer collects the outcomes of finished jobs and records each batch in one
transaction through :func:`app.jobs.queue.finish`, retrying the same batch while the database is
unreachable, so that an outcome is never lost to a blip. Jobs finish faster in batches: one round trip
and one commit for many jobs.

A job stays *held* (its lease renewed) from its claim until its outcome is recorded; the completer lets
go of it then.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app import metrics
from app.errors import is_refusal
from app.jobs import queue
from app.jobs.queue import Outcome
from app.settings import Settings
from app.worker.executor import RunningJob
from app.worker.faults import describe, next_jobs_refused, retrying
from app.worker.held import HeldConnection

COMPLETER_BATCH = 1000
"""Most outcomes recorded in one transaction."""
STOPPING_ANSWER_SECS = 2.0
"""How long a stopping worker's write of outcomes waits for its answer before it is tried again on a
fresh connection (milliseconds when the database answers; the stop waits for outcomes about 10 s)."""


@dataclass
class Tally:
    """Jobs this worker finished: totals for its log line at the end, and the counts not yet added to its
    ``workers`` row (the throughput sample behind /admin's "failures in the last hour"), which the lease
    keeper writes from its own thread (hence the lock)."""

    completed: int = 0
    failed: int = 0
    unsent_completed: int = 0
    unsent_failed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_completed(self) -> None:
        with self._lock:
            self.completed += 1
            self.unsent_completed += 1

    def count_failed(self) -> None:
        with self._lock:
            self.failed += 1
            self.unsent_failed += 1

    def count_swept_failures(self, n: int) -> None:
        """Jobs the rescue sweep failed (no attempts left) count in this worker's sample, not its total."""
        with self._lock:
            self.unsent_failed += n

    def take_unsent(self) -> tuple[int, int]:
        """The completed and failed counts not yet in the worker's row, now taken out of the tally; give
        them back with :meth:`give_back` if they could not be written."""
        with self._lock:
            taken = self.unsent_completed, self.unsent_failed
            self.unsent_completed = self.unsent_failed = 0
            return taken

    def give_back(self, completed: int, failed: int) -> None:
        with self._lock:
            self.unsent_completed += completed
            self.unsent_failed += failed


class Completer:
    """Records the outcomes handed to :meth:`submit`, in batches, until :meth:`close`.

    ``held`` is the worker's map of jobs whose lease it holds; a job leaves it when its outcome is
    recorded (or found stale). ``on_notify`` is called when a batch made jobs due (dependents released,
    retries queued), so the worker polls at once.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        worker_id: str,
        engine: AsyncEngine,
        held: dict[uuid.UUID, RunningJob],
        tally: Tally,
        log: Any,
        on_notify: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.engine = engine
        self.answer_secs = settings.heartbeat_secs
        """How long a write of outcomes waits for its answer before it is tried again on a fresh
        connection: as long as the lease keeper waits for a renewal's. Meanwhile the keeper renews the
        jobs' leases, so on a connection gone silent the jobs would stay held, neither recorded nor
        rescued, for as long as the write waited: for ever, unbounded."""
        self.held_conn = HeldConnection(engine)
        """Where batches of standalone completions are written, each as one autocommit statement."""
        self.held = held
        self.tally = tally
        self.log = log
        self.on_notify = on_notify
        self.recorded = asyncio.Event()
        """Set whenever held jobs were let go of (the worker's drain waits on it)."""
        self.unrecorded: dict[uuid.UUID, Outcome] = {}
        """Outcomes submitted and not yet recorded (or given up), by job id, whether queued or in a batch
        being written: what a stop that has to go on without the event loop still records, from another
        thread (:mod:`app.worker.stuck`); a finished job handed back instead would run again."""
        self._given_up: dict[uuid.UUID, float] = {}
        """Jobs let go of with nothing recorded (:meth:`forget`), with when: a stop must not hand them back
        as never started (:func:`app.worker.lifecycle.release_unreceived`)."""
        self._outcomes: asyncio.Queue[Outcome | None] = asyncio.Queue()

    def submit(self, outcome: Outcome) -> None:
        self.unrecorded[outcome.job_id] = outcome
        self._outcomes.put_nowait(outcome)

    def _settled(self, outcome: Outcome) -> None:
        """``outcome`` is recorded, or given up: it is no longer waiting (a newer claim's outcome of the
        same job stays)."""
        waiting = self.unrecorded.get(outcome.job_id)
        if waiting is not None and waiting.claim == outcome.claim:
            del self.unrecorded[outcome.job_id]

    def stopping(self) -> None:
        """The worker is stopping: from now on a write waits for its answer no longer than
        :data:`STOPPING_ANSWER_SECS` before it is tried again on a fresh connection. A heartbeat (a third
        of the lease: 100 s by default) is longer than the stop waits for outcomes, so on a kept
        connection gone silent an outcome was left unrecorded and its job, finished, run again after the
        rescue."""
        self.answer_secs = min(self.answer_secs, STOPPING_ANSWER_SECS)

    def close(self) -> None:
        """No more outcomes: :meth:`run` returns once those submitted are recorded."""
        self._outcomes.put_nowait(None)

    def forget(self, job: RunningJob) -> None:
        """Let go of a job that has nothing to record (its lease was lost)."""
        if self.held.get(job.id) is job:
            del self.held[job.id]
        self._forget_old()
        self._given_up[job.id] = time.monotonic()
        self.recorded.set()

    @property
    def given_up(self) -> set[uuid.UUID]:
        """The jobs let go of within the last lease. Older ones are forgotten: whatever this worker held
        of them has run out and been rescued by now, so a job of theirs locked by this worker is from a
        later claim, and the set does not grow with every lease lost over the worker's life."""
        self._forget_old()
        return set(self._given_up)

    def _forget_old(self) -> None:
        oldest = time.monotonic() - self.settings.worker_visibility_timeout_secs
        for job_id in [j for j, at in self._given_up.items() if at < oldest]:
            del self._given_up[job_id]

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            await self.held_conn.close(keep=False)  # the worker is stopping

    async def _run(self) -> None:
        while True:
            first = await self._outcomes.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < COMPLETER_BATCH and not self._outcomes.empty():
                item = self._outcomes.get_nowait()
                if item is None:
                    await self._record(batch)
                    return
                batch.append(item)
            await self._record(batch)

    async def _record(self, batch: list[Outcome], *, fallback: bool = False) -> None:
        """Record a batch of outcomes; retried while the database is unreachable. A batch that fails for
        another reason is split, so one bad outcome cannot block the others; a completion or failure that
        cannot be recorded becomes a permanent failure naming why (``fallback``), so the job does not
        stay running until the sweep."""
        try:
            report = await self.write(batch)
        except Exception as exc:
            if len(batch) > 1:
                for outcome in batch:
                    await self._record([outcome])
                return
            outcome = batch[0]
            self.log.error("could not record an outcome", job_id=str(outcome.job_id), error=describe(exc))
            if outcome.kind in ("completed", "failed") and not fallback:
                # The core refusing a processor's next jobs (a type, a $ref, a file, an input over its
                # limit) is the processor's failure, told as the executor tells a next-jobs plan it
                # refuses: every refusal of the app's own, not only a BadInput.
                refused = is_refusal(exc) and bool(outcome.next_jobs)
                error = (
                    next_jobs_refused(exc)
                    if refused
                    else f"the outcome could not be recorded: {describe(exc)}"
                )
                failure = Outcome(
                    outcome.job_id,
                    "failed",
                    permanent=True,
                    pipeline_id=outcome.pipeline_id,
                    error=error,
                    claim=outcome.claim,
                )
                await self._record([failure], fallback=True)
                return
            job = self.held.get(outcome.job_id)
            if job is not None and job.same_claim(outcome):
                self.held.pop(outcome.job_id, None)
            self._settled(outcome)
            return
        self._after_record(batch, report)

    async def write(self, batch: list[Outcome]) -> queue.FinishReport:
        """Record ``batch``: completions of standalone jobs as one autocommit statement (most batches are
        only those), then whatever it did not apply in a transaction of its own."""
        report = queue.FinishReport()
        rest = batch
        if queue.standalone(batch):
            report = await retrying(
                self.held_conn,
                "finish",
                lambda conn: queue.complete_standalone(conn, self.worker_id, batch),
                self.log,
                answer_secs=self.answer_secs,
            )
            rest = [o for o in batch if o.job_id not in report.status]
            if not rest:
                return report
        more = await retrying(
            self.engine,
            "finish",
            lambda conn: queue.finish(conn, self.worker_id, rest, self.settings),
            self.log,
            answer_secs=self.answer_secs,
        )
        more.status.update(report.status)
        more.notify = more.notify or report.notify
        left_out = [o for o in rest if o.job_id not in more.status]
        if left_out:
            more.status.update(await self._recorded_earlier(left_out))
        return more

    async def _recorded_earlier(self, left_out: list[Outcome]) -> dict[uuid.UUID, str]:
        """Of outcomes a write left out, those an earlier write of this worker's had recorded (its
        COMMIT went through, its answer was lost, and it was written again): reported as recorded, not
        as a lease lost. Best effort: a failed look-up leaves them reported as lost."""
        try:
            async with self.engine.connect() as conn:
                found = await queue.recorded_earlier(conn, self.worker_id, left_out)
        except Exception as exc:
            self.log.warning("could not look up outcomes written without an answer", error=describe(exc))
            return {}
        for job_id, status in found.items():
            self.log.info(
                "outcome was recorded by an earlier write whose answer was lost",
                job_id=str(job_id),
                status=status,
            )
        return found

    def _after_record(self, batch: list[Outcome], report: queue.FinishReport) -> None:
        counts: dict[tuple[Any, str], int] = {}  # counters are bumped once per batch and type
        for outcome in batch:
            self._settled(outcome)
            job = self.held.get(outcome.job_id)
            if job is not None and job.same_claim(outcome):
                del self.held[outcome.job_id]
            else:  # a stale claim's outcome: the held job is a newer claim, which keeps its lease
                job = None
            metric = self._account(outcome, report.status.get(outcome.job_id), job)
            if metric is not None:
                key = (metric, job.row["type"] if job else "?")
                counts[key] = counts.get(key, 0) + 1
        for (metric, job_type), n in counts.items():
            metrics.by_type(metric, job_type).inc(n)
        self.recorded.set()
        if report.notify:
            self.on_notify()

    def _account(self, outcome: Outcome, status: str | None, job: RunningJob | None) -> Any:
        """Log what became of one outcome and count it; returns the per-type counter to bump, if any."""
        job_log = job.log if job is not None else self.log.bind(job_id=str(outcome.job_id))
        duration_ms = round(job.duration * 1000) if job else None
        error = (outcome.error or "")[:300]
        if status is None:
            job_log.warning("outcome discarded: the job is no longer ours (lease lost)", outcome=outcome.kind)
            metrics.LOST.inc()
            return None
        if status == "completed" or status == "waiting_approval":
            self.tally.count_completed()
            job_log.info("job finished", status=status, duration_ms=duration_ms)
            return metrics.COMPLETED
        if status == "failed":
            self.tally.count_failed()
            job_log.info("job failed", status=status, duration_ms=duration_ms, error=error)
            return metrics.FAILED
        if status == "queued" and outcome.kind == "failed":
            job_log.info(
                "job attempt failed; retry scheduled",
                duration_ms=duration_ms,
                retry_in_secs=round(outcome.delay, 2),
                error=error,
            )
            return metrics.RETRIED
        if status == "cancelled":
            job_log.info("job cancelled", duration_ms=duration_ms)
            return metrics.CANCELLED
        job_log.info("job released", status=status, duration_ms=duration_ms)
        return None
