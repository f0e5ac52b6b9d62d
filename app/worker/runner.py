"""The worker: claim → run → record, in one asyncio process (issue 4; seeds 000 §4, 002, 004).

Shape (River's producer/executor/completer split, without threads):

* **claim loop** — while slots are free, one claim takes as many due jobs as there are free slots
  (``MAX_CONCURRENT_JOBS`` in all); then it sleeps until a NOTIFY, the next scheduled ``run_at``, or the
  poll interval (``JOB_PROCESSOR_POLL_INTERVAL``, only the fallback).
* **one task per job** — validates input, runs the processor (CPU-bound ones in their own process) under
  the type's timeout, and turns whatever happens into an :class:`~app.jobs.queue.Outcome`; an unexpected
  exception is a failed attempt with its traceback stored (capped), never a dead worker.
* **completer** — collects outcomes and records each batch in one transaction (issue 10: batched
  transitions), retrying the same batch while the database is unreachable so an outcome is never lost
  to a blip (issue 4 §11).
* **side tasks** (:mod:`app.worker.leases`, :mod:`app.worker.listener`, :func:`app.alerts.delivery_loop`)
  — lease renewal and cancel checks, the rescue sweep and upkeep, LISTEN, and alert delivery. They are
  supervised: if one dies of a bug, the worker stops loudly instead of running on without it.

Internal operations use the worker's own small engine (claim, finish, leases, sweep) and a dedicated LISTEN
connection, so processors that use the database through ``ctx.db`` can never starve them (case C15).
Graceful shutdown (SIGTERM/SIGINT, issue 4 §7; case C04): claim nothing new, keep renewing leases, let
running jobs finish within ``WORKER_SHUTDOWN_GRACE_SECS``, then put the rest back to ``queued`` without
counting the attempt, and exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from app import __version__, metrics
from app.db import create_engine, is_transient
from app.files import FileStore, JobFiles
from app.jobs import queue
from app.jobs.backoff import RetryPolicy, retry_delay
from app.jobs.payload import cap_text, result_json
from app.jobs.queue import Outcome
from app.jobs.rows import ClaimedJob
from app.processors import (
    CpuContext,
    JobCancelled,
    JobContext,
    PermanentError,
    ProcessorSpec,
    Result,
    RetryableError,
    registry,
)
from app.settings import Settings

log = structlog.get_logger("jobdesk.worker")

COMPLETER_BATCH = 1000
"""Most outcomes recorded in one transaction."""
PROGRESS_MIN_INTERVAL_SECS = 0.5
"""Progress reports of one job are written at most this often (the rest are coalesced)."""


def make_worker_id() -> str:
    """``host-pid-random`` (issue 4 §8): unique across hosts, processes and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass
class RunningJob:
    """A job this worker holds. ``stop_reason`` says why its task was cancelled: ``cancel`` (a cancel
    request past its grace), ``shutdown`` (past the shutdown grace), ``lost`` (lease taken away)."""

    row: ClaimedJob
    started: float
    task: asyncio.Task[None] | None = None
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    stop_reason: str | None = None
    progress_at: float = 0.0
    progress_pending: tuple[float | None, str | None] | None = None
    log: Any = None
    duration: float = 0.0


class Worker:
    """One worker process's (or the web app's in-app) job runner.

    ``url`` is the asyncpg database URL; ``app_engine`` is the pooled engine given to processors as
    ``ctx.db`` (the web app passes its own; standalone workers get one of ``DB_POOL_SIZE``).
    """

    def __init__(
        self,
        settings: Settings,
        url: str,
        *,
        app_engine: AsyncEngine | None = None,
        worker_id: str | None = None,
        concurrency: int | None = None,
    ) -> None:
        self.settings = settings
        self.url = url
        self.app_engine = app_engine
        self.id = worker_id or make_worker_id()
        self.concurrency = concurrency or settings.max_concurrent_jobs
        self.lease_secs = settings.worker_visibility_timeout_secs
        self.files = FileStore(settings.files_dir)
        self.engine: AsyncEngine | None = None
        self.claim_batch = max(1, -(-self.concurrency // 2))
        """Most jobs one claim takes: half the slots, so that the next claim can be on its way while the
        jobs of the last one run (issue 10, ``bench/throughput.py``)."""
        self.autocommit: AsyncEngine | None = None
        """``engine`` in autocommit mode, for single statements that need no transaction of their own."""
        self.running: dict[uuid.UUID, RunningJob] = {}
        """Jobs being processed (they hold a slot)."""
        self.held: dict[uuid.UUID, RunningJob] = {}
        """Jobs whose lease we hold: running, plus finished ones whose outcome is not recorded yet."""
        self.stopping = False
        self.stopped = asyncio.Event()
        self.listener: Any = None
        self.completed_count = 0
        self.failed_count = 0
        self.finished_since_touch = [0, 0]
        self.renew_leases = True
        """Tests switch this off to show that without lease renewal a long job runs twice (case C01)."""
        self.sweep_enabled = True
        """Tests switch this off to show that without the sweep a lost job stays stuck (case C03)."""
        self._wake = asyncio.Event()
        self._limited: list[str] = []
        self._limited_checked = 0.0
        self._slot_freed = asyncio.Event()
        self._recorded = asyncio.Event()
        self._outcomes: asyncio.Queue[Outcome | None] = asyncio.Queue()
        self._owned_app_engine = False
        self._fatal: BaseException | None = None
        self._side: dict[str, asyncio.Task[None]] = {}
        self._started = asyncio.Event()
        self.last_beat = time.monotonic()
        """When the worker last wrote its heartbeat (registration, then each lease renewal), monotonic."""
        level = settings.job_worker_log_level or settings.log_level
        self.debug = level == "DEBUG"
        self.log = log.bind(worker_id=self.id)

    # --- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask for a graceful stop (idempotent; safe from a signal handler)."""
        if not self.stopping:
            self.stopping = True
            self.log.info(
                "worker stopping",
                running=len(self.running),
                grace_secs=self.settings.worker_shutdown_grace_secs,
            )
        self._wake.set()
        self._slot_freed.set()

    async def wait_started(self) -> None:
        await self._started.wait()

    def health(self) -> str | None:
        """``None`` while this worker is doing its job, else a plain reason (``GET /readyz``, issue 10 §3):
        not started yet (the database may be unreachable), stopping, a side task (listener, leases,
        sweep, completer) stopped, or no heartbeat written for two heartbeat intervals and 30 s."""
        if self._fatal is not None:
            return f"a side task died: {self._fatal!r}"[:300]
        if self.stopping:
            return "the worker is stopping"
        if not self._started.is_set():
            return "the worker has not started yet (is the database reachable?)"
        dead = sorted(name for name, task in self._side.items() if task.done())
        if dead:
            return f"its {', '.join(dead)} task stopped"
        silent = time.monotonic() - self.last_beat
        if silent > 2 * self.settings.heartbeat_secs + 30:
            return f"no heartbeat written for {silent:.0f} s: the worker cannot reach the database"
        return None

    async def run(self) -> None:
        """Run until :meth:`stop` (then drain and return) or until a side task dies (then raise)."""
        from app import alerts
        from app.worker import leases
        from app.worker.listener import Listener

        self.engine = create_engine(
            self.url, pool_size=4, pool_timeout=30, application_name=f"jobdesk-worker:{self.id}"[:63]
        )
        self.autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        if self.app_engine is None:
            self.app_engine = create_engine(
                self.url,
                pool_size=self.settings.db_pool_size,
                pool_timeout=self.settings.db_pool_timeout_secs,
                application_name="jobdesk-processors",
            )
            self._owned_app_engine = True
        queue_started = time.monotonic()
        from app import controls

        await self._retrying(
            "sync schedules", lambda conn: controls.sync_code_schedules(conn, self.settings, self.log)
        )
        await self._retrying(
            "register",
            lambda conn: queue.register_worker(
                conn,
                worker_id=self.id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                concurrency=self.concurrency,
                version=__version__,
            ),
        )
        self.last_beat = time.monotonic()
        self.listener = Listener(
            (self.settings.database_listen_url or self.url).replace(
                "postgresql+asyncpg://", "postgresql://", 1
            ),
            on_jobs=self.wake,
            on_cancel=self._on_cancel_notify,
            log=self.log,
        )
        self._side = {
            "listener": asyncio.create_task(self.listener.run(), name=f"{self.id}:listener"),
            "leases": asyncio.create_task(leases.lease_loop(self), name=f"{self.id}:leases"),
            "sweep": asyncio.create_task(leases.sweep_loop(self), name=f"{self.id}:sweep"),
            # Alert delivery (issue 8): its own task on the processors' pool, never on the job path.
            "alerts": asyncio.create_task(alerts.delivery_loop(self), name=f"{self.id}:alerts"),
        }
        for name, task in self._side.items():
            task.add_done_callback(lambda t, n=name: self._side_done(n, t))
        completer = asyncio.create_task(self._completer(), name=f"{self.id}:completer")
        completer.add_done_callback(lambda t: self._side_done("completer", t))
        self.log.info(
            "worker started",
            concurrency=self.concurrency,
            lease_secs=self.lease_secs,
            poll_interval=self.settings.job_processor_poll_interval,
            startup_ms=round((time.monotonic() - queue_started) * 1000),
        )
        metrics.RUNNING.set_function(lambda: len(self.running))  # read at scrape time
        self._started.set()
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            await self._outcomes.put(None)
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(
                    asyncio.shield(completer), timeout=max(5.0, self.settings.worker_shutdown_grace_secs)
                )
            for task in self._side.values():
                task.cancel()
            completer.cancel()
            await asyncio.gather(*self._side.values(), completer, return_exceptions=True)
            if self.listener is not None:
                await self.listener.aclose()
            if self._fatal is None:
                with contextlib.suppress(Exception):
                    async with self.engine.begin() as conn:
                        await queue.unregister_worker(conn, self.id)
            await self.engine.dispose()
            if self._owned_app_engine and self.app_engine is not None:
                await self.app_engine.dispose()
            self.stopped.set()
            self.log.info("worker stopped", completed=self.completed_count, failed=self.failed_count)
        if self._fatal is not None:
            raise RuntimeError(
                f"worker {self.id} stopped because a side task died: {self._fatal!r}"
            ) from self._fatal

    def _side_done(self, name: str, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self.stopped.is_set():
            return
        exc = task.exception()
        if exc is None and (self.stopping and name == "completer"):
            return
        self._fatal = exc or RuntimeError(f"{name} task ended unexpectedly")
        self.log.error("worker side task died; stopping the worker", task=name, error=repr(self._fatal))
        self.stop()
        for job in list(self.running.values()):  # no leases, no completer: stop now, the sweep rescues them
            job.stop_reason = "lost"
            job.cancel_event.set()
            if job.task is not None:
                job.task.cancel()

    async def _retrying(self, what: str, fn: Any) -> Any:
        """Run ``fn(conn)`` in a transaction on the worker engine, retrying transient errors with backoff."""
        assert self.engine is not None
        delay = 0.2
        while True:
            try:
                async with self.engine.begin() as conn:
                    return await fn(conn)
            except Exception as exc:
                if not is_transient(exc) or (self.stopping and what == "claim"):
                    raise
                self.log.warning(
                    "database unavailable; retrying", operation=what, error=_short(exc), retry_in_secs=delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    # --- claiming -----------------------------------------------------------------------------

    def wake(self) -> None:
        """Poll now (a NOTIFY arrived, or the listener reconnected)."""
        self._wake.set()

    async def _claim_loop(self) -> None:
        poll = self.settings.job_processor_poll_interval
        error_delay = 0.2
        while not self.stopping:
            free = self.concurrency - len(self.running)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            self._wake.clear()
            want = min(free, self.claim_batch)
            try:
                # Limited types first (within their allowance), so a flood of other jobs cannot starve
                # them; then one fast claim for the rest.
                rows = await self._claim_limited(want)
                if len(rows) < want:
                    rows.extend(await self._claim(want - len(rows)))
                for row in rows:  # start at once: the lookup below must not delay them (latency)
                    self._start(row)
                next_due = None
                if len(rows) < want:
                    next_due = await self._next_due()
                error_delay = 0.2
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.log.warning(
                    "claim failed: database unavailable", error=_short(exc), retry_in_secs=error_delay
                )
                await self._sleep(error_delay)
                error_delay = min(error_delay * 2, max(poll, 5.0))
                continue
            if rows and self.debug:
                self.log.debug("claimed", count=len(rows), ids=[str(r["id"]) for r in rows])
            if len(rows) >= want:
                # A full batch: claim the next one straight away. The jobs just started run while that
                # claim waits for the database, so Python work and database work overlap.
                continue
            timeout = poll if next_due is None else max(0.0, min(poll, next_due))
            if self.debug:
                self.log.debug("poll", claimed=len(rows), free=free, sleep_secs=round(timeout, 3))
            await self._sleep(timeout)

    async def _sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``, returning early on :meth:`wake`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    async def _claim(self, free: int) -> list[ClaimedJob]:
        """One claim statement for up to ``free`` jobs. The statement is atomic by itself, so it runs in
        autocommit mode: one round trip instead of three (``BEGIN``, claim, ``COMMIT``)."""
        assert self.autocommit is not None
        async with self.autocommit.connect() as conn:
            return list(await queue.claim(conn, self.id, free, self.lease_secs))

    async def _claim_limited(self, free: int) -> list[ClaimedJob]:
        """Jobs of types with a concurrency or rate limit (issue 11 §4), each claimed under its control
        row's lock in one transaction. Which types are limited is looked up at most once a second while
        none is (a limit set meanwhile also wakes the worker), so unlimited queues pay nothing."""
        assert self.engine is not None and self.autocommit is not None
        now = time.monotonic()
        if not self._limited and now - self._limited_checked < 1.0:
            return []
        async with self.autocommit.connect() as conn:
            self._limited = [c["type"] for c in await queue.limited_types(conn)]
        self._limited_checked = now
        rows: list[ClaimedJob] = []
        if not self._limited:
            return rows
        async with self.engine.begin() as conn:
            for job_type in self._limited:
                room = free - len(rows)
                if room <= 0:
                    break
                rows.extend(await queue.claim_limited(conn, self.id, job_type, room, self.lease_secs))
        return rows

    async def _next_due(self) -> float | None:
        """Seconds until the next scheduled job is due (``None``: nothing scheduled)."""
        assert self.autocommit is not None
        async with self.autocommit.connect() as conn:
            return await queue.seconds_until_next_due(conn)

    def _start(self, row: ClaimedJob) -> None:
        stale = self.running.get(row["id"])
        if stale is not None:
            # Our earlier attempt of this job lost its lease (it was rescued) and we claimed the job
            # again: stop the old attempt without recording anything; the new one takes over.
            stale.log.warning("job claimed again while an earlier attempt still ran here; stopping that one")
            stale.stop_reason = "lost"
            stale.cancel_event.set()
            self._force_stop(stale, "lost")
        job = RunningJob(row=row, started=time.monotonic())
        job.log = self.log.bind(
            job_id=str(row["id"]),
            job_type=row["type"],
            attempt=row["attempts"],
            pipeline_id=str(row["pipeline_id"]) if row["pipeline_id"] else None,
            request_id=row["request_id"],
        )
        self.running[row["id"]] = job
        self.held[row["id"]] = job
        metrics.by_type(metrics.CLAIMED, row["type"]).inc()
        claimed_at = row["lease_expires_at"].timestamp() - self.lease_secs
        metrics.by_type(metrics.QUEUE_WAIT, row["type"]).observe(
            max(0.0, claimed_at - row["run_at"].timestamp())
        )
        job.task = asyncio.create_task(self._execute(job), name=f"job:{row['id']}")

    # --- executing ----------------------------------------------------------------------------

    def policy(self, spec: ProcessorSpec | None) -> RetryPolicy:
        """The retry policy of a job type: its own override, else ``JOB_RETRY_INTERVALS`` with jitter."""
        if spec is not None and spec.retry is not None:
            return spec.retry
        return RetryPolicy.schedule(self.settings.job_retry_intervals, self.settings.job_retry_jitter)

    async def _execute(self, job: RunningJob) -> None:
        row = job.row
        spec = registry.get(row["type"])
        timeout = (spec.timeout if spec and spec.timeout else None) or self.settings.job_default_timeout_secs
        job.log.info("job started", max_attempts=row["max_attempts"])
        outcome: Outcome | None = None
        timer: asyncio.Timeout | None = None
        try:
            if spec is None:
                raise PermanentError(f"no processor for job type {row['type']!r} is installed in this worker")
            try:
                data = row["input_data"]
                if row["parents"]:
                    from app.pipelines import resolve_refs

                    data = resolve_refs(data, row["parents"])
                model = spec.parse_input(data)
            except ValidationError as exc:
                raise PermanentError(
                    f"the job's input is not valid for {row['type']}: {exc.errors()[0]['msg']}"
                ) from None
            async with asyncio.timeout(timeout) as timer:
                result = await self._call(spec, job, model)
            outcome = await self._success(job, result)
        except JobCancelled:
            outcome = self._stopped(job, "stopped by the processor after a cancel request")
        except asyncio.CancelledError:
            if job.stop_reason is None:
                raise
            outcome = self._stopped(job, "stopped after a cancel request")
        except TimeoutError as exc:
            if timer is not None and timer.expired():
                outcome = self._failure(job, spec, f"timed out after {timeout:g} s", permanent=False)
            else:
                outcome = self._failure(job, spec, _describe(exc), permanent=False)
        except PermanentError as exc:
            outcome = self._failure(job, spec, str(exc) or type(exc).__name__, permanent=True)
        except Exception as exc:
            outcome = self._failure(job, spec, _describe(exc), permanent=False)
        finally:
            if self.running.get(row["id"]) is job:  # not a newer attempt of the same job (see _start)
                del self.running[row["id"]]
            self._slot_freed.set()
            job.cancel_event.set()  # wakes nothing further; makes late ctx.sleep calls return at once
        duration = time.monotonic() - job.started
        metrics.by_type(metrics.DURATION, row["type"]).observe(duration)
        if outcome is None:
            if self.held.get(row["id"]) is job:
                del self.held[row["id"]]
            self._recorded.set()
            metrics.LOST.inc()
            job.log.warning(
                "job abandoned: lease lost (the sweep rescued it)", duration_ms=round(duration * 1000)
            )
            return
        outcome.pipeline_id = row["pipeline_id"]
        outcome.attempt = row["attempts"]  # the fencing token: only this attempt's write can win
        job.duration = duration
        self._outcomes.put_nowait(outcome)

    def _stopped(self, job: RunningJob, cancel_message: str) -> Outcome | None:
        """The outcome of a job stopped early: why it was asked to stop decides (cancel request →
        ``cancelled``; shutdown past the grace → ``released``; lease lost → nothing to record)."""
        if job.stop_reason == "shutdown":
            return Outcome(
                job.row["id"], "released", message="released: the worker shut down before the job finished"
            )
        if job.stop_reason == "lost":
            return None
        return Outcome(job.row["id"], "cancelled", message=cancel_message)

    async def _call(self, spec: ProcessorSpec, job: RunningJob, model: Any) -> Any:
        row = job.row
        parents = row["parents"]
        if spec.cpu_bound:
            from app.processors.inputs import file_ids_in
            from app.worker.cpu import ProcessFailure, run_in_process

            ids = [i for found in file_ids_in(type(model), row["input_data"] or {}).values() for i in found]
            names = await JobFiles(self.files, self.app_engine, row).names(ids) if ids else {}
            out_dir = Path(tempfile.mkdtemp(prefix=f"job-{row['id']}-", dir=self._scratch()))
            ctx = CpuContext(
                job_id=str(row["id"]),
                attempt=row["attempts"],
                input=model,
                files_dir=self.files.dir,
                output_dir=out_dir,
                parents=parents or {},
                file_names=names,
            )
            await self._progress(job, 0.0, "Working…")
            try:
                return await run_in_process(spec.func, ctx, lambda f, m: self._progress(job, f, m))
            except ProcessFailure as exc:
                raise _ProcessorError(str(exc), exc.traceback_text) from None
        ctx = JobContext(
            job=row,
            input=model,
            log=job.log,
            settings=self.settings,
            db=self.app_engine,
            files=JobFiles(self.files, self.app_engine, row),
            parents=parents or {},
            cancel_event=job.cancel_event,
            progress=lambda f, m: self._progress(job, f, m),
            worker_id=self.id,
        )
        return await spec.func(ctx)

    def _scratch(self) -> Path:
        path = self.settings.data_dir / "scratch"
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def _success(self, job: RunningJob, result: Any) -> Outcome:
        row = job.row
        if isinstance(result, Result):
            data = dict(result.data or {})
            if result.files:
                refs = []
                for f in result.files:
                    refs.append(
                        await JobFiles(self.files, self.app_engine, row).save(
                            f.name, source=f.path, content_type=f.content_type
                        )
                    )
                data.setdefault("files", refs)
            next_jobs = result.next_jobs
        else:
            data, next_jobs = (result if result is not None else {}), []
        if not isinstance(data, dict):
            data = {"value": data}
        outcome = Outcome(row["id"], "completed", result=result_json(data))
        if next_jobs:
            from app import pipelines

            try:
                outcome.next_jobs = pipelines.plan_next_jobs(row, next_jobs, self.settings)
            except Exception as exc:  # a bad next-jobs plan is the processor's permanent failure
                return self._failure(
                    job,
                    registry.get(row["type"]),
                    f"could not create the next jobs: {_describe(exc)}",
                    permanent=True,
                )
        return outcome

    def _failure(
        self, job: RunningJob, spec: ProcessorSpec | None, error: str, *, permanent: bool
    ) -> Outcome:
        row = job.row
        delay = 0.0
        if not permanent and row["attempts"] < row["max_attempts"]:
            delay = retry_delay(self.policy(spec), row["attempts"])
        if self.debug:
            job.log.debug(
                "retry decision",
                permanent=permanent,
                attempts=row["attempts"],
                max_attempts=row["max_attempts"],
                delay_secs=round(delay, 3),
            )
        return Outcome(row["id"], "failed", error=cap_text(error), permanent=permanent, delay=delay)

    async def _progress(self, job: RunningJob, fraction: float | None, message: str | None) -> None:
        now = time.monotonic()
        job.progress_pending = (fraction, message)
        if now - job.progress_at < PROGRESS_MIN_INTERVAL_SECS:
            return  # coalesced; the latest value is written by the next report or the lease loop
        await self.flush_progress(job)

    async def flush_progress(self, job: RunningJob) -> None:
        """Write a job's latest pending progress report (called by reports and by the lease loop)."""
        pending, job.progress_pending = job.progress_pending, None
        if pending is None or self.engine is None:
            return
        job.progress_at = time.monotonic()
        try:
            async with self.engine.begin() as conn:
                await queue.set_progress(conn, self.id, job.row["id"], pending[0], pending[1])
        except Exception as exc:
            if not is_transient(exc):
                raise
            job.log.warning("could not record progress", error=_short(exc))

    # --- cancellation -------------------------------------------------------------------------

    def _on_cancel_notify(self, payload: str) -> None:
        try:
            job_id = uuid.UUID(payload)
        except ValueError:
            return
        self.request_cancel(job_id)

    def request_cancel(self, job_id: uuid.UUID) -> None:
        """Ask a running job to stop (cancel request seen through NOTIFY or the durable check): set its
        cancel signal, then cancel its task after ``JOB_CANCEL_GRACE_SECS`` (issue 4 §5)."""
        job = self.running.get(job_id)
        if job is None or job.cancel_event.is_set():
            return
        job.log.info(
            "cancel requested; asking the processor to stop", grace_secs=self.settings.job_cancel_grace_secs
        )
        job.cancel_event.set()
        asyncio.get_running_loop().call_later(
            self.settings.job_cancel_grace_secs, self._force_stop, job, "cancel"
        )

    def _force_stop(self, job: RunningJob, reason: str) -> None:
        if job.task is not None and not job.task.done():
            job.stop_reason = job.stop_reason or reason
            job.task.cancel()

    def lost(self, job_ids: set[uuid.UUID]) -> None:
        """Our lease on these jobs is gone (rescued elsewhere): stop them without recording anything."""
        for job_id in job_ids:
            job = self.running.get(job_id)
            if job is not None:
                job.log.warning("lease lost; stopping the job")
                job.stop_reason = "lost"
                job.cancel_event.set()
                self._force_stop(job, "lost")

    # --- shutdown -----------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Let running jobs finish within the grace period; then release the rest (issue 4 §7)."""
        grace = self.settings.worker_shutdown_grace_secs
        tasks = [j.task for j in self.running.values() if j.task is not None]
        if tasks:
            self.log.info("waiting for running jobs to finish", count=len(tasks), grace_secs=grace)
            _, pending = await asyncio.wait(tasks, timeout=grace)
            if pending:
                self.log.warning("grace period over; releasing unfinished jobs", count=len(pending))
                for job in list(self.running.values()):
                    job.stop_reason = job.stop_reason or "shutdown"
                    job.cancel_event.set()
                    self._force_stop(job, "shutdown")
                await asyncio.wait(pending, timeout=10)
        deadline = time.monotonic() + max(10.0, grace)
        while self.held and self._fatal is None and time.monotonic() < deadline:  # outcomes being recorded
            self._recorded.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._recorded.wait(), timeout=max(0.0, deadline - time.monotonic()))
        if self.held:
            self.log.warning(
                "stopping with outcomes not recorded; the sweep will rescue these jobs", count=len(self.held)
            )

    # --- completer ----------------------------------------------------------------------------

    async def _completer(self) -> None:
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

    async def _record(self, batch: list[Outcome]) -> None:
        """Record a batch of outcomes; retried while the database is unreachable (issue 4 §11); a batch
        that fails for another reason is split so one bad outcome cannot block the others."""
        try:
            report = await self._retrying(
                "finish", lambda conn: queue.finish(conn, self.id, batch, self.settings)
            )
        except Exception as exc:
            if len(batch) > 1:
                for outcome in batch:
                    await self._record([outcome])
                return
            outcome = batch[0]
            job = self.held.get(outcome.job_id)
            self.log.error("could not record an outcome", job_id=str(outcome.job_id), error=_describe(exc))
            if outcome.kind in ("completed", "failed") and not getattr(outcome, "_fallback", False):
                fallback = Outcome(
                    outcome.job_id,
                    "failed",
                    permanent=True,
                    pipeline_id=outcome.pipeline_id,
                    error=f"the outcome could not be recorded: {_describe(exc)}",
                    attempt=outcome.attempt,
                )
                fallback._fallback = True  # type: ignore[attr-defined]
                await self._record([fallback])
            elif job is not None and _same_attempt(job, outcome):
                self.held.pop(outcome.job_id, None)
            return
        self._after_record(batch, report)

    def _after_record(self, batch: list[Outcome], report: queue.FinishReport) -> None:
        counts: dict[tuple[Any, str], int] = {}  # counters are bumped once per batch and type

        def count(metric: Any, job_type: str) -> None:
            counts[(metric, job_type)] = counts.get((metric, job_type), 0) + 1

        for outcome in batch:
            job = self.held.get(outcome.job_id)
            if job is not None and _same_attempt(job, outcome):
                del self.held[outcome.job_id]
            else:  # a stale attempt's outcome: the held job is a newer attempt, which keeps its lease
                job = None
            status = report.status.get(outcome.job_id)
            job_log = job.log if job is not None else self.log.bind(job_id=str(outcome.job_id))
            duration_ms = round(job.duration * 1000) if job else None
            job_type = job.row["type"] if job else "?"
            if status is None:
                job_log.warning(
                    "outcome discarded: the job is no longer ours (lease lost)", outcome=outcome.kind
                )
                metrics.LOST.inc()
                continue
            if status == "completed" or status == "waiting_approval":
                self.completed_count += 1
                self.finished_since_touch[0] += 1
                count(metrics.COMPLETED, job_type)
                job_log.info("job finished", status=status, duration_ms=duration_ms)
            elif status == "failed":
                self.failed_count += 1
                self.finished_since_touch[1] += 1
                count(metrics.FAILED, job_type)
                job_log.info(
                    "job failed", status=status, duration_ms=duration_ms, error=(outcome.error or "")[:300]
                )
            elif status == "queued" and outcome.kind == "failed":
                count(metrics.RETRIED, job_type)
                job_log.info(
                    "job attempt failed; retry scheduled",
                    duration_ms=duration_ms,
                    retry_in_secs=round(outcome.delay, 2),
                    error=(outcome.error or "")[:300],
                )
            elif status == "cancelled":
                count(metrics.CANCELLED, job_type)
                job_log.info("job cancelled", duration_ms=duration_ms)
            else:
                job_log.info("job released", status=status, duration_ms=duration_ms)
        for (metric, job_type), n in counts.items():
            metrics.by_type(metric, job_type).inc(n)
        self._recorded.set()
        if report.notify:
            self.wake()


def _same_attempt(job: RunningJob, outcome: Outcome) -> bool:
    return outcome.attempt is None or job.row["attempts"] == outcome.attempt


class _ProcessorError(Exception):
    """A CPU-bound processor's failure, carrying the child's traceback for ``error_message``."""

    def __init__(self, message: str, traceback_text: str) -> None:
        super().__init__(message)
        self.traceback_text = traceback_text


def _describe(exc: BaseException) -> str:
    """``Type: message`` then the traceback, as stored in ``error_message`` (capped by the queue)."""
    if isinstance(exc, _ProcessorError):
        return f"{exc}\n\n{exc.traceback_text}"
    if isinstance(exc, RetryableError) and str(exc):
        return str(exc)
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    try:
        tb = "".join(traceback.format_exception(exc, limit=50))
    except RecursionError:
        tb = ""
    return f"{head}\n\n{tb}" if tb else head


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


# --- standalone process ---------------------------------------------------------------------------


def run_standalone(settings: Settings) -> int:
    """``jobdesk worker`` / ``python worker.py``: run one worker until SIGTERM/SIGINT; return the exit code
    (0 after a graceful stop, 1 when the worker died or could not start; issue 4 §7–8)."""
    from app.db import DatabaseUnavailable, check_connection, migration_status, resolve_database_url

    try:
        from app.logs import configure_logging

        configure_logging(settings)
    except ImportError:  # pragma: no cover - logging module missing only in partial checkouts
        logging.basicConfig(level=settings.log_level)

    async def main() -> int:
        try:
            url = resolve_database_url(settings)
        except DatabaseUnavailable as exc:
            log.error(str(exc))
            return 1
        probe = create_engine(url, pool_size=1)
        try:
            await check_connection(probe)
            current, message = await migration_status(probe)
        except DatabaseUnavailable as exc:
            log.error(str(exc))
            return 1
        finally:
            await probe.dispose()
        if not current:
            log.error(f"Refusing to start the worker: {message}")
            return 1
        worker = Worker(settings, url)
        bind = settings.worker_metrics_bind
        if bind is not None:
            from prometheus_client import start_http_server

            try:
                start_http_server(bind[1], addr=bind[0])  # a daemon thread; the library's own server
            except OSError as exc:
                log.error(
                    f"Cannot serve metrics on WORKER_METRICS_ADDR={settings.worker_metrics_addr}: {exc}"
                )
                return 1
            log.info("serving metrics", address=f"http://{settings.worker_metrics_addr}/metrics")
        loop = asyncio.get_running_loop()
        signals_seen = 0

        def on_signal() -> None:
            nonlocal signals_seen
            signals_seen += 1
            worker.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            await worker.run()
        except Exception as exc:
            log.error("worker crashed", error=repr(exc))
            return 1
        return 0

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main())


def _loop_factory() -> Any:
    """uvloop's event loop when it is installed (it comes with ``litestar[standard]``, and uvicorn uses it
    for the in-app worker too), else asyncio's: uvloop roughly halves the worker's per-job overhead in
    socket I/O and task scheduling (issue 10, ``bench/throughput.py``)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency of litestar[standard]
        return None
    return uvloop.new_event_loop
