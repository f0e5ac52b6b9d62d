"""One-statement reads and writes (``app.db.read_rows``/``write_rows``: the session lookup of every
request, status polls, a single enqueue) run on a pooled connection's bare asyncpg connection. A
connection whose statement broke off other than by a plain server error goes out of the pool instead of
back into it: the next request would otherwise get a dead connection, or one still busy with the
abandoned statement."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import read_rows, write_rows

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
