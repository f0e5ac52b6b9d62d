"""The worker's side of live job logs: catching what a processor logs and writing it in batches.

A processor's lines reach a job's :class:`JobLogBuffer` three ways: ``ctx.log`` (a :class:`JobLogger`
around the structlog logger bound to the job), Python ``logging`` anywhere inside the processor's task
(a root handler that finds the job through the :data:`current` context variable, which asyncio copies
into the tasks and ``to_thread`` calls the processor starts), and, for a CPU-bound processor, records
its child process sends over the result pipe (:mod:`app.worker.cpu`).

Adding a line is an append under a lock (callable from any thread); nothing waits for the database.
:class:`JobLogWriter` writes every buffer that has lines at most :data:`FLUSH_SECS` apart, in one
transaction on the worker's own pool (not the lease keeper's connection), and once more when a job ends,
before its outcome is recorded, so the page that shows the outcome shows every line. A job that logs
nothing costs one small object and no write. A buffer keeps at most :data:`app.jobs.joblog.MAX_LINES`
unwritten lines; older ones are counted and end up in the cut marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import traceback
import uuid
from collections import deque
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app import dbclock
from app.db import is_transient
from app.jobs import joblog
from app.jobs.joblog import Line
from app.silence import answered_within, warn_on_close

FLUSH_SECS = 0.5
"""How often buffered lines are written (at most this long after they were logged, plus the write)."""


class JobLogBuffer:
    """Lines of one attempt of one job, not written yet."""

    __slots__ = ("job_id", "attempt", "debug", "logged", "_writer", "_lines", "_dropped", "_queued", "_lock")

    def __init__(self, writer: JobLogWriter, job_id: uuid.UUID, attempt: int, *, debug: bool = False) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.debug = debug
        self._writer = writer
        self._lines: deque[Line] = deque(maxlen=joblog.MAX_LINES)
        self._dropped = 0
        self._queued = False
        self._lock = threading.Lock()
        self.logged = False
        """Whether anything was logged (the job's end then flushes its lines)."""

    def add(self, level: str, message: str) -> None:
        """Keep one line (any thread). Past the bound the oldest unwritten line is dropped and counted."""
        # On the database's clock, as every other time of the job (started, finished, its events): a
        # worker host whose clock is minutes off stamped its lines minutes outside the job's run.
        line = Line(self.job_id, self.attempt, dbclock.db_time(), level, message)
        with self._lock:
            if len(self._lines) == self._lines.maxlen:
                self._dropped += 1
            self._lines.append(line)
            self.logged = True
            if self._queued:
                return
            self._queued = True
        self._writer.mark(self)

    def take(self) -> list[Line]:
        """The unwritten lines (with a cut marker first when some were dropped), emptying the buffer."""
        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
            dropped, self._dropped = self._dropped, 0
            self._queued = False
        if dropped:
            when = lines[0].at if lines else dbclock.db_time()
            marker = Line(self.job_id, self.attempt, when, joblog.CUT, joblog.cut_text(dropped), dropped)
            lines.insert(0, marker)
        return lines


current: ContextVar[JobLogBuffer | None] = ContextVar("jobdesk_job_log", default=None)
"""The log buffer of the job whose processor runs in this context (``None`` elsewhere)."""


class JobLogWriter:
    """Writes buffered job log lines for one worker; :meth:`run` is one of the worker's side tasks."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        log: Any = None,
        flush_secs: float = FLUSH_SECS,
        answer_secs: float | None = None,
    ) -> None:
        self.engine = engine
        self.log = log
        self.flush_secs = flush_secs
        self.answer_secs = answer_secs
        """How long a write waits for its answer, its commit included, before its connection is closed
        (:func:`app.silence.answered_within`; ``None``: no bound). A job's end waits for its lines: on a
        connection gone silent an unbounded write held the job's outcome for ever."""
        self._pending: dict[uuid.UUID, JobLogBuffer] = {}
        self._lock = threading.Lock()
        self._writing = asyncio.Lock()
        install_handler()

    def buffer(self, job_id: uuid.UUID, attempt: int, *, debug: bool = False) -> JobLogBuffer:
        return JobLogBuffer(self, job_id, attempt, debug=debug)

    def mark(self, buf: JobLogBuffer) -> None:
        with self._lock:
            self._pending[buf.job_id] = buf

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_secs)
            if self._pending:
                await self.flush()

    async def flush(self, job_id: uuid.UUID | None = None) -> None:
        """Write the pending lines (of every job, or of ``job_id`` only), after any write in progress —
        so that when a job's flush returns, every line it logged is committed. A failed write is logged
        and its lines are lost: a log must never hold a job up."""
        async with self._writing:  # one write at a time: a job's lines are committed in their order
            with self._lock:
                if job_id is None:
                    bufs = list(self._pending.values())
                    self._pending.clear()
                else:
                    one = self._pending.pop(job_id, None)
                    bufs = [one] if one is not None else []
            lines = [ln for buf in bufs for ln in buf.take()]
            if not lines:
                return
            try:
                on_close = warn_on_close(self.log, "job log", self.answer_secs)
                async with answered_within(self.engine.begin(), self.answer_secs, on_close) as conn:
                    await joblog.write(conn, lines)
            except Exception as exc:
                if self.log is not None:
                    self.log.warning(
                        "could not write job log lines",
                        lines=len(lines),
                        transient=is_transient(exc),
                        error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
                    )


# --- what a processor logs -----------------------------------------------------------------------

_LEVELS = {"debug": "debug", "info": "info", "msg": "info", "warning": "warning", "warn": "warning"}
_LEVELS |= {"error": "error", "exception": "error", "critical": "critical", "fatal": "critical"}


def render(event: Any, args: Iterable[Any] = (), kw: dict[str, Any] | None = None) -> str:
    """A structlog call as one line: the event (``%`` formatted with ``args``), then ``key=value``."""
    text = str(event)
    args = tuple(args)
    if args:
        with contextlib.suppress(Exception):
            text = text % args
    extra = " ".join(f"{k}={v}" for k, v in (kw or {}).items() if k != "exc_info")
    return f"{text} {extra}" if extra else text


class JobLogger:
    """``ctx.log``: the structlog logger bound to the job, whose calls are also kept in the job's log."""

    __slots__ = ("_log", "_buf")

    def __init__(self, log: Any, buf: JobLogBuffer) -> None:
        self._log = log
        self._buf = buf

    def bind(self, **kw: Any) -> JobLogger:
        return JobLogger(self._log.bind(**kw), self._buf)

    def new(self, **kw: Any) -> JobLogger:
        return JobLogger(self._log.new(**kw), self._buf)

    def unbind(self, *keys: str) -> JobLogger:
        return JobLogger(self._log.unbind(*keys), self._buf)

    def _emit(self, method: str, event: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        level = _LEVELS[method]
        if level != "debug" or self._buf.debug:
            text = render(event, args, kw)
            if method == "exception" or kw.get("exc_info"):
                text = f"{text}\n{traceback.format_exc().rstrip()}"
            self._buf.add(level, text)
        return getattr(self._log, method)(event, *args, **kw)

    def debug(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        return self._emit("debug", event, args, kw)

    def info(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        return self._emit("info", event, args, kw)

    msg = info

    def warning(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        return self._emit("warning", event, args, kw)

    warn = warning

    def error(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        return self._emit("error", event, args, kw)

    def exception(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        return self._emit("exception", event, args, kw)

    def critical(self, event: Any = None, *args: Any, **kw: Any) -> Any:
        return self._emit("critical", event, args, kw)

    fatal = critical

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def record_text(record: logging.LogRecord) -> str:
    """A standard-library record as one line: its message, then its traceback if it has one."""
    try:
        text = record.getMessage()
    except Exception:  # a bad format string must not lose the line
        text = str(record.msg)
    if record.exc_info:
        text = f"{text}\n{''.join(traceback.format_exception(*record.exc_info)).rstrip()}"
    return text


class _JobLogHandler(logging.Handler):
    """Root handler: a record logged inside a processor's context goes to its job's log too."""

    def emit(self, record: logging.LogRecord) -> None:
        buf = current.get()
        if buf is None:
            return
        try:
            level = record.levelname.lower()
            if level != "debug" or buf.debug:
                buf.add(level, record_text(record))
        except Exception:
            self.handleError(record)


_handler = _JobLogHandler()


def install_handler() -> None:
    """Put the job log handler on the root logger (once per process)."""
    root = logging.getLogger()
    if _handler not in root.handlers:
        root.addHandler(_handler)
