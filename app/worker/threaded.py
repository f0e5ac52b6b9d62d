"""The in-app worker (``WORKER_ENABLED`` in ``jobdesk serve``): a :class:`~app.worker.runner.Worker` in a
thread with an event loop of its own, so that a processor that blocks its loop never blocks the web's
pages, and the web's load never delays the worker.

The worker uses its own engines (an engine's connections belong to the loop that opened them); the web
app's lifespan calls :func:`start_in_thread` at start-up and :meth:`ThreadedWorker.stop` (or
:meth:`ThreadedWorker.stop_async`) at shutdown, which stops the worker gracefully and waits for it —
except for a loop a processor blocks past the stop's budget, and for threads a processor is stuck in
(:mod:`app.worker.stuck`).

In a process whose stop signals reach :data:`~app.worker.signals.STOP` (``jobdesk serve``:
:meth:`~app.worker.signals.StopSignals.chain`), the worker follows them as ``jobdesk worker`` does, through the same
:class:`~app.worker.stuck.StopControl`: the first stops it at once (not once the web server has closed
its connections) and arms the last resort, a second skips the rest of the grace period, and
:attr:`ThreadedWorker.unclean` says whether the stop took its course.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import structlog

from app.settings import Settings
from app.worker import stuck
from app.worker.main import loop_factory
from app.worker.runner import Worker
from app.worker.signals import STOP
from app.worker.stuck import DaemonThreadPool, StopControl

log = structlog.get_logger("jobdesk.worker")

START_TIMEOUT_SECS = 30.0
JOIN_STEP_SECS = 0.1


class ThreadedWorker:
    """A worker running in its own thread and event loop. ``worker`` is the
    :class:`~app.worker.runner.Worker` (its ``health()`` is safe to call from any thread); ``error`` is
    what it died of, if it did."""

    def __init__(self, settings: Settings, url: str, **worker_kw: Any) -> None:
        self.settings = settings
        self.url = url
        self.worker_kw = worker_kw
        self.worker: Worker | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._control: StopControl | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="jobdesk-in-app-worker", daemon=True)

    def start(self) -> ThreadedWorker:
        """Start the thread; return once the worker exists (it then connects and starts by itself)."""
        self._thread.start()
        self._ready.wait(START_TIMEOUT_SECS)
        return self

    def done(self) -> bool:
        """Whether the worker has stopped (or died)."""
        return self._ready.is_set() and not self._thread.is_alive()

    def health(self) -> str | None:
        if self.worker is None:
            return "the in-app worker has not started"
        return self.worker.health()

    @property
    def unclean(self) -> bool:
        """Whether its stop did not take its course: a second stop signal hurried it, or the stop watch
        gave up on a loop a processor blocked (``jobdesk serve`` then exits with
        :data:`~app.worker.stuck.EXIT_UNCLEAN`)."""
        return self._control is not None and self._control.unclean

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the worker to stop gracefully and wait for its thread (at most ``timeout`` seconds);
        ``True`` when it ended. A loop a processor blocks past the stop's budget is not waited for: the
        stop watch hands its jobs back from its own thread, and the thread (a daemon) is left behind."""
        control, loop, worker = self._control, self._loop, self.worker
        if control is not None:
            control.begin()  # the budget counts from the first stop (a stop signal's, in jobdesk serve)
        if loop is not None and worker is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                loop.call_soon_threadsafe(worker.stop)
        if self._thread.is_alive():
            self._join(timeout)
        return not self._thread.is_alive()

    def _join(self, timeout: float | None) -> None:
        """Wait for the thread, at most ``timeout`` seconds, and no longer than until the stop watch gave
        up on its loop."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._thread.is_alive():
            step = JOIN_STEP_SECS if end is None else min(JOIN_STEP_SECS, end - time.monotonic())
            if step <= 0:
                return
            self._thread.join(step)
            if self._control is not None and self._control.gave_up.is_set():
                return

    async def stop_async(self) -> bool:
        """:meth:`stop` without blocking the calling event loop."""
        return await asyncio.to_thread(self.stop)

    def _main(self) -> None:
        loop = loop_factory() if loop_factory is not None else asyncio.new_event_loop()
        # Daemon threads for asyncio.to_thread: a processor stuck in one must not hold the web process's
        # exit (Python joins a ThreadPoolExecutor's threads at exit, however long they run).
        loop.set_default_executor(DaemonThreadPool(thread_name_prefix="jobdesk-in-app-thread"))
        try:
            loop.run_until_complete(self._run())
        except BaseException as exc:
            self.error = exc
            log.error("the in-app worker stopped with an error", error=repr(exc))
        finally:
            try:
                _close(loop)
            finally:
                self._ended()
                self._ready.set()

    async def _run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        try:
            self.worker = Worker(self.settings, self.url, **self.worker_kw)
            # The process's last resort only where its stop signals reach the worker: elsewhere (a test)
            # nothing may end the process.
            follows = STOP.catching
            last_resort = stuck.LAST_RESORT if follows else None
            self._control = stuck.watch_in_thread(self.worker, loop, last_resort=last_resort)
            if follows:
                STOP.forward(self._control.on_signal)  # at once for a signal that came before
        finally:
            self._ready.set()
        await self.worker.run()

    def _ended(self) -> None:
        """The loop is closed: no more signals to it, no more stop watch, and no more last resort (nothing
        of the worker's can hold the process now), unless the watch gave up on a loop still blocked."""
        control = self._control
        if control is None:
            return
        STOP.unforward(control.on_signal)
        control.close()
        if control.last_resort is not None and not control.gave_up.is_set():
            control.last_resort.disarm()


LEFTOVERS_SECS = 1.0
"""How long the stopped in-app worker waits for the tasks left in its loop to end once cancelled."""


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Close the worker's loop without waiting for processor work that did not stop: a task that ignores
    its cancellation, a thread (``asyncio.to_thread``) that runs on. ``asyncio.Runner`` waits for both,
    however long they take, and the web process's shutdown waited with it; their jobs' outcomes are
    recorded (or left to the sweep), and what they still do is discarded."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=LEFTOVERS_SECS))
    left = [t for t in tasks if not t.done()]
    if left:
        log.warning("the in-app worker stops with processor tasks that did not end", count=len(left))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()  # shuts the default executor down without waiting for its threads


def start_in_thread(settings: Settings, url: str, **worker_kw: Any) -> ThreadedWorker:
    """Start a worker on ``url`` in a thread of its own; stop it with the handle's ``stop()``."""
    return ThreadedWorker(settings, url, **worker_kw).start()
