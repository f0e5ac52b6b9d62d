"""Schema v1: models match migrations, migrations round-trip."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import asyncpg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from app.db import asyncpg_dsn, create_engine, downgrade, head_revision, migration_status, run_migrations
from app.models import JOBS_STORAGE, Base
from tests.support.cli import cli_env, cmd


async def _diff(url: str) -> list:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(
                        sync, opts={"compare_type": True, "compare_server_default": True}
                    ),
                    Base.metadata,
                )
            )
    finally:
        await engine.dispose()


async def test_migrated_schema_matches_the_models(db_url: str) -> None:
    assert await _diff(db_url) == []


async def test_upgrade_downgrade_upgrade_round_trips(fresh_db_url: str) -> None:
    await run_migrations(fresh_db_url)
    await downgrade(fresh_db_url, "base")
    conn = await asyncpg.connect(asyncpg_dsn(fresh_db_url))
    try:
        left = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
        )
        assert left == []
    finally:
        await conn.close()
    await run_migrations(fresh_db_url)
    assert await _diff(fresh_db_url) == []


async def test_migration_status_reports_missing_and_current_schema(fresh_db_url: str) -> None:
    engine = create_async_engine(fresh_db_url)
    try:
        ok, message = await migration_status(engine)
        assert not ok
        assert "jobdesk migrate" in message
        await run_migrations(fresh_db_url)
        ok, message = await migration_status(engine)
        assert ok
        assert head_revision() in message
    finally:
        await engine.dispose()


async def test_jobs_table_has_its_own_fillfactor_and_autovacuum_settings(pg: asyncpg.Connection) -> None:
    options = await pg.fetchval("SELECT reloptions FROM pg_class WHERE relname = 'jobs'")
    parsed = dict(o.split("=", 1) for o in options)
    assert {k: float(v) for k, v in parsed.items()} == {k: float(v) for k, v in JOBS_STORAGE.items()}


# Case N12 (docs/cases.md).
def test_concurrent_migrate_commands_all_succeed(tmp_path: Path, fresh_db_url: str) -> None:
    """Four ``jobdesk migrate`` started together on a fresh database (as several hosts deploying at once):
    each waits for the migration lock; one migrates, the others then find nothing to do. All exit 0."""
    env = cli_env(tmp_path, DATABASE_URL=fresh_db_url)
    procs = [
        subprocess.Popen(
            cmd("migrate"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
        )
        for _ in range(4)
    ]
    results = [(proc.wait(120), *proc.communicate()) for proc in procs]
    assert [code for code, _, _ in results] == [0, 0, 0, 0], results
    assert all("Traceback" not in out + err for _, out, err in results), results
    assert asyncio.run(migration_status_of(fresh_db_url))[0]


async def migration_status_of(url: str) -> tuple[bool, str]:
    engine = create_engine(url, pool_size=1)
    try:
        return await migration_status(engine)
    finally:
        await engine.dispose()


def test_head_revision_read_from_the_files_is_alembics_head() -> None:
    """The head is read from the migration files' revision lines without importing Alembic (seconds at
    every start on a busy machine); it must be the revision Alembic itself finds."""
    from app.db import _alembic_head

    assert head_revision() == _alembic_head()
