"""The connection the claim loop and the completer keep between statements: every statement on it is
its own transaction, and a connection that broke (its server process killed, as when the network splits)
is dropped, so the next statement runs on a fresh one instead of failing for good."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.worker.held import HeldConnection


async def _pid(held: HeldConnection) -> int:
    async with held.use() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_broken_held_connection_is_replaced_and_its_pool_slot_freed(
    engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    held = HeldConnection(engine)
    first = await _pid(held)
    assert await _pid(held) == first  # kept between statements
    async with held.use() as conn:  # autocommit: a write is visible at once, with no COMMIT
        await conn.execute(text("CREATE TABLE held_probe (n int)"))
        await conn.execute(text("INSERT INTO held_probe VALUES (1)"))
    assert await pg.fetchval("SELECT count(*) FROM held_probe") == 1

    await pg.execute("SELECT pg_terminate_backend($1)", first)
    with pytest.raises(DBAPIError):
        await _pid(held)
    second = await _pid(held)
    assert second != first
    await held.close()
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_held_connections_plan_once_and_give_their_connection_back_as_they_found_it(
    engine: AsyncEngine,
) -> None:
    show = text("SHOW plan_cache_mode")
    held = HeldConnection(engine)
    async with held.use() as conn:
        assert (await conn.execute(show)).scalar_one() == "force_generic_plan"
        pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    await held.close()
    async with engine.connect() as conn:  # the same pooled connection, for the rest of the worker
        assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one() == pid
        assert (await conn.execute(show)).scalar_one() == "auto"


async def test_a_statement_interrupted_midway_leaves_no_half_used_connection_behind(
    engine: AsyncEngine,
) -> None:
    held = HeldConnection(engine)
    first = await _pid(held)

    async def slow() -> None:
        async with held.use() as conn:
            await conn.execute(text("SELECT pg_sleep(3)"))

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(slow(), 0.2)  # e.g. the worker stopping while a claim is on the wire
    started = time.monotonic()
    assert await _pid(held) != first
    assert time.monotonic() - started < 1.5  # not waiting for the abandoned statement to end
    await held.close()
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_an_autocommit_engine_is_behind_the_same_pooler_as_its_parent() -> None:
    """The worker's kept connections come from ``engine.execution_options(isolation_level="AUTOCOMMIT")``.
    Such an engine read as made for no pooler: behind PgBouncer in transaction mode a kept connection set
    generic plans on whichever server connection ran it, and a claim cut short at a stop would have had
    PgBouncer's own process id taken for the server's (:func:`app.worker.claiming._server_pid`)."""
    from app.db import create_engine, engine_pooler

    engine = create_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none", pool_size=1, pooler="transaction")
    try:
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        assert engine_pooler(autocommit) == "transaction"
        assert engine_pooler(autocommit.execution_options(isolation_level="AUTOCOMMIT")) == "transaction"
        assert not HeldConnection(autocommit)._generic
    finally:
        await engine.dispose()
