"""Shared fixtures: a real PostgreSQL for every test.

The server is ``TEST_DATABASE_URL`` when set (``.ci/run`` points it at the machine's PostgreSQL 15),
otherwise an embedded PostgreSQL that this test session owns. Migrations run once into a template
database; each test that asks for ``db_url`` gets a ``CREATE DATABASE … TEMPLATE`` copy of its own, so
tests see each other's committed rows across connections exactly as workers do (no test-wide transaction
that would hide concurrency bugs), and never share state. A copy is made equal to the template again
after its test, checked, renamed and given to a later test (:mod:`tests.support.recycle`).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

# Settings are cached per process: fix the environment before anything imports the app.
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.pop("DATABASE_URL", None)
for _name in (
    "SLACK_WEBHOOK_URL",
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_CHAT_ID",
    "ALERT_WEBHOOK_URL",
    "SMTP_HOST",
):
    os.environ.pop(_name, None)

ROOT = Path(__file__).resolve().parents[1]

from app.db import asyncpg_dsn, run_migrations  # noqa: E402
from app.settings import Settings, load_settings, normalize_database_url  # noqa: E402
from tests.support import cheap_hashing  # noqa: E402
from tests.support.factories import SIDE_EFFECTS_DDL, TestUser, make_user  # noqa: E402
from tests.support.recycle import RecycledDatabases  # noqa: E402
from tests.support.webkit import app_client  # noqa: E402

ARTIFACTS = ROOT / "tests" / "artifacts"

cheap_hashing.use(cheap_hashing.CHEAP)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="run the long variants of timing-heavy tests")


# Modules whose tests assert on wall-clock time (leases of a few seconds, a rolling minute's edge, a
# reconnect or a server start within a deadline) with worker or server processes of their own. `make
# test` runs every other test on three pytest processes (`-m "not serial"`, pytest-xdist) and these apart
# afterwards (`-m serial`, three files at a time): a CPU-bound neighbour's spike would otherwise fail them
# for no fault of Jobdesk's. Beside each other they are no such neighbours: they mostly wait on
# processes of their own.
SERIAL_MODULES = {
    "tests/ops/test_cli.py",
    "tests/ops/test_embedded.py",
    "tests/ops/test_ops.py",
    "tests/ops/test_partition.py",
    "tests/ops/test_pgbouncer.py",
    "tests/worker/test_chaos.py",
    "tests/worker/test_hostile.py",
    "tests/worker/test_silent.py",
    "tests/worker/test_claim_order.py",
    "tests/worker/test_claim_rate.py",
    "tests/worker/test_worker_faults.py",
    "tests/worker/test_shutdown.py",
    "tests/worker/test_stop_watch.py",
    "tests/worker/test_worker_processes.py",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(ROOT).as_posix() in SERIAL_MODULES or item.get_closest_marker("alone"):
            item.add_marker(pytest.mark.serial)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Every object alive now (the app, its libraries and the collected tests: several hundred thousand)
    # lives to the end of the run; frozen, no collection traverses them again. Each test then builds a
    # Litestar app, engines and clients whose many short-lived objects would trigger a full collection
    # of that whole heap every few hundred milliseconds: most of a test's own CPU time went to the
    # collector. Collections still run, on the objects the tests make, and less often.
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)


@pytest.fixture
def real_password_hashing() -> Iterator[None]:
    """argon2 at the app's own parameters in this process for the test (:mod:`tests.support.cheap_hashing`):
    for tests of what hashing costs, or of what it must not be spent on."""
    cheap_hashing.use(cheap_hashing.REAL)
    try:
        yield
    finally:
        cheap_hashing.use(cheap_hashing.CHEAP)


@pytest.fixture(scope="session")
def long_run(request: pytest.FixtureRequest) -> bool:
    """True with ``--long``: timing-heavy tests use the cases' full durations instead of CI's short ones."""
    return bool(request.config.getoption("--long"))


# --- the server ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """asyncpg URL of a server where tests may create and drop databases."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        yield normalize_database_url(url)
        return
    from tests.support.pg_owned import OwnedPostgres

    with OwnedPostgres(Path(tempfile.mkdtemp(prefix="jobdesk-testpg-"))) as server:
        yield server.url


def _admin_dsn(url: str, database: str = "postgres") -> str:
    from sqlalchemy.engine import make_url

    return asyncpg_dsn(make_url(url).set(database=database).render_as_string(hide_password=False))


def _db_url(server_url: str, database: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(server_url).set(database=database).render_as_string(hide_password=False)


_counter = itertools.count()
_PREFIX = f"jobdesk_t{os.getpid()}"


async def _create_db(server_url: str, name: str, template: str | None = None) -> None:
    conn = await asyncpg.connect(_admin_dsn(server_url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        if template:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _drop_db(server_url: str, name: str) -> None:
    conn = await asyncpg.connect(_admin_dsn(server_url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_db(pg_server_url: str) -> Iterator[str]:
    """Name of a database migrated to head, the template every test database is copied from."""
    name = f"{_PREFIX}_template"
    asyncio.run(_create_db(pg_server_url, name))
    asyncio.run(run_migrations(_db_url(pg_server_url, name)))
    yield name
    asyncio.run(_drop_db(pg_server_url, name))


@pytest.fixture
async def fresh_db_url(pg_server_url: str) -> AsyncIterator[str]:
    """URL of a new, empty database (no schema), dropped afterwards; for migration tests."""
    name = f"{_PREFIX}_{next(_counter)}"
    await _create_db(pg_server_url, name)
    yield _db_url(pg_server_url, name)
    await _drop_db(pg_server_url, name)


@pytest.fixture(scope="session")
def recycled_databases(pg_server_url: str, template_db: str) -> Iterator[RecycledDatabases]:
    """This process's copies of the template (:mod:`tests.support.recycle`)."""
    databases = RecycledDatabases(
        _admin_dsn(pg_server_url), lambda name: _admin_dsn(pg_server_url, name), template_db, _PREFIX
    )
    yield databases
    asyncio.run(databases.close())


@pytest.fixture
async def db_url(pg_server_url: str, recycled_databases: RecycledDatabases) -> AsyncIterator[str]:
    """URL of this test's own migrated database, in the template's state and under a name no test used
    before; afterwards made equal to the template again for a later test, or dropped."""
    name = await recycled_databases.take()
    yield _db_url(pg_server_url, name)
    await recycled_databases.give_back(name)


# --- application objects ---------------------------------------------------------------------------

TEST_SETTINGS: dict[str, Any] = {
    "job_retry_intervals": [0.05, 0.05, 0.05],
    "job_retry_jitter": 0.0,
    "job_processor_poll_interval": 0.5,
    "worker_visibility_timeout_secs": 5,
    "worker_sweep_interval_secs": 0.5,
    "worker_shutdown_grace_secs": 5,
    "job_cancel_grace_secs": 0.5,
    "db_pool_size": 10,
    "secret_key": "test-secret-key-for-csrf-signing-0123456789",
    "log_level": "WARNING",
}


@pytest.fixture
def make_settings(db_url: str, tmp_path: Path) -> Any:
    """``make_settings(**overrides)`` → Settings for this test's database, with short test timings."""

    def _make(**overrides: Any) -> Settings:
        values = {**TEST_SETTINGS, "database_url": db_url, "jobdesk_data_dir": tmp_path / "data", **overrides}
        return load_settings(**values)

    return _make


@pytest.fixture
def settings(make_settings: Any) -> Settings:
    return make_settings()


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[Any]:
    """A pooled async engine on this test's database."""
    from app.db import create_engine

    eng = create_engine(settings.database_url or "", pool_size=5)
    yield eng
    await eng.dispose()


@pytest.fixture
async def pg(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A raw asyncpg connection on this test's database, for assertions and for tampering with rows."""
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    yield conn
    await conn.close()


@pytest.fixture
def tcp_proxy(pg_server_url: str) -> Iterator[Any]:
    """A TCP proxy in front of the test server (:class:`netproxy.TcpProxy`): ``tcp_proxy.url(db_url)``
    is a database URL through it; ``cut()`` and ``restore()`` cut a client off and let it back."""
    from sqlalchemy.engine import make_url

    from tests.support.netproxy import TcpProxy

    target = make_url(pg_server_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432).start()
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


# --- users and the web app --------------------------------------------------------------------------


@pytest.fixture
async def owner(pg: asyncpg.Connection) -> TestUser:
    """A user who owns the test's jobs; the ``side_effects`` table of ``test.effect`` exists."""
    await pg.execute(SIDE_EFFECTS_DDL)
    return await make_user(pg)


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    """Settings of the web app under test: no in-app worker, so jobs stay where the test puts them."""
    return make_settings(worker_enabled=False)


@pytest.fixture
async def client(ui_settings: Settings) -> AsyncIterator[AsyncTestClient]:
    """A started app (lifespan run) on ``ui_settings`` and a test client for it."""
    async with app_client(ui_settings) as c:
        yield c
