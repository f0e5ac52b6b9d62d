"""CPU-bound processors run in a separate process, so the event loop that serves pages and
renews leases never stalls.

Each attempt gets its own child process from a ``forkserver`` (fast to start, safe with asyncio, with
the processor modules preloaded), so a cancel or timeout can kill it — a process pool could only abandon
a running task. At most ``os.cpu_count()`` such processes run at once per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import multiprocessing
import os
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from app import processors
from app.processors import CpuContext, PermanentError

_ctx = multiprocessing.get_context("forkserver")
_ctx.set_forkserver_preload(
    ["app.processors", "app.processors.builtin", "app.processors.images", "app.processors.reports"]
)
# Children import the processor's own module; make the parent's import path theirs (tests, plug-ins).
_slots: asyncio.Semaphore | None = None


class ProcessFailure(Exception):
    """The processor raised in its process; ``str()`` is ``"<ExceptionType>: <message>"`` and
    ``traceback_text`` the child's formatted traceback."""

    def __init__(self, message: str, traceback_text: str) -> None:
        super().__init__(message)
        self.traceback_text = traceback_text


def _child(conn: Any, module: str, qualname: str, ctx: CpuContext) -> None:
    processors._set_cpu_progress(lambda fraction, message: conn.send(("progress", fraction, message)))
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
        result = target(ctx)
        conn.send(("ok", result))
    except BaseException as exc:  # report everything, including SystemExit, to the parent
        with contextlib.suppress(Exception):
            conn.send(
                (
                    "error",
                    type(exc).__name__,
                    str(exc),
                    traceback.format_exc(),
                    isinstance(exc, PermanentError),
                )
            )
    finally:
        conn.close()


def _semaphore() -> asyncio.Semaphore:
    global _slots
    if _slots is None:
        _slots = asyncio.Semaphore(max(1, os.cpu_count() or 1))
    return _slots


async def run_in_process(
    func: Any,
    ctx: CpuContext,
    on_progress: Callable[[float | None, str | None], Awaitable[None]] | None = None,
) -> Any:
    """Run ``func(ctx)`` in a child process and return its result; ``on_progress`` receives the
    processor's :meth:`CpuContext.report_progress` calls.

    Cancelling the awaiting task kills the child (used for cancel requests and timeouts).

    Raises:
        PermanentError: the processor raised one.
        ProcessFailure: the processor raised anything else.
        RuntimeError: the child died without answering (killed, out of memory, crashed).
    """
    async with _semaphore():
        loop = asyncio.get_running_loop()
        parent, child = _ctx.Pipe(duplex=False)
        proc = _ctx.Process(target=_child, args=(child, func.__module__, func.__qualname__, ctx), daemon=True)
        await loop.run_in_executor(None, proc.start)
        child.close()
        readable = asyncio.Event()
        loop.add_reader(parent.fileno(), readable.set)
        message: Any = None
        try:
            while message is None:
                await readable.wait()
                readable.clear()
                try:
                    while parent.poll():
                        item = parent.recv()
                        if item[0] == "progress":
                            if on_progress is not None:
                                await on_progress(item[1], item[2])
                            continue
                        message = item
                        break
                except (EOFError, OSError):
                    break  # the child died without a result
        except asyncio.CancelledError:
            proc.kill()
            raise
        finally:
            loop.remove_reader(parent.fileno())
            parent.close()
            await loop.run_in_executor(None, proc.join, 10)
        if message is None:
            raise RuntimeError(f"the processor's process ended without a result (exit code {proc.exitcode})")
        if message[0] == "ok":
            return message[1]
        _, name, text, tb, permanent = message
        if permanent:
            raise PermanentError(text)
        raise ProcessFailure(f"{name}: {text}", tb)
