"""The worker: claim → run → record, in one asyncio process.

Shape (River's producer/executor/completer split, without threads):

* **claim loop** (:mod:`app.worker.claim_loop`) — as soon as a slot frees, one claim takes as many due
  jobs as there are free slots (``MAX_CONCURRENT_JOBS`` in all) plus room in a small buffer of claimed
  jobs ahead of the slots (:mod:`app.worker.buffer`, at most one per slot), from which a freed slot
  starts its next job without a round trip (:meth:`Worker.hold`, :meth:`Worker.fill_slots`); then it
  sleeps until a NOTIFY, the next scheduled ``run_at``, or the poll interval.
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
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from app import metrics
from app.db import create_engine
from app.dbpool import drop_idle, let_go
from app.files import FileStore
from app.jobs import queue
from app.settings import Settings
from app.silence import answered_within
from app.worker import health, lifecycle
from app.worker.buffer import ClaimBuffer
from app.worker.claim_loop import claim_loop
from app.worker.claiming import Claimer, wait_any
from app.worker.completer import Completer, Tally
from app.worker.executor import Executor, RunningJob
from app.worker.joblog import JobLogWriter
from app.worker.keeper import LeaseKeeper
from app.worker.leases import HeldJobs, JobChecks, idle_in_transaction_ms
from app.worker.listener import Listener
from app.worker.maintenance import Maintenance
from app.worker.watchdog import TICK_SECS, LoopWatchdog

log = structlog.get_logger("jobdesk.worker")

SHUTDOWN_STEP_SECS = 5.0
"""The longest a stopping worker waits for its side tasks to end once cancelled, and for the database to
answer its last statements and closes (it goes on without them)."""
UNREGISTER_SECS = 2.0
"""How long a stopping worker tries to delete its row (a connection and a statement: milliseconds when
the database is in reach; otherwise the row is left to age out)."""

SIDE_TASKS_LATEST_SECS = 1.0
"""The side tasks start when the first claim's answer is in, or this many seconds after the start if it
takes longer (see :meth:`Worker.run`)."""


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
        self.application_name = f"jobdesk-worker:{self.id}"[:63]
        """The name of the worker's own connections (what a stop's cleanup finds its sessions by)."""
        self.engine = create_engine(
            url,
            pool_size=4,
            pool_timeout=30,
            application_name=self.application_name,
            idle_in_transaction_timeout_ms=idle_in_transaction_ms(settings),
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self.held = HeldJobs()
        """Jobs whose lease we hold: running, plus finished ones whose outcome is not recorded yet."""
        self.tally = Tally()
        self.stopping = False
        self.hurried = asyncio.Event()
        """Set by :meth:`hurry`: the stop skips what is left of its grace period."""
        self.stopped = asyncio.Event()
        self.last_beat = time.monotonic()
        """When the worker last wrote its heartbeat (registration, then each lease renewal), monotonic."""
        self.woken = asyncio.Event()
        """Set by a NOTIFY (:meth:`wake`) or a stop: the claim loop claims now instead of sleeping on."""
        self.slot_freed = asyncio.Event()
        """Set whenever a slot frees: the claim loop, waiting with every slot busy, looks for room."""
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
            on_settled=self.slot_freed.set,
            joblog=JobLogWriter(self.engine, log=self.log, answer_secs=settings.heartbeat_secs),
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
        self.checks = JobChecks(self, answer_secs=settings.heartbeat_secs)
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
            self.completer.stopping()
            self.log.info(
                "worker stopping",
                running=len(self.running),
                grace_secs=self.settings.worker_shutdown_grace_secs,
            )
        self.woken.set()
        self.slot_freed.set()
        return first

    def hurry(self) -> None:
        """A second stop request (a second SIGTERM or Ctrl+C): stop, skipping what is left of the grace
        period: running jobs are stopped and released now (idempotent; call it in the worker's loop)."""
        self.stop()
        if not self.hurried.is_set():
            self.hurried.set()
            self.log.warning(
                "asked to stop again: skipping the rest of the grace period; running jobs are stopped "
                "and released now",
                running=len(self.running),
            )

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
        self._loop = asyncio.get_running_loop()
        self.leases.start()
        ticker = asyncio.create_task(self._tick(), name=f"{self.id}:ticker")
        ticker.add_done_callback(functools.partial(self._side_done, "ticker"))
        self._side = {"ticker": ticker}
        completer = asyncio.create_task(self.completer.run(), name=f"{self.id}:completer")
        completer.add_done_callback(functools.partial(self._side_done, "completer"))
        # The other side tasks start once the first claim's answer is in (lifecycle.side_tasks says why).
        later = asyncio.get_running_loop().call_later(SIDE_TASKS_LATEST_SECS, self.start_side_tasks)
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
            await claim_loop(self)
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

    def start_side_tasks(self) -> None:
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
        """Record what is left, stop the side tasks, unregister, release the engines. Each step is
        bounded: the database may not answer at all (a partition: a statement or a connection's close
        waits for a reply that never comes), and a side task may not end when cancelled."""
        self.completer.close()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(
                asyncio.shield(completer), timeout=max(5.0, self.settings.worker_shutdown_grace_secs)
            )
        # The ticker runs on until the lease keeper stops: without its ticks the keeper's watchdog takes
        # the slow steps below for a blocked loop.
        ticker = self._side.get("ticker")
        tasks = [t for t in self._side.values() if t is not ticker] + [completer]
        for task in tasks:
            task.cancel()
        _, stuck = await asyncio.wait(tasks, timeout=SHUTDOWN_STEP_SECS)
        if stuck:
            self.log.warning(
                "side tasks did not end when cancelled; stopping without them",
                tasks=sorted(t.get_name() for t in stuck),
            )
        await self.leases.stop()
        if ticker is not None:
            ticker.cancel()
            await asyncio.wait([ticker])
        try:
            async with asyncio.timeout(SHUTDOWN_STEP_SECS):
                await self._release()
        except TimeoutError:
            self.log.warning(
                "the database did not answer at shutdown; dropping its connections unclosed",
                waited_secs=SHUTDOWN_STEP_SECS,
            )
            await self.engine.dispose(close=False)
            if self._owns_app_engine:
                await self.app_engine.dispose(close=False)
        self.stopped.set()
        self.log.info("worker stopped", completed=self.tally.completed, failed=self.tally.failed)

    async def _release(self) -> None:
        """Close the kept connections, unregister, close the engines. Nothing here waits on a connection
        the stop does not need: the pooled ones, which may have gone silent, are closed without a word to
        the server (which ends an idle session when its socket closes), and the unregister, the one
        statement left, runs on a fresh connection within :data:`UNREGISTER_SECS`."""
        await self.claimer.close()
        await self.listener.aclose()
        drop_idle(self.engine)
        if self._fatal is None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(UNREGISTER_SECS):
                    async with answered_within(self.engine.begin(), UNREGISTER_SECS) as conn:
                        await queue.unregister_worker(conn, self.id)
        await let_go(self.engine)
        if self._owns_app_engine:
            await let_go(self.app_engine)

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
        self.woken.set()

    async def sleep(self, seconds: float, *, finished: bool = False) -> None:
        """Sleep up to ``seconds``, returning early on :meth:`wake` (and, if ``finished``, when the outcome
        of a job that ran here is recorded)."""
        await wait_any([self.woken, self.completer.recorded] if finished else [self.woken], seconds)

    def free_slots(self) -> int:
        return self.concurrency - len(self.running) - len(self.executor.lingering)

    def fill_slots(self) -> None:
        """Start buffered jobs in the free slots (called whenever a slot frees, and by the claim loop)."""
        while not self.stopping and self.buffer and self.free_slots() > 0:
            job = self.buffer.pop()
            if job is not None:
                self._launch(job)

    def hold(self, row: Any, claim_sent: float) -> None:
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
        # The loop kept from run(): asyncio.create_task asks for the running loop, which on Python 3.11
        # is a getpid system call, twice per job with the processor's task.
        loop = self._loop or asyncio.get_running_loop()
        job.task = loop.create_task(self._run_job(job), name=f"job:{job.id_text}")

    # --- one job's task -----------------------------------------------------------------------

    async def _run_job(self, job: RunningJob) -> None:
        """Run the job, free its slot, and hand its outcome to the completer."""
        try:
            outcome = await self.executor.execute(job)
        finally:
            if self.running.get(job.id) is job:  # not a newer attempt of the same job (see hold)
                del self.running[job.id]
            self.fill_slots()
            self.slot_freed.set()
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
        outcome.claim = job.row["claims"]  # the fencing token: only this claim's write can win
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
        if job is None:
            lifecycle.cancel_buffered(self, job_id)
            return
        if job.cancel_event.is_set():
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

    def lease_running_out(self, claims: Mapping[uuid.UUID, int]) -> None:
        """These jobs' leases (job id → the claim each is of) end within the margin and could not be
        renewed (the database is out of reach): stop them now, before another worker can have claimed
        them. The word comes from the lease keeper's thread and may be read after the job was claimed here
        again (rescued meanwhile: a retry or a rerun sets its attempt back, so only the claim tells): a job
        held at another claim now has a fresh lease and runs on, as :meth:`lost` leaves it."""
        job_ids = {
            j
            for j, claim in claims.items()
            if (held := self.held.get(j)) is None or held.row["claims"] == claim
        }
        lifecycle.drop_buffered(self, job_ids, "lease not renewed and about to run out", hand_back=True)
        for job_id in job_ids:
            job = self.running.get(job_id)
            if job is not None and job.stop_reason is None:
                job.log.warning(
                    "lease not renewed and about to run out; stopping the job before it can be rescued",
                    lease_secs=self.lease_secs,
                )
                self._abandon(job)

    def lost(self, job_ids: set[uuid.UUID], claims: Mapping[uuid.UUID, int] | None = None) -> None:
        """Our lease on these jobs is gone (rescued elsewhere): stop them without recording anything.
        ``claims``: the claim each lease was of; a job held at another claim now (claimed here again since)
        is not the one lost and runs on."""
        if claims is not None:
            job_ids = {
                j
                for j in job_ids
                if (held := self.held.get(j)) is None or held.row["claims"] == claims.get(j)
            }
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
