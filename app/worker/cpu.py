"""CPU-bound processors run in a separate process, so the event loop that serves pages and
renews leases never stalls.

Each attempt gets its own child process from a ``forkserver`` (fast to start, safe with asyncio, with
the processor modules preloaded), so a cancel or timeout can kill it — a process pool could only abandon
a running task. At most ``os.cpu_count()`` such processes run at once per event loop (the slots are kept
per loop: an asyncio primitive belongs to the loop that first used it, and the in-app worker runs its
own loop in a thread).

A child ignores SIGINT and SIGTERM (a Ctrl+C, a stop sent to every process of the service): it stops
when the worker kills it.

Each child's address space is capped (``CPU_JOB_MAX_MEMORY_MB``, through ``RLIMIT_AS``), so one large
file cannot take the host's memory. A child that runs out — a ``MemoryError``, or killed by the kernel —
is a permanent failure saying the file is too large to process; a child that ends without sending a
result (it exited by itself, or its result could not be sent back) is a failure that says so.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.util
import os
import resource
import signal
import threading
import traceback
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from app import processors
from app.processors import CpuContext, PermanentError

_ctx = multiprocessing.get_context("forkserver")
_ctx.set_forkserver_preload(
    ["app.processors", "app.processors.builtin", "app.processors.images", "app.processors.reports"]
)
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()

_live: set[Any] = set()
"""Children not yet seen to end. Killed at the process's exit: multiprocessing ends a daemon child then
with SIGTERM, which they ignore, and would wait for each for ever."""


def _kill_live() -> None:
    for proc in list(_live):
        with contextlib.suppress(Exception):
            proc.kill()


# Registered after multiprocessing's own exit function (imported above), so run before it.
atexit.register(_kill_live)

EXIT_OUT_OF_MEMORY = 75
"""Exit code of a child that ran out of memory and could not even report it."""
EXIT_UNSENDABLE = 76
"""Exit code of a child whose result and error report could not be sent back."""


class ProcessFailure(Exception):
    """The processor raised in its process; ``str()`` is ``"<ExceptionType>: <message>"`` and
    ``traceback_text`` the child's formatted traceback."""

    def __init__(self, message: str, traceback_text: str) -> None:
        super().__init__(message)
        self.traceback_text = traceback_text


def too_large(max_memory_mb: int) -> PermanentError:
    cap = f"its limit of {max_memory_mb} MB" if max_memory_mb else "the memory available"
    return PermanentError(
        f"The file is too large to process: the job needed more memory than {cap} "
        "(CPU_JOB_MAX_MEMORY_MB). Try a smaller file."
    )


def _limit_memory(max_memory_mb: int) -> None:
    if max_memory_mb > 0:
        cap = max_memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


class _PipeLogHandler(logging.Handler):
    """In the child: each log record goes to the parent as a ``("log", level, text)`` message, which
    the worker keeps in the job's log (:mod:`app.worker.joblog`)."""

    def __init__(self, send: Any) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text = f"{text}\n{''.join(traceback.format_exception(*record.exc_info)).rstrip()}"
            self._send(("log", record.levelname.lower(), text[:100_000]))
        except Exception:
            self.handleError(record)


def _child_logging(conn: Any) -> Any:
    """Route the child's logging (``ctx.log`` and any ``logging`` logger) to the parent; returns the
    locked ``send`` that progress reports share (a thread of the processor may log too)."""
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            conn.send(message)

    root = logging.getLogger()
    root.handlers[:] = [_PipeLogHandler(send)]
    root.setLevel(logging.INFO)
    return send


def _child(conn: Any, module: str, qualname: str, ctx: CpuContext, max_memory_mb: int) -> None:
    """The child's body. Whatever happens, it sends exactly one final message or exits with a code
    that says why it could not (the parent maps both to a clear error)."""
    # The worker decides when this process stops: it kills it on a cancel, a timeout, or past the
    # shutdown grace. A Ctrl+C reaches the terminal's whole process group, and a service manager's stop
    # every process of the service: either ended the job at once, a failed attempt, while the worker
    # itself would have let it finish within the grace.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    code = 0
    try:
        _limit_memory(max_memory_mb)
        send = _child_logging(conn)
        processors._set_cpu_progress(lambda fraction, message: send(("progress", fraction, message)))
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
        message: Any = ("ok", target(ctx))
        conn.send(message)
    except MemoryError:
        message = None  # free what we can before trying to say so
        code = _send_quietly(conn, ("memory",), EXIT_OUT_OF_MEMORY)
    except BaseException as exc:  # report everything, including SystemExit, to the parent
        report = ("error", type(exc).__name__, str(exc)[:100_000], traceback.format_exc()[-100_000:])
        code = _send_quietly(conn, (*report, isinstance(exc, PermanentError)), EXIT_UNSENDABLE)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    if code:
        os._exit(code)


def _send_quietly(conn: Any, message: tuple[Any, ...], failure_code: int) -> int:
    """Send ``message``; the exit code to end with (0 when it was sent)."""
    try:
        conn.send(message)
    except MemoryError:
        return EXIT_OUT_OF_MEMORY
    except BaseException:
        return failure_code
    return 0


def _semaphore() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _slots.get(loop)
    if slots is None:
        slots = _slots[loop] = asyncio.Semaphore(max(1, os.cpu_count() or 1))
    return slots


async def run_in_process(
    func: Any,
    ctx: CpuContext,
    on_progress: Callable[[float | None, str | None], Awaitable[None]] | None = None,
    *,
    max_memory_mb: int = 0,
    on_log: Callable[[str, str], None] | None = None,
) -> Any:
    """Run ``func(ctx)`` in a child process and return its result; ``on_progress`` receives the
    processor's :meth:`CpuContext.report_progress` calls, ``on_log`` its log records as ``(level,
    text)``. ``max_memory_mb`` caps the child's address space (0: no cap).

    Cancelling the awaiting task kills the child (used for cancel requests and timeouts).

    Raises:
        PermanentError: the processor raised one, or the child ran out of memory.
        ProcessFailure: the processor raised anything else.
        RuntimeError: the child ended without a result (crashed, exited by itself, result not sendable).
    """
    async with _semaphore():
        loop = asyncio.get_running_loop()
        parent, child = _ctx.Pipe(duplex=False)
        proc = _ctx.Process(
            target=_child, args=(child, func.__module__, func.__qualname__, ctx, max_memory_mb), daemon=True
        )
        _live.add(proc)
        starting = loop.run_in_executor(None, proc.start)
        try:
            # A cancel while the child starts (in a thread, which goes on regardless) must still kill it:
            # the start is waited for, then the child is killed below.
            await asyncio.shield(starting)
            child.close()
            message = await _receive(loop, parent, on_progress, on_log)
        except asyncio.CancelledError:
            await _settled(starting)
            if proc.pid is not None:
                proc.kill()
            raise
        finally:
            child.close()
            parent.close()
            if proc.pid is not None:
                await loop.run_in_executor(None, proc.join, 10)
            if proc.pid is None or proc.exitcode is not None:
                _live.discard(proc)
    return _result(message, proc.exitcode, max_memory_mb)


async def _settled(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, whatever it raises and however often the waiting task is cancelled
    meanwhile: a child starting in a thread must have started before it can be killed (a start takes
    milliseconds)."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(future)


async def _receive(
    loop: asyncio.AbstractEventLoop,
    parent: Any,
    on_progress: Callable[[float | None, str | None], Awaitable[None]] | None,
    on_log: Callable[[str, str], None] | None = None,
) -> Any:
    """The child's final message (``None`` when it ended without one), passing progress and log
    records on."""
    readable = asyncio.Event()
    loop.add_reader(parent.fileno(), readable.set)
    try:
        while True:
            await readable.wait()
            readable.clear()
            try:
                while parent.poll():
                    item = parent.recv()
                    if item[0] == "log":
                        if on_log is not None:
                            on_log(item[1], item[2])
                        continue
                    if item[0] != "progress":
                        return item
                    if on_progress is not None:
                        await on_progress(item[1], item[2])
            except (EOFError, OSError):
                return None  # the child died without a result
    finally:
        loop.remove_reader(parent.fileno())


def _result(message: Any, exitcode: int | None, max_memory_mb: int) -> Any:
    if message is None:
        raise _no_result(exitcode, max_memory_mb)
    if message[0] == "ok":
        return message[1]
    if message[0] == "memory":
        raise too_large(max_memory_mb)
    _, name, text, tb, permanent = message
    if name == "MemoryError":
        raise too_large(max_memory_mb)
    if name == "SystemExit":
        raise ProcessFailure(
            f"the processor called sys.exit({text}) instead of returning a result or raising an error", tb
        )
    if permanent:
        raise PermanentError(text)
    raise ProcessFailure(f"{name}: {text}", tb)


def _no_result(exitcode: int | None, max_memory_mb: int) -> Exception:
    """The error for a child that ended without a final message."""
    if exitcode == EXIT_OUT_OF_MEMORY or exitcode == -signal.SIGKILL:
        # SIGKILL that we did not send: the kernel's out-of-memory killer is by far the likeliest sender
        return too_large(max_memory_mb)
    if exitcode == EXIT_UNSENDABLE:
        return RuntimeError(
            "the processor finished, but neither its result nor its error could be sent back from its "
            "process (is the result too large, or not picklable?)"
        )
    if exitcode == 0:
        return RuntimeError(
            "the processor's process exited without returning a result (exit code 0): the processor "
            "ended its process itself (os._exit or similar) instead of returning"
        )
    return RuntimeError(f"the processor's process ended without a result (exit code {exitcode})")
