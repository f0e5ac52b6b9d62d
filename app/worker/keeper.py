"""The lease keeper: a thread of its own, with its own event loop and database connection, that keeps the
worker's leases and heartbeat going whatever its processors do to the worker's event loop.

* **renewal** — every ``heartbeat_secs`` it renews the lease of every held job in one statement and
  refreshes the worker's row (heartbeat, health), then tells the worker's loop which jobs were lost
  (rescued elsewhere: stop them without recording anything) or asked to cancel. After a failed attempt
  the next comes after a quarter of a heartbeat, so a blip costs no lease. An attempt without an answer
  after a heartbeat is left to finish on its own connection (its success still counts, until it is a
  lease old) and the next attempt gets a fresh one, so a connection that hangs (a network partition)
  never holds up renewal.
* **the lease guard** — several times a second it compares each held lease's end, by the worker's own
  monotonic clock (when the statement that last renewed it was sent, plus the lease length), with now.
  When renewal has failed for so long that the lease ends within ``margin`` seconds, the job is stopped
  at once (cancelled; a CPU-bound child is killed): another worker can claim it only after the lease
  ends in the database *and* a rescue sweep ran, so with the default margin of one heartbeat the local
  stop comes at least a heartbeat before any rescue. Its late write, if any, is refused by the database.
* **the loop watchdog** — :class:`app.worker.watchdog.LoopWatchdog` notices a blocked event loop.

Everything the keeper asks of the worker goes through ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import create_engine, is_transient
from app.dbpool import let_go
from app.jobs import queue
from app.settings import Settings
from app.worker.completer import Tally
from app.worker.faults import first_line
from app.worker.leases import HeldJobs, idle_in_transaction_ms
from app.worker.watchdog import LoopWatchdog

GUARD_TICK_SECS = 0.1


class KeeperHost(Protocol):
    """What the lease keeper needs of its worker (read from the keeper's thread)."""

    id: str
    url: str
    settings: Settings
    lease_secs: float
    held: HeldJobs
    tally: Tally
    stopping: bool
    debug: bool
    log: Any
    last_beat: float
    watchdog: LoopWatchdog

    @property
    def listening(self) -> bool: ...

    def running_count(self) -> int: ...

    def health_report(self) -> dict[str, Any]: ...

    def request_cancel(self, job_id: uuid.UUID) -> None: ...

    def lost(self, job_ids: set[uuid.UUID]) -> None: ...

    def lease_running_out(self, claims: dict[uuid.UUID, int]) -> None: ...

    def keeper_died(self, exc: BaseException) -> None: ...


class LeaseKeeper:
    """Start with :meth:`start` (from the worker's loop), stop with :meth:`stop`."""

    def __init__(self, worker: KeeperHost, *, margin: float | None = None) -> None:
        self.worker = worker
        self.heartbeat = worker.settings.heartbeat_secs
        self.margin = self.heartbeat if margin is None else margin
        """Seconds before a lease's end (by the worker's clock) at which a job whose lease could not be
        renewed is stopped."""
        self.enabled = True
        """Tests switch this off to show that without lease renewal a long job runs twice. The worker's
        heartbeat is still written."""
        self.renewal_failing_since: float | None = None
        self._thread: threading.Thread | None = None
        self._main_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._engine: AsyncEngine | None = None
        self._slow: dict[asyncio.Task[None], AsyncEngine] = {}
        """Attempts without an answer after a heartbeat, with the engine each runs on."""
        self._written_health: str | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._main_loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._main, name=f"{self.worker.id}:leases", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    async def stop(self) -> None:
        """Stop renewing (the worker's outcomes are recorded by then) and wait for the thread to end."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)

    # --- the thread ---------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # the worker must not run on without its leases
            self._tell("keeper_died", exc)

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        guard = asyncio.create_task(self._guard())
        try:
            await self._renew_loop()
        finally:
            guard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await guard
            if self._engine is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(let_go(self._engine), 5)

    def _tell(self, method: str, *args: Any) -> None:
        """Call ``worker.<method>(*args)`` in the worker's loop."""
        loop = self._main_loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(getattr(self.worker, method), *args)

    def _new_engine(self) -> AsyncEngine:
        worker = self.worker
        return create_engine(
            worker.url,
            pool_size=1,
            pool_timeout=30,
            application_name=f"jobdesk-leases:{worker.id}"[:63],
            idle_in_transaction_timeout_ms=idle_in_transaction_ms(worker.settings),
        )

    async def _renew_loop(self) -> None:
        assert self._stop is not None
        next_at = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, next_at - time.monotonic()))
            if self._stop.is_set():
                return
            sent = time.monotonic()
            renewed = await self._attempt(sent)
            next_at = sent + (self.heartbeat if renewed else self.heartbeat / 4)

    async def _attempt(self, sent: float) -> bool:
        """One renewal; ``True`` when it succeeded within a heartbeat."""
        if self._engine is None:
            self._engine = self._new_engine()
        task = asyncio.create_task(self.renew_once(self._engine, sent))
        done, _ = await asyncio.wait({task}, timeout=self.heartbeat)
        if not done:
            self._slow[task] = self._engine
            self._engine = None
            task.add_done_callback(self._slow_done)
            asyncio.get_running_loop().call_later(self.worker.lease_secs, task.cancel)  # useless by then
            self._failed(TimeoutError(f"no answer within {self.heartbeat:g} s"))
            return False
        exc = task.exception()
        if exc is None:
            self.renewal_failing_since = None
            return True
        if not is_transient(exc):
            raise exc
        self._failed(exc)
        return False

    def _slow_done(self, task: asyncio.Task[None]) -> None:
        engine = self._slow.pop(task)
        if not task.cancelled() and task.exception() is None:
            self.renewal_failing_since = None
        disposal = asyncio.create_task(engine.dispose(close=False))
        self._slow[disposal] = engine  # keeps a reference until it ran
        disposal.add_done_callback(lambda t: self._slow.pop(t, None))

    def _failed(self, exc: BaseException) -> None:
        if self.renewal_failing_since is None:
            self.renewal_failing_since = time.monotonic()
        self.worker.log.warning("lease renewal failed: database unavailable", error=first_line(exc))

    async def renew_once(self, engine: AsyncEngine, sent: float) -> None:
        """Renew the leases of held jobs and write the worker's heartbeat, in one transaction; then tell
        the worker which jobs were lost and which were asked to cancel."""
        worker = self.worker
        held = {job_id: lease.claim for job_id, lease in worker.held.leases().items()}
        health = json.dumps(worker.health_report(), sort_keys=True)
        completed, failed = worker.tally.take_unsent()
        try:
            async with engine.begin() as conn:
                report = None
                if held and self.enabled:
                    report = await queue.keep_leases(conn, worker.id, held, worker.lease_secs)
                await queue.touch_worker(
                    conn,
                    worker.id,
                    running=worker.running_count(),
                    stopping=worker.stopping,
                    listener_connected=worker.listening,
                    completed=completed,
                    failed=failed,
                )
                if health != self._written_health:
                    await queue.set_worker_health(conn, worker.id, health)
        except BaseException:
            worker.tally.give_back(completed, failed)
            raise
        self._written_health = health
        worker.last_beat = time.monotonic()
        if report is None:
            return
        worker.held.renewed(report.renewed, sent)
        if worker.debug:
            worker.log.debug("leases renewed", renewed=len(report.renewed), lost=len(report.lost))
        for job_id in report.cancelled:
            self._tell("request_cancel", job_id)
        if report.lost:
            self._tell("lost", set(report.lost), {job_id: held[job_id] for job_id in report.lost})

    async def _guard(self) -> None:
        """Stop jobs whose lease runs out without renewal; watch the worker's loop."""
        worker = self.worker
        while True:
            await asyncio.sleep(GUARD_TICK_SECS)
            worker.watchdog.check()
            if not self.enabled:
                continue
            running_out = worker.held.running_out(time.monotonic() - worker.lease_secs + self.margin)
            if running_out:
                self._tell("lease_running_out", running_out)
