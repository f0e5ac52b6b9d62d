"""Ending the server sessions of a worker's claims that lost their answer: a session is named by its
process id and its start, never by a process id alone, which the server gives to a later session once
the first has ended."""

from __future__ import annotations

import datetime
from typing import Any

import asyncpg

from app.db import asyncpg_dsn, create_engine
from app.jobs import queue
from app.worker.claiming import _server_session

NAME = "jobdesk-worker:test-end-sessions"


async def _ended(conn: asyncpg.Connection) -> bool:
    try:
        await conn.fetchval("SELECT 1")
    except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, ConnectionError):
        return True
    return False


async def test_a_process_id_reused_by_a_later_session_of_the_same_worker_is_not_ended(
    db_url: str, engine: Any, pg: asyncpg.Connection
) -> None:
    """A claim lost its answer on a session whose process id the worker noted; by the time the worker
    ends it, that session is gone and the server has given the same process id to another session —
    another connection of the same worker, named as it is (a completer's write, say). Matched by process
    id and name, the later session was terminated, and with it whatever it was doing. Matched with the
    session's start too, it is left alone; the session the worker noted is ended."""
    later = await asyncpg.connect(asyncpg_dsn(db_url), server_settings={"application_name": NAME})
    try:
        pid = later.get_server_pid()
        started = await pg.fetchval("SELECT backend_start FROM pg_stat_activity WHERE pid = $1", pid)
        earlier = started - datetime.timedelta(seconds=1)  # the noted session, ended since
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            assert await queue.end_sessions(conn, [pid], NAME, started=[earlier])
            assert not await _ended(later)
            assert await queue.end_sessions(conn, [pid], NAME, started=[started])
        assert await _ended(later)
    finally:
        later.terminate()


async def test_a_claims_connection_knows_its_server_sessions_start_without_asking(
    db_url: str, pg: asyncpg.Connection
) -> None:
    """What a claim notes about its session (process id and start) is read without a round trip, and is
    the server's own."""
    claims = create_engine(db_url, pool_size=1, application_name=NAME)
    try:
        async with claims.connect() as conn:
            session = _server_session(conn)
            assert session is not None
            pid, started = session
            row = await pg.fetchrow(
                "SELECT backend_start, application_name FROM pg_stat_activity WHERE pid = $1", pid
            )
        assert (started, row["application_name"]) == (row["backend_start"], NAME)
    finally:
        await claims.dispose()
