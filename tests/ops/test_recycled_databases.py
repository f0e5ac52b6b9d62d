"""The tests' databases are used again (:mod:`tests.support.recycle`): what a test leaves behind must not
reach the next one. A database a test wrote to comes back equal to a new copy of the template, under a new
name; one whose schema a test changed is dropped, never used again."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.conftest import _admin_dsn
from tests.support.factories import SIDE_EFFECTS_DDL, make_user
from tests.support.recycle import RecycledDatabases, state

_runs = itertools.count()


@pytest.fixture
async def databases(pg_server_url: str, template_db: str) -> AsyncIterator[RecycledDatabases]:
    """A pool of its own (the session's hands out this test's database)."""
    pool = RecycledDatabases(
        _admin_dsn(pg_server_url),
        lambda name: _admin_dsn(pg_server_url, name),
        template_db,
        f"{template_db.removesuffix('_template')}_rc{next(_runs)}",
    )
    yield pool
    await pool.close()


async def exists(pool: RecycledDatabases, name: str) -> bool:
    admin = await asyncpg.connect(pool.admin_dsn)
    try:
        return bool(await admin.fetchval("SELECT count(*) FROM pg_database WHERE datname = $1", name))
    finally:
        await admin.close()


async def test_a_database_a_test_wrote_to_comes_back_equal_to_a_new_copy(
    databases: RecycledDatabases,
) -> None:
    """Rows (and the template's own row, updated in place), sequences used, a table of the test's own, the
    planner's statistics after ANALYZE, the cumulative counters, and a connection left open: the database
    comes back under a new name (the old one is gone for whoever reconnects), equal to a new copy."""
    name = await databases.take()
    conn = await asyncpg.connect(databases.dsn_of(name))
    left_open = await asyncpg.connect(databases.dsn_of(name))
    try:
        await conn.execute(SIDE_EFFECTS_DDL)
        user = await make_user(conn)
        await conn.execute(
            "INSERT INTO side_effects (job_id, attempt, worker, pid) VALUES (gen_random_uuid(), 1, 'w', 1)"
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, status, input_data, user_id, max_attempts) "
            "SELECT gen_random_uuid(), 'noop', 'queued', '{}', $1, 3 FROM generate_series(1, 500)",
            user.id,
        )
        await conn.execute("DELETE FROM jobs WHERE random() < 0.5")
        await conn.execute("UPDATE alembic_version SET version_num = version_num")
        await conn.execute("ANALYZE jobs")
        await conn.execute("SELECT pg_stat_force_next_flush()")
    finally:
        await conn.close()
    await databases.give_back(name)

    assert len(databases.free) == 1, "the database was dropped instead of being used again"
    again = databases.free[0]
    assert again != name and not await exists(databases, name)
    with pytest.raises(asyncpg.InvalidCatalogNameError):
        await asyncpg.connect(databases.dsn_of(name))
    assert left_open.is_closed() or not await _answers(left_open)

    fresh = databases._new_name()
    admin = await asyncpg.connect(databases.admin_dsn)
    await admin.execute(f'CREATE DATABASE "{fresh}" TEMPLATE "{databases.template}"')
    try:
        assert databases.shape is not None
        states = []
        for each in (again, fresh):
            conn = await asyncpg.connect(databases.dsn_of(each))
            try:
                states.append(await state(conn, databases.shape.rows))
                counts = await conn.fetchrow(
                    "SELECT (SELECT count(*) FROM users) AS users, (SELECT count(*) FROM jobs) AS jobs, "
                    "(SELECT to_regclass('side_effects')) AS side_effects, "
                    "(SELECT reltuples FROM pg_class WHERE relname = 'jobs') AS reltuples, "
                    "(SELECT count(*) FROM pg_statistic WHERE starelid = 'jobs'::regclass) AS stats, "
                    "(SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables) AS inserted, "
                    "nextval('users_id_seq') AS next_user"
                )
                assert dict(counts) == {
                    "users": 0,
                    "jobs": 0,
                    "side_effects": None,
                    "reltuples": -1,
                    "stats": 0,
                    "inserted": 0,
                    "next_user": 1,
                }, each
            finally:
                await conn.close()
        differences = sorted(set(states[0]) ^ set(states[1]))
        assert differences == [], differences
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{fresh}"')
        await admin.close()
        left_open.terminate()


async def _answers(conn: asyncpg.Connection) -> bool:
    try:
        await conn.fetchval("SELECT 1")
        return True
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
        return False


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE jobs ADD COLUMN extra int",
        "DROP INDEX ix_audit_log_id_desc",
        "ALTER TABLE jobs SET (fillfactor = 50)",
        "CREATE FUNCTION leftover() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "CREATE VIEW leftover AS SELECT 1 AS one",
        "ANALYZE",
    ],
)
async def test_a_database_whose_schema_a_test_changed_is_dropped(
    databases: RecycledDatabases, change: str
) -> None:
    """A change beyond rows (and beyond tables of the test's own), or statistics the reset does not clear
    (a database-wide ANALYZE also analyses the catalogs), and the database is dropped, not used again."""
    name = await databases.take()
    conn = await asyncpg.connect(databases.dsn_of(name))
    try:
        await conn.execute(change)
    finally:
        await conn.close()
    await databases.give_back(name)
    assert databases.free == []
    admin = await asyncpg.connect(databases.admin_dsn)
    try:
        left = await admin.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE $1", databases.prefix + "%"
        )
    finally:
        await admin.close()
    assert left == []
