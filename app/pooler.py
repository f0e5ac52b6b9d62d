"""How Jobdesk talks to PostgreSQL directly and through PgBouncer (``DATABASE_POOLER``).

* ``none`` — direct connections. Session settings (JIT off, the timeouts) go as startup parameters, and
  asyncpg prepares and caches every statement per connection, which is the fastest path.
* ``transaction`` — PgBouncer in transaction mode: each transaction may run on a different server
  connection, shared with other clients. So:

  - no startup parameters but ``application_name`` (PgBouncer refuses the others: "unsupported startup
    parameter: jit"); JIT and the timeouts are set with ``SET LOCAL`` at the start of every transaction;
  - no named prepared statements. A named statement lives on the server connection that prepared it, so
    another client on that connection could find it: a clash of names ("prepared statement … already
    exists"), a missing one ("… does not exist"), or — worst — a client executing another process's
    statement with its own parameters. With ``statement_cache_size=0`` asyncpg uses the unnamed statement
    and sends Parse, Bind and Execute again before the one Sync that ends the exchange (its describe step
    ends with Flush, not Sync), so PgBouncer cannot hand the server connection to anyone in between;
    SQLAlchemy's own statement cache (``prepared_statement_cache_size``) is off too, and its
    ``prepare()`` then also asks asyncpg for an unnamed statement. Unique statement names, the other
    remedy, would leave every named statement behind on PgBouncer's server connections (its stock settings
    run no ``DISCARD`` in transaction mode).
  - ``BEGIN`` waits in PgBouncer's queue when every server connection is busy (up to its
    ``query_wait_timeout``, 120 s by default); Jobdesk gives up after the engine's pool timeout instead,
    so a request gets its 503 as it does when its own pool is exhausted.

  ``statement_cache_size=0`` in the URL's query string does not work: SQLAlchemy passes query values to
  asyncpg as strings (it converts only ``port`` and ``prepared_statement_cache_size``), and asyncpg fails
  to connect comparing the string with a number. Here it is passed as a number.
* ``session`` — PgBouncer in session mode: a client keeps its server connection, so prepared statements are
  safe (PgBouncer's ``DISCARD ALL`` clears them before the next client), but PgBouncer still refuses
  startup parameters; the settings are applied with ``SET`` once per new connection.

``LISTEN`` cannot work through transaction pooling (the notification goes to whichever client holds the
server connection), so the worker's LISTEN connection goes to ``DATABASE_LISTEN_URL``, and migrations (which
take a lock for their whole run) to ``DATABASE_MIGRATE_URL``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal, cast

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_only

from app.silence import SilenceBoundConnection

PoolerMode = Literal["none", "transaction", "session"]
POOLER_MODES: tuple[PoolerMode, ...] = ("none", "transaction", "session")

CONNECT_TIMEOUT_SECS = 10


def session_settings(statement_timeout_ms: int, idle_in_transaction_timeout_ms: int) -> dict[str, str]:
    """The settings every Jobdesk connection runs with: JIT off, and the timeouts that are not 0.

    JIT compilation is off because Jobdesk's statements are short OLTP queries, and the planner's estimates
    (e.g. for the claim's check of the small ``job_type_controls`` table) crossed ``jit_above_cost``, so
    each claim spent ~35 ms compiling code to run for 1 ms (found with EXPLAIN ANALYZE while profiling
    ``bench/throughput.py``).
    """
    values = {"jit": "off"}
    if statement_timeout_ms:
        values["statement_timeout"] = str(int(statement_timeout_ms))
    if idle_in_transaction_timeout_ms:
        values["idle_in_transaction_session_timeout"] = str(int(idle_in_transaction_timeout_ms))
    return values


def connect_args(
    mode: PoolerMode, application_name: str, settings: dict[str, str], wait_secs: float | None = None
) -> dict[str, Any]:
    """Keyword arguments for asyncpg's ``connect`` (through SQLAlchemy's ``connect_args``).

    ``wait_secs`` (transaction mode): how long each statement of a new connection's set-up (SQLAlchemy's
    type and version queries) may wait, as each may queue in PgBouncer; lifted once the set-up is done
    (:func:`install`)."""
    if mode == "none":
        server_settings = {"application_name": application_name, **settings}
        return {
            "server_settings": server_settings,
            "timeout": CONNECT_TIMEOUT_SECS,
            "connection_class": SilenceBoundConnection,
        }
    # application_name is a startup parameter PgBouncer itself tracks and accepts.
    args: dict[str, Any] = {
        "server_settings": {"application_name": application_name},
        "timeout": CONNECT_TIMEOUT_SECS,
        "connection_class": SilenceBoundConnection,  # socket options: nothing PgBouncer sees
    }
    if mode == "transaction":
        args["statement_cache_size"] = 0
        args["prepared_statement_cache_size"] = 0
        if wait_secs:
            args["command_timeout"] = wait_secs
    return args


def set_statements(settings: dict[str, str], *, local: bool) -> str:
    """``SET [LOCAL] name = 'value'; …`` for ``settings`` (one simple-protocol round trip)."""
    verb = "SET LOCAL" if local else "SET"
    return "; ".join(f"{verb} {name} = '{value}'" for name, value in settings.items())


def install(engine: AsyncEngine, mode: PoolerMode, settings: dict[str, str], wait_secs: float) -> None:
    """Apply ``settings`` behind a pooler: per transaction (``transaction``) or per connection (``session``)."""
    if mode == "transaction":
        event.listen(
            engine.sync_engine, "begin", _per_transaction(set_statements(settings, local=True), wait_secs)
        )
        # Registered after SQLAlchemy's own connect hooks (type codecs, the first connection's checks), so
        # it runs once they are done: from then on statements have no client-side limit (the server's
        # statement_timeout applies; only BEGIN's wait is bounded, above).
        event.listen(engine.sync_engine.pool, "connect", _end_setup_timeout)
    elif mode == "session":
        event.listen(
            engine.sync_engine.pool, "connect", _per_connection(set_statements(settings, local=False))
        )


def _per_transaction(sql: str, wait_secs: float) -> Callable[[Connection], None]:
    """The ``begin`` hook of a transaction-mode engine: ``BEGIN`` (bounded by ``wait_secs``), then
    ``SET LOCAL`` — the one place every Jobdesk transaction passes through, whoever opens it."""

    def begin(conn: Connection) -> None:
        adapter: Any = conn.connection.dbapi_connection
        # Autocommit statements (single reads, the worker's claim) run without a transaction: nothing to
        # SET LOCAL into, and asyncpg sends each as one exchange.
        if adapter is None or adapter.autocommit or adapter._started:
            return
        try:
            await_only(_begin_and_set(adapter, sql, wait_secs))
        except TimeoutError:
            # The BEGIN is still queued in the pooler: this connection is done. Closed at once (a graceful
            # close would wait for the BEGIN first), then dropped from the pool.
            adapter._connection.terminate()
            conn.invalidate()
            raise sa_exc.TimeoutError(
                f"the connection pooler found no free server connection within {wait_secs:g} s"
            ) from None
        except Exception as exc:
            # As for a failed BEGIN: wrapped as a DBAPIError, the connection invalidated on a disconnect.
            conn._handle_dbapi_exception(exc, None, None, None, None)

    return begin


async def _begin_and_set(adapter: Any, sql: str, wait_secs: float) -> None:
    await asyncio.wait_for(adapter._start_transaction(), wait_secs)
    await adapter._connection.execute(sql)


def _end_setup_timeout(dbapi_connection: Any, _record: Any) -> None:
    raw = getattr(dbapi_connection, "_connection", None)
    config = getattr(raw, "_config", None)
    if config is not None and hasattr(config, "_replace"):
        raw._config = config._replace(command_timeout=None)  # type: ignore[union-attr]


def _per_connection(sql: str) -> Callable[[Any, Any], None]:
    def connect(dbapi_connection: Any, _record: Any) -> None:
        await_only(cast(Any, dbapi_connection)._connection.execute(sql))

    return connect


def pooler_refusal(reason: str) -> str | None:
    """When ``reason`` (a failed connection's message) says a pooler refused Jobdesk's startup parameters,
    what to set instead; else ``None``."""
    if "unsupported startup parameter" not in reason:
        return None
    return (
        f"a connection pooler answered ({reason}): this looks like PgBouncer. Set DATABASE_POOLER=transaction "
        "(or session, matching its pool_mode), DATABASE_LISTEN_URL to the PostgreSQL server itself, and "
        "DATABASE_MIGRATE_URL too if migrations should not go through the pooler"
    )
