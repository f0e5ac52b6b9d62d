"""The worker: claim → run → record, in one asyncio process.

Shape (River's producer/executor/completer split, without threads):

* **claim loop** (here) — as soon as a slot frees, one claim takes as many due jobs as there are free
  slots (``MAX_CONCURRENT_JOBS`` in all) plus room in a small buffer of claimed jobs ahead of the slots
  (:mod:`app.worker.buffer`, at most one per slot), from which a freed slot starts its next job without
  a round trip; then it sleeps until a NOTIFY, the next scheduled ``run_at``, or the poll interval
  (``JOB_PROCESSOR_POLL_INTERVAL``, only the fallback).
* **one task per job** — :class:`~app.worker.executor.Executor` runs the processor and turns whatever
  happens into an :class:`~app.jobs.queue.Outcome`.
* **completer** (:mod:`app.worker.completer`) — records outcomes in batches, retrying through outages.
* **side tasks** — durable cancel checks and held-back progress (:mod:`app.worker.leases`), the sweep
  (:mod:`app.worker.maintenance`), LISTEN (:mod:`app.worker.listener`), alert delivery
  (:class:`app.alerts.Deliverer`) and the loop's watchdog tick. They are supervised: if one dies of a
  bug, the worker stops loudly instead of running on without it.
* **the lease keeper** (:mod:`app.worker.keeper`) — a thread with its own loop and connection: leases,
  heartbeat, stopping jobs whose lease runs out unrenewed, and the watchdog of a blocked loop.

Internal operations use the worker's own small engine (claim, finish, leases, sweep) and a dedicated LISTEN
connection, so processors that use the database through ``ctx.db`` can never starve them of connections.
Graceful shutdown (SIGTERM/SIGINT, or :meth:`Worker.stop`): claim nothing new, keep renewing leases, let
running jobs finish within ``WORKER_SHUTDOWN_GRACE_SECS``, then put the rest back to ``queued`` without
counting the attempt, and return.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from app import metrics
from app.db import create_engine, is_transient
from app.files import FileStore
from app.jobs import queue
from app.settings import Settings
from app.worker import health, lifecycle
from app.worker.buffer import ClaimBuffer
from app.worker.claiming import Claimer, wait_any
from app.worker.completer import COMPLETER_BATCH, Completer, Tally
from app.worker.executor import Executor, RunningJob
from app.worker.faults import first_line
from app.worker.joblog import JobLogWriter
from app.worker.keeper import LeaseKeeper
from app.worker.leases import HeldJobs, JobChecks
from app.worker.listener import Listener
from app.worker.maintenance import Maintenance
from app.worker.watchdog import TICK_SECS, LoopWatchdog

log = structlog.get_logger("jobdesk.worker")

CLAIMS_IN_FLIGHT = 2
"""Claims a worker may have on their way at once. With one, a worker whose jobs are short runs at most
one claim's worth of jobs per round trip, its slots empty while it waits; the buffer's bound (at most one
claimed job per slot waiting) holds however many claims fly, since each asks only for room not yet asked
for."""

UNRECORDED_MAX = COMPLETER_BATCH
"""Finished jobs that may wait for the completer before the claim loop takes fewer. Unbounded, a completer
that fell behind let the claims run on (``bench/scale.py``, 500 slots: 290,000 held jobs, 1.5 GB), and
renewing all those leases in one transaction held up the very completions it waited for."""

SIDE_TASKS_LATEST_SECS = 1.0
"""The side tasks start when the first claim's answer is in, or this many seconds after the start if it
takes longer (see :meth:`Worker.run`)."""

CLAIM_RETRY_FIRST_SECS = 0.2
"""First wait after a claim failed because the database is unreachable (doubled up to the poll interval
or 5 s)."""


def make_worker_id() -> str:
    """``host-pid-random``: unique across hosts, processes and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    """One worker process's (or the web app's in-app) job runner: :meth:`run` until :meth:`stop`.

    ``url`` is the asyncpg database URL; ``app_engine`` is the pooled engine given to processors as
    ``ctx.db`` (otherwise the worker makes one of ``DB_POOL_SIZE``; it must belong to the worker's loop).
    ``lease_margin``: a job whose lease could not be renewed is stopped this many seconds before the lease
    ends by the worker's clock (default: one heartbeat interval).
    ``job_types``: the types it claims (default: every type whose processor is installed).
    ``buffer``: how many claimed jobs may wait for a slot (default and most: one per slot).
    """

    def __init__(
        self,
        settings: Settings,
        url: str,
        *,
        app_engine: AsyncEngine | None = None,
        worker_id: str | None = None,
        concurrency: int | None = None,
        lease_margin: float | None = None,
        job_types: Iterable[str] | None = None,
        buffer: int | None = None,
    ) -> None:
        self.settings = settings
        self.url = url
        self.id = worker_id or make_worker_id()
        self.concurrency = concurrency or settings.max_concurrent_jobs
        self.lease_secs = settings.worker_visibility_timeout_secs
        self.buffer = ClaimBuffer(self.concurrency if buffer is None else min(buffer, self.concurrency))
        """Claimed jobs waiting for a slot, so that a freed slot starts its next job without a round trip
        while the claim loop refills the buffer (measured with ``bench/peers.py``)."""
        level = settings.job_worker_log_level or settings.log_level
        self.debug = level == "DEBUG"
        self.log = log.bind(worker_id=self.id)
        self.files = FileStore(settings.files_dir)
        self.engine = create_engine(
            url, pool_size=4, pool_timeout=30, application_name=f"jobdesk-worker:{self.id}"[:63]
        )
        self.autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        """``engine`` in autocommit mode, for single statements that need no transaction of their own."""
        self._owns_app_engine = app_engine is None
        self.app_engine = app_engine or create_engine(
            url,
            pool_size=settings.db_pool_size,
            pool_timeout=settings.db_pool_timeout_secs,
            application_name="jobdesk-processors",
        )
        self.running: dict[uuid.UUID, RunningJob] = {}
        """Jobs being processed (they hold a slot)."""
        self.held = HeldJobs()
        """Jobs whose lease we hold: running, plus finished ones whose outcome is not recorded yet."""
        self.tally = Tally()
        self.stopping = False
        self.stopped = asyncio.Event()
        self.last_beat = time.monotonic()
        """When the worker last wrote its heartbeat (registration, then each lease renewal), monotonic."""
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self.claimer = Claimer(
            self.engine,
            self.autocommit,
            worker_id=self.id,
            lease_secs=self.lease_secs,
            types=job_types,
            user_max=settings.user_max_running_jobs,
        )
        self._fatal: BaseException | None = None
        self._side: dict[str, asyncio.Task[None]] = {}
        self._started = threading.Event()
        self._assemble(lease_margin)

    def _assemble(self, lease_margin: float | None) -> None:
        """The parts the worker drives: LISTEN, job execution, the completer, lease renewal, the sweep."""
        settings = self.settings
        self.listener = Listener(
            (settings.database_listen_url or self.url).replace("postgresql+asyncpg://", "postgresql://", 1),
            on_jobs=self.wake,
            on_cancel=self._on_cancel_notify,
            log=self.log,
        )
        self.executor = Executor(
            settings,
            worker_id=self.id,
            files=self.files,
            engine=self.engine,
            app_engine=self.app_engine,
            debug=self.debug,
            on_settled=self._slot_freed.set,
            joblog=JobLogWriter(self.engine, log=self.log),
        )
        self.completer = Completer(
            settings,
            worker_id=self.id,
            engine=self.engine,
            held=self.held,
            tally=self.tally,
            log=self.log,
            on_notify=self.wake,
        )
        self.checks = JobChecks(self)
        self.watchdog = LoopWatchdog(Executor._call.__code__, self.log)
        self.leases = LeaseKeeper(self, margin=lease_margin)
        self.maintenance = Maintenance(
            self.engine, settings, files=self.files, tally=self.tally, log=self.log, wake=self.wake
        )

    # --- switches and state for tests and health checks ------------------------------------------

    @property
    def renew_leases(self) -> bool:
        """Whether held jobs' leases are renewed (tests switch it off to show a long job runs twice)."""
        return self.leases.enabled

    @renew_leases.setter
    def renew_leases(self, value: bool) -> None:
        self.leases.enabled = value

    @property
    def sweep_enabled(self) -> bool:
        """Whether the sweep runs (tests switch it off to show a lost job stays stuck without it)."""
        return self.maintenance.enabled

    @sweep_enabled.setter
    def sweep_enabled(self, value: bool) -> None:
        self.maintenance.enabled = value

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up."""
        return self.listener.connected

    @property
    def fatal(self) -> BaseException | None:
        """What a side task (or the lease keeper) died of, if one did."""
        return self._fatal

    @property
    def started(self) -> bool:
        return self._started.is_set()

    def dead_side_tasks(self) -> list[str]:
        return sorted(name for name, task in list(self._side.items()) if task.done())

    @property
    def completed_count(self) -> int:
        return self.tally.completed

    @property
    def failed_count(self) -> int:
        return self.tally.failed

    # --- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> bool:
        """Ask for a graceful stop (idempotent; safe from a signal handler). ``True`` when this call
        started the stop, ``False`` when the worker was already stopping; :meth:`run` returns once the
        drain is over (``stopped`` is set then)."""
        first = not self.stopping
        if first:
            self.stopping = True
            self.log.info(
                "worker stopping",
                running=len(self.running),
                grace_secs=self.settings.worker_shutdown_grace_secs,
            )
        self._wake.set()
        self._slot_freed.set()
        return first

    async def wait_started(self) -> None:
        """Return once the worker runs (callable from any event loop: the in-app worker has its own)."""
        while not await asyncio.to_thread(self._started.wait, 0.1):  # short waits: cancellable between
            continue

    def health(self) -> str | None:
        """``None`` while this worker is doing its job, else a plain reason (for ``GET /readyz``); see
        :func:`app.worker.health.problem`. Safe to call from another thread."""
        return health.problem(self)

    def health_report(self) -> dict[str, Any]:
        """What the worker's row carries besides its counts (``workers.health``, shown by ``/admin``)."""
        return health.report(self)

    def running_count(self) -> int:
        return len(self.running)

    async def run(self) -> None:
        """Run until :meth:`stop` (then drain and return) or until a side task dies (then raise)."""
        started = time.monotonic()
        await self._register()
        self.watchdog.thread_id = threading.get_ident()
        self.leases.start()
        ticker = asyncio.create_task(self._tick(), name=f"{self.id}:ticker")
        ticker.add_done_callback(functools.partial(self._side_done, "ticker"))
        self._side = {"ticker": ticker}
        completer = asyncio.create_task(self.completer.run(), name=f"{self.id}:completer")
        completer.add_done_callback(functools.partial(self._side_done, "completer"))
        # The other side tasks start once the first claim's answer is in (lifecycle.side_tasks says why).
        later = asyncio.get_running_loop().call_later(SIDE_TASKS_LATEST_SECS, self._start_side_tasks)
        self.log.info(
            "worker started",
            concurrency=self.concurrency,
            lease_secs=self.lease_secs,
            poll_interval=self.settings.job_processor_poll_interval,
            startup_ms=round((time.monotonic() - started) * 1000),
        )
        metrics.RUNNING.set_function(lambda: len(self.running))  # read at scrape time
        metrics.LINGERING.set_function(lambda: len(self.executor.lingering))
        metrics.LOOP_STALLED.set_function(self.watchdog.stalled_secs)
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            later.cancel()
            await self._shut_down(completer)
        if self._fatal is not None:
            raise RuntimeError(
                f"worker {self.id} stopped because a side task died: {self._fatal!r}"
            ) from self._fatal

    async def _register(self) -> None:
        await lifecycle.register(self)
        self.last_beat = time.monotonic()

    def _start_side_tasks(self) -> None:
        """Start the side tasks besides the ticker, once (then the worker counts as started)."""
        if self._started.is_set() or self.stopped.is_set():
            return
        side = lifecycle.side_tasks(self)
        for name, task in side.items():
            task.add_done_callback(functools.partial(self._side_done, name))
        self._side.update(side)
        self._started.set()

    async def _tick(self) -> None:
        """Tell the watchdog the loop runs."""
        while True:
            self.watchdog.tick()
            await asyncio.sleep(TICK_SECS)

    async def _shut_down(self, completer: asyncio.Task[None]) -> None:
        """Record what is left, stop the side tasks, unregister, release the engines."""
        self.completer.close()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(
                asyncio.shield(completer), timeout=max(5.0, self.settings.worker_shutdown_grace_secs)
            )
        for task in self._side.values():
            task.cancel()
        completer.cancel()
        await asyncio.gather(*self._side.values(), completer, return_exceptions=True)
        await self.leases.stop()
        await self.claimer.close()
        await self.listener.aclose()
        if self._fatal is None:
            with contextlib.suppress(Exception):
                async with self.engine.begin() as conn:
                    await queue.unregister_worker(conn, self.id)
        await self.engine.dispose()
        if self._owns_app_engine:
            await self.app_engine.dispose()
        self.stopped.set()
        self.log.info("worker stopped", completed=self.tally.completed, failed=self.tally.failed)

    def _side_done(self, name: str, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self.stopped.is_set():
            return
        exc = task.exception()
        if exc is None and (self.stopping and name == "completer"):
            return
        self._fatal = exc or RuntimeError(f"{name} task ended unexpectedly")
        self._die(name)

    def keeper_died(self, exc: BaseException) -> None:
        """The lease keeper's thread ended with ``exc`` (called in the worker's loop)."""
        if self.stopped.is_set() or self._fatal is not None:
            return
        self._fatal = exc
        self._die("lease keeper")

    def _die(self, name: str) -> None:
        self.log.error("worker side task died; stopping the worker", task=name, error=repr(self._fatal))
        self.stop()
        for job in list(self.running.values()):  # no leases, no completer: stop now, the sweep rescues them
            self._abandon(job)

    # --- claiming -----------------------------------------------------------------------------

    def wake(self) -> None:
        """Poll now (a NOTIFY arrived, or the listener reconnected)."""
        self._wake.set()

    async def _claim_loop(self) -> None:
        """Claim whenever there is room, with up to :data:`CLAIMS_IN_FLIGHT` claims on their way at once
        (each asks only for room the others have not asked for), until :meth:`stop`."""
        flying: dict[asyncio.Task[tuple[int, float | None]], int] = {}
        """Claims on their way, and how many jobs each asked for."""
        try:
            await self._claim_until_stopped(flying)
        finally:
            # Whatever a claim on its way brings is ours: let it arrive, so that its jobs are buffered and
            # handed back by the drain rather than left to the rescue.
            if flying:
                await asyncio.gather(*flying, return_exceptions=True)
                self._start_side_tasks()  # a first claim's jobs may be running: their logs need the writer

    async def _claim_until_stopped(self, flying: dict[asyncio.Task[tuple[int, float | None]], int]) -> None:
        poll = self.settings.job_processor_poll_interval
        error_delay = CLAIM_RETRY_FIRST_SECS
        most = self.concurrency + self.buffer.capacity + UNRECORDED_MAX  # jobs held at most
        while not self.stopping:
            self._fill_slots()
            free = self._free_slots() - sum(flying.values())
            # A slot held by a task that ignored its cancel frees at an unknown time: no job waits for it.
            room = max(
                0,
                min(
                    self.buffer.room(), self.buffer.capacity - len(self.executor.lingering) - len(self.buffer)
                ),
            )
            # Held jobs (buffered, running, finished but not recorded) stay within the slots, the buffer
            # and UNRECORDED_MAX, however far behind the completer is.
            bound = most - len(self.held) - sum(flying.values())
            behind = bound < free + room
            want = max(0, min(free + room, bound))
            if len(flying) < CLAIMS_IN_FLIGHT and want >= (
                1 if free > 0 else max(1, self.buffer.capacity // 2)
            ):
                self._wake.clear()  # a NOTIFY from now on is for a later claim than this one
                self.completer.recorded.clear()  # an outcome recorded during the claim may lift a limit
                task = asyncio.create_task(self._claim_and_start(want), name=f"{self.id}:claim")
                flying[task] = want
                continue
            # Every slot busy (or asked for) and the buffer mostly full: wait for a slot or a claim.
            self._slot_freed.clear()
            waits = {asyncio.ensure_future(self._slot_freed.wait())}
            if behind:  # and for the completer, whose next recorded batch makes room
                self.completer.recorded.clear()
                waits.add(asyncio.ensure_future(self.completer.recorded.wait()))
            try:
                await asyncio.wait({*waits, *flying}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            for task in [t for t in flying if t.done()]:
                self._start_side_tasks()  # the first claim's answer is in (see run)
                asked = flying.pop(task)
                try:
                    claimed, next_due = task.result()
                    error_delay = CLAIM_RETRY_FIRST_SECS
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    self.log.warning(
                        "claim failed: database unavailable", error=first_line(exc), retry_in_secs=error_delay
                    )
                    await self._sleep(error_delay)
                    error_delay = min(error_delay * 2, max(poll, 5.0))
                    continue
                if claimed >= asked or flying:
                    # A full batch: the next claim goes out as soon as there is room (the jobs just
                    # started run meanwhile). A short one with another claim still on its way: that one
                    # says whether there is more.
                    continue
                await self._idle(claimed, next_due)

    async def _idle(self, claimed: int, next_due: float | None) -> None:
        """After a short claim: sleep until a NOTIFY, the next due job, the poll interval, or (when a limit
        held jobs back) an outcome recorded here."""
        poll = self.settings.job_processor_poll_interval
        timeout = poll if next_due is None else max(0.0, min(poll, next_due))
        if self.claimer.held_back:
            # Claimable jobs were left behind by a limit: an outcome recorded here (or the per-minute
            # window moving on) lifts it, so wait for that rather than a whole poll interval.
            timeout = self.claimer.sleep_limit(timeout)
        if self.debug:
            self.log.debug("poll", claimed=claimed, free=self._free_slots(), sleep_secs=round(timeout, 3))
        await self._sleep(timeout, finished=bool(self.claimer.held_back))

    async def _claim_and_start(self, want: int) -> tuple[int, float | None]:
        """Claim up to ``want`` jobs and start them; returns how many were claimed and, when fewer than
        ``want``, the seconds until the next scheduled job is due (``None``: nothing scheduled)."""
        sent = time.monotonic()  # the leases start no earlier than this, by our clock
        rows = await self.claimer.claim(want)
        if time.monotonic() - sent >= self.lease_secs - self.leases.margin:
            # The answer came too late to run these safely (the loop was blocked while it waited): their
            # leases may be running out already. The rescue gives them to a worker in time.
            self.log.warning(
                "claimed jobs arrived too late to run; leaving them to the rescue", count=len(rows)
            )
            return len(rows), None
        for row in rows:  # start at once: the lookup below must not delay them (latency)
            self._start(row, sent)
        self._fill_slots()
        if rows and self.debug:
            self.log.debug("claimed", count=len(rows), ids=[str(r["id"]) for r in rows])
        if len(rows) >= want:
            return len(rows), None
        return len(rows), await self._next_due()

    async def _sleep(self, seconds: float, *, finished: bool = False) -> None:
        """Sleep up to ``seconds``, returning early on :meth:`wake` (and, if ``finished``, when the outcome
        of a job that ran here is recorded)."""
        await wait_any([self._wake, self.completer.recorded] if finished else [self._wake], seconds)

    async def _next_due(self) -> float | None:
        """Seconds until the next scheduled job is due (``None``: nothing scheduled)."""
        return await self.claimer.seconds_until_next_due()

    def _free_slots(self) -> int:
        return self.concurrency - len(self.running) - len(self.executor.lingering)

    def _fill_slots(self) -> None:
        """Start buffered jobs in the free slots (called whenever a slot frees, and by the claim loop)."""
        while not self.stopping and self.buffer and self._free_slots() > 0:
            job = self.buffer.pop()
            if job is not None:
                self._launch(job)

    def _start(self, row: Any, claim_sent: float) -> None:
        """Hold a claimed job (its lease is ours from now) and buffer it; it starts when a slot is free."""
        stale = self.running.get(row["id"])
        if stale is not None:
            # Our earlier attempt of this job lost its lease (it was rescued) and we claimed the job
            # again: stop the old attempt without recording anything; the new one takes over.
            stale.log.warning("job claimed again while an earlier attempt still ran here; stopping that one")
            self._abandon(stale)
        if row["id"] in self.buffer:
            self.buffer.drop({row["id"]})
        id_text = str(row["id"])
        job = RunningJob(
            row=row,
            started=time.monotonic(),
            claim_sent=claim_sent,
            id_text=id_text,
            log=self.log.bind(
                job_id=id_text,
                job_type=row["type"],
                attempt=row["attempts"],
                pipeline_id=str(row["pipeline_id"]) if row["pipeline_id"] else None,
                request_id=row["request_id"],
            ),
        )
        self.held[row["id"]] = job
        metrics.by_type(metrics.CLAIMED, row["type"]).inc()
        claimed_at = row["lease_expires_at"].timestamp() - self.lease_secs
        metrics.by_type(metrics.QUEUE_WAIT, row["type"]).observe(
            max(0.0, claimed_at - row["run_at"].timestamp())
        )
        self.buffer.add(job)

    def _launch(self, job: RunningJob) -> None:
        job.started = time.monotonic()
        self.running[job.id] = job
        job.task = asyncio.create_task(self._run_job(job), name=f"job:{job.id_text}")

    # --- one job's task -----------------------------------------------------------------------

    async def _run_job(self, job: RunningJob) -> None:
        """Run the job, free its slot, and hand its outcome to the completer."""
        try:
            outcome = await self.executor.execute(job)
        finally:
            if self.running.get(job.id) is job:  # not a newer attempt of the same job (see _start)
                del self.running[job.id]
            self._fill_slots()
            self._slot_freed.set()
            job.cancel_event.set()  # wakes nothing further; makes late ctx.sleep calls return at once
        duration = time.monotonic() - job.started
        metrics.by_type(metrics.DURATION, job.row["type"]).observe(duration)
        if outcome is None:
            self.completer.forget(job)
            metrics.LOST.inc()
            job.log.warning(
                "job abandoned: lease lost (the sweep rescued it)", duration_ms=round(duration * 1000)
            )
            return
        outcome.pipeline_id = job.row["pipeline_id"]
        outcome.attempt = job.row["attempts"]  # the fencing token: only this attempt's write can win
        job.duration = duration
        self.completer.submit(outcome)

    async def flush_progress(self, job: RunningJob) -> None:
        """Write a job's latest pending progress report (lease renewal calls this for coalesced ones)."""
        await self.executor.flush_progress(job)

    # --- cancellation -------------------------------------------------------------------------

    def _on_cancel_notify(self, payload: str) -> None:
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        self.request_cancel(job_id)

    def request_cancel(self, job_id: uuid.UUID) -> None:
        """Ask a running job to stop (cancel request seen through NOTIFY or the durable check): set its
        cancel signal, then cancel its task after ``JOB_CANCEL_GRACE_SECS``."""
        job = self.running.get(job_id)
        if job is None or job.cancel_event.is_set():
            return
        job.log.info(
            "cancel requested; asking the processor to stop", grace_secs=self.settings.job_cancel_grace_secs
        )
        job.cancel_event.set()
        asyncio.get_running_loop().call_later(
            self.settings.job_cancel_grace_secs, self.force_stop, job, "cancel"
        )

    def force_stop(self, job: RunningJob, reason: str) -> None:
        if job.task is not None and not job.task.done():
            job.stop_reason = job.stop_reason or reason
            job.task.cancel()

    def _abandon(self, job: RunningJob) -> None:
        """Stop a job at once without recording anything: its lease is gone or cannot be kept."""
        job.stop_reason = "lost"
        job.cancel_event.set()
        self.force_stop(job, "lost")

    def lease_running_out(self, job_ids: list[uuid.UUID]) -> None:
        """These jobs' leases end within the margin and could not be renewed (the database is out of
        reach): stop them now, before another worker can have claimed them."""
        lifecycle.drop_buffered(self, set(job_ids), "lease not renewed and about to run out")
        for job_id in job_ids:
            job = self.running.get(job_id)
            if job is not None and job.stop_reason is None:
                job.log.warning(
                    "lease not renewed and about to run out; stopping the job before it can be rescued",
                    lease_secs=self.lease_secs,
                )
                self._abandon(job)

    def lost(self, job_ids: set[uuid.UUID]) -> None:
        """Our lease on these jobs is gone (rescued elsewhere): stop them without recording anything."""
        lifecycle.drop_buffered(self, job_ids, "lease lost")
        for job_id in job_ids:
            job = self.running.get(job_id)
            if job is not None:
                job.log.warning("lease lost; stopping the job")
                self._abandon(job)

    # --- shutdown -----------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Hand back buffered jobs, let running jobs finish within the grace period, then release the rest
        and wait (a while) for the outcomes to be recorded (:func:`app.worker.lifecycle.drain`)."""
        await lifecycle.drain(self)
