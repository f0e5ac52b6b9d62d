"""Logging: structlog for Jobdesk's own events, with the standard library's records (uvicorn, Alembic,
SQLAlchemy) rendered the same way.

Output goes to standard output: one JSON object per line when it is not a terminal (containers, CI,
log shippers), a readable coloured line otherwise. Values bound with ``structlog.contextvars`` (the
web layer binds ``request_id``, the worker ``job_id`` and ``worker_id``) appear on every line logged in
that context.

The chain is kept short because the worker logs on its hot path: level filtering happens before any
processor runs (``make_filtering_bound_logger``), there are no call-site or stack processors, JSON is
encoded by msgspec (several times faster than ``json.dumps``; it comes with Litestar), and the lines a
turn of the event loop writes go out with one ``write`` and one ``flush`` at the end of that turn, however
the stream is buffered (a line written outside an event loop goes out at once, and so does every line
once the stop's last resort may end the process): logging must not be what limits the worker's
throughput.
"""

from __future__ import annotations

import atexit
import json as _json
import logging
import sys
import threading
import time
from asyncio import AbstractEventLoop
from asyncio import events as _events
from collections.abc import Callable
from typing import Any, TextIO

import msgspec
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from app.settings import Settings

LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}

#: Loggers whose names start with this follow ``JOB_WORKER_LOG_LEVEL`` when it is set, so the worker's
#: per-claim detail can be switched on without the web app's debug noise.
WORKER_LOGGER_PREFIX = "jobdesk.worker"


class _LineLogger:
    """structlog output: hands one rendered line to ``sys.stdout`` as it is at write time (:func:`_write`).

    Looking ``sys.stdout`` up on each line (rather than once) keeps loggers cached before a stream swap
    (pytest's capture, a daemon redirect) writing to the live stream instead of a closed one.
    """

    __slots__ = ("name", "_stream")

    def __init__(self, name: str | None = None, stream: TextIO | None = None) -> None:
        self.name = name
        self._stream = stream

    def msg(self, message: str) -> None:
        _write(self._stream or sys.stdout, message + "\n")

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


_PENDING: dict[TextIO, tuple[AbstractEventLoop, list[str]]] = {}
"""Lines written during the current turn of an event loop, by stream, not yet handed to it."""
_PENDING_LOCK = threading.RLock()
"""Guards :data:`_PENDING` and keeps the lines of several threads in the order they were handed over."""
PENDING_MAX_LINES = 256
"""Lines one turn keeps back at most: a turn that writes more (a processor logging in a loop without
awaiting) hands them over in parts of this many, as a stream's own buffer would when full."""
_AT_ONCE = False
"""Every line goes out as it is written (:func:`write_at_once`)."""
_LAST_LOOP: tuple[int, AbstractEventLoop] | None = None
"""The thread that last wrote a line from a running event loop, and that loop."""
EXIT_WAIT_SECS = 2.0
"""How long :func:`hold_for_exit` waits for a line another thread is handing over."""


def write_at_once(on: bool = True) -> None:
    """Hand every line over as it is written, in every thread, not at the end of its loop's turn (until
    called with ``False``). For a process that may be ended by a thread that runs no Python (the stop's
    last resort, :class:`app.worker.stuck.LastResort`): the turn whose end would hand the lines over may
    never end, and no code can hand them over when the process ends. Safe in a signal handler (it only
    sets a flag); lines already waiting go out with the next line written, or at :func:`flush`."""
    global _AT_ONCE
    _AT_ONCE = on


def _write(out: TextIO, text: str) -> None:
    """Hand ``text`` to ``out`` once the current turn of the running event loop is over, together with the
    other lines its callbacks write in that turn (a worker starting and finishing a batch of jobs writes
    two each): one ``write`` and one ``flush``, so one system call, instead of one each. The stream's own
    buffering does not decide this: with ``PYTHONUNBUFFERED`` (container images set it) every ``write``
    is a system call. Where no loop runs in this thread (the command line, processors' threads) the line
    goes out at once, after any lines still waiting for that stream. A line waits at most for the callbacks
    already due, never for I/O (and not at all after :func:`write_at_once`)."""
    global _LAST_LOOP
    if _AT_ONCE:
        loop = None
    else:
        # The thread that wrote last usually writes again from the same loop: a line from it skips asking
        # for the running loop, which on Python 3.11 is a getpid system call (the worker writes two lines
        # per job). A running loop this thread last wrote from is the loop running in this thread, as long
        # as no loop moves to another thread once stopped (none of ours does).
        ident = threading.get_ident()
        last = _LAST_LOOP
        if last is not None and last[0] == ident and last[1].is_running():
            loop = last[1]
        else:
            loop = _events._get_running_loop()
            if loop is not None:
                _LAST_LOOP = (ident, loop)
    with _PENDING_LOCK:
        due = _PENDING.get(out)
        if due is not None and due[0] is loop:
            due[1].append(text)
            if len(due[1]) >= PENDING_MAX_LINES:
                _hand_over(out, due[1])
                due[1].clear()  # the flush already due finds the lines written after these
            return
        # Lines another loop (or one that stopped or closed before its flush ran) left waiting go first.
        earlier = _PENDING.pop(out)[1] if due is not None else []
        if loop is not None:
            try:
                loop.call_soon(_flush, out)
            except RuntimeError:  # the loop is closing
                loop = None
            else:
                _PENDING[out] = (loop, [text])
        if earlier or loop is None:
            _hand_over(out, earlier if loop is not None else [*earlier, text])


def _flush(out: TextIO) -> None:
    with _PENDING_LOCK:
        due = _PENDING.pop(out, None)
        if due is not None and due[1]:
            _hand_over(out, due[1])


def flush() -> None:
    """Hand every waiting line to its stream now (before the process ends without its event loop)."""
    with _PENDING_LOCK:
        for out in list(_PENDING):
            _flush(out)


def hold_for_exit(timeout: float = EXIT_WAIT_SECS) -> None:
    """:func:`flush`, for a caller that ends the process next (``os._exit``, the interpreter's exit), and
    keep the lines of every other thread back until the process has ended: a thread that is handing
    lines over (a processor's, logging while it blocks the loop the stop gave up on) finishes first, and
    none begins, so the output never ends in half a line, and no other thread's line comes after the exit's.
    Waits at most ``timeout`` for that thread (its stream may not take any more: a reader that stopped),
    then flushes without it. The calling thread may still write."""
    if not _PENDING_LOCK.acquire(timeout=timeout):
        return
    for out in list(_PENDING):
        _flush(out)
    # The lock is left held: the process ends with it.


atexit.register(hold_for_exit)  # lines of a loop that stopped before its flush ran, or of one that is stuck


def _hand_over(out: TextIO, lines: list[str]) -> None:
    try:
        try:
            out.write("".join(lines))
        except UnicodeEncodeError:  # a lone surrogate in a readable line: written as its escape
            out.write("".join(lines).encode("utf-8", "backslashreplace").decode("utf-8"))
        out.flush()
    except ValueError:  # closed meanwhile (a test's captured stream, a redirect); nothing left to write to
        pass


class _LineLoggerFactory:
    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def __call__(self, *args: Any) -> _LineLogger:
        name = args[0] if args and isinstance(args[0], str) else None
        return _LineLogger(name, self._stream)


class _LineHandler(logging.Handler):
    """Standard-library handler writing formatted records to ``sys.stdout`` (looked up per record), in
    order with structlog's lines (:func:`_write`)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__()
        self._stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _write(self._stream or sys.stdout, self.format(record) + "\n")
        except Exception:  # a logging failure must never take the caller down
            self.handleError(record)


def _fallback(value: Any) -> Any:
    return repr(value)


def _json_renderer() -> Processor:
    """Render the event dict as one JSON object (keys in insertion order, non-ASCII kept, unknown
    objects as their ``repr`` — as structlog's ``JSONRenderer`` does, only faster)."""
    encode = msgspec.json.Encoder(enc_hook=_fallback).encode

    def render(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> str:
        try:
            return encode(event_dict).decode()
        except (TypeError, ValueError, OverflowError):  # e.g. keys msgspec refuses (tuples): never raise
            # ASCII escapes: a lone surrogate (which msgspec refuses) could not be written to the stream
            return _json.dumps(event_dict, default=repr, ensure_ascii=True, skipkeys=True)

    return render


def _timestamper() -> _Step:
    """``timestamp``: ISO 8601 in UTC with microseconds and ``Z`` (as structlog's ``TimeStamper(fmt="iso",
    utc=True)`` writes it), with the date-and-seconds part formatted once per second rather than per line."""
    cache: list[Any] = [-1, ""]

    def stamp(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        now = time.time()
        second = int(now)
        if second != cache[0]:
            cache[0], cache[1] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        event_dict["timestamp"] = f"{cache[1]}.{int((now - second) * 1_000_000):06d}Z"
        return event_dict

    return stamp


_LEVEL_NAMES = {"warn": "warning", "exception": "error"}
"""Level names of logger methods that are aliases (as structlog's ``add_log_level`` writes them)."""


_Step = Callable[[WrappedLogger, str, EventDict], EventDict]
"""A processor that hands the event dict on (rather than rendering it)."""


def _prepare_lines(stamp: _Step, *, level_filter: _Step | None = None, exceptions: bool = True) -> Processor:
    """What the separate processors did to each of structlog's own lines before rendering, in one call:
    the logger's name, the level filter per logger (when set), the context variables, the level, the
    timestamp and (``exceptions``) the traceback of a line that carries ``exc_info``. The worker writes
    two lines per job at ``INFO``, and a call per processor per line showed in its profile."""
    merge = structlog.contextvars.merge_contextvars
    format_exc = structlog.processors.format_exc_info

    def prepare(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        name = getattr(logger, "name", None)
        if name and "logger" not in event_dict:
            event_dict["logger"] = name
        if level_filter is not None:
            event_dict = level_filter(logger, method_name, event_dict)
        event_dict = merge(logger, method_name, event_dict)
        event_dict["level"] = _LEVEL_NAMES.get(method_name, method_name)
        event_dict = stamp(logger, method_name, event_dict)
        if exceptions and "exc_info" in event_dict:
            event_dict = format_exc(logger, method_name, event_dict)
        return event_dict

    return prepare


def _per_logger_level(base: int, worker: int) -> _Step:
    """Drop events below ``base`` unless they come from a worker logger (then ``worker`` applies)."""

    def _filter(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        level = LEVELS.get(method_name.upper(), 20)
        name = getattr(logger, "name", None) or ""
        threshold = worker if name.startswith(WORKER_LOGGER_PREFIX) else base
        if level < threshold:
            raise structlog.DropEvent
        return event_dict

    return _filter


def configure_logging(settings: Settings, *, stream: TextIO | None = None, json: bool | None = None) -> None:
    """Configure structlog and the standard library's root logger for this process.

    ``LOG_LEVEL`` sets the level; ``JOB_WORKER_LOG_LEVEL``, when set, applies to loggers named
    ``jobdesk.worker…`` instead. ``json`` defaults to "standard output is not a terminal". ``stream``
    (tests) replaces standard output. Safe to call more than once; the last call wins, except for
    loggers already cached by an earlier configuration.
    """
    out = stream
    if json is None:
        json = not (out or sys.stdout).isatty()
    base = LEVELS[settings.log_level]
    worker = LEVELS.get(settings.job_worker_log_level or "", base)
    lowest = min(base, worker)

    stamp = _timestamper()
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        stamp,
    ]
    renderer: Processor
    if json:
        renderer = _json_renderer()
        exc_processors: list[Processor] = [structlog.processors.format_exc_info]
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=out is None and sys.stdout.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
        exc_processors = []

    level_filter = _per_logger_level(base, worker) if worker != base else None
    processors: list[Processor] = [
        _prepare_lines(stamp, level_filter=level_filter, exceptions=bool(exc_processors)),
        renderer,
    ]

    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(lowest),
        logger_factory=_LineLoggerFactory(out),
        cache_logger_on_first_use=True,
    )

    # Standard-library records (uvicorn, Alembic, SQLAlchemy warnings) through the same renderer.
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared, *exc_processors],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = _LineHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _LineHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(base)
    # Alembic announces each of its plugins at INFO when it is imported, and it is imported lazily (by the
    # worker's schema check, after logging is set up): noise at every start, not news.
    logging.getLogger("alembic.runtime.plugins").setLevel(max(base, logging.WARNING))
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
