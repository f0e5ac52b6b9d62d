"""A file-system error on a path that waits out database outages is that path's failure, not an outage:
``OSError`` is both a lost connection and an unreadable folder, a missing file or a full disk, and only
the first is retried (:func:`app.db.is_transient`, :mod:`app.socket_errors`). The connection errors the
driver really raises when the database is away stay transient."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import asyncpg
import pytest
import structlog
from sqlalchemy import text
from structlog.testing import capture_logs

from app.db import asyncpg_dsn, is_transient
from app.jobs import queue
from app.settings import Settings
from app.worker import faults
from app.worker.faults import retrying
from tests.support import processors as support_processors  # noqa: F401  (registers test.effect)
from tests.support.factories import TestUser, make_job
from tests.support.workers import running_worker, wait_status

log = structlog.get_logger("test")

FILE_ERRORS = [
    PermissionError(errno.EACCES, "Permission denied", "/data/files/ab"),
    FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/files/ab/cd"),
    OSError(errno.ENOSPC, "No space left on device"),  # a write to a full disk names no file
    FileNotFoundError("the stored file is gone"),
]


@pytest.mark.parametrize("error", FILE_ERRORS, ids=lambda e: type(e).__name__ + str(e.errno))
async def test_a_file_error_in_a_retried_write_is_raised_at_once_not_retried_as_an_outage(
    engine: Any, error: OSError, monkeypatch: Any
) -> None:
    monkeypatch.setattr(faults, "RETRY_FIRST_DELAY_SECS", 0.01)
    calls = 0

    async def write(conn: Any) -> None:
        nonlocal calls
        calls += 1
        await conn.execute(text("SELECT 1"))
        raise error

    with capture_logs() as logs, pytest.raises(type(error)):
        await asyncio.wait_for(retrying(engine, "finish", write, log), 5)
    assert calls == 1
    assert not [e for e in logs if e["event"] == "database unavailable; retrying"]


async def test_a_lost_connection_in_a_retried_write_is_still_waited_out(
    engine: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(faults, "RETRY_FIRST_DELAY_SECS", 0.01)
    calls = 0

    async def write(conn: Any) -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        return int((await conn.execute(text("SELECT 7"))).scalar_one())

    assert await asyncio.wait_for(retrying(engine, "finish", write, log), 5) == 7
    assert calls == 3


async def test_what_the_driver_raises_when_the_server_is_away_is_transient(
    db_url: str, pg: asyncpg.Connection, tmp_path: Any
) -> None:
    """Real failures, as asyncpg raises them: a Unix socket with no server behind it (a
    ``FileNotFoundError`` naming no file), a refused port, a name that does not resolve, a connection
    ended during a statement and the next use of it."""
    seen: list[BaseException] = []
    for where in (
        {"host": str(tmp_path)},
        {"host": "127.0.0.1", "port": 1},
        {"host": "no-such-host.invalid"},
    ):
        with pytest.raises(Exception) as failed:
            await asyncpg.connect(user="postgres", database="postgres", timeout=5, **where)
        seen.append(failed.value)
    assert isinstance(seen[0], FileNotFoundError)
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        sleeping = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(10)"))
        await asyncio.sleep(0.3)
        await pg.execute("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(Exception) as failed:
            await sleeping
        seen.append(failed.value)
        with pytest.raises(Exception) as failed:
            await conn.fetchval("SELECT 1")
        seen.append(failed.value)
    finally:
        conn.terminate()
    assert [repr(e) for e in seen if not is_transient(e)] == []


async def test_a_full_disk_while_recording_a_completion_fails_the_job_instead_of_retrying_for_ever(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, monkeypatch: Any
) -> None:
    """The completer's write raises an error of the disk: the job ends failed, saying why, within
    seconds — not left running behind "database unavailable; retrying" until someone restarts it."""

    async def disk_full(*args: Any, **kw: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(queue, "complete_standalone", disk_full)
    job = (await make_job(engine, settings, owner, "test.effect", {"seconds": 0}))["id"]
    with capture_logs() as logs:
        async with running_worker(settings):
            row = await wait_status(pg, job, ["failed"], timeout=10)
    assert "No space left on device" in row["error_message"]
    assert not [e for e in logs if e["event"] == "database unavailable; retrying"]


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_no_descriptor_left_for_a_socket_is_waited_out_but_a_file_open_is_its_own_failure(code: int) -> None:
    """A new connection's socket refused for want of descriptors names no file, and goes when other
    connections and files close: an outage to wait out. ``open`` hitting the same limit names its file."""
    assert is_transient(OSError(code, "Too many open files"))
    assert not is_transient(OSError(code, "Too many open files", "/data/files/ab"))
