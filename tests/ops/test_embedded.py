"""The embedded PostgreSQL used when DATABASE_URL is unset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import app.embedded as embedded
from app.db import DatabaseUnavailable
from app.embedded import HANDLE_FILE, prune_embedded_handles, root_embedded_conflicts


def test_home_folders_are_conflicts_for_root() -> None:
    assert Path("/root") in root_embedded_conflicts([Path("/root/src/jobdesk/.jobdesk/pgdata")])
    assert Path("/home") in root_embedded_conflicts([Path("/home/ann/jobdesk/.jobdesk/pgdata")])
    assert root_embedded_conflicts([Path("/srv/jobdesk/.jobdesk/pgdata"), Path("/opt/venv/lib/pg/bin")]) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal only applies when running as root")
def test_root_refusal_message_says_where_to_put_things(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Treat this test's temp folder as a home folder, rather than writing under the real /root.
    fake_home = tmp_path / "home-of-someone"
    monkeypatch.setattr(embedded, "_home_dirs", lambda: {fake_home})
    monkeypatch.setattr(embedded, "_embedded_server", None)
    with pytest.raises(DatabaseUnavailable) as caught:
        embedded.start_embedded_postgres(fake_home / "jobdesk" / ".jobdesk")
    message = str(caught.value)
    assert message.startswith("Refusing to start the embedded PostgreSQL as root")
    assert str(fake_home) in message
    assert "/srv/jobdesk" in message
    assert "JOBDESK_DATA_DIR" in message
    assert "DATABASE_URL" in message
    assert not (fake_home / "jobdesk" / ".jobdesk" / "pgdata" / "PG_VERSION").exists()


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from sqlalchemy import text
    from app.db import create_engine
    from app.embedded import start_embedded_postgres

    async def main(url):
        engine = create_engine(url, pool_size=1)
        async with engine.connect() as conn:
            version = (await conn.execute(text("SHOW server_version_num"))).scalar()
        await engine.dispose()
        return version

    url = start_embedded_postgres(Path(sys.argv[1]))
    print(url)
    print(asyncio.run(main(url)))
    """
)


@pytest.mark.slow
def test_start_embedded_postgres_in_a_temp_dir(tmp_path: Path) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    if os.geteuid() == 0 and root_embedded_conflicts([Path(POSTGRES_BIN_PATH).resolve()]):
        pytest.skip(
            "as root with the virtualenv under a home folder the embedded server is refused by design"
        )
    data = tmp_path / "data"
    for _ in range(2):  # the second run reuses the data directory
        result = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(data)],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert result.returncode == 0, result.stderr
        url, version = result.stdout.split()
        assert url.startswith("postgresql+asyncpg://postgres@/postgres")
        assert int(version) >= 150000
    assert (data / "pgdata" / "PG_VERSION").exists()


CRASH_THEN_EXIT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from sqlalchemy import text
    from app.db import create_engine
    from app.embedded import start_embedded_postgres

    async def main(url):
        engine = create_engine(url, pool_size=1)
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        await engine.dispose()

    asyncio.run(main(start_embedded_postgres(Path(sys.argv[1]))))
    if sys.argv[2] == "crash":
        os.kill(os.getpid(), signal.SIGKILL)  # no exit hooks: the handle file keeps this process's id
    """
)


def _embedded(data: Path, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CRASH_THEN_EXIT, str(data), how],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).resolve().parents[2],
    )


@pytest.mark.slow
def test_a_clean_exit_after_a_crash_stops_the_embedded_server(tmp_path: Path) -> None:
    """A process using the embedded PostgreSQL is killed (its id stays in the server's handle file); the
    next one finds the server running, adopts it, and on its clean exit stops it and leaves no dead id."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    if os.geteuid() == 0 and root_embedded_conflicts([Path(POSTGRES_BIN_PATH).resolve()]):
        pytest.skip(
            "as root with the virtualenv under a home folder the embedded server is refused by design"
        )
    data = tmp_path / "data"
    pgdata = data / "pgdata"
    postmaster = pgdata / "postmaster.pid"
    try:
        crashed = _embedded(data, "crash")
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        assert postmaster.exists(), "the crashed process's server should still be running"
        assert json.loads((pgdata / HANDLE_FILE).read_text()) != []

        clean = _embedded(data, "exit")
        assert clean.returncode == 0, clean.stderr
        deadline = time.monotonic() + 15
        while postmaster.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not postmaster.exists(), "the embedded PostgreSQL is still running after a clean exit"
        assert json.loads((pgdata / HANDLE_FILE).read_text()) == []
    finally:
        if postmaster.exists():  # never leave a server behind
            os.kill(int(postmaster.read_text().split()[0]), signal.SIGTERM)


def test_prune_keeps_live_processes_and_drops_ended_ones(tmp_path: Path) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    (tmp_path / HANDLE_FILE).write_text(json.dumps([os.getpid(), ended.pid, os.getppid()]))
    kept = prune_embedded_handles(tmp_path, threading.Lock())
    assert kept == [os.getpid(), os.getppid()]
    assert json.loads((tmp_path / HANDLE_FILE).read_text()) == kept
