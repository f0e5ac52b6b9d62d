"""Running one job: check its input, call its processor under the type's timeout — in the worker's event
loop, or in a process of its own for a CPU-bound processor — and turn whatever happens into an
:class:`~app.jobs.queue.Outcome`. An unexpected exception is a failed attempt with its traceback stored
(capped), never a dead worker.

The bookkeeping around a job (its slot, its lease, recording the outcome) is the worker's
(:mod:`app.worker.runner`) and the completer's (:mod:`app.worker.completer`); nothing here writes job
state, apart from progress reports of a job this worker holds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app import dbclock, pipelines
from app.db import is_transient
from app.errors import AppError
from app.files import FileStore
from app.formatting import known_zone
from app.job_files import JobFiles
from app.jobs import queue
from app.jobs.backoff import RetryPolicy, retry_delay
from app.jobs.error_text import INPUT_UNFIT
from app.jobs.fanout import unwrap_literals
from app.jobs.payload import cap_text, result_json
from app.jobs.queue import Outcome
from app.processors import (
    CpuContext,
    Input,
    JobCancelled,
    JobContext,
    PermanentError,
    ProcessorSpec,
    Result,
    RetryableError,
    registry,
)
from app.settings import Settings
from app.silence import answered_within
from app.worker import scratch
from app.worker.cpu import run_in_process
from app.worker.faults import describe, first_line, next_jobs_refused
from app.worker.joblog import JobLogger, JobLogWriter, current

OWNER_ZONE = text("SELECT timezone FROM users WHERE id = :id")
"""A job's owner's time zone, read as a CPU-bound attempt is handed over."""

PROGRESS_MIN_INTERVAL_SECS = 0.5
"""Progress reports of one job are written at most this often (the rest are coalesced)."""


@dataclass
class RunningJob:
    """A job this worker holds. ``stop_reason`` says why its task was cancelled: ``cancel`` (a cancel
    request past its grace), ``shutdown`` (past the shutdown grace), ``lost`` (lease taken away, or
    running out without renewal)."""

    row: Any
    started: float
    log: Any
    task: asyncio.Task[None] | None = None
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    stop_reason: str | None = None
    progress_at: float = 0.0
    progress_pending: tuple[float | None, str | None] | None = None
    duration: float = 0.0
    claim_sent: float = 0.0
    """When the claim that took this job was sent (monotonic): the start of its lease by our clock."""
    log_buffer: Any = None
    """The job's log lines not written yet (:class:`app.worker.joblog.JobLogBuffer`), once it runs."""
    scratch: Path | None = None
    """The scratch directory of this claim of a CPU-bound job (:mod:`app.worker.scratch`), once made."""
    files: Any = None
    """The attempt's :class:`app.job_files.JobFiles` (what it stored, and whether the storage limit refused
    an output), once made."""
    id: uuid.UUID = field(init=False)
    """``row["id"]``, kept as an attribute: the worker's bookkeeping reads it a dozen times per job."""
    id_text: str = ""
    """``str(id)``, made once for the job's log lines and task names (formatting a UUID is not free)."""

    def __post_init__(self) -> None:
        self.id = self.row["id"]
        if not self.id_text:
            self.id_text = str(self.id)

    def released(self, message: str) -> Outcome:
        """This attempt handed back to the queue (``released``: queued again, the attempt not counted),
        fenced by its claim like every other outcome of it."""
        return Outcome(
            self.id,
            "released",
            message=message,
            pipeline_id=self.row["pipeline_id"],
            claim=self.row["claims"],
        )

    def same_claim(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` belongs to this claim of the job (an outcome without a claim does)."""
        return outcome.claim is None or self.row["claims"] == outcome.claim


class Executor:
    """Runs jobs for one worker. ``engine`` is the worker's own (progress reports); ``app_engine`` the
    pooled engine processors get as ``ctx.db`` and that file records are written through."""

    def __init__(
        self,
        settings: Settings,
        *,
        worker_id: str,
        files: FileStore,
        engine: AsyncEngine,
        app_engine: AsyncEngine,
        debug: bool = False,
        on_settled: Callable[[], None] = lambda: None,
        joblog: JobLogWriter | None = None,
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.files = files
        self.engine = engine
        self.app_engine = app_engine
        self.debug = debug
        self.on_settled = on_settled
        self.joblog = joblog
        """Keeps what processors log as their jobs' logs (``None``: not kept)."""
        """Called when a lingering processor task finally ends (its slot is free again)."""
        self.lingering: set[asyncio.Task[Any]] = set()
        """Processor tasks that did not stop when cancelled: their jobs' outcomes are recorded, their
        results will be discarded, and each still holds a slot until it ends."""

    def policy(self, spec: ProcessorSpec | None) -> RetryPolicy:
        """The retry policy of a job type: its own override, else ``JOB_RETRY_INTERVALS`` with jitter."""
        if spec is not None and spec.retry is not None:
            return spec.retry
        return RetryPolicy.schedule(self.settings.job_retry_intervals, self.settings.job_retry_jitter)

    async def write_logs(self) -> None:
        """Write processors' log lines as they come (a side task of the worker)."""
        if self.joblog is not None:
            await self.joblog.run()

    async def execute(self, job: RunningJob) -> Outcome | None:
        """Run ``job`` to its outcome (:meth:`run`), then write what it logged and has not been written
        yet, so that the page showing the outcome shows every line."""
        outcome = await self.run(job)
        if self.joblog is not None and job.log_buffer is not None and job.log_buffer.logged:
            await self.joblog.flush(job.id)
        return outcome

    async def run(self, job: RunningJob) -> Outcome | None:
        """Run ``job`` to its outcome; ``None`` when there is nothing to record (its lease was lost).

        A cancellation of the job's task is an outcome only when the worker asked for it (a cancel request,
        a shutdown, a lost lease: ``job.stop_reason``); any other cancellation is re-raised. The time
        limit holds whatever the processor does: see :meth:`_supervise`.
        """
        row = job.row
        spec = registry.get(row["type"])
        timeout = (spec.timeout if spec and spec.timeout else None) or self.settings.job_default_timeout_secs
        job.log.info("job started", max_attempts=row["max_attempts"])
        try:
            if spec is None:
                raise PermanentError(f"no processor for job type {row['type']!r} is installed in this worker")
            model = _parse_input(spec, row)
            result = await self._supervise(spec, job, model, timeout)
            return await self._success(job, result)
        except JobCancelled:
            return self._stopped(job, "stopped by the processor after a cancel request")
        except asyncio.CancelledError:
            if job.stop_reason is None:
                raise
            return self._stopped(job, "stopped after a cancel request")
        except _TimeLimit:
            return self._failure(job, spec, f"took longer than its {timeout:g} s limit", permanent=False)
        except PermanentError as exc:
            return self._failure(job, spec, str(exc) or type(exc).__name__, permanent=True)
        except Exception as exc:
            wait = exc.retry_after if isinstance(exc, RetryableError) else None
            return self._failure(job, spec, describe(exc), permanent=False, retry_after=wait)
        finally:
            self._clear_scratch(job)

    def _clear_scratch(self, job: RunningJob) -> None:
        """Remove the attempt's scratch directory, whatever its outcome (the outputs worth keeping were
        stored by :meth:`_success`; a child stopped past its grace was killed and writes nothing more).
        At once, with no await: a cancel arriving meanwhile could not take the outcome with it, and
        removing a directory costs less than storing the outputs did."""
        path, job.scratch = job.scratch, None
        if path is not None:
            scratch.remove(path)

    async def _supervise(self, spec: ProcessorSpec, job: RunningJob, model: Any, limit: float) -> Any:
        """Run the processor in a task of its own and wait for it at most ``limit`` seconds.

        Past the limit — or when the worker stops the job (its own task is cancelled) — the processor is
        asked to stop (``ctx`` cancel signal, then its task cancelled) and given the cancel grace. The
        outcome is decided then, whatever the processor does afterwards: a processor that swallows the
        cancellation keeps running as a *lingering* task, counted in :attr:`lingering`, holding its slot
        until it really ends, and whatever it returns is discarded (and logged).
        """
        loop = job.task.get_loop() if job.task is not None else asyncio.get_running_loop()
        work = loop.create_task(self._call(spec, job, model), name=f"processor:{job.id_text}")
        try:
            await settled(work, limit)
        except asyncio.CancelledError:
            await self._reap(job, work, job.stop_reason or "cancelled")
            raise
        if work.done():
            if work.cancelled():
                raise RuntimeError("the processor's task was cancelled by the processor itself")
            return work.result()
        job.log.warning("job past its time limit; stopping it", timeout_secs=limit)
        await self._reap(job, work, "timeout")
        raise _TimeLimit

    async def _reap(self, job: RunningJob, work: asyncio.Task[Any], why: str) -> None:
        """Stop a processor's task: signal, cancel, wait the cancel grace; it lingers if still running."""
        job.cancel_event.set()
        work.cancel()
        try:
            await settled(work, self.settings.job_cancel_grace_secs)
        finally:
            if work.done():
                _discard(job, work, why)
            else:
                self._linger(job, work, why)

    def _linger(self, job: RunningJob, work: asyncio.Task[Any], why: str) -> None:
        self.lingering.add(work)
        job.log.error(
            "the processor did not stop when cancelled; it lingers, holding its slot until it ends",
            reason=why,
            lingering=len(self.lingering),
        )

        def settled(task: asyncio.Task[Any]) -> None:
            self.lingering.discard(task)
            _discard(job, task, why)
            self.on_settled()

        work.add_done_callback(settled)

    # --- calling the processor ----------------------------------------------------------------

    async def _call(self, spec: ProcessorSpec, job: RunningJob, model: Any) -> Any:
        row = job.row
        log = job.log
        if self.joblog is not None:
            # This task's context (copied into the tasks and threads the processor starts) names the
            # job, so its logging records reach the job's log; nothing is written unless it logs.
            job.log_buffer = self.joblog.buffer(row["id"], row["attempts"], debug=self.debug)
            current.set(job.log_buffer)
            log = JobLogger(job.log, job.log_buffer)
        if spec.cpu_bound:
            return await self._call_in_process(spec, job, model)
        ctx: JobContext[Any] = JobContext(
            job=row,
            input=model,
            log=log,
            settings=self.settings,
            db=self.app_engine,
            files=self._job_files(job),
            parents=row["parents"] or {},
            cancel_event=job.cancel_event,
            progress=lambda f, m: self.report_progress(job, f, m),
            worker_id=self.worker_id,
        )
        return await spec.func(ctx)

    async def _call_in_process(self, spec: ProcessorSpec, job: RunningJob, model: Any) -> Any:
        """A CPU-bound processor runs in a child process, so the event loop that renews leases (and, in
        the web app, serves pages) never stalls; cancelling this call kills the child."""
        row = job.row
        paths, names = await self._job_files(job).for_process(model, row["parents"] or {})
        out_dir = job.scratch = scratch.make(self.settings.data_dir, row["id"], row["claims"])
        ctx = CpuContext(
            job_id=str(row["id"]),
            attempt=row["attempts"],
            input=model,
            output_dir=out_dir,
            parents=row["parents"] or {},
            file_names=names,
            files=paths,
            now=dbclock.db_time(),
            timezone=await self._owner_zone(row),
        )
        await self.report_progress(job, 0.0, "Working…")
        return await run_in_process(
            spec.func,
            ctx,
            lambda f, m: self.report_progress(job, f, m),
            max_memory_mb=self.settings.cpu_job_max_memory_mb,
            on_log=job.log_buffer.add if job.log_buffer is not None else None,
        )

    async def _owner_zone(self, row: Any) -> str:
        """The job's owner's time zone now (:attr:`CpuContext.timezone`); UTC for a name no picker offers."""
        async with answered_within(self.app_engine.connect(), self.settings.heartbeat_secs) as conn:
            name = (await conn.execute(OWNER_ZONE, {"id": row["user_id"]})).scalar()
        return known_zone(name) or "UTC"

    def _job_files(self, job: RunningJob) -> JobFiles:
        """The attempt's ``ctx.files``: one per attempt, holding the owner's storage limit."""
        if job.files is None:
            job.files = JobFiles(
                self.files,
                self.app_engine,
                job.row,
                limit=self.settings.user_max_upload_bytes,
                retention_days=self.settings.job_retention_days,
                answer_secs=self.settings.heartbeat_secs,
            )
        return job.files

    # --- outcomes -----------------------------------------------------------------------------

    async def _success(self, job: RunningJob, result: Any) -> Outcome:
        row = job.row
        if job.files is not None and job.files.refused is not None:
            # The processor caught the refusal of an output and returned: the job still fails, as its
            # results are incomplete and what it had stored is gone.
            raise PermanentError(job.files.refused)
        if isinstance(result, Result):
            data = dict(result.data or {})
            if result.files:
                files = self._job_files(job)
                refs = []
                for f in result.files:
                    refs.append(await files.save(f.name, source=f.path, content_type=f.content_type))
                data.setdefault("files", refs)
            next_jobs = result.next_jobs
        else:
            data, next_jobs = (result if result is not None else {}), []
        if not isinstance(data, dict):
            data = {"value": data}
        outcome = Outcome(row["id"], "completed", result=result_json(data))
        if next_jobs:
            try:
                outcome.next_jobs = pipelines.plan_next_jobs(row, next_jobs, self.settings)
            except Exception as exc:  # a bad next-jobs plan is the processor's permanent failure
                if isinstance(exc, AppError):
                    job.log.warning("the next jobs were refused", error=first_line(exc))
                else:
                    job.log.error("the next jobs could not be planned", error=describe(exc))
                return self._failure(job, registry.get(row["type"]), next_jobs_refused(exc), permanent=True)
        return outcome

    def _failure(
        self,
        job: RunningJob,
        spec: ProcessorSpec | None,
        error: str,
        *,
        permanent: bool,
        retry_after: float | None = None,
    ) -> Outcome:
        row = job.row
        delay = 0.0
        if not permanent and row["attempts"] < row["max_attempts"]:
            delay = retry_delay(self.policy(spec), row["attempts"], retry_after=retry_after)
        if self.debug:
            job.log.debug(
                "retry decision",
                permanent=permanent,
                attempts=row["attempts"],
                max_attempts=row["max_attempts"],
                delay_secs=round(delay, 3),
                retry_after_secs=retry_after,
            )
        return Outcome(row["id"], "failed", error=cap_text(error), permanent=permanent, delay=delay)

    def blocked(self, job: RunningJob, blocked_secs: float) -> Outcome:
        """The outcome of an attempt whose processor blocked the event loop until the worker had to stop
        without it: a failed attempt (retried with backoff while attempts remain, as any failure), so a
        processor that always blocks cannot hold every worker that claims it for ever. Fenced by the
        claim like every outcome."""
        error = f"the worker had to stop while this job blocked its event loop for {blocked_secs:.0f} s"
        outcome = self._failure(job, registry.get(job.row["type"]), error, permanent=False)
        outcome.pipeline_id = job.row["pipeline_id"]
        outcome.claim = job.row["claims"]
        return outcome

    def _stopped(self, job: RunningJob, cancel_message: str) -> Outcome | None:
        """The outcome of a job stopped early: why it was asked to stop decides (cancel request →
        ``cancelled``; shutdown past the grace → ``released``; lease lost → nothing to record)."""
        if job.stop_reason == "shutdown":
            return job.released("released: the worker shut down before the job finished")
        if job.stop_reason == "lost":
            return None
        return Outcome(job.row["id"], "cancelled", message=cancel_message)

    # --- progress -----------------------------------------------------------------------------

    async def report_progress(self, job: RunningJob, fraction: float | None, message: str | None) -> None:
        """A processor's progress report; written at once unless the last write was very recent."""
        now = time.monotonic()
        job.progress_pending = (fraction, message)
        if now - job.progress_at < PROGRESS_MIN_INTERVAL_SECS:
            return  # coalesced; the latest value is written by the next report or by lease renewal
        await self.flush_progress(job)

    async def flush_progress(self, job: RunningJob) -> None:
        """Write a job's latest pending progress report (called by reports and by lease renewal)."""
        pending, job.progress_pending = job.progress_pending, None
        if pending is None:
            return
        job.progress_at = time.monotonic()
        try:
            # The processor awaits this write: bounded as the completer's, so that a connection gone silent
            # is given up (and dropped from the pool) instead of holding the processor for ever.
            async with answered_within(self.engine.begin(), self.settings.heartbeat_secs) as conn:
                await queue.set_progress(
                    conn, self.worker_id, job.row["id"], pending[0], pending[1], claim=job.row["claims"]
                )
        except Exception as exc:
            if not is_transient(exc):
                raise
            job.log.warning("could not record progress", error=first_line(exc))


async def settled(task: asyncio.Task[Any], seconds: float) -> None:
    """Return when ``task`` is done or after ``seconds``, whichever comes first; cancelling the caller
    leaves ``task`` running. What ``asyncio.wait({task}, timeout=seconds)`` does, at a third of its cost:
    it runs once per job (no set of tasks, no second pass over it). The loop is the task's own: asking for
    the running loop costs a getpid system call on Python 3.11."""
    loop = task.get_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    task.add_done_callback(wake)
    timer = loop.call_later(seconds, wake)
    try:
        await waiter
    finally:
        timer.cancel()
        task.remove_done_callback(wake)


class _TimeLimit(Exception):
    """The processor ran past its time limit (raised only by the executor itself, so that a
    ``TimeoutError`` of the processor's own is not mistaken for it)."""


def _discard(job: RunningJob, work: asyncio.Task[Any], why: str) -> None:
    """A processor task that ended after its job's outcome was decided: log what it left behind."""
    if work.cancelled():
        return
    exc = work.exception()
    if exc is None:
        job.log.warning("late result discarded: the processor returned after its job was stopped", reason=why)
    elif not isinstance(exc, JobCancelled):
        job.log.info("the stopped processor ended with an error", reason=why, error=first_line(exc))


def _parse_input(spec: ProcessorSpec, row: Any) -> Input:
    """The job's input as the processor's model, with references to parents' results resolved first."""
    try:
        data = row["input_data"]
        if row["parents"]:
            data = pipelines.resolve_refs(data, row["parents"])
        elif row["pipeline_id"]:
            data = unwrap_literals(data)  # a literal list's item in a step with no parents
        return spec.parse_input(data)
    except ValidationError as exc:
        # Each bad field said with what filled it (a $ref may have read something of another shape than
        # its field takes). Permanent: the same input fails again.
        fields = pipelines.input_unfit_words(exc.errors(), row["input_data"], spec)
        raise PermanentError(f"{INPUT_UNFIT}{row['type']}: {fields}") from None
