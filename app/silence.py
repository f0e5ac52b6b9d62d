"""A bound on silence for every connection Jobdesk opens to PostgreSQL (or to PgBouncer).

When the network path goes silent — a partition, a NAT or firewall entry that expired, a host that
vanished: packets dropped, no reset, no FIN — a connection sees nothing wrong. asyncpg sets no TCP
keepalive, and most statements have no client-side timeout, so a statement whose answer never comes
waits until the kernel gives up retransmitting what it sent (``tcp_retries2``: about 15 minutes), or for
ever when nothing it sent is unacknowledged (the request arrived, the answer was lost) and no keepalive
probes the peer. So every socket gets, at connect:

* TCP keepalive after :data:`KEEPALIVE_IDLE_SECS` of silence, a probe every
  :data:`KEEPALIVE_INTERVAL_SECS`, :data:`KEEPALIVE_COUNT` unanswered probes: a silent connection with
  nothing in flight is dropped after about 25 s. The kernel of a live peer answers probes whatever its
  PostgreSQL is doing, so a long statement or an idle pooled connection is not affected, and probes cost
  a few bytes every 10 s on idle connections only.
* ``TCP_USER_TIMEOUT`` of :data:`USER_TIMEOUT_SECS`: data sent and not acknowledged by the peer's kernel
  for that long drops the connection (instead of 15 minutes of retransmissions). Also only the network:
  a busy server's kernel still acknowledges.

A dropped connection fails its statement with a connection error the callers already treat as
transient (:func:`app.db.is_transient`): the worker retries or hands back, a web request gets its error
and the pool a fresh connection. These are socket options, not startup parameters, so they work the same
through PgBouncer. The worker's statements also have shorter bounds of their own, tied to the lease:
the claims, the completer's writes, the sweep's transactions, a processor's progress reports and
``ctx.files`` (:func:`app.silence.answered_within`), for a path where keepalive sees nothing wrong (a proxy
or a pooler in between keeps the TCP connection alive).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import asyncpg

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

KEEPALIVE_IDLE_SECS = 10
"""Seconds without any packet from the peer before the first probe."""
KEEPALIVE_INTERVAL_SECS = 5
KEEPALIVE_COUNT = 3
USER_TIMEOUT_SECS = 30
"""Longest a sent packet may stay unacknowledged (and, on Linux, the bound keepalive aborts at once it
has started probing). Well above a retransmission or two on a lossy but working path."""


def bound_silence(sock: Any) -> None:
    """Set keepalive and ``TCP_USER_TIMEOUT`` on ``sock`` (a TCP socket; others are left alone). An option
    the platform lacks is skipped."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    options = [
        (socket.SOL_SOCKET, getattr(socket, "SO_KEEPALIVE", None), 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), KEEPALIVE_IDLE_SECS),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_SECS),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_COUNT),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), USER_TIMEOUT_SECS * 1000),
    ]
    for level, option, value in options:
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(level, option, value)


class SilenceBoundConnection(asyncpg.Connection):
    """An asyncpg connection whose socket has :func:`bound_silence`'s options, set as it is made (asyncpg
    has no option for them): pass it as ``connection_class`` to ``asyncpg.connect``."""

    def __init__(self, protocol: Any, transport: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(protocol, transport, *args, **kwargs)
        with contextlib.suppress(Exception):
            bound_silence(transport.get_extra_info("socket"))


class Watch:
    """The driver connections a piece of work (a part of the sweep) has open now, so that whoever gives up
    on the work closes them all at once (:meth:`close_all`) instead of waiting, through the work's own
    cancellation, for a rollback on the very connection that stopped answering. Connections opened
    through :func:`answered_within` while the watch is current (:func:`watching`) are registered
    for the block's duration. :attr:`gave_up` says whether a bound closed one of them: the error the
    work then fails with is its own silence, not the database's outage."""

    def __init__(self) -> None:
        self.open: dict[int, asyncpg.Connection] = {}
        self.gave_up = False

    def close_all(self) -> int:
        """Close every registered connection's socket at once; returns how many were open."""
        closed = 0
        for raw in list(self.open.values()):
            if not raw.is_closed():
                self.gave_up = True
                raw.terminate()
                closed += 1
        self.open.clear()
        return closed


_watch: contextvars.ContextVar[Watch | None] = contextvars.ContextVar("jobdesk_silence_watch", default=None)


def watching(watch: Watch) -> contextvars.Context:
    """A copy of the current context in which ``watch`` is current: run the watched work in it (as a
    task: ``asyncio.create_task(coro, context=watching(watch))``)."""
    context = contextvars.copy_context()
    context.run(_watch.set, watch)
    return context


def _driver(conn: AsyncConnection) -> asyncpg.Connection | None:
    """``conn``'s asyncpg connection (``None``: another driver, or not reachable)."""
    with contextlib.suppress(Exception):
        sync: Any = conn.sync_connection
        raw = sync.connection.dbapi_connection._connection
        if isinstance(raw, asyncpg.Connection):
            return raw
    return None


def close_unless_answered(
    conn: AsyncConnection, seconds: float, on_close: Callable[[], None] | None = None
) -> asyncio.TimerHandle | None:
    """Close ``conn``'s socket at once if the caller has not cancelled the returned timer within
    ``seconds``: a bound on silence for what runs on it, its ``COMMIT`` or ``ROLLBACK`` included.

    On a connection gone silent (a partition, a dead NAT entry: packets dropped, nothing closed) an
    answer may never come, and TCP notices nothing while nothing sent is unacknowledged. Cancelling the
    waiting task is not enough: the rollback that follows waits for its own answer on the same silent
    connection. A closed socket fails every wait on it at once, with an error :func:`app.db.is_transient` knows,
    and the pool drops the connection. A timer (``call_later``): no round trip, nothing per statement.
    ``None`` when the driver connection cannot be reached (another driver): no bound then."""
    raw = _driver(conn)
    if raw is None:
        return None
    watch = _watch.get()

    def close() -> None:
        if not raw.is_closed():
            if watch is not None:
                watch.gave_up = True
            if on_close is not None:
                on_close()
            raw.terminate()

    return asyncio.get_running_loop().call_later(seconds, close)


def warn_on_close(log: Any, what: str, seconds: float | None) -> Callable[[], None]:
    """The ``on_close`` of a bounded wait (:func:`close_unless_answered`, :func:`answered_within`) that
    logs, on ``log`` (``None``: nothing), which ``what`` gave up on its connection and after how long."""

    def closing() -> None:
        if log is not None:
            log.warning(
                "no answer from the database; closing the connection", operation=what, waited_secs=seconds
            )

    return closing


@contextlib.asynccontextmanager
async def answered_within(
    block: contextlib.AbstractAsyncContextManager[AsyncConnection],
    seconds: float | None,
    on_close: Callable[[], None] | None = None,
) -> AsyncIterator[AsyncConnection]:
    """``async with answered_within(engine.begin(), seconds) as conn``: the connection ``block`` yields,
    closed (:func:`close_unless_answered`) unless the whole block — its ``COMMIT`` or ``ROLLBACK`` and the
    connection's return to the pool included — is over within ``seconds``. On a connection gone silent the
    block then fails with a connection error (:func:`app.db.is_transient`) and the pool drops the connection,
    instead of waiting for an answer that never comes. ``None``: no bound."""
    timer: asyncio.TimerHandle | None = None
    watch, raw = _watch.get(), None
    try:
        async with block as conn:
            if watch is not None and (raw := _driver(conn)) is not None:
                watch.open[id(raw)] = raw
            if seconds is not None:
                timer = close_unless_answered(conn, seconds, on_close)
            yield conn
    finally:
        if timer is not None:
            timer.cancel()
        if watch is not None and raw is not None:
            watch.open.pop(id(raw), None)
