"""Job types: the processor API — registering a processor, the context it gets, and what it may return.

A processor per ``job.type``, stateless: input from ``input_data``, output to ``result_data``, optionally
next jobs. Adding a job type is one module plus one line in :data:`PROCESSOR_MODULES`::

    # app/processors/greeting.py
    from app.processors import Input, JobContext, processor

    class GreetingInput(Input):
        name: str = Field(title="Name", description="Who to greet")

    @processor("greeting", title="Say hello", description="Greets someone by name.", input=GreetingInput)
    async def greet(ctx: JobContext[GreetingInput]) -> dict:
        await ctx.report_progress(0.5, "Thinking of a greeting")
        return {"message": f"Hello, {ctx.input.name}!"}

A processor is ``async def f(ctx) -> dict | Result | None``. One marked ``cpu_bound=True`` is instead a
plain ``def f(ctx: CpuContext) -> dict | Result | None``, run in a separate process so that the event
loop serving pages and renewing leases never stalls. Raise :class:`PermanentError` for a
failure that retrying cannot fix (bad input, a 4xx from a service); any other exception is a failed
attempt that is retried with backoff while attempts remain.

The registry, :class:`Input`, :class:`NextJob`, :class:`PermanentError` and the input checks live in
:mod:`app.jobs.types` (the queue needs them to validate jobs) and are re-exported here.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

from pydantic import Field

from app.jobs.backoff import RetryPolicy
from app.jobs.file_inputs import widget_of
from app.jobs.types import (
    EmptyInput,
    Input,
    InputModel,
    NextJob,
    PermanentError,
    ProcessorSpec,
    Registry,
    registry,
    validation_error,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.settings import Settings

__all__ = [
    "PROCESSOR_MODULES",
    "CpuContext",
    "EmptyInput",
    "FileId",
    "FileIds",
    "PICTURES",
    "TABLES",
    "Input",
    "InputModel",
    "JobCancelled",
    "JobContext",
    "LongText",
    "NextJob",
    "OutputFile",
    "PermanentError",
    "ProcessorSpec",
    "Registry",
    "Result",
    "RetryableError",
    "processor",
    "registry",
    "validation_error",
    "widget_of",
]

PROCESSOR_MODULES: list[str] = [
    "app.processors.builtin",
    "app.processors.http_request",
    "app.processors.email_send",
    "app.processors.images",
    "app.processors.reports",
    "app.processors.pipeline_templates",
]
"""Modules that register job types when imported. Add one line per new module."""


# --- input schemas ------------------------------------------------------------------------------


LongText = Annotated[str, Field(json_schema_extra={"widget": "textarea"})]
"""Multi-line text: rendered as a ``<textarea>``."""
FileId = Annotated[uuid.UUID, Field(json_schema_extra={"widget": "file"})]
"""An uploaded file's id (``POST /api/files``): rendered as a file picker."""
FileIds = Annotated[list[uuid.UUID], Field(json_schema_extra={"widget": "files"})]
PICTURES: dict[str, Any] = {"accept": "image/*"}
"""``json_schema_extra`` of a file field that takes pictures: the form's ``accept=`` and the check of the
uploaded bytes at submission, on every path (:func:`app.jobs.queue.check_file_owners`)."""
TABLES: dict[str, Any] = {"accept": ".csv,.tsv,.txt,text/csv,text/tab-separated-values,text/plain"}
"""``json_schema_extra`` of a file field that takes a CSV (or other delimited text) file."""
"""Several uploaded files' ids: rendered as a multiple file picker."""


# --- results ------------------------------------------------------------------------------------


@dataclass
class OutputFile:
    """A file a CPU-bound processor wrote under ``ctx.output_dir``; stored and linked in the result."""

    path: Path
    name: str
    content_type: str = "application/octet-stream"


@dataclass
class Result:
    """What a processor returns. ``data`` becomes ``result_data``; ``files`` are stored and listed in
    ``result_data["files"]`` as ``{"file_id", "name", "size", "content_type"}``; ``next_jobs`` are
    created when the completion is recorded."""

    data: dict[str, Any] | None = None
    next_jobs: list[NextJob] = field(default_factory=list)
    files: list[OutputFile] = field(default_factory=list)


class RetryableError(Exception):
    """A failed attempt worth retrying whose message is written for people (a service is down, a
    timeout): stored as the message alone, without the exception's class name or a traceback.
    ``retry_after``: seconds the service asked to wait (its ``Retry-After``); the next attempt waits at
    least that long, within the job type's longest retry delay (:func:`app.jobs.backoff.retry_delay`)."""

    def __init__(self, *args: object, retry_after: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after = retry_after


class JobCancelled(Exception):
    """Raised by :meth:`JobContext.sleep` and :meth:`JobContext.check_cancelled` once a cancel was
    requested; let it propagate and the job ends ``cancelled``."""


# --- context ------------------------------------------------------------------------------------

InputT = TypeVar("InputT", bound=Input)


class JobContext(Generic[InputT]):
    """What an async processor gets.

    Attributes: ``job`` (the claimed row: ``id``, ``type``, ``attempts``, ``max_attempts``, ``user_id``,
    ``pipeline_id``, ``step_key``, ``input_data``…), ``input`` (the validated input model), ``attempt``
    (1-based), ``log`` (a structlog logger bound to the job; its lines, and Python ``logging`` records
    of the processor, are also kept as the job's log, shown live on its page), ``parents`` (``{step key or job id:
    result_data}`` of the jobs this one depends on), ``settings``, ``db`` (the app's pooled engine, for
    processors that use the database), ``files`` (:class:`app.job_files.JobFiles`: read inputs, save outputs),
    ``worker_id`` (the worker running it).

    ``db`` has no bound of its own on a wait for the database's answer, unlike the worker's bookkeeping
    (claims, outcomes, progress, ``files``: :func:`app.silence.answered_within`): a processor's own
    statements may rightly run for minutes (a report, a bulk update), and a bound of a heartbeat would
    cut them. What bounds them is the job's time limit (past it the job fails and the processor is
    cancelled; one still waiting lingers in its slot until the wait ends) and, below it, every pooled
    connection's bound on silence (keepalive, ``TCP_USER_TIMEOUT``: a path that drops packets ends the
    connection). A processor that wants a tighter bound on a block of its own wraps it:
    ``async with answered_within(ctx.db.begin(), seconds) as conn``.
    """

    def __init__(
        self,
        *,
        job: Any,
        input: InputT,
        log: Any,
        settings: Settings,
        db: AsyncEngine | None,
        files: Any,
        parents: dict[str, Any],
        cancel_event: asyncio.Event,
        progress: Callable[[float | None, str | None], Awaitable[None]],
        worker_id: str = "",
    ) -> None:
        self.job = job
        self.worker_id = worker_id
        self.input = input
        self.log = log
        self.settings = settings
        self.db = db
        self.files = files
        self.parents = parents
        self._cancel_event = cancel_event
        self._progress = progress

    @property
    def attempt(self) -> int:
        return int(self.job["attempts"])

    @property
    def cancelled(self) -> bool:
        """True once a cancel (or shutdown past its grace period) was requested: stop soon."""
        return self._cancel_event.is_set()

    def check_cancelled(self) -> None:
        """Raise :class:`JobCancelled` if a cancel was requested."""
        if self._cancel_event.is_set():
            raise JobCancelled()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, returning early by raising :class:`JobCancelled` on a cancel request."""
        try:
            await asyncio.wait_for(self._cancel_event.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            return
        raise JobCancelled()

    async def report_progress(self, fraction: float | None, message: str | None = None) -> None:
        """Record progress (``fraction`` in 0..1) and a short message for the job page; cheap to call
        often (writes are coalesced by the worker)."""
        await self._progress(fraction, message)


@dataclass(frozen=True)
class CpuContext:
    """What a CPU-bound processor gets, in a separate process: picklable, no database access.

    ``input`` is the validated model; :meth:`input_path` gives the bytes of one of the job's files;
    write outputs under ``output_dir`` and return them as :class:`OutputFile`. :attr:`log` (or any
    ``logging`` logger) writes to the job's log.
    """

    job_id: str
    attempt: int
    input: Any
    output_dir: Path
    parents: dict[str, Any] = field(default_factory=dict)
    file_names: dict[str, str] = field(default_factory=dict)
    """``{file id: original name}`` of the files in :attr:`files` (filled by the worker)."""
    files: dict[str, Path] = field(default_factory=dict)
    """``{file id: path}`` of the files this job may read: those its input and its parents' results
    name that belong to the job's owner, resolved by the worker through the owner check before this
    process started (:meth:`app.job_files.JobFiles.for_process`). No other file is reachable by id."""
    now: datetime | None = None
    """When the worker handed this attempt to its process, on the database's clock (as the worker
    measures it: :func:`app.dbclock.db_time`), in UTC: the time a processor stamps on what it makes.
    The child process cannot measure that clock itself, and its host's clock and zone are no one's."""
    timezone: str = "UTC"
    """The job's owner's time zone (an IANA name, from their account, as the worker read it when it handed
    this attempt over): the zone a processor says a time in for its owner to read (a report's "made on")."""

    def input_path(self, file_id: uuid.UUID | str, what: str = "file") -> Path:
        """The bytes of one of the job's files (see :attr:`files`).

        Raises:
            PermanentError: ``file_id`` is not one of them: not a file id, unknown, deleted, or not a
                file of the job's owner (one answer for all, retrying cannot fix it).
        """
        path = self.files.get(str(file_id).lower())
        if path is None or not path.is_file():
            raise PermanentError(
                f"The {what} {str(file_id)[:100]} is not available to this job: it does not exist, it "
                "is no longer stored, or it is not yours. Upload it again."
            )
        return path

    @property
    def log(self) -> logging.Logger:
        """A standard-library logger whose lines (``info`` and above) are kept in the job's log, like
        any ``logging`` call in the processor's process."""
        return logging.getLogger(f"jobdesk.job.{self.job_id}")

    def report_progress(self, fraction: float | None, message: str | None = None) -> None:
        """Report progress (``fraction`` in 0..1) to the job page from the processor's process; sent to
        the worker at most every 0.2 s (later reports replace earlier ones)."""
        global _cpu_progress_at
        if _cpu_progress is None:
            return
        now = time.monotonic()
        if fraction is not None and fraction < 1 and now - _cpu_progress_at < 0.2:
            return
        _cpu_progress_at = now
        _cpu_progress(fraction, message)


_cpu_progress: Callable[[float | None, str | None], None] | None = None
_cpu_progress_at = 0.0


def _set_cpu_progress(send: Callable[[float | None, str | None], None] | None) -> None:
    """Set by :mod:`app.worker.cpu` in a CPU-bound job's process."""
    global _cpu_progress
    _cpu_progress = send


# --- registering ------------------------------------------------------------------------------


def processor(
    type: str,
    *,
    title: str,
    description: str,
    input: InputModel = EmptyInput,
    cpu_bound: bool = False,
    timeout: float | None = None,
    max_attempts: int | None = None,
    retry_intervals: list[float] | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
    jitter: float | None = None,
    diagnostic: bool = False,
    group: str = "General",
    next_types: Sequence[str] = (),
    settings_check: Callable[[dict[str, Any], Any], dict[str, str]] | None = None,
    submit_check: Callable[[dict[str, Any], bool], dict[str, str]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the processor of job type ``type``.

    ``retry_intervals`` (seconds) or ``backoff_base``/``backoff_cap`` (seconds, exponential) override
    ``JOB_RETRY_INTERVALS`` for this type. ``timeout`` is seconds per attempt. ``next_types`` names the
    diagnostic or internal types its processor returns as next jobs for owners who could not submit
    them directly (see :func:`app.jobs.types.may_create_next`). ``settings_check`` checks an input
    against the settings at every submission (see :attr:`app.jobs.types.ProcessorSpec.settings_check`);
    ``submit_check`` refuses at every submission an input that could only fail, knowing whether the job
    will have parents (see :attr:`app.jobs.types.ProcessorSpec.submit_check`).

    Raises:
        TypeError: an async function marked ``cpu_bound``, or a plain one not marked.
        ValueError: the type is already registered.
    """

    # Long only by its keyword list and the nested decorator that turns them into one ProcessorSpec.
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        is_async = inspect.iscoroutinefunction(func)
        if cpu_bound and is_async:
            raise TypeError(
                f"{type}: a cpu_bound processor must be a plain function (it runs in another process)"
            )
        if not cpu_bound and not is_async:
            raise TypeError(f"{type}: a processor must be `async def`, or be marked cpu_bound=True")
        policy = None
        if retry_intervals is not None or backoff_base is not None:
            policy = RetryPolicy(
                intervals=tuple(retry_intervals) if retry_intervals else None,
                base=backoff_base,
                cap=backoff_cap,
                jitter=0.3 if jitter is None else jitter,
            )
        registry.register(
            ProcessorSpec(
                type=type,
                title=title,
                description=description,
                input_model=input,
                func=func,
                cpu_bound=cpu_bound,
                timeout=timeout,
                max_attempts=max_attempts,
                retry=policy,
                diagnostic=diagnostic,
                group=group,
                next_types=tuple(next_types),
                settings_check=settings_check,
                submit_check=submit_check,
            )
        )
        return func

    return decorate
