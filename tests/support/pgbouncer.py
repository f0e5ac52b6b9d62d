"""PgBouncer in front of the test server: the ``pgbouncer`` fixture.

``pgbouncer(mode)`` starts Debian's PgBouncer (``/usr/sbin/pgbouncer``; ``.ci/run`` installs it) on a free
loopback port with its stock settings — only the pool mode, the address and trust authentication are set,
plus any override a test passes — pointing at the test server, and returns a :class:`PgBouncer` whose
:meth:`PgBouncer.url` gives a database's address through it. Every PgBouncer started is stopped when the
test ends. Tests skip with the reason when PgBouncer is not installed.

A test module uses it with ``pytest_plugins = ("pgbouncer",)``.
"""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

PGBOUNCER = Path("/usr/sbin/pgbouncer")

#: PgBouncer refuses to run as root; as root it is started with ``-u`` as this user.
RUN_AS = "nobody"


class PgBouncer:
    """A running PgBouncer: ``url(database)`` is that database's asyncpg URL through it."""

    def __init__(
        self, server_url: str, port: int, mode: str, proc: subprocess.Popen[bytes], log: Path
    ) -> None:
        self.server_url = server_url
        self.port = port
        self.mode = mode
        self.proc = proc
        self.log = log

    def url(self, database: str | None = None) -> str:
        """``database`` (default: the server URL's own) on the test server, through this PgBouncer."""
        server = make_url(self.server_url)
        through = server.set(host="127.0.0.1", port=self.port, database=database or server.database)
        through = through.difference_update_query(["host"])
        return through.render_as_string(hide_password=False)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # PgBouncer's immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_target(server_url: str) -> str:
    """The ``[databases]`` connection string for the test server (TCP, or a Unix socket folder)."""
    url = make_url(server_url)
    host = url.host or str(url.query.get("host") or "127.0.0.1")
    parts = [f"host={host}", f"port={url.port or 5432}"]
    if url.username:
        parts.append(f"user={url.username}")
    if url.password:
        parts.append(f"password={url.password}")
    return " ".join(parts)


def start_pgbouncer(server_url: str, mode: str, workdir: Path, **overrides: object) -> PgBouncer:
    """Start PgBouncer in ``mode`` in front of ``server_url``'s server; waits until it accepts connections."""
    port = _free_port()
    user = make_url(server_url).username or "postgres"
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    settings: dict[str, object] = {
        "listen_addr": "127.0.0.1",
        "listen_port": port,
        "unix_socket_dir": "",
        "auth_type": "trust",
        "auth_file": workdir / "users.txt",
        "pool_mode": mode,
        **overrides,
    }
    ini = "[databases]\n* = " + _server_target(server_url) + "\n\n[pgbouncer]\n"
    ini += "".join(f"{name} = {value}\n" for name, value in settings.items())
    (workdir / "pgbouncer.ini").write_text(ini)
    log = workdir / "pgbouncer.log"
    command = [str(PGBOUNCER), str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:
        pwd.getpwnam(RUN_AS)
        command[1:1] = ["-u", RUN_AS]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(server_url, port, mode, proc, log)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return bouncer
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                bouncer.stop()
                raise RuntimeError(f"PgBouncer did not start:\n{bouncer.log_tail()}") from None
            time.sleep(0.05)


@pytest.fixture
def pgbouncer(pg_server_url: str) -> Iterator[Callable[..., PgBouncer]]:
    """``pgbouncer(mode="transaction", **settings)`` → a running :class:`PgBouncer` (stopped after the test)."""
    if not PGBOUNCER.exists():
        pytest.skip(f"PgBouncer is not installed ({PGBOUNCER} is missing; Debian's package is `pgbouncer`)")
    started: list[PgBouncer] = []
    folders: list[tempfile.TemporaryDirectory[str]] = []

    def start(mode: str = "transaction", **overrides: object) -> PgBouncer:
        for attempt in range(3):  # the free port may be taken by another process before PgBouncer binds it
            folder = tempfile.TemporaryDirectory(prefix="jobdesk-pgbouncer-")
            folders.append(folder)
            try:
                bouncer = start_pgbouncer(pg_server_url, mode, Path(folder.name), **overrides)
            except RuntimeError:
                if attempt == 2:
                    raise
                continue
            started.append(bouncer)
            return bouncer
        raise AssertionError("unreachable")

    try:
        yield start
    finally:
        for bouncer in started:
            bouncer.stop()
        for folder in folders:
            folder.cleanup()
