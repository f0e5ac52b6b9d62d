"""A stopping worker whose event loop does not answer, and processor threads that do not end.

A processor that blocks the worker's event loop (``time.sleep`` or a long C call inside ``async def``)
holds every step of the graceful stop: the loop cannot cancel the job, record its release or close
anything until the processor lets go, however long that is. The **stop watch** looks at the loop from
another thread (:class:`LoopProbe`: a callback posted to it, answered or not); once the stop's budget is
spent (``WORKER_SHUTDOWN_GRACE_SECS``, the cancel grace, :data:`MARGIN_SECS`; at once after a second stop
signal) with the loop silent for :data:`~app.worker.watchdog.STALL_SECS`, it settles every held job
through the queue from its own thread and connection (:func:`hand_back`, each write fenced by the
attempt): a finished job's outcome still waiting for the completer is recorded as it ended; the jobs
whose processor is blocking the loop fail this attempt (so a processor that always blocks is retried
with backoff and fails for good after its attempts, instead of holding every worker that claims it for
ever); the others (buffered, or running beside the culprit) are released, the attempt not counted. The
worker's row is removed, and the caller goes on without the loop: ``jobdesk worker`` exits with
:data:`EXIT_UNCLEAN`, the web process's lifespan stops waiting for its in-app worker (and ``jobdesk
serve`` then exits with it too). A loop that answers is never overtaken: its own steps are bounded.

The stop watch needs the GIL. A processor stuck in a C call that holds it (a catastrophic regular
expression) stops every thread of Python, the watch's too: :class:`LastResort`, armed when the stop
begins, ends the process from ``faulthandler``'s own thread, which needs no GIL.

The in-app worker's loop runs ``asyncio.to_thread`` calls in daemon threads (:class:`DaemonThreadPool`):
a processor stuck in one of them no longer holds the web process's exit (Python joins the threads of
every :class:`~concurrent.futures.ThreadPoolExecutor` at exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import functools
import itertools
import queue as queues
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app import logs
from app.db import create_engine, is_transient
from app.jobs import queue
from app.jobs.queue import Outcome
from app.worker.faults import first_line
from app.worker.watchdog import STALL_SECS

if TYPE_CHECKING:
    from app.worker.runner import Worker

MARGIN_SECS = 1.0
"""Beyond the grace and the cancel grace, what a stopping worker's loop gets before a silent loop is
given up on (the last wait for lingering processor tasks is this long)."""

HAND_BACK_SECS = 5.0
"""The longest the hand-back waits for the database."""

LAST_RESORT_MARGIN_SECS = 5.0
"""Beyond the stop's budget, a stall's length and the hand-back's time, how long no thread of Python may
run before :class:`LastResort` ends the process."""

WATCH_TICK_SECS = 0.1
REARM_SECS = 1.0
"""How often the stop watch pushes the last resort back (each time starts a thread of faulthandler's)."""

EXIT_UNCLEAN = 3
"""``jobdesk worker``'s exit status after a stop that was not clean: the stop watch gave up on a blocked
event loop, or a second stop signal forced the stop (0 is a graceful stop; 1 a worker that died, or
the :class:`LastResort`); ``jobdesk serve``'s too, after such a stop of its in-app worker."""

RELEASED_STUCK = "released: the worker shut down while a processor blocked its event loop"


def stop_budget(worker: Worker) -> float:
    """Seconds a stop may take before a silent loop is given up on."""
    settings = worker.settings
    return settings.worker_shutdown_grace_secs + settings.job_cancel_grace_secs + MARGIN_SECS


class LoopProbe:
    """Whether an event loop still runs its callbacks, asked from another thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, answered_at: float | None = None) -> None:
        """``answered_at``: when the loop is known to have last run a callback (default: now)."""
        self.loop = loop
        self.answered_at = time.monotonic() if answered_at is None else answered_at
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


@dataclass
class HandBack:
    """What :func:`hand_back` did: finished jobs whose outcome it recorded, blocking jobs whose attempt it
    failed, jobs it released, and writes that lost their race (the job was no longer this worker's)."""

    recorded: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0


class StopWatch:
    """A stop that began now: :meth:`stuck` says when its loop is to be given up on."""

    def __init__(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.worker = worker
        self.began = time.monotonic()
        self.deadline = self.began + stop_budget(worker)
        # The loop's last tick is the last time it answered: a loop blocked since before the stop is
        # given up on as soon as the budget allows, not a stall's length later.
        self.probe = LoopProbe(loop, answered_at=worker.watchdog.ticked_at)
        self.forced = False

    def hurry(self) -> None:
        """A second stop request: the budget ends now (a loop that answers is still not overtaken; it
        skips the rest of its grace by itself, :meth:`app.worker.runner.Worker.hurry`)."""
        self.forced = True
        self.deadline = min(self.deadline, time.monotonic())

    def stuck(self) -> bool:
        """Past the budget, with the loop silent for a stall's length (asks the loop again each call)."""
        self.probe.ask()
        return time.monotonic() >= self.deadline and self.probe.silent_secs() >= STALL_SECS

    def give_up(self) -> HandBack:
        """Settle the worker's jobs from this thread (:func:`hand_back`) and log why and how."""
        worker = self.worker
        blocked_secs = time.monotonic() - worker.watchdog.ticked_at
        blocking, where = worker.watchdog.culprits()
        try:
            done = hand_back(worker, blocking={job.id for job in blocking}, blocked_secs=blocked_secs)
        except Exception as exc:
            done = HandBack()
            worker.log.error(
                "could not hand the jobs back; the sweep will rescue them when their leases end",
                error=first_line(exc),
            )
        worker.log.error(
            "the event loop did not stop in time: a processor is blocking it; finished jobs' outcomes "
            "are recorded, the blocking jobs' attempts failed, the other jobs handed back, and the "
            "worker stops without it",
            reason="a second stop signal" if self.forced else "the stop's budget ran out",
            waited_secs=round(time.monotonic() - self.began, 1),
            blocked_secs=round(blocked_secs, 1),
            recorded=done.recorded,
            failed=done.failed,
            released=done.released,
            lost=done.lost,
            jobs=[{"id": job.id_text, "type": str(job.row["type"])} for job in blocking],
            where=where,
        )
        return done


def hand_back(worker: Worker, *, blocking: Collection[uuid.UUID] = (), blocked_secs: float = 0.0) -> HandBack:
    """Settle every job ``worker`` holds through :func:`app.jobs.queue.finish`, from the calling thread,
    with an event loop and a connection of its own (each write fenced by the worker and the claim,
    like the completer's), and remove the worker's row.

    A job whose outcome the completer has not recorded yet gets that outcome (it finished: released, it
    would run again); a job in ``blocking`` (its processor blocks the loop) fails this attempt
    (:meth:`app.worker.executor.Executor.blocked`, ``blocked_secs`` in its error); the rest are
    released, the attempt not counted."""
    finished = dict(worker.completer.unrecorded)  # a copy: the loop's thread may still change it
    outcomes: list[Outcome] = []
    kinds: dict[uuid.UUID, str] = {}
    for job in worker.held.jobs():
        outcome = finished.get(job.id)
        if outcome is not None and job.same_claim(outcome):
            kinds[job.id] = "recorded"
        elif job.id in blocking:
            outcome, kinds[job.id] = worker.executor.blocked(job, blocked_secs), "failed"
        else:
            outcome, kinds[job.id] = job.released(RELEASED_STUCK), "released"
        outcomes.append(outcome)

    async def write() -> set[uuid.UUID]:
        engine = create_engine(
            worker.url,
            pool_size=1,
            pool_timeout=HAND_BACK_SECS,
            application_name=f"jobdesk-hand-back:{worker.id}"[:63],
        )
        try:
            async with asyncio.timeout(HAND_BACK_SECS):
                written = await _finish(engine, worker, outcomes)
                async with engine.begin() as conn:
                    await queue.unregister_worker(conn, worker.id)
            return written
        finally:
            await engine.dispose(close=False)

    written = asyncio.run(write())
    done = HandBack()
    for job_id, kind in kinds.items():
        kind = kind if job_id in written else "lost"
        setattr(done, kind, getattr(done, kind) + 1)
    return done


async def _finish(engine: AsyncEngine, worker: Worker, outcomes: Sequence[Outcome]) -> set[uuid.UUID]:
    """Record ``outcomes`` in one transaction; when that fails for another reason than the database's
    absence, each in a transaction of its own, so one that cannot be recorded does not hold back the
    others (it is left to the sweep). Returns the ids whose write won."""
    try:
        async with engine.begin() as conn:
            return set((await queue.finish(conn, worker.id, outcomes, worker.settings)).status)
    except Exception as exc:
        if len(outcomes) < 2 or is_transient(exc):
            raise
    written: set[uuid.UUID] = set()
    for outcome in outcomes:
        try:
            async with engine.begin() as conn:
                written |= set((await queue.finish(conn, worker.id, [outcome], worker.settings)).status)
        except Exception as exc:
            worker.log.error("could not record an outcome", job_id=str(outcome.job_id), error=first_line(exc))
    return written


class LastResort:
    """The end of the process when no thread of Python can run.

    A processor stuck in a C call that holds the GIL (a regular expression that backtracks for hours, a
    C extension's loop) stops every thread of Python: the stop watch cannot give up on the loop, and the
    process outlives its stop for ever. ``faulthandler``'s timer runs in a thread of its own that needs
    no GIL: :meth:`arm` sets it to the time the stop watch would need to give up and hand the jobs back,
    plus :data:`LAST_RESORT_MARGIN_SECS`, and the stop watch pushes it back on each of its turns while it
    can run (so a stop whose loop answers, however slow, is never cut short). Once it fires, it writes
    every thread's stack to standard error ("Timeout (0:00:14)!") and ends the process with status 1;
    the jobs are left to the rescue sweep, whose leases end.

    The timer is armed in the stop signal's handler, which Python runs only between bytecodes: a C call
    that already holds the GIL when the signal comes keeps even the handler from running (only a
    supervisor's SIGKILL ends that process).
    """

    def __init__(self) -> None:
        try:
            # A file descriptor, not a file object: faulthandler then runs no Python code (a file's
            # fileno() and flush()) and so cannot let another thread in halfway through arming.
            self.fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
        except (AttributeError, ValueError, OSError):
            self.fd = 2
        self.armed_at: float | None = None
        self._disarmed = False
        self._lock = threading.RLock()  # re-entrant: the signal handler may interrupt its own thread

    def arm(self, budget_left: float) -> None:
        """Fire once ``budget_left`` (of the stop's budget), a stall's length, the hand-back's time and a
        margin have passed with no thread of Python running (again: the last call counts)."""
        timeout = max(0.0, budget_left) + STALL_SECS + HAND_BACK_SECS + LAST_RESORT_MARGIN_SECS
        with self._lock:
            if not self._disarmed:
                # Its exit runs no Python: a line waiting for the end of its loop's turn would be lost.
                logs.write_at_once()
                self.armed_at = time.monotonic()
                faulthandler.dump_traceback_later(timeout, exit=True, file=self.fd)

    def disarm(self) -> None:
        """The stop is over and the event loop closed: no more timer."""
        with self._lock:
            self._disarmed = True
            if self.armed_at is not None:
                faulthandler.cancel_dump_traceback_later()
                logs.write_at_once(False)


LAST_RESORT = LastResort()
"""The process's one last resort (faulthandler has one timer per process)."""


class StopControl:
    """The stop watch of a worker, in a daemon thread started with the worker (see
    :func:`watch_in_thread`): :meth:`begin` when the stop begins, :meth:`hurry` on a second stop signal
    (:meth:`on_signal` does both and asks the worker's loop). Each is safe in a signal handler: they set
    events no other code takes, arm a timer and post to the loop.

    ``last_resort``: the process's :data:`LAST_RESORT`, or ``None`` where the worker's stop may not end
    the process (an in-app worker in a process that does not stop on signals, such as a test's)."""

    def __init__(
        self,
        worker: Worker,
        loop: asyncio.AbstractEventLoop,
        then: Callable[[], None] | None = None,
        last_resort: LastResort | None = LAST_RESORT,
    ) -> None:
        self.worker = worker
        self.loop = loop
        self.then = then
        self.last_resort = last_resort
        self.began = threading.Event()
        self.hurried = threading.Event()
        self.gave_up = threading.Event()
        """Set once the watch gave up on the loop and handed the jobs back."""
        self._closed = False

    def begin(self) -> None:
        if not self.began.is_set():
            self._arm(stop_budget(self.worker))
            self.began.set()

    def hurry(self) -> None:
        self.begin()
        self.hurried.set()

    def on_signal(self, _signum: int, count: int) -> None:
        """A stop signal (the target of :meth:`app.worker.signals.StopSignals.forward`): the first asks
        the worker to stop and starts the stop watch (and its last resort); a second skips the rest of
        the grace period (the loop's :meth:`~app.worker.runner.Worker.hurry`, and the watch's budget
        ends at once)."""
        self.begin()
        if count > 1:
            self.hurry()
        with contextlib.suppress(RuntimeError):  # the loop closed: the stop is over
            self.loop.call_soon_threadsafe(self.worker.stop if count == 1 else self.worker.hurry)

    @property
    def unclean(self) -> bool:
        """Whether the stop did not take its course: hurried by a second stop signal, or given up on."""
        return self.hurried.is_set() or self.gave_up.is_set()

    def close(self) -> None:
        """The worker's loop is over (its thread ended): the watch thread ends, and no stop begins."""
        self._closed = True
        self.began.set()

    def run(self) -> None:
        """The thread: wait for the stop, keep the last resort ahead while the worker stops, give up
        on a stuck loop (then call ``then``)."""
        self.began.wait()
        if self._closed:
            return
        watch = StopWatch(self.worker, self.loop)
        self.worker.log.info(
            "stop watch started: a processor blocking the event loop past the budget is given up on",
            budget_secs=round(stop_budget(self.worker), 1),
        )
        while not self.worker.stopped.is_set() and not self._closed:
            if self.hurried.is_set() and not watch.forced:
                watch.hurry()
            if watch.stuck():
                self._arm(0.0)  # the hand-back's own time, from now
                watch.give_up()
                self.gave_up.set()
                if self.then is not None:
                    self.then()
                return
            if self.last_resort is not None:
                armed_at = self.last_resort.armed_at or 0.0
                if time.monotonic() - armed_at >= REARM_SECS or watch.forced and armed_at < watch.deadline:
                    self.last_resort.arm(watch.deadline - time.monotonic())
            time.sleep(WATCH_TICK_SECS)
        # Stopped: the process exits within seconds; the timer, left armed, ends it if it does not (the
        # in-app worker's is disarmed once its loop is closed: the web process may go on for a while).

    def _arm(self, budget_left: float) -> None:
        if self.last_resort is not None:
            self.last_resort.arm(budget_left)


def watch_in_thread(
    worker: Worker,
    loop: asyncio.AbstractEventLoop,
    then: Callable[[], None] | None = None,
    last_resort: LastResort | None = LAST_RESORT,
) -> StopControl:
    """Start a daemon thread that, once the returned control's :meth:`~StopControl.begin` is called (the
    stop began), runs a stop watch: when the loop is stuck, it gives up on it and calls ``then`` (in that
    thread).

    The thread starts now, not when the stop begins: the stop begins in a signal handler, which may
    interrupt the main thread inside ``threading``'s own locks (starting a thread takes one); setting an
    event no other code uses takes none of them."""
    control = StopControl(worker, loop, then, last_resort)
    threading.Thread(target=control.run, name=f"{worker.id}:stop-watch", daemon=True).start()
    return control


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
