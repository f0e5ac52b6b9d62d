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
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.db import create_engine
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
    outcomes = [
        Outcome(
            job.id,
            "released",
            message=RELEASED_STUCK,
            pipeline_id=job.row["pipeline_id"],
            attempt=job.row["attempts"],
        )
        for job in jobs
    ]

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


def watch_in_thread(worker: Worker, loop: asyncio.AbstractEventLoop, then: Callable[[], None]) -> None:
    """Start a stop watch in a daemon thread of its own: when the loop is stuck, give up on it and call
    ``then`` (in that thread)."""
    watch = StopWatch(worker, loop)

    def run() -> None:
        while not watch.stuck():
            time.sleep(0.1)
        watch.give_up()
        then()

    threading.Thread(target=run, name=f"{worker.id}:stop-watch", daemon=True).start()
