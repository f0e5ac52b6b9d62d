"""Taking a connection from an engine's pool, and giving it back, without a greenlet when neither needs I/O.

SQLAlchemy's pool is synchronous code that reaches the driver through ``await_only``, so the async engine
runs every checkout and every return in a greenlet (``greenlet_spawn``), in case it has to connect,
recycle, ping or close a connection on the way. Mostly it has to do none of these: a connection waits
in the pool, young and valid, and goes back to a queue with room for it. On the paths that run one
statement per request or per call (a single enqueue, the per-request session lookup, the status polls)
those two greenlets were a tenth of the time of a single enqueue (about 55 µs of CPU of 230).

So before a checkout or a return the pool is asked whether it would need I/O, from the conditions
SQLAlchemy itself checks on that path (``_ConnectionRecord.get_connection``, ``_ConnectionFairy._reset``,
``QueuePool._do_return_conn``). Only when it would not does it run here, as the plain synchronous call;
anything else (an empty pool, a connection due for recycling or invalidated, a pre-ping, a listener, a
full queue, a transaction to roll back) takes the greenlet as before. The conditions read a few private
attributes of SQLAlchemy 2.0's pool; :func:`checkout_without_io` answers ``None`` (the greenlet) for a
pool whose shape it does not know, so a change there costs speed, not correctness.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import AsyncAdaptedQueuePool, Pool
from sqlalchemy.util import greenlet_spawn


def _next_record(pool: AsyncAdaptedQueuePool) -> Any | None:
    """The pooled connection record the next checkout takes, if one waits; ``None`` otherwise."""
    queue: Any = getattr(pool, "_pool", None)
    waiting = getattr(getattr(queue, "_queue", None), "_queue", None)  # the asyncio queue's own storage
    if not waiting:
        return None
    # asyncio.Queue takes from the left of its deque; LifoQueue from the end of its list.
    return waiting[-1] if getattr(queue, "use_lifo", False) else waiting[0]


def _checkout_needs_io(pool: AsyncAdaptedQueuePool, record: Any) -> bool:
    """Whether taking ``record`` out of ``pool`` would talk to the server (as ``get_connection`` and the
    checkout's pre-ping and listeners decide)."""
    if pool._pre_ping or pool.dispatch.checkout:
        return True
    started = getattr(record, "starttime", None)
    if getattr(record, "dbapi_connection", None) is None or started is None:
        return True  # invalidated: reconnects
    recycle = pool._recycle
    return (
        (recycle > -1 and time.time() - started > recycle)
        or pool._invalidate_time > started
        or getattr(record, "_soft_invalidate_time", started + 1) > started
    )


def checkout_without_io(pool: Pool) -> Any | None:
    """A connection (SQLAlchemy's pool proxy) taken from ``pool`` at once, when that needs no I/O; else
    ``None``, and the caller checks out in a greenlet."""
    if type(pool) is not AsyncAdaptedQueuePool:
        return None
    record = _next_record(pool)
    if record is None or _checkout_needs_io(pool, record):
        return None
    return pool.connect()


def _return_needs_io(pool: Pool, fairy: Any) -> bool:
    """Whether giving ``fairy`` back would talk to the server: a transaction to roll back (or commit) on
    return, a listener, or a queue without room (the connection would be closed)."""
    adapter = fairy.dbapi_connection
    if adapter is None or getattr(adapter, "_started", True) or pool.dispatch.reset or pool.dispatch.checkin:
        return True
    queue: Any = getattr(pool, "_pool", None)
    maxsize = getattr(queue, "maxsize", None)
    return maxsize is None or (maxsize > 0 and queue.qsize() >= maxsize)


async def give_back(pool: Pool, fairy: Any) -> None:
    """Return ``fairy`` to ``pool``; in a greenlet only when the return needs I/O."""
    if type(pool) is AsyncAdaptedQueuePool and not _return_needs_io(pool, fairy):
        fairy.close()
    else:
        await greenlet_spawn(fairy.close)


async def take(pool: Pool) -> Any:
    """A connection from ``pool``; in a greenlet only when the checkout needs I/O."""
    fairy = checkout_without_io(pool)
    return fairy if fairy is not None else await greenlet_spawn(pool.connect)


def drop_idle(engine: AsyncEngine) -> int:
    """Close the sockets of the connections waiting in ``engine``'s pool, at once and without a word to
    the server (which ends an idle session when its socket closes, as it does on a graceful close): a
    graceful close waits for the server's reply, which on a path gone silent never comes. Their records
    are invalidated: a later checkout connects afresh, a dispose finds nothing to wait for. How many
    there were. A pool whose shape this does not know is left alone (0)."""
    pool: Any = engine.sync_engine.pool
    waiting = getattr(getattr(getattr(pool, "_pool", None), "_queue", None), "_queue", None)
    dropped = 0
    for record in list(waiting or ()):
        raw = getattr(getattr(record, "dbapi_connection", None), "_connection", None)
        if raw is not None and hasattr(raw, "terminate"):
            with contextlib.suppress(Exception):
                raw.terminate()
                dropped += 1
            with contextlib.suppress(Exception):
                record.invalidate()  # the next checkout of this record connects afresh
    return dropped


async def let_go(engine: AsyncEngine) -> None:
    """Dispose of ``engine`` without waiting for the server: its idle connections' sockets closed first
    (:func:`drop_idle`)."""
    drop_idle(engine)
    await engine.dispose()
