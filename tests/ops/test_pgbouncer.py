"""Jobdesk behind PgBouncer with its stock settings (``DATABASE_POOLER``), through real processes.

The ``pgbouncer`` fixture (tests/support/pgbouncer.py) starts Debian's PgBouncer in front of the test server; these
tests skip with the reason where it is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app import settings as settings_mod
from app.db import asyncpg_dsn, create_engine, fetch_dicts, read_rows
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from app.worker.runner import Worker
from tests.support.cli import assert_clean_failure, cli_env, cmd, free_port, run
from tests.support.webkit import app_client, bearer

pytest_plugins = ("tests.support.pgbouncer",)  # the ``pgbouncer`` fixture (imported by pytest, not here)

Start = Callable[..., Any]
"""The ``pgbouncer`` fixture: ``pgbouncer(mode, **settings)`` → a running ``pgbouncer.PgBouncer``."""

_ECHO = text(
    "SELECT CAST(:n AS int) AS n, current_setting('jit') AS jit, current_setting('statement_timeout') AS timeout"
)
_TEXT = text("SELECT CAST(:s AS text) || '/' || CAST(:n AS int) AS s")


def _database(url: str) -> str:
    return str(make_url(url).database)


# --- prepared statements and session settings --------------------------------------------------------------


async def _mixed_workload(engines: list[Any], count: int) -> tuple[int, int, list[str]]:
    """``count`` concurrent transactions and autocommit reads over ``engines`` (two "processes"), each
    checking that it got its own answer; returns (wrong answers, errors, error texts)."""
    wrong = errors = 0
    texts: list[str] = []

    async def one(i: int) -> bool:
        engine = engines[i % len(engines)]
        if i % 3 == 0:
            rows = await read_rows(engine, _TEXT, {"s": f"r{i}", "n": i})
            return rows == [{"s": f"r{i}/{i}"}]
        async with engine.begin() as conn:
            row = (await conn.execute(_ECHO, {"n": i})).mappings().one()
            rows = await fetch_dicts(conn, _TEXT, {"s": f"t{i}", "n": -i})
        return row["n"] == i and rows == [{"s": f"t{i}/{-i}"}]

    for outcome in await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True):
        if isinstance(outcome, BaseException):
            errors += 1
            texts.append(f"{type(outcome).__name__}: {outcome}"[:200])
        elif not outcome:
            wrong += 1
    return wrong, errors, texts


# Case N11 (docs/cases.md).
async def test_transaction_mode_shares_server_connections_without_prepared_statement_mix_ups(
    pgbouncer: Start, db_url: str
) -> None:
    """Two "processes" (engines) through a transaction-mode PgBouncer with two server connections: every
    statement gets its own answer, none fails, no prepared statement is left on the server connections, and
    each transaction runs with JIT off and the statement timeout (``SET LOCAL``). The same workload with
    asyncpg's named, cached statements (what Jobdesk did before ``DATABASE_POOLER``) fails."""
    bouncer = pgbouncer("transaction", default_pool_size=2)
    url = bouncer.url(_database(db_url))
    # 600 at once on two server connections: on a loaded machine the last wait longer than the default
    # 5 s for a connection, which is not what this test looks at
    engines = [
        create_engine(url, pool_size=5, pool_timeout=60, pooler="transaction", statement_timeout_ms=4321)
        for _ in range(2)
    ]
    try:
        wrong, errors, texts = await _mixed_workload(engines, 600)
        assert (wrong, errors) == (0, 0), texts[:5]
        async with engines[0].begin() as conn:
            row = (await conn.execute(_ECHO, {"n": 1})).mappings().one()
            assert (row["jit"], row["timeout"]) == ("off", "4321ms")
        for _ in range(4):  # look at both server connections
            async with engines[1].begin() as conn:
                left = (await conn.execute(text("SELECT count(*) FROM pg_prepared_statements"))).scalar()
                assert left == 0
    finally:
        for engine in engines:
            await engine.dispose()

    # Without the transaction-mode settings (asyncpg's named statements, cached per client connection):
    named = [create_engine(url, pool_size=5, pooler="session") for _ in range(2)]
    try:
        wrong, errors, _ = await _mixed_workload(named, 300)
    finally:
        for engine in named:
            await engine.dispose()
    assert wrong + errors > 0, "named prepared statements went through transaction pooling unharmed"


async def test_pool_exhausted_behind_pgbouncer_answers_503_within_the_pool_timeout(
    pgbouncer: Start, db_url: str, make_settings: Any
) -> None:
    """PgBouncer's only server connection held by another client: a request waits DB_POOL_TIMEOUT_SECS (not
    PgBouncer's 120 s queue) and gets a 503; once the connection is free the same request answers."""
    bouncer = pgbouncer("transaction", default_pool_size=1)
    url = bouncer.url(_database(db_url))
    settings = make_settings(
        database_url=url,
        database_pooler="transaction",
        database_listen_url=db_url,
        worker_enabled=False,
        db_pool_timeout_secs=1,
    )
    _, headers = await bearer(db_url, "pool@example.com")
    async with app_client(settings) as client:
        assert (await client.get("/api/me", headers=headers)).status_code == 200
        holder = await asyncpg.connect(asyncpg_dsn(url), statement_cache_size=0)
        try:
            await holder.execute("BEGIN; SELECT 1")  # the server connection is now this client's
            for path in ("/api/me", "/api/jobs"):
                started = time.monotonic()
                answer = await client.get(path, headers=headers)
                waited = time.monotonic() - started
                assert answer.status_code == 503, answer.text
                assert answer.headers["retry-after"] == "5", answer.text
                assert waited < 3, f"{path} waited {waited:.1f} s"
            # A single autocommit read (the session lookup of every page) is bounded the same way.
            engine = create_engine(url, pool_size=1, pool_timeout=1, pooler="transaction")
            started = time.monotonic()
            with pytest.raises(sa_exc.TimeoutError):
                await read_rows(engine, _TEXT, {"s": "x", "n": 1})
            assert time.monotonic() - started < 3
            await holder.execute("ROLLBACK")
            assert await read_rows(engine, _TEXT, {"s": "x", "n": 1}) == [{"s": "x/1"}]
            await engine.dispose()
        finally:
            await holder.close()
        assert (await client.get("/api/jobs", headers=headers)).status_code == 200


# --- timeouts per transaction ----------------------------------------------------------------------------


@pytest.fixture
def process_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Settings]]:
    """``process_env(**VARS)`` → the process's settings read from those environment variables (restored
    afterwards): engines made without explicit settings follow them."""

    def apply(**variables: str) -> Settings:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        settings_mod.get_settings.cache_clear()
        return settings_mod.get_settings()

    yield apply
    settings_mod.get_settings.cache_clear()


@pytest.mark.parametrize("mode", ["none", "transaction"])
async def test_a_worker_transaction_that_goes_silent_is_ended_by_the_server(
    pgbouncer: Start,
    db_url: str,
    pg: asyncpg.Connection,
    process_env: Callable[..., Settings],
    make_settings: Any,
    mode: str,
) -> None:
    """A worker host lost in the middle of a transaction that locks a job row: the server ends that
    transaction after DB_IDLE_IN_TRANSACTION_TIMEOUT_MS, directly and through PgBouncer in transaction mode
    (where the timeout can only be set per transaction), so the row is free again for the rescue."""
    url = db_url if mode == "none" else pgbouncer(mode).url(_database(db_url))
    settings = process_env(
        DATABASE_URL=url,
        DATABASE_POOLER=mode,
        DATABASE_LISTEN_URL=db_url,
        DB_IDLE_IN_TRANSACTION_TIMEOUT_MS="1000",
        DB_STATEMENT_TIMEOUT_MS="5000",
    )
    user_id = await pg.fetchval(
        "INSERT INTO users (email, password_hash) VALUES ('w@example.com', 'x') RETURNING id"
    )
    direct = create_engine(db_url, pool_size=1)
    async with direct.begin() as conn:
        job_id = (
            await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=user_id), make_settings())
        ).job["id"]
    await direct.dispose()

    worker = Worker(settings, url)  # its own connections, made as the worker process makes them
    silent = await worker.engine.connect()
    try:
        await silent.begin()
        timeouts = (await silent.execute(text("SHOW idle_in_transaction_session_timeout"))).scalar()
        assert timeouts == "1s"
        await silent.execute(text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"), {"id": job_id})
        # ...and the host goes silent. Another session finds the row locked, then free within the timeout:
        free_after = await _seconds_until_lockable(pg, job_id)
        assert 0.5 < free_after < 3, free_after
        with pytest.raises(sa_exc.DBAPIError):
            await silent.execute(text("SELECT 1"))
    finally:
        with contextlib.suppress(Exception):
            await silent.close()
        await worker.engine.dispose()
        await worker.app_engine.dispose()


async def _seconds_until_lockable(pg: asyncpg.Connection, job_id: Any, limit: float = 10) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            async with pg.transaction():
                await pg.execute("SELECT id FROM jobs WHERE id = $1 FOR UPDATE NOWAIT", job_id)
            return time.monotonic() - started
        except asyncpg.LockNotAvailableError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"the job row stayed locked for {limit} s")


# --- the commands -------------------------------------------------------------------------------------------


def test_a_pooler_met_with_database_pooler_none_is_one_error_line(
    tmp_path: Path, pgbouncer: Start, db_url: str
) -> None:
    bouncer = pgbouncer("transaction")
    for command in ("migrate", "worker"):
        result = run(tmp_path, command, DATABASE_URL=bouncer.url(_database(db_url)))
        line = assert_clean_failure(result, "DATABASE_POOLER", "unsupported startup parameter")
        assert "DATABASE_LISTEN_URL" in line


def _wait_http(url: str, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{url} did not answer within {timeout} s"
        time.sleep(0.2)


class _Api:
    """Requests to a running ``jobdesk serve`` that fail the test on any 5xx."""

    def __init__(self, base: str, token: str) -> None:
        self.client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=15)

    def __call__(self, method: str, path: str, **kw: Any) -> Any:
        answer = self.client.request(method, path, **kw)
        assert answer.status_code < 500, f"{method} {path}: {answer.status_code} {answer.text[:300]}"
        return answer

    def wait(self, path: str, status: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body: dict[str, Any] = self("GET", path).json()
            if body["status"] == status:
                return body
            assert time.monotonic() < deadline, f"{path} is still {body['status']}"
            time.sleep(0.1)


def _exercise(api: _Api) -> None:
    """A few API routes, jobs completed by a worker, a pipeline, and a burst of concurrent requests."""
    assert api("GET", "/api/me").json()["is_admin"] is True
    assert api("GET", "/api/job-types").status_code == 200
    jobs = [
        api("POST", "/api/jobs", json={"type": "noop", "input_data": {"n": i}}).json()["id"] for i in range(5)
    ]
    for job_id in jobs:
        api.wait(f"/api/jobs/{job_id}", "completed")
    assert api("GET", f"/api/jobs/{jobs[0]}/events").status_code == 200
    steps = [
        {"key": "start", "type": "noop"},
        {"key": "left", "type": "noop", "depends_on": ["start"]},
        {"key": "right", "type": "noop", "depends_on": ["start"]},
    ]
    pipeline = api("POST", "/api/pipelines", json={"name": "fan", "steps": steps}).json()
    done = api.wait(f"/api/pipelines/{pipeline['id']}", "completed")
    assert all(step["status"] == "completed" for step in done["steps"])
    for path in ("/api/jobs", "/api/pipelines", "/api/schedules", "/readyz", "/login"):
        api("GET", path)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=str(api.client.base_url), headers=api.client.headers) as client:
            paths = [f"/api/jobs/{jobs[i % len(jobs)]}" for i in range(60)] + ["/api/me"] * 20
            answers = await asyncio.gather(*(client.get(p, timeout=15) for p in paths))
        return [a.status_code for a in answers]

    codes = asyncio.run(burst())
    assert set(codes) == {200}, codes


# Case N11 (docs/cases.md).
@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_serve_worker_and_migrate_behind_pgbouncer(
    tmp_path: Path, pgbouncer: Start, fresh_db_url: str, mode: str
) -> None:
    """``jobdesk migrate`` (direct), then ``jobdesk serve`` (with its in-app worker) and ``jobdesk worker``
    with DATABASE_POOLER set, through PgBouncer with its stock settings: the API, jobs and a pipeline
    work, with no 5xx and no worker error."""
    bouncer = pgbouncer(mode)
    env = {
        "DATABASE_URL": bouncer.url(_database(fresh_db_url)),
        "DATABASE_POOLER": mode,
        "DATABASE_LISTEN_URL": fresh_db_url,
        "DATABASE_MIGRATE_URL": fresh_db_url,
        # Session pooling gives each client connection its own server connection: the pools of both
        # processes must fit in PgBouncer's stock default_pool_size (20).
        "DB_POOL_SIZE": "4",
        "WORKER_ENABLED": "true",
    }
    migrated = run(tmp_path, "migrate", **env)
    assert migrated.returncode == 0, migrated.stderr
    assert "Migrated the database" in migrated.stdout, migrated.stderr
    made = run(tmp_path, "create-user", "ops@example.com", "--admin", stdin="a-long-enough-password\n", **env)
    assert made.returncode == 0, made.stderr
    token = run(tmp_path, "create-token", "ops@example.com", **env)
    assert token.returncode == 0, token.stderr

    port = free_port()
    logs = {name: (tmp_path / f"{name}.log").open("w+") for name in ("serve", "worker")}
    procs = {
        name: subprocess.Popen(
            cmd(*args),
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            text=True,
            env=cli_env(tmp_path, **env),
            cwd=tmp_path,
        )
        for name, args in (("serve", ("serve", "--port", str(port))), ("worker", ("worker",)))
    }
    try:
        _wait_http(f"http://127.0.0.1:{port}/readyz", procs["serve"])
        _exercise(_Api(f"http://127.0.0.1:{port}", token.stdout.strip().splitlines()[-1]))
        assert all(proc.poll() is None for proc in procs.values())
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            if proc.poll() is None:
                proc.kill()
    output = {}
    for name, log in logs.items():
        log.seek(0)
        output[name] = log.read()
        log.close()
    for name, text_ in output.items():
        assert "Traceback" not in text_, f"{name}:\n{text_[-3000:]}\npgbouncer:\n{bouncer.log_tail()}"
        assert '"level":"error"' not in text_.replace(" ", ""), (
            f"{name}:\n{text_[-3000:]}\npgbouncer:\n{bouncer.log_tail()}"
        )
