"""One-statement reads and writes (``app.db.read_rows``/``write_rows``: the session lookup of every
request, status polls, a single enqueue) run on a pooled connection's bare asyncpg connection. A
connection whose statement broke off other than by a plain server error goes out of the pool instead of
back into it: the next request would otherwise get a dead connection, or one still busy with the
abandoned statement."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app import dbpool
from app.db import create_engine, pooled_driver_connection, read_rows, write_rows

PID = text("SELECT pg_backend_pid() AS pid")


async def _pid(engine: AsyncEngine) -> int:
    return int((await read_rows(engine, PID, {}))[0]["pid"])


async def test_one_statement_commits_on_its_own_and_a_server_error_keeps_the_connection(
    engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    await pg.execute("CREATE TABLE pooled_probe (n int PRIMARY KEY)")
    await write_rows(engine, text("INSERT INTO pooled_probe VALUES (:n)"), {"n": 1})
    assert await pg.fetchval("SELECT count(*) FROM pooled_probe") == 1  # committed, no COMMIT sent
    first = await _pid(engine)
    with pytest.raises(asyncpg.UniqueViolationError):
        await write_rows(engine, text("INSERT INTO pooled_probe VALUES (:n)"), {"n": 1})
    assert await _pid(engine) == first  # a refused statement leaves a healthy connection: it is kept
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_connection_whose_server_went_away_is_not_handed_out_again(
    engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    first = await _pid(engine)
    await pg.execute("SELECT pg_terminate_backend($1)", first)
    # The statement that meets the dead connection fails (how depends on when the server's farewell
    # arrived: AdminShutdownError, "connection is closed", or asyncpg's protocol state error); the pool
    # does not ping before each checkout.
    with pytest.raises(Exception):  # noqa: B017
        await _pid(engine)
    assert await _pid(engine) != first  # not the dead connection again
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_statement_abandoned_midway_leaves_no_busy_connection_in_the_pool(
    engine: AsyncEngine,
) -> None:
    first = await _pid(engine)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(read_rows(engine, text("SELECT pg_sleep(3)"), {}), 0.2)
    started = time.monotonic()
    assert await _pid(engine) != first
    assert time.monotonic() - started < 1.5  # not waiting for the abandoned statement to end
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


# --- checkout and return without a greenlet (app.dbpool) -----------------------------------------------


@pytest.fixture
async def one_connection(db_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine whose pool holds one connection and may open one more for a moment (overflow)."""
    engine = create_engine(db_url, pool_size=1, max_overflow=1, pool_timeout=5)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The checkouts and returns that ran in a greenlet, by the function they ran."""
    seen: list[str] = []
    real = dbpool.greenlet_spawn

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(dbpool, "greenlet_spawn", counted)
    return seen


async def test_a_warm_pool_hands_out_and_takes_back_without_a_greenlet(
    one_connection: AsyncEngine, spawns: list[str]
) -> None:
    first = await _pid(one_connection)
    assert spawns == ["connect"]  # the first checkout connects
    spawns.clear()
    assert [await _pid(one_connection) for _ in range(3)] == [first] * 3
    assert spawns == []


async def test_with_every_connection_out_a_checkout_waits_for_one_back(
    one_connection: AsyncEngine, pg: asyncpg.Connection, spawns: list[str]
) -> None:
    """An empty pool is no place for the synchronous checkout: SQLAlchemy would have to wait (or
    connect) there, and both need the greenlet."""
    await _pid(one_connection)
    held = asyncio.Event()
    release = asyncio.Event()

    holder_pid: list[int] = []

    async def hold_the_only_connection() -> None:
        async with pooled_driver_connection(one_connection) as raw:
            holder_pid.append(raw.get_server_pid())
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold_the_only_connection())
    await held.wait()
    spawns.clear()
    other = await _pid(one_connection)  # a connection of the overflow, opened in the greenlet
    assert spawns == ["connect"]
    release.set()
    await holder
    # The pool keeps one: the second connection back found the queue full and was closed, in the greenlet.
    assert spawns == ["connect", "close"]
    assert one_connection.sync_engine.pool.checkedin() == 1  # type: ignore[attr-defined]
    assert await _pid(one_connection) == other
    await _until_gone(pg, holder_pid[0])  # closed, not left open outside the pool


async def test_a_connection_due_for_recycling_is_replaced(
    db_url: str, pg: asyncpg.Connection, spawns: list[str]
) -> None:
    engine = create_engine(db_url, pool_size=1)
    engine.sync_engine.pool._recycle = 1  # type: ignore[attr-defined]  # create_engine's is half an hour
    try:
        first = await _pid(engine)
        await asyncio.sleep(1.1)
        spawns.clear()
        second = await _pid(engine)
        assert second != first and spawns[0] == "connect"
        # The old connection was closed, not left open beside the new one.
        await _until_gone(pg, first)
    finally:
        await engine.dispose()


async def test_an_invalidated_connection_is_replaced(one_connection: AsyncEngine, spawns: list[str]) -> None:
    first = await _pid(one_connection)
    async with pooled_driver_connection(one_connection):
        pass
    pool = one_connection.sync_engine.pool
    fairy = await dbpool.take(pool)
    fairy.invalidate(soft=True)  # e.g. what a disconnect seen on the connection asks for
    await dbpool.give_back(pool, fairy)
    spawns.clear()
    assert await _pid(one_connection) != first
    assert spawns[0] == "connect"


async def _until_gone(pg: asyncpg.Connection, pid: int) -> None:
    for _ in range(50):
        if not await pg.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"backend {pid} is still connected")
