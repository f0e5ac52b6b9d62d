"""Job types: the processor registry, the context a processor gets, and what it may return.

Seed 000 §8 (a processor per ``job.type``, stateless, input from ``input_data``, output to
``result_data``, optional next jobs) and issue 4 §1. Adding a job type is one module plus one line in
:data:`PROCESSOR_MODULES`::

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
loop serving pages and renewing leases never stalls (issue 4 §1). Raise :class:`PermanentError` for a
failure that retrying cannot fix (bad input, a 4xx from a service); any other exception is a failed
attempt that is retried with backoff while attempts remain.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import BadInput
from app.jobs.backoff import RetryPolicy

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.settings import Settings

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


class Input(BaseModel):
    """Base class of every processor's input schema; unknown fields are refused (a typo is an error).

    Field ``title``/``description``/default drive the generated web form (issue 6 §2). Use the
    annotated types below for form widgets that a plain type cannot express.
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class EmptyInput(Input):
    """For job types that take no input."""


LongText = Annotated[str, Field(json_schema_extra={"widget": "textarea"})]
"""Multi-line text: rendered as a ``<textarea>``."""
FileId = Annotated[uuid.UUID, Field(json_schema_extra={"widget": "file"})]
"""An uploaded file's id (``POST /api/files``): rendered as a file picker."""
FileIds = Annotated[list[uuid.UUID], Field(json_schema_extra={"widget": "files"})]
"""Several uploaded files' ids: rendered as a multiple file picker."""


def widget_of(schema: Any) -> str | None:
    """The ``widget`` hint (``"textarea"``, ``"file"``, ``"files"``) of a field's JSON schema, also when it
    is nested in ``anyOf``/``oneOf``/``allOf`` (an optional ``FileId | None`` field)."""
    if isinstance(schema, dict):
        if isinstance(schema.get("widget"), str):
            return schema["widget"]
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in schema.get(key) or []:
                found = widget_of(sub)
                if found:
                    return found
    return None


# --- results ------------------------------------------------------------------------------------


@dataclass
class NextJob:
    """A job a processor asks to create when it completes (seed 000 §8; issue 5 §2).

    It joins the pipeline of the creating job (one is created if there is none) and belongs to the
    creating job's owner (case C20). ``depends_on`` holds ``key`` values of other next jobs from the
    same result and/or ids of jobs already in the pipeline; the graph is checked for cycles (case C09).
    """

    type: str
    input_data: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    depends_on: list[str | uuid.UUID] = field(default_factory=list)
    requires_approval: bool = False
    title: str | None = None
    priority: int = 0


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


class PermanentError(Exception):
    """Fail the job now, without retries (issue 3 §4): the input is wrong, or a service said no (4xx)."""


class RetryableError(Exception):
    """A failed attempt worth retrying whose message is written for people (a service is down, a
    timeout): stored as the message alone, without the exception's class name or a traceback."""


class JobCancelled(Exception):
    """Raised by :meth:`JobContext.sleep` and :meth:`JobContext.check_cancelled` once a cancel was
    requested; let it propagate and the job ends ``cancelled``."""


# --- context ------------------------------------------------------------------------------------

InputT = TypeVar("InputT", bound=Input)


class JobContext(Generic[InputT]):
    """What an async processor gets (issue 4 §1).

    Attributes: ``job`` (the claimed row: ``id``, ``type``, ``attempts``, ``max_attempts``, ``user_id``,
    ``pipeline_id``, ``step_key``, ``input_data``…), ``input`` (the validated input model), ``attempt``
    (1-based), ``log`` (a structlog logger bound to the job), ``parents`` (``{step key or job id:
    result_data}`` of the jobs this one depends on), ``settings``, ``db`` (the app's pooled engine, for
    processors that use the database), ``files`` (:class:`app.files.JobFiles`: read inputs, save outputs),
    ``worker_id`` (the worker running it).
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

    ``input`` is the validated model; :meth:`input_path` gives an uploaded file's bytes on disk;
    write outputs under ``output_dir`` and return them as :class:`OutputFile`.
    """

    job_id: str
    attempt: int
    input: Any
    files_dir: Path
    output_dir: Path
    parents: dict[str, Any] = field(default_factory=dict)
    file_names: dict[str, str] = field(default_factory=dict)
    """``{file id: original name}`` of the uploaded files named in ``input`` (filled by the worker)."""

    def input_path(self, file_id: uuid.UUID | str) -> Path:
        return self.files_dir / str(file_id)

    def report_progress(self, fraction: float | None, message: str | None = None) -> None:
        """Report progress (``fraction`` in 0..1) to the job page from the processor's process; sent to
        the worker at most every 0.2 s (later reports replace earlier ones)."""
        import time

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


# --- registry -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessorSpec:
    """A registered job type. ``timeout`` is seconds per attempt (``None``: ``JOB_DEFAULT_TIMEOUT_SECS``);
    ``max_attempts``/``retry`` override the global retry settings; ``diagnostic`` types are shown only to
    admins (issue 6 §1); ``group`` groups the catalogue."""

    type: str
    title: str
    description: str
    input_model: type[Input]
    func: Callable[..., Any]
    cpu_bound: bool = False
    timeout: float | None = None
    max_attempts: int | None = None
    retry: RetryPolicy | None = None
    diagnostic: bool = False
    group: str = "General"

    def validate_input(self, data: dict[str, Any], *, field_prefix: str = "input_data") -> dict[str, Any]:
        """Validate ``data`` against the input schema; return it normalised (defaults filled, JSON types).

        Raises:
            BadInput: one entry per bad field, keyed ``input_data.<field path>``.
        """
        try:
            model = self.input_model.model_validate(data)
        except ValidationError as exc:
            raise validation_error(exc, field_prefix) from None
        return model.model_dump(mode="json")

    def parse_input(self, data: dict[str, Any]) -> Input:
        return self.input_model.model_validate(data)


def validation_error(exc: ValidationError, prefix: str) -> BadInput:
    """A pydantic ``ValidationError`` as :class:`BadInput` with dotted field paths under ``prefix``."""
    errors: dict[str, str] = {}
    for err in exc.errors():
        path = prefix
        for part in err["loc"]:
            path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}"
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "is not a field of this job type"
        elif err["type"] == "missing":
            message = "is required"
        errors.setdefault(path, message[0].lower() + message[1:] if message else message)
    first_path, first_msg = next(iter(errors.items()))
    return BadInput(f"{first_path}: {first_msg}", errors=errors)


class Registry:
    """Job types by name. Modules in :data:`PROCESSOR_MODULES` are imported on first use."""

    def __init__(self) -> None:
        self._specs: dict[str, ProcessorSpec] = {}
        self._loaded = False
        self._lock = threading.Lock()

    def register(self, spec: ProcessorSpec) -> None:
        existing = self._specs.get(spec.type)
        if existing is not None and existing.func is not spec.func:
            raise ValueError(f"job type {spec.type!r} is registered twice")
        self._specs[spec.type] = spec

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if not self._loaded:
                for module in [*PROCESSOR_MODULES, *_extra_modules()]:
                    importlib.import_module(module)
                self._loaded = True

    def get(self, type_: str) -> ProcessorSpec | None:
        self._load()
        return self._specs.get(type_)

    def names(self) -> list[str]:
        self._load()
        return list(self._specs)

    def all(self) -> list[ProcessorSpec]:
        self._load()
        return list(self._specs.values())


def _extra_modules() -> list[str]:
    """``JOBDESK_PROCESSOR_MODULES``: modules with your own job types, loaded without editing Jobdesk."""
    import os

    return [m.strip() for m in os.environ.get("JOBDESK_PROCESSOR_MODULES", "").split(",") if m.strip()]


registry = Registry()


def processor(
    type: str,
    *,
    title: str,
    description: str,
    input: type[Input] = EmptyInput,
    cpu_bound: bool = False,
    timeout: float | None = None,
    max_attempts: int | None = None,
    retry_intervals: list[float] | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
    jitter: float | None = None,
    diagnostic: bool = False,
    group: str = "General",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the processor of job type ``type``.

    ``retry_intervals`` (seconds) or ``backoff_base``/``backoff_cap`` (seconds, exponential) override
    ``JOB_RETRY_INTERVALS`` for this type (issue 3 §5). ``timeout`` is seconds per attempt.

    Raises:
        TypeError: an async function marked ``cpu_bound``, or a plain one not marked.
        ValueError: the type is already registered.
    """

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
            )
        )
        return func

    return decorate
