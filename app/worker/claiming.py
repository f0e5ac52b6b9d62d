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
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import asyncpg
import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db import SESSION_START, engine_pooler
from app.jobs import queue
from app.jobs.rows import ClaimedJob
from app.jobs.types import registry
from app.silence import close_unless_answered
from app.worker.held import HeldConnection

log = structlog.get_logger("jobdesk.worker")

Session = tuple[int, datetime | None]
"""A server session: its process id, and when it started (``None``: not known)."""

LIMITS_RECHECK_SECS = 1.0
"""How often a worker whose types have no limit looks again (by taking the locking path once)."""
LATE_CHECK_SECS = 1.0
"""How often, at most, a worker looks for jobs that a claim it gave up on behind a pooler took after all
(:attr:`Claimer.late_until`); a twelfth of the lease when that is shorter, so that they are found well
before their lease runs out."""


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
        self.unanswered = False
        """Whether a claim ended without its answer (cancelled at the stop, or failed): the jobs it took, if
        it took any, are locked by this worker without its knowing them. Cleared once they are handed
        back (:func:`app.worker.lifecycle.release_unreceived`), or given up on (:meth:`give_up_hand_back`)."""
        self._unanswered_at: float | None = None
        self.cut_short: dict[int, datetime | None] = {}
        """Server sessions of claims that failed or that the worker gave up waiting for (process id: when
        the session started): ended before their jobs are handed back (see
        :func:`app.worker.lifecycle.release_unreceived`)."""
        self._on_way: dict[asyncio.Task[Any] | None, list[Session | None]] = {}
        self.late_until: float | None = None
        """Until when (monotonic) a claim given up on behind a pooler may still commit: its server session
        is the pooler's to choose, so it cannot be ended as a direct one is, and a claim that runs long on
        the server (a lock, a slow plan) commits after the hand-back found nothing. Until then the worker
        looks again (:meth:`late_check_due`, :func:`app.worker.lifecycle.release_late`); after it, what
        such a claim took has an expired lease, which the rescue hands on."""
        self._late_checked = float("-inf")

    async def claim(self, want: int, answer_secs: float | None = None) -> list[ClaimedJob]:
        """Claim up to ``want`` jobs of this worker's types, in claim order, within every limit. Without
        an answer (its commit's included) within ``answer_secs`` the claim's connection is closed and
        the claim fails as one whose connection was cut (:meth:`_bounded`)."""
        now = time.monotonic()
        if not self.limited and now - self._looked < LIMITS_RECHECK_SECS:
            self.held_back, self.room_in = (), None
            with self._answered() as on, self._bounded(answer_secs) as bound:
                async with self._connection() as conn:
                    on.append(_server_session(conn))
                    bound(conn)
                    return list(
                        await queue.claim(conn, self.worker_id, want, self.lease_secs, types=self.types)
                    )
        self._looked = now
        with self._answered() as on, self._bounded(answer_secs) as bound:  # the commit too
            async with self.engine.begin() as conn:
                on.append(_server_session(conn))
                bound(conn)
                result = await queue.claim_within_all_limits(
                    conn, self.worker_id, want, self.lease_secs, types=self.types, user_max=self.user_max
                )
        self.limited, self.held_back, self.room_in = result.limited, result.held_back, result.room_in
        return list(result.jobs)

    @contextlib.contextmanager
    def _bounded(self, seconds: float | None) -> Iterator[Callable[[AsyncConnection], None]]:
        """Give the block's connection (passed to the function yielded) ``seconds`` to answer, after which
        its socket is closed (:func:`app.silence.close_unless_answered`) and every wait on it fails at once,
        with a connection error: the statement's, and the rollback or commit of the locking path's
        transaction, which a cancelled claim would still wait for on the same silent connection."""
        timers: list[asyncio.TimerHandle] = []

        def bound(conn: AsyncConnection) -> None:
            if seconds is not None:
                timer = close_unless_answered(
                    conn,
                    seconds,
                    lambda: log.warning(
                        "no answer to a claim; closing its connection",
                        worker_id=self.worker_id,
                        waited_secs=round(seconds, 2),
                    ),
                )
                if timer is not None:
                    timers.append(timer)

        try:
            yield bound
        finally:
            for timer in timers:
                timer.cancel()

    @contextlib.contextmanager
    def _answered(self) -> Iterator[list[Session | None]]:
        """Keep, while the claim is on its way, the server process the block puts in the list (read before
        the claim is sent: a connection cut short is discarded), for :meth:`gave_up`; note a claim that
        failed without its answer."""
        on: list[Session | None] = []
        task = asyncio.current_task()
        self._on_way[task] = on
        try:
            yield on
        except BaseException as exc:
            # A claim that failed on its way (its connection cut, say) may have committed, or may still
            # be running on the server: its session is ended before what it took is handed back. One the
            # server refused (a deadlock, a timeout) took nothing, and its session is alive and in use.
            if not _refused_by_server(exc):
                self._lost_answer(on)
            raise
        finally:
            self._on_way.pop(task, None)

    def gave_up(self, claims: Iterable[asyncio.Task[Any]]) -> None:
        """The worker stopped waiting for the answers of ``claims`` (and cancelled them)."""
        for claim in claims:
            self._lost_answer(self._on_way.get(claim, ()))

    def _lost_answer(self, sessions: Iterable[Session | None]) -> None:
        sessions = list(sessions)
        if not self.unanswered:
            self.unanswered, self._unanswered_at = True, time.monotonic()
        self.cut_short.update(session for session in sessions if session is not None)
        if any(session is None for session in sessions):  # sent through a pooler: no session to end
            self.late_until = time.monotonic() + self.lease_secs

    def late_check_due(self) -> bool:
        """Whether to look now for jobs a claim given up on behind a pooler took after the hand-back
        (:attr:`late_until`): while it may still commit, at most every :data:`LATE_CHECK_SECS`."""
        if self.late_until is None:
            return False
        now = time.monotonic()
        if now >= self.late_until:
            self.late_until = None
            return False
        return now - self._late_checked >= min(LATE_CHECK_SECS, self.lease_secs / 12)

    def late_check_in(self) -> float | None:
        """Seconds until :meth:`late_check_due` next says to look (``None``: nothing to look for), so that
        an idle worker's sleep (a whole poll interval) does not pass over a claim's late commit."""
        if self.late_until is None:
            return None
        return max(0.0, self._late_checked + min(LATE_CHECK_SECS, self.lease_secs / 12) - time.monotonic())

    def late_checked(self) -> None:
        self._late_checked = time.monotonic()

    def unanswered_secs(self) -> float:
        """Seconds since a claim first failed without its answer and nothing was handed back (0: none)."""
        return (
            0.0
            if not self.unanswered or self._unanswered_at is None
            else time.monotonic() - self._unanswered_at
        )

    def handed_back(self) -> None:
        """What claims without an answer took is handed back (or there was nothing to hand back)."""
        self.unanswered, self._unanswered_at = False, None
        self.cut_short.clear()

    def give_up_hand_back(self) -> None:
        """Stop trying to hand back what claims without an answer took: their leases have run out by now, so
        the rescue hands those jobs on (counting the attempt), and waiting longer would only keep this
        worker from claiming."""
        self.handed_back()

    async def seconds_until_next_due(self, answer_secs: float | None = None) -> float | None:
        """Seconds until the next scheduled job is due (``None``: nothing scheduled); bounded as a claim."""
        with self._bounded(answer_secs) as bound:
            async with self._connection() as conn:
                bound(conn)
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
        """Close the kept connections (the worker is stopping) without waiting for the server."""
        for held in self._held:
            await held.close(keep=False)

    def sleep_limit(self, seconds: float) -> float:
        """``seconds``, cut to when a held-back per-minute limit next allows a start."""
        if self.room_in is None:
            return seconds
        return max(0.0, min(seconds, self.room_in))


def _refused_by_server(exc: BaseException) -> bool:
    """Whether the server answered the claim with an error (a deadlock, a statement timeout, its session
    ended): its transaction was rolled back, so it took nothing. A lost connection is no answer."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, asyncpg.PostgresError) and not isinstance(
            current, asyncpg.exceptions.PostgresConnectionError
        ):
            return True
        # what it was raised from (SQLAlchemy's wrapping of the driver's error), not what it met meanwhile
        current = current.__cause__ or getattr(current, "orig", None)
    return False


def _server_session(conn: AsyncConnection) -> Session | None:
    """The PostgreSQL server session of ``conn``: its process id and when it started (attribute reads:
    asyncpg keeps the process id the server sent at connect, the start was noted at connect,
    :func:`app.db._observe_clock`). ``None`` behind a pooler, whose process id is its own and no
    server's."""
    if engine_pooler(conn.engine) != "none":
        return None
    with contextlib.suppress(Exception):
        sync: Any = conn.sync_connection
        pid = sync.connection.dbapi_connection._connection.get_server_pid()
        started = sync.connection.info.get(SESSION_START)
        return (pid, started) if isinstance(pid, int) else None
    return None


async def wait_any(events: Iterable[asyncio.Event], seconds: float) -> None:
    """Return when one of ``events`` is set, or after ``seconds``."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
