"""The worker's claims: which job types it runs, which path a claim takes, and what a short claim means.

* **Types.** A worker claims only the job types whose processors it has (its registry, or the types it
  was given), and registers them in its ``workers`` row: during a rolling deploy, workers of the old and
  the new version run side by side and a job of a new type waits for a worker that runs it instead of
  failing on one that does not (``/admin`` lists the types no live worker runs).
* **Path.** While none of its types has a concurrency or rate limit, a claim is one statement in
  autocommit mode (one round trip). Otherwise it is a short transaction that locks the limited types'
  control rows first (:func:`app.jobs.queue.claim_within_limits`), and while a per-person limit applies
  takes the fair claims' lock too (:func:`app.jobs.queue.claim_within_all_limits`). Whether any of its types is limited is
  learnt from that transaction, taken at least once every :data:`LIMITS_RECHECK_SECS`; a limit set
  meanwhile only keeps that type's jobs waiting until then (the fast path skips limited types), and
  setting a limit wakes the workers anyway.
* **Short claims.** A claim that took fewer jobs than asked either found nothing more to claim — the
  worker may sleep until a NOTIFY, the next due time or the poll interval — or was held back by a limit
  (:attr:`Claimer.held_back`): then an outcome recorded here (a job of that type finishing), or the
  per-minute window moving on, lifts it, and the worker waits for that instead of a poll interval. (A
  job of the type finishing on another worker lets that worker, which has just freed a slot, claim.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.jobs import queue
from app.jobs.rows import ClaimedJob
from app.jobs.types import registry
from app.worker.held import HeldConnection

LIMITS_RECHECK_SECS = 1.0
"""How often a worker whose types have no limit looks again (by taking the locking path once)."""


def served_types(job_types: Iterable[str] | None = None) -> list[str]:
    """The job types a worker runs: ``job_types`` if given, else every type whose processor is installed."""
    return sorted(set(registry.names() if job_types is None else job_types))


class Claimer:
    """Claims for one worker (see the module docstring). ``engine`` runs the locking transaction;
    ``autocommit`` (the same engine in autocommit mode) the one-statement claim, on a connection the
    claimer keeps (:class:`~app.worker.held.HeldConnection`) until :meth:`close`."""

    def __init__(
        self,
        engine: AsyncEngine,
        autocommit: AsyncEngine,
        *,
        worker_id: str,
        lease_secs: float,
        types: Iterable[str] | None = None,
        user_max: int = 0,
    ) -> None:
        self.engine = engine
        self.autocommit = autocommit
        self._held: list[HeldConnection] = []
        """Connections of the one-statement claims (and the due-time look-ups), kept between them: one
        for each claim on its way at the same time."""
        self._idle: list[HeldConnection] = []
        self.worker_id = worker_id
        self.lease_secs = lease_secs
        self.types = served_types(types)
        self.user_max = user_max
        """``USER_MAX_RUNNING_JOBS``: with it, every claim takes the locking path (a fair claim)."""
        self.limited = False
        """Whether one of :attr:`types` had a limit at the last look."""
        self.held_back: tuple[str, ...] = ()
        """Limited types whose claimable jobs the last claim left behind because of their limit."""
        self.room_in: float | None = None
        """Seconds until a held-back per-minute limit allows another start (``None``: not known)."""
        self._looked = float("-inf")

    async def claim(self, want: int) -> list[ClaimedJob]:
        """Claim up to ``want`` jobs of this worker's types, in claim order, within every limit."""
        now = time.monotonic()
        if not self.limited and now - self._looked < LIMITS_RECHECK_SECS:
            self.held_back, self.room_in = (), None
            async with self._connection() as conn:
                return list(await queue.claim(conn, self.worker_id, want, self.lease_secs, types=self.types))
        self._looked = now
        async with self.engine.begin() as conn:
            result = await queue.claim_within_all_limits(
                conn, self.worker_id, want, self.lease_secs, types=self.types, user_max=self.user_max
            )
        self.limited, self.held_back, self.room_in = result.limited, result.held_back, result.room_in
        return list(result.jobs)

    async def seconds_until_next_due(self) -> float | None:
        """Seconds until the next scheduled job is due (``None``: nothing scheduled)."""
        async with self._connection() as conn:
            return await queue.seconds_until_next_due(conn)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        """A kept autocommit connection no other claim is using now."""
        if self._idle:
            held = self._idle.pop()
        else:
            held = HeldConnection(self.autocommit)
            self._held.append(held)
        try:
            async with held.use() as conn:
                yield conn
        finally:
            self._idle.append(held)

    async def close(self) -> None:
        for held in self._held:
            await held.close()

    def sleep_limit(self, seconds: float) -> float:
        """``seconds``, cut to when a held-back per-minute limit next allows a start."""
        if self.room_in is None:
            return seconds
        return max(0.0, min(seconds, self.room_in))


async def wait_any(events: Iterable[asyncio.Event], seconds: float) -> None:
    """Return when one of ``events`` is set, or after ``seconds``."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
