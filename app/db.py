"""Database plumbing shared by the web app, the worker and the CLI.

* :func:`app.embedded.resolve_database_url` (a module of its own) — ``DATABASE_URL``, or an embedded
  PostgreSQL under ``JOBDESK_DATA_DIR/pgdata`` when it is unset, so a first run needs no database server.
* :func:`create_engine` — the pooled SQLAlchemy async engine (asyncpg) used by web requests and by
  processors. The worker's own claim/lease/listen connections are separate (see ``app.worker``).
* :func:`fetch_dicts`, :func:`read_rows` — statements straight on the asyncpg connection (hot paths).
* :func:`migration_status`, :func:`run_migrations` — Alembic, run in a thread because Alembic's async
  ``env.py`` calls ``asyncio.run``, which cannot run inside a running event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import time
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import asyncpg
import msgspec
import structlog
from sqlalchemy import event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.util import await_only

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

from app import dbclock, dbpool
from app.pooler import PoolerMode, connect_args, install, pooler_refusal, session_settings
from app.settings import Settings, SettingsError, get_settings
from app.socket_errors import is_connection_error

log = structlog.get_logger("jobdesk.db")

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS_DIR = ROOT / "migrations"


class DatabaseUnavailable(Exception):
    """The database cannot be reached or is not usable; the message is meant for a person."""


# --- JSON -------------------------------------------------------------------------------------------


def json_dumps(value: Any) -> str:
    """JSON text for ``jsonb`` parameters: compact, non-ASCII kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_decode_json = msgspec.json.Decoder().decode


def json_loads(text: str | bytes) -> Any:
    """A ``json``/``jsonb`` value read from the database: msgspec's decoder, a tenth of ``json.loads``'s
    time on a job's input, which is decoded for every claimed job and every row a page shows. Whatever
    msgspec refuses goes to ``json.loads`` as before (text PostgreSQL does not print today, such as
    ``1e400`` or ``NaN``), so no value reads differently or newly fails."""
    try:
        return _decode_json(text)
    except msgspec.DecodeError:
        return json.loads(text)


def asyncpg_dsn(url: str) -> str:
    """``url`` as a plain ``postgresql://`` DSN for ``asyncpg.connect`` (worker connections)."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def describe_url(url: str) -> str:
    """``url`` with its password hidden, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


# --- engines ------------------------------------------------------------------------------------------


def create_engine(
    url: str,
    *,
    pool_size: int,
    pool_timeout: float = 5.0,
    application_name: str = "jobdesk",
    statement_timeout_ms: int | None = None,
    idle_in_transaction_timeout_ms: int | None = None,
    max_overflow: int = 0,
    pooler: PoolerMode | None = None,
) -> AsyncEngine:
    """A pooled async engine over asyncpg.

    ``pool_timeout`` (seconds) bounds the wait for a free connection; when it passes SQLAlchemy raises
    ``sqlalchemy.exc.TimeoutError``, which the web app turns into a 503 rather than a hanging request (behind
    PgBouncer in transaction mode the same bound applies to the wait in PgBouncer's queue).

    Every connection runs with JIT off, ``statement_timeout`` and ``idle_in_transaction_session_timeout``
    (ms; 0 turns one off): a slow statement or a transaction left open — by a slow page, or by a worker
    host lost in the middle of a transaction, whose locked rows the rescue would otherwise skip until TCP
    gives up hours later — ends within its limit, so it cannot hold locks or the snapshot that keeps
    autovacuum from cleaning the jobs table. Unset, the timeouts and ``pooler`` (how the settings reach the
    server: :mod:`app.pooler`) come from the process's settings (``DB_STATEMENT_TIMEOUT_MS``,
    ``DB_IDLE_IN_TRANSACTION_TIMEOUT_MS``, ``DATABASE_POOLER``), so the worker's own connections and the
    processors' pool get them as the web's do.
    """
    process = _process_settings()
    mode: PoolerMode = pooler or (process.database_pooler if process else "none")
    if statement_timeout_ms is None:
        statement_timeout_ms = process.db_statement_timeout_ms if process else 0
    if idle_in_transaction_timeout_ms is None:
        idle_in_transaction_timeout_ms = process.db_idle_in_transaction_timeout_ms if process else 0
    values = session_settings(statement_timeout_ms, idle_in_transaction_timeout_ms)
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout,
        pool_pre_ping=False,
        pool_recycle=1800,
        json_serializer=json_dumps,
        json_deserializer=json_loads,
        connect_args=connect_args(mode, application_name, values, pool_timeout),
    )
    # Before install(): behind PgBouncer the clock's statement waits in its queue like the connection's
    # other set-up statements, bounded by the pool timeout until install()'s hook lifts that bound.
    event.listen(engine.sync_engine.pool, "connect", _observe_clock)
    install(engine, mode, values, pool_timeout)
    engine.sync_engine._jobdesk_pooler = mode  # type: ignore[attr-defined]
    return engine


CONNECTED = "SELECT now(), (SELECT backend_start FROM pg_stat_get_activity(pg_backend_pid()))"
SESSION_START = "jobdesk_backend_start"
"""Key of a pooled connection's ``info``: when its server session started (see :func:`_observe_clock`)."""


def _observe_clock(dbapi_connection: Any, record: Any) -> None:
    """Measure the database's clock against this process's on each new connection (:mod:`app.dbclock`):
    one round trip per connection, and connections are kept for half an hour. The same round trip notes
    when the server session started (in the connection's ``info``): with its process id it names the
    session, whereas a process id alone may belong, later, to another session (a reused id)."""
    sent = time.time_ns()
    db_now, started = await_only(cast(Any, dbapi_connection)._connection.fetchrow(CONNECTED))
    dbclock.observe(db_now, sent, time.time_ns())
    record.info[SESSION_START] = started


def engine_pooler(engine: AsyncEngine) -> PoolerMode:
    """The ``DATABASE_POOLER`` mode ``engine`` was made for (``none`` for engines made elsewhere); an
    engine made by ``execution_options`` (the autocommit ones) shares its parent's pool and mode."""
    sync: Any = engine.sync_engine
    while not hasattr(sync, "_jobdesk_pooler") and hasattr(sync, "_proxied"):
        sync = sync._proxied
    return getattr(sync, "_jobdesk_pooler", "none")


def _process_settings() -> Settings | None:
    try:
        return get_settings()
    except SettingsError:  # the command reports it; an engine made anyway gets the plain defaults
        return None


@contextlib.asynccontextmanager
async def connect(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in a transaction that commits on success and rolls back on error."""
    async with engine.begin() as conn:
        yield conn


async def check_connection(engine: AsyncEngine) -> None:
    """Open one connection and run ``SELECT 1``.

    Raises:
        DatabaseUnavailable: with the reason (refused, unknown host, bad password, missing database).
    """
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:
        raise _unavailable(engine, exc) from exc


def _unavailable(engine: AsyncEngine, exc: BaseException) -> DatabaseUnavailable:
    reason = _reason(exc)
    where = describe_url(str(engine.url))
    hint = pooler_refusal(reason)
    if hint is not None and engine_pooler(engine) == "none":
        return DatabaseUnavailable(
            f"The database at {where} cannot be used with DATABASE_POOLER=none: {hint}."
        )
    return DatabaseUnavailable(f"Cannot reach the database at {where}: {reason}")


def _reason(exc: BaseException) -> str:
    while exc.__cause__ is not None and str(exc) == str(exc.__cause__):
        exc = exc.__cause__
    orig = getattr(exc, "orig", None)
    text_ = str(orig or exc).strip().splitlines()
    return (text_[0] if text_ else type(exc).__name__)[:500]


# --- migrations ---------------------------------------------------------------------------------------


def alembic_config(url: str) -> AlembicConfig:
    """An Alembic ``Config`` pointing at ``migrations/`` and ``url``."""
    # Alembic is imported where it is used: importing it costs about 0.3 s that the worker and most
    # commands would pay at every start for migrations they do not run.
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


_REVISION_LINE = re.compile(
    r"""^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(?:"([^"\n]*)"|'([^'\n]*)'|None)\s*$""", re.M
)


def head_revision() -> str:
    """The newest migration's revision id, read from the ``revision`` and ``down_revision`` lines of the
    files in ``migrations/versions``. Alembic would import every migration module to find it: with its
    own import, that took seconds at the start of every worker and command on a busy machine, all to
    compare one string. A file these lines do not describe plainly (a merge of two heads, a revision
    written any other way) leaves the answer to Alembic."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        found = {m.group(1): m.group(2) or m.group(3) for m in _REVISION_LINE.finditer(path.read_text())}
        if not found.get("revision") or "down_revision" not in found:
            return _alembic_head()
        revisions.add(found["revision"])
        if found["down_revision"]:
            parents.add(found["down_revision"])
    heads = revisions - parents
    if len(heads) != 1:
        return _alembic_head()
    return heads.pop()


def _alembic_head() -> str:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("postgresql+asyncpg://x@localhost/x"))
    heads = script.get_heads()
    assert len(heads) == 1, f"migrations have {len(heads)} heads: {heads}"
    return heads[0]


async def current_revision(engine: AsyncEngine) -> str | None:
    """The database's applied revision, or ``None`` for an empty database (autocommit: two reads need no
    ``BEGIN`` and ``ROLLBACK`` round trips)."""
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        exists = (
            await conn.execute(text("SELECT to_regclass('public.alembic_version') IS NOT NULL"))
        ).scalar()
        if not exists:
            return None
        return (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()


async def checked_schema(engine: AsyncEngine) -> tuple[bool, str]:
    """:func:`check_connection` and :func:`migration_status` on one connection: four round trips fewer
    (``SELECT 1``, ``BEGIN``/``ROLLBACK``) before a worker's first claim or a command. Raises
    :class:`DatabaseUnavailable` as :func:`check_connection` does."""
    try:
        current = await current_revision(engine)
    except Exception as exc:
        raise _unavailable(engine, exc) from exc
    return _status(current)


async def migration_status(engine: AsyncEngine) -> tuple[bool, str]:
    """``(current, message)``: whether the schema is at the newest migration, and a readable reason."""
    return _status(await current_revision(engine))


def _status(current: str | None) -> tuple[bool, str]:
    head = head_revision()
    if current == head:
        return True, f"schema at {head}"
    if current is None:
        return False, "the database has no Jobdesk schema yet: run `jobdesk migrate`"
    return False, f"the schema is at {current} but this version needs {head}: run `jobdesk migrate`"


#: Key of the advisory lock every migration run holds for its transaction ("jobdesk" in ASCII), so that
#: several ``jobdesk migrate`` (or ``serve``) starting together run one after another: the first applies
#: the migrations, the others then find the schema current and have nothing to do.
MIGRATION_LOCK_KEY = 0x6A6F626465736B


def migration_engine(url: str) -> AsyncEngine:
    """The engine migrations run on (``migrations/env.py``): one connection, no timeouts (a migration may
    take long, and waits for the lock while another runs), no startup parameters but the name and no named
    prepared statements — so it also works through PgBouncer in either mode, for a ``DATABASE_MIGRATE_URL``
    that is not a direct connection."""
    return create_async_engine(
        url, poolclass=NullPool, connect_args=connect_args("transaction", "jobdesk-migrate", {})
    )


def _upgrade_sync(url: str, revision: str) -> None:
    from alembic import command as alembic_command

    alembic_command.upgrade(alembic_config(url), revision)


def _downgrade_sync(url: str, revision: str) -> None:
    from alembic import command as alembic_command

    alembic_command.downgrade(alembic_config(url), revision)


async def run_migrations(url: str, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` from inside a running event loop (in a worker thread)."""
    await asyncio.to_thread(_upgrade_sync, url, revision)


async def downgrade(url: str, revision: str) -> None:
    """Revert migrations down to ``revision`` (``"base"`` removes everything)."""
    await asyncio.to_thread(_downgrade_sync, url, revision)


# --- error classification -------------------------------------------------------------------------

_TRANSIENT_SQLSTATES = ("08", "57P", "53300", "40001", "40P01")


# --- hot paths straight on asyncpg ----------------------------------------------------------------------
#
# The claim and finish statements run thousands of times a second under load. Going through SQLAlchemy's
# cursor and result machinery (a greenlet switch per statement, a Row and a RowMapping per row) cost about
# a fifth of the worker's CPU in ``bench/throughput.py``; these run the same SQL — compiled once from the
# same ``text()`` statement — directly on the asyncpg connection under the caller's SQLAlchemy connection,
# inside its transaction, and return plain dicts: fewer round trips, and prepared statements.
# The web app's most frequent reads (the session lookup of every request, the 2 s status polls) use
# :func:`read_rows`: the same, on a connection in autocommit mode — one round trip, no BEGIN/ROLLBACK.
# asyncpg prepares and caches each statement per connection. When the connection is not asyncpg (or the
# adapter's internals differ from what is checked below), the SQLAlchemy path runs instead.
# Behind PgBouncer in transaction mode the engine's connections have asyncpg's statement cache off, so these
# use the unnamed statement, parsed again with its parameters before the one Sync of each exchange: nothing
# outlives the statement, and an autocommit read is still one exchange on one server connection.

_DIALECT = PGDialect_asyncpg()

#: ``id(statement) -> (weak reference to that statement, its compiled form)``. The reference is checked on
#: every hit: an id is only unique among live objects, and a statement built per call is freed at once,
#: so its id comes back for the next one. A freed statement's entry is dropped by the weak reference's
#: callback. Compiling costs 15-30 µs, a hit well under 1 µs, on statements the worker runs per job.
_COMPILED: dict[int, tuple[weakref.ref[Any], tuple[str, tuple[str, ...]]]] = {}


def compiled_sql(statement: Any) -> tuple[str, tuple[str, ...]]:
    """``(sql with $n placeholders, parameter names in order)`` of a ``text()`` statement, cached per
    statement object (module-level statements compile once)."""
    key = id(statement)
    hit = _COMPILED.get(key)
    if hit is not None and hit[0]() is statement:
        return hit[1]
    compiled = statement.compile(dialect=_DIALECT)
    result = (str(compiled), tuple(compiled.positiontup or ()))
    try:
        ref = weakref.ref(statement, functools.partial(_forget_compiled, key))
    except TypeError:  # not weak-referenceable: correct without the cache
        return result
    _COMPILED[key] = (ref, result)
    return result


def _forget_compiled(key: int, ref: weakref.ref[Any]) -> None:
    # Only this statement's own entry: a newer statement may already hold the same id.
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is ref:
        _COMPILED.pop(key, None)


async def driver_connection(conn: AsyncConnection) -> Any | None:
    """The asyncpg connection under ``conn``, with ``conn``'s transaction begun on it (SQLAlchemy's asyncpg
    adapter sends ``BEGIN`` lazily, before its first statement); ``None`` if that cannot be done safely."""
    sync = conn.sync_connection
    if sync is not None and not sync.closed and not sync.invalidated:
        # Checked out already: an attribute read. ``get_raw_connection`` would run the same read in a
        # greenlet (for the reconnect an invalidated connection needs), 10 µs per statement.
        fairy: Any = sync.connection
    else:
        fairy = await conn.get_raw_connection()
    adapter = getattr(fairy, "dbapi_connection", None)
    raw = getattr(adapter, "_connection", None)
    start = getattr(adapter, "_start_transaction", None)
    mutex = getattr(adapter, "_execute_mutex", None)
    if raw is None or start is None or mutex is None or not hasattr(adapter, "_started"):
        return None
    if not adapter._started:  # type: ignore[union-attr]
        async with mutex:
            if not adapter._started:  # type: ignore[union-attr]
                async with discarded_if_lost(conn, raw):
                    await start()  # a no-op in autocommit mode
    return raw


@contextlib.asynccontextmanager
async def discarded_if_lost(conn: AsyncConnection, raw: asyncpg.Connection) -> AsyncIterator[None]:
    """Run a statement sent straight on ``raw`` (``conn``'s asyncpg connection); if its connection was
    lost meanwhile, invalidate ``conn`` so that the pool discards it. SQLAlchemy sees a lost connection
    only under a statement of its own: one lost under a statement sent straight, or under the ``BEGIN``
    sent for it (whose adapter then counts its transaction as never begun, so the rollback as it goes
    back has nothing to do), went back to the pool as if sound, and every later checkout that began
    with such a statement failed on it, for as long as the pool kept it: the worker's retries of a job's
    completion failed on the same dead connection until the pool recycled it, half an hour later."""
    try:
        yield
    except BaseException:
        if raw.is_closed() and not conn.invalidated:
            await conn.invalidate()
        raise


async def fetch_dicts(conn: AsyncConnection, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run ``statement`` in ``conn``'s transaction and return its rows as dicts (see above)."""
    raw = await driver_connection(conn)
    if raw is None:
        return [dict(r) for r in (await conn.execute(statement, params)).mappings().all()]
    async with discarded_if_lost(conn, raw):
        return await _fetch_raw(raw, statement, params)


async def _fetch_raw(raw: asyncpg.Connection, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    sql, names = compiled_sql(statement)
    return [dict(r.items()) for r in await raw.fetch(sql, *[params[n] for n in names])]


def autocommit_engine(engine: AsyncEngine) -> AsyncEngine:
    """``engine`` in autocommit mode (same pool), for single read statements; kept on the engine, so it
    lives and goes with it."""
    sync = engine.sync_engine
    hit: AsyncEngine | None = getattr(sync, "_jobdesk_autocommit", None)
    if hit is None:
        hit = engine.execution_options(isolation_level="AUTOCOMMIT")
        sync._jobdesk_autocommit = hit  # type: ignore[attr-defined]
    return hit


async def read_rows(engine: AsyncEngine, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one read-only ``text()`` statement outside any transaction (autocommit, one round trip, a
    prepared statement) and return its rows as dicts. For the per-request session lookup and the status
    polls (measured with ``bench/pages.py``); anything that writes or reads twice uses a transaction."""
    if engine_pooler(engine) == "transaction":
        return await _read_rows_bounded(engine, statement, params)
    async with pooled_driver_connection(engine) as raw:
        return await _fetch_raw(raw, statement, params)


@contextlib.asynccontextmanager
async def pooled_driver_connection(engine: AsyncEngine) -> AsyncIterator[asyncpg.Connection]:
    """A connection of ``engine``'s pool as the bare asyncpg connection, outside any transaction (each
    statement commits on its own), given back to the pool afterwards.

    Checking out through the pool itself costs a third of an ``AsyncConnection``'s checkout (no
    ``Connection`` object, no isolation level set and reset), and without a greenlet when neither the
    checkout nor the return needs I/O (:mod:`app.dbpool`), which counts for the one-statement paths that
    run per request or per job. A connection whose statement failed other than by a plain server
    error (the connection broke, the statement was cancelled mid-way) is discarded instead of going back
    to the pool, where the next checkout would find it broken or still busy."""
    pool = engine.sync_engine.pool
    fairy = await dbpool.take(pool)
    raw: asyncpg.Connection = fairy.dbapi_connection._connection
    try:
        yield raw
    except asyncpg.PostgresError as exc:
        # A refused statement (a constraint, a statement timeout) leaves the connection usable; the server
        # shutting the session down (57P0x) or a lost connection (08xxx) does not.
        if raw.is_closed() or (exc.sqlstate or "").startswith(("08", "57P")):
            fairy.invalidate()
        raise
    except BaseException:
        fairy.invalidate()
        raise
    finally:
        await dbpool.give_back(pool, fairy)


async def write_rows(engine: AsyncEngine, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one writing ``text()`` statement on its own, in autocommit: the statement is its own transaction,
    so everything it writes (its CTEs) and any ``pg_notify`` in it commit together or not at all, in one
    round trip. Behind PgBouncer in transaction mode it is one exchange on one server connection, with
    no prepared statement left behind, as for :func:`read_rows`."""
    return await read_rows(engine, statement, params)


async def _read_rows_bounded(
    engine: AsyncEngine, statement: Any, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """:func:`read_rows` behind PgBouncer in transaction mode, where the statement may wait in PgBouncer's
    queue for a server connection: like a transaction's ``BEGIN`` (:mod:`app.pooler`) it waits no longer
    than the pool timeout, so the request gets its 503 instead of waiting for PgBouncer's own limit."""
    wait = engine.sync_engine.pool.timeout()  # type: ignore[attr-defined]
    try:
        async with autocommit_engine(engine).connect() as conn:
            try:
                return await asyncio.wait_for(fetch_dicts(conn, statement, params), wait)
            except TimeoutError:
                raw = await driver_connection(conn)
                if raw is not None:
                    raw.terminate()  # at once: a graceful close would wait for the queued statement first
                await conn.invalidate()
                raise
    except TimeoutError:  # the statement's wait, or a new connection's set-up queries' (app.pooler)
        raise sa_exc.TimeoutError(
            f"the connection pooler found no free server connection within {wait:g} s"
        ) from None


def driver_errors(exc: BaseException) -> tuple[BaseException, ...]:
    """The driver's own errors behind ``exc``: a statement run through SQLAlchemy wraps asyncpg's error
    (``orig``, whose cause is asyncpg's); one run straight on the asyncpg connection (the token lookup,
    the single enqueue, a bulk enqueue's ``COPY``) raises asyncpg's error itself."""
    if isinstance(exc, sa_exc.DBAPIError):
        orig = exc.orig
        return () if orig is None else (orig, orig.__cause__ or orig)
    return (exc,)


def referent_deleted(exc: BaseException) -> bool:
    """Whether the database refused a row because a row it refers to is gone (a foreign key): deleted by
    another transaction after the request checked it (a person, a pipeline, a batch, a file). The web
    layer answers it with :data:`app.errors.GONE_MESSAGE` (409), and audits an admin's as a refusal."""
    return any(isinstance(e, asyncpg.ForeignKeyViolationError) for e in driver_errors(exc))


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` means "the database is (briefly) unavailable; try again": a dropped or refused
    connection (or one left in the middle of an operation), an admin/crash shutdown, too many connections, a pool timeout, a serialization failure or
    deadlock. Used by the worker to retry acknowledgements instead of losing them (a finished job whose
    result cannot be written at once would otherwise be run again after its lease expires). An
    ``OSError`` is one only when it is a connection's (:mod:`app.socket_errors`): a file's error (the
    files folder unreadable, a file gone, the disk full) raised on such a path is its own failure, not an
    outage retried for ever."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, sa_exc.TimeoutError | sa_exc.DisconnectionError | sa_exc.InterfaceError):
            return True
        if isinstance(current, OSError):
            # a socket's, or a file's (a name, a full disk): the latter is the failure, whatever it
            # was raised while handling
            return is_connection_error(current)
        if isinstance(
            current,
            TimeoutError
            | asyncpg.exceptions.ConnectionDoesNotExistError
            | asyncpg.exceptions.InterfaceError
            | asyncpg.exceptions.PostgresConnectionError
            | asyncpg.exceptions.CannotConnectNowError
            # a connection handed out while asyncpg still reads its server's farewell ("another
            # operation is in progress"): as broken as a dropped one, and a fresh one works
            | asyncpg.exceptions.InternalClientError,
        ):
            return True
        sqlstate = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(_TRANSIENT_SQLSTATES):
            return True
        current = current.__cause__ or current.__context__ or getattr(current, "orig", None)
    return False
