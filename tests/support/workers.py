"""Helpers for running workers in tests: in-process (fast) and as real subprocesses (kill -9, SIGTERM)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings
from app.worker.completer import Completer, Tally
from app.worker.runner import Worker

ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def standalone_completer(
    settings: Settings, engine: AsyncEngine, worker_id: str = "test-worker"
) -> AsyncIterator[Completer]:
    """A worker's completer on ``engine``, outside any worker: outcomes written by the test's calls to
    :meth:`~app.worker.completer.Completer.write` (or its other methods); its held connection closed at exit."""
    completer = Completer(
        settings,
        worker_id=worker_id,
        engine=engine,
        held={},
        tally=Tally(),
        log=structlog.get_logger("test"),
        on_notify=lambda: None,
    )
    try:
        yield completer
    finally:
        await completer.held_conn.close()


@contextlib.asynccontextmanager
async def running_worker(settings: Settings, **kw: Any) -> AsyncIterator[Worker]:
    """An in-process worker on ``settings.database_url``, stopped gracefully at exit."""
    worker = Worker(settings, settings.database_url or "", **kw)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)


async def wait_status(
    pg: asyncpg.Connection, job_id: Any, statuses: Iterable[str], timeout: float = 20.0
) -> dict[str, Any]:
    """Poll until the job has one of ``statuses``; return its row (fails the test on timeout)."""
    wanted = set(statuses)
    deadline = time.monotonic() + timeout
    row = None
    while time.monotonic() < deadline:
        row = await pg.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
        if row is not None and row["status"] in wanted:
            return dict(row)
        await asyncio.sleep(0.02)
    raise AssertionError(
        f"job {job_id} did not reach {wanted} within {timeout}s: {dict(row) if row else None}"
    )


async def wait_until(
    predicate: Any, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout}s")


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for a worker subprocess mirroring ``settings``."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JOB", "WORKER", "MAX_CONCURRENT", "DB_"))
    }
    env.update(
        {
            "DATABASE_URL": settings.database_url or "",
            "JOBDESK_DATA_DIR": str(settings.data_dir),
            "MAX_CONCURRENT_JOBS": str(settings.max_concurrent_jobs),
            "DB_POOL_SIZE": str(settings.db_pool_size),
            "JOB_PROCESSOR_POLL_INTERVAL": str(settings.job_processor_poll_interval),
            "JOB_RETRY_INTERVALS": ",".join(str(i) for i in settings.job_retry_intervals),
            "JOB_RETRY_JITTER": str(settings.job_retry_jitter),
            "WORKER_VISIBILITY_TIMEOUT_SECS": str(settings.worker_visibility_timeout_secs),
            "WORKER_SWEEP_INTERVAL_SECS": str(settings.worker_sweep_interval_secs),
            "WORKER_SHUTDOWN_GRACE_SECS": str(settings.worker_shutdown_grace_secs),
            "JOB_CANCEL_GRACE_SECS": str(settings.job_cancel_grace_secs),
            "SECRET_KEY": "test",
            "LOG_LEVEL": "INFO",
            "JOBDESK_PROCESSOR_MODULES": "tests.support.processors",
            "PYTHONPATH": str(ROOT),
        }
    )
    if settings.worker_heartbeat_secs:
        env["WORKER_HEARTBEAT_SECS"] = str(settings.worker_heartbeat_secs)
    env.update(extra)
    return env


class WorkerProcess:
    """``python worker.py`` as a real subprocess; its output goes to ``log_path``."""

    command: tuple[str, ...] = (str(ROOT / "worker.py"),)

    def __init__(self, settings: Settings, log_path: Path, *, own_group: bool = False, **extra: str) -> None:
        """``own_group``: in a process group of its own, which a test may signal as a terminal's Ctrl+C
        does (``os.killpg``) without signalling itself."""
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            self.argv(),
            env=worker_env(settings, **{**self.environment(), **extra}),
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=own_group,
        )

    def argv(self) -> list[str]:
        return [sys.executable, *self.command]

    def environment(self) -> dict[str, str]:
        return {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """``kill -9``: no cleanup, no release, nothing."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


class ServeProcess(WorkerProcess):
    """``jobdesk serve --port PORT [--workers N]`` with its in-app worker, as a real subprocess, used like
    a :class:`WorkerProcess`."""

    def __init__(
        self, settings: Settings, log_path: Path, port: int, *, web_processes: int = 1, **kw: Any
    ) -> None:
        self.command = ("-m", "app.cli", "serve", "--port", str(port), "--workers", str(web_processes))
        super().__init__(settings, log_path, **kw)

    def environment(self) -> dict[str, str]:
        return {"WORKER_ENABLED": "true"}


class MakeRunProcess(WorkerProcess):
    """``make run PORT=PORT`` as a person starts it, in a process group of its own (make's), serving on
    ``settings``' database with the test's interpreter: its ``VENV`` (in ``venv_dir``) holds a
    ``jobdesk`` that runs this checkout's command, and a stamp newer than ``pyproject.toml``, so make
    installs nothing."""

    def __init__(self, settings: Settings, log_path: Path, port: int, venv_dir: Path) -> None:
        jobdesk = venv_dir / "bin" / "jobdesk"
        jobdesk.parent.mkdir(parents=True, exist_ok=True)
        jobdesk.write_text(f'#!/bin/sh\nexec {sys.executable} -m app.cli "$@"\n')
        jobdesk.chmod(0o755)
        (venv_dir / ".installed-stamp").touch()
        self.make = ["make", "--no-print-directory", "run", f"VENV={venv_dir}", f"PORT={port}"]
        super().__init__(settings, log_path, own_group=True)

    def argv(self) -> list[str]:
        return self.make

    def environment(self) -> dict[str, str]:
        return {"WORKER_ENABLED": "true"}

    def close(self) -> None:
        """Whatever of the group is left (make, its shell, the server) is killed."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        super().close()


@contextlib.contextmanager
def serve_process(
    settings: Settings, port: int, log_path: Path, **extra: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``jobdesk serve`` with its in-app worker on ``settings``' database, as a real process on ``port``
    (its output in ``log_path``); killed at exit if it still runs."""
    env = worker_env(settings, WORKER_ENABLED="true", **extra)
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def catches_signal(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has installed a handler of its own for ``sig`` (``SigCgt`` in Linux's
    ``/proc/<pid>/status``; a process that has ended catches nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


async def signal_once_caught(proc: subprocess.Popen[Any], sig: int, after: float | None) -> None:
    """Send ``sig`` to ``proc`` ``after`` seconds after its start, or (``None``) as soon as it has
    installed its SIGTERM handler: the earliest moment a program can stop cleanly."""
    if after is not None:
        await asyncio.sleep(after)
    else:
        await wait_until(
            lambda: asyncio.sleep(0, catches_signal(proc.pid, signal.SIGTERM)),
            timeout=20,
            interval=0.005,
            what="the process's SIGTERM handler",
        )
    proc.send_signal(sig)


async def worker_ids(pg: asyncpg.Connection) -> list[str]:
    return [r["id"] for r in await pg.fetch("SELECT id FROM workers ORDER BY started_at")]
