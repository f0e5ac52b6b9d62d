"""LISTEN/NOTIFY for the worker, with reconnection: a lost connection is noticed and restored.

One dedicated asyncpg connection LISTENs on the jobs channel (enqueue, due retries, released dependents)
and the cancel channel. The connection's loss is noticed two ways: asyncpg's termination callback (the
server closed it: restart, ``pg_terminate_backend``) and a periodic liveness query with a timeout (a
half-open TCP connection that never reports its death). Either way the listener reconnects with
exponential backoff and jitter — never a busy spin on a dead database — runs LISTEN again and then asks
the claim loop to poll once at once, picking up jobs enqueued during the gap. State is visible in logs,
in ``workers.listener_connected`` and in the ``jobdesk_listener_connected`` metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from typing import Any

import asyncpg
import structlog

from app import metrics
from app.jobs.queue import CANCEL_CHANNEL, JOBS_CHANNEL
from app.silence import SilenceBoundConnection

LIVENESS_INTERVAL_SECS = 2.0
LIVENESS_TIMEOUT_SECS = 2.0
CONNECT_TIMEOUT_SECS = 10.0
BACKOFF_START_SECS = 0.2
BACKOFF_MAX_SECS = 10.0


class Listener:
    """Keeps one LISTEN connection alive. ``on_jobs()`` is called for each jobs-channel notification and
    after every (re)connect; ``on_cancel(job_id)`` for each cancel notification."""

    def __init__(
        self,
        dsn: str,
        *,
        on_jobs: Callable[[], None],
        on_cancel: Callable[[str], None],
        log: Any,
        liveness_interval: float = LIVENESS_INTERVAL_SECS,
    ) -> None:
        self.dsn = dsn
        self.on_jobs = on_jobs
        self.on_cancel = on_cancel
        self.log = log or structlog.get_logger("jobdesk.listener")
        self.liveness_interval = liveness_interval
        self.connected = False
        self.reconnects = 0
        self.enabled = True
        """Tests switch this off to show that without re-LISTEN a lost listener is never restored."""
        self._lost = asyncio.Event()
        self._conn: asyncpg.Connection | None = None

    def _notified(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        if channel == CANCEL_CHANNEL:
            self.on_cancel(payload)
        else:
            self.on_jobs()

    def _terminated(self, conn: Any) -> None:
        # asyncpg calls this soon after a connection ends, also one we closed ourselves: only the loss
        # of the current connection counts. Counting a replaced one marked its successor lost, which was
        # replaced in turn, and so on: hundreds of reconnections a second after one failed liveness check.
        if conn is self._conn:
            self._lost.set()

    async def _connect(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(
            self.dsn,
            timeout=CONNECT_TIMEOUT_SECS,
            server_settings={"application_name": "jobdesk-listener"},
            connection_class=SilenceBoundConnection,
        )
        try:
            # The LISTEN statements are bounded too: a connection that goes silent right after its
            # start would otherwise hold the listener here for good, before any liveness check.
            async with asyncio.timeout(CONNECT_TIMEOUT_SECS):
                await conn.add_listener(JOBS_CHANNEL, self._notified)
                await conn.add_listener(CANCEL_CHANNEL, self._notified)
        except BaseException:
            conn.terminate()  # not left open (and LISTENing) when this fails or is cancelled
            raise
        conn.add_termination_listener(self._terminated)
        return conn

    async def run(self) -> None:
        """Run until cancelled."""
        delay = BACKOFF_START_SECS
        first = True
        while True:
            if not first and not self.enabled:
                await asyncio.sleep(3600)  # negative control: never re-LISTEN
                continue
            try:
                self._lost.clear()
                self._conn = await self._connect()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                self._set_connected(False)
                wait = delay * (1 + random.random() * 0.2)
                self.log.warning(
                    "listener could not connect; retrying", error=str(exc)[:200], retry_in_secs=round(wait, 2)
                )
                await asyncio.sleep(wait)
                delay = min(delay * 2, BACKOFF_MAX_SECS)
                continue
            delay = BACKOFF_START_SECS
            if not first:
                self.reconnects += 1
            self.log.info("listener connected", reconnects=self.reconnects)
            first = False
            self._set_connected(True)
            self.on_jobs()  # poll once at once: jobs may have been enqueued while we were away
            try:
                await self._watch()
            finally:
                self._set_connected(False)
                await self._close()
            self.log.warning("listener connection lost; reconnecting")

    async def _watch(self) -> None:
        """Return when the connection is lost (termination callback or failed liveness check)."""
        assert self._conn is not None
        while True:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns normally when it is cancelled
            # just as the event is set, and the listener then reconnected instead of stopping, so the
            # worker's shutdown waited for it for good.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.liveness_interval):
                    await self._lost.wait()
            if self._lost.is_set():
                return
            try:
                await self._conn.fetchval("SELECT 1", timeout=LIVENESS_TIMEOUT_SECS)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                self.log.warning("listener liveness check failed", error=str(exc)[:200] or type(exc).__name__)
                return

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.remove_termination_listener(self._terminated)
            conn.terminate()

    def _set_connected(self, value: bool) -> None:
        self.connected = value
        metrics.LISTENER_CONNECTED.set(1 if value else 0)

    async def aclose(self) -> None:
        await self._close()
        self._set_connected(False)
