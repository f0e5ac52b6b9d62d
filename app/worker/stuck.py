"""A stopping worker whose event loop does not answer, and processor threads that do not end.

A processor that blocks the worker's event loop (``time.sleep`` or a long C call inside ``async def``)
holds every step of the graceful stop: the loop cannot cancel the job, record its release or close
anything until the processor lets go, however long that is. The **stop watch** looks at the loop from
another thread (:class:`LoopProbe`: a callback posted to it, answered or not); once the stop's budget is
spent (``WORKER_SHUTDOWN_GRACE_SECS``, the cancel grace, :data:`MARGIN_SECS`) with the loop silent for
:data:`~app.worker.watchdog.STALL_SECS`, it hands every held job back through the queue from its own
thread (:func:`hand_back`: ``released`` with its event, as a graceful stop would, the worker's row
removed), and the caller goes on without the loop: ``jobdesk worker`` exits, the web process's lifespan
stops waiting for its in-app worker. A loop that answers is never overtaken: its own steps are bounded.

The in-app worker's loop runs ``asyncio.to_thread`` calls in daemon threads (:class:`DaemonThreadPool`):
a processor stuck in one of them no longer holds the web process's exit (Python joins the threads of
every :class:`~concurrent.futures.ThreadPoolExecutor` at exit).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import queue as queues
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.db import create_engine
from app.jobs import queue
from app.worker.faults import first_line
from app.worker.watchdog import STALL_SECS

if TYPE_CHECKING:
    from app.worker.runner import Worker

MARGIN_SECS = 1.0
"""Beyond the grace and the cancel grace, what a stopping worker's loop gets before a silent loop is
given up on (the last wait for lingering processor tasks is this long)."""

HAND_BACK_SECS = 5.0
"""The longest the hand-back waits for the database."""

RELEASED_STUCK = "released: the worker shut down while a processor blocked its event loop"


def stop_budget(worker: Worker) -> float:
    """Seconds a stop may take before a silent loop is given up on."""
    settings = worker.settings
    return settings.worker_shutdown_grace_secs + settings.job_cancel_grace_secs + MARGIN_SECS


class LoopProbe:
    """Whether an event loop still runs its callbacks, asked from another thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.answered_at = time.monotonic()
        self._asked = False

    def ask(self) -> None:
        """Post a callback to the loop (one at a time); a closed loop counts as answering."""
        if self._asked:
            return
        self._asked = True
        try:
            self.loop.call_soon_threadsafe(self._answer)
        except RuntimeError:  # closed: nothing of it is left to wait for
            self._answer()

    def silent_secs(self) -> float:
        return time.monotonic() - self.answered_at

    def _answer(self) -> None:
        self.answered_at = time.monotonic()
        self._asked = False


class StopWatch:
    """A stop that began now: :meth:`stuck` says when its loop is to be given up on."""

    def __init__(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.worker = worker
        self.deadline = time.monotonic() + stop_budget(worker)
        self.probe = LoopProbe(loop)

    def stuck(self) -> bool:
        """Past the budget, with the loop silent for a stall's length (asks the loop again each call)."""
        self.probe.ask()
        return time.monotonic() >= self.deadline and self.probe.silent_secs() >= STALL_SECS

    def give_up(self) -> int:
        """Hand the worker's jobs back and log why; returns how many were released."""
        worker = self.worker
        stall = worker.watchdog.current
        try:
            released = hand_back(worker)
        except Exception as exc:
            released = 0
            worker.log.error(
                "could not hand the jobs back; the sweep will rescue them when their leases end",
                error=first_line(exc),
            )
        worker.log.error(
            "the event loop did not stop in time: a processor is blocking it; its jobs are handed back "
            "and the worker stops without it",
            waited_secs=round(stop_budget(worker), 1),
            released=released,
            jobs=stall.jobs if stall is not None else [],
            where=stall.where if stall is not None else "",
        )
        return released


def hand_back(worker: Worker) -> int:
    """Release every job ``worker`` holds through :func:`app.jobs.queue.finish` (each write fenced by the
    worker and the attempt, like the completer's) and remove its row, from the calling thread, with an
    event loop and a connection of its own; returns how many were released."""
    jobs = worker.held.jobs()
    outcomes = [job.released(RELEASED_STUCK) for job in jobs]

    async def write() -> int:
        engine = create_engine(
            worker.url,
            pool_size=1,
            pool_timeout=HAND_BACK_SECS,
            application_name=f"jobdesk-hand-back:{worker.id}"[:63],
        )
        try:
            async with asyncio.timeout(HAND_BACK_SECS), engine.begin() as conn:
                report = await queue.finish(conn, worker.id, outcomes, worker.settings)
                await queue.unregister_worker(conn, worker.id)
            return len(outcomes) - len(report.lost)
        finally:
            await engine.dispose(close=False)

    return asyncio.run(write())


def watch_in_thread(
    worker: Worker, loop: asyncio.AbstractEventLoop, then: Callable[[], None]
) -> threading.Event:
    """Start a daemon thread that, once the returned event is set (the stop began), runs a stop watch:
    when the loop is stuck, it gives up on it and calls ``then`` (in that thread).

    The thread starts now, not when the stop begins: the stop begins in a signal handler, which may
    interrupt the main thread inside ``threading``'s own locks (starting a thread takes one); setting an
    event no other code uses takes none of them."""
    began = threading.Event()

    def run() -> None:
        began.wait()
        watch = StopWatch(worker, loop)
        while not watch.stuck():
            time.sleep(0.1)
        watch.give_up()
        then()

    threading.Thread(target=run, name=f"{worker.id}:stop-watch", daemon=True).start()
    return began


class DaemonThreadPool(ThreadPoolExecutor):
    """A thread pool whose threads are daemons, left behind at the interpreter's exit: the default
    executor of the in-app worker's loop. It is a :class:`ThreadPoolExecutor` only for
    ``loop.set_default_executor``, which takes nothing else; it uses none of its machinery."""

    def __init__(self, max_workers: int = 32, thread_name_prefix: str = "jobdesk-thread") -> None:
        super().__init__(max_workers=1, thread_name_prefix=thread_name_prefix)
        self._limit = max_workers
        self._prefix = thread_name_prefix
        self._calls: queues.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queues.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._started: list[threading.Thread] = []
        self._names = itertools.count()
        self._closed = False
        self._guard = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._guard:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future[Any] = Future()
            self._calls.put((future, functools.partial(fn, *args, **kwargs)))
            if not self._idle.acquire(blocking=False) and len(self._started) < self._limit:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._prefix}_{next(self._names)}", daemon=True
                )
                thread.start()
                self._started.append(thread)
            return future

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, call = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, call
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._guard:
            self._closed = True
            threads = list(self._started)
        if cancel_futures:
            while True:
                try:
                    item = self._calls.get_nowait()
                except queues.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._calls.put(None)
        if wait:
            for thread in threads:
                thread.join()
