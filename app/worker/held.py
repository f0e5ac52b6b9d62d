"""A connection kept checked out for one of the worker's hot paths (claims, completions).

Taking a pooled connection and giving it back costs SQLAlchemy about as much CPU as the claim statement
itself (measured: 0.6 ms against 0.2 ms per claim of 20 jobs on asyncpg), and the worker makes thousands
of claims and completion writes a second. So the claim loop and the completer each keep one connection in
autocommit mode: every statement on it is its own transaction, exactly as on a fresh connection. A
connection whose statement failed or was interrupted is in an unknown state: it is invalidated (closed,
its pool slot freed) and the next statement takes a fresh one.

These connections plan their statements once (``plan_cache_mode = force_generic_plan``): the claim
and completion statements are prepared once per connection by asyncpg, but PostgreSQL's default is to
plan them again for each set of parameters, which cost the claim of 20 jobs about as much server time as
running it (measured: about 1.1 ms less backend CPU per claim and completion of 20 jobs). Their generic
plans read the same indexes. Behind PgBouncer in transaction mode statements are not prepared, and the
setting is not made (a ``SET`` would stay on whichever server connection ran it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db import engine_pooler

GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"
RESET_TIMEOUT_SECS = 2.0


class HeldConnection:
    """One autocommit connection of ``engine``'s pool, taken at first use and kept until :meth:`close`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._generic = engine_pooler(engine) != "transaction"
        self._conn: AsyncConnection | None = None

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncConnection]:
        """The held connection (a fresh one when there is none); dropped if the block raises."""
        conn = self._conn
        try:
            if conn is None or conn.closed or conn.invalidated:
                conn = self._conn = await self.engine.connect()
                if self._generic:
                    await conn.exec_driver_sql(GENERIC_PLANS)
            yield conn
        except BaseException:
            self._conn = None
            if conn is not None:
                await self._discard(conn)
            raise

    async def close(self, *, keep: bool = True) -> None:
        """Give the connection back to the pool, with PostgreSQL's default planning again; or, not
        ``keep``ing it (a stopping worker, whose engine is disposed next), close it at once without a
        word to the server: a RESET and a graceful close each wait for an answer, which on a connection
        gone silent never comes (4 s of the stop)."""
        conn, self._conn = self._conn, None
        if conn is not None and not keep:
            await self._discard(conn)
        elif conn is not None:
            try:
                if self._generic:
                    # bounded: on a connection that went silent (a partition) no answer ever comes
                    async with asyncio.timeout(RESET_TIMEOUT_SECS):
                        await conn.exec_driver_sql("RESET plan_cache_mode")
            except Exception:
                await self._discard(conn)
                return
            await self._discard(conn, invalidate=False)

    @staticmethod
    async def _discard(conn: AsyncConnection, *, invalidate: bool = True) -> None:
        # Shielded from a cancellation that arrives meanwhile: a connection left half-closed would keep its
        # pool slot for good.
        async def discard() -> None:
            with contextlib.suppress(Exception):
                if invalidate:
                    # Its socket closed at once: SQLAlchemy's invalidation first tries a graceful close,
                    # which on a connection gone silent waits 2 s for an answer that never comes (and
                    # a claim given up for its silence would hand back its jobs that much later).
                    with contextlib.suppress(Exception):
                        sync: Any = conn.sync_connection
                        sync.connection.dbapi_connection._connection.terminate()
                    await conn.invalidate()
                await conn.close()

        await asyncio.shield(discard())
