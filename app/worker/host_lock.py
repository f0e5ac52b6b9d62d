"""One in-app worker per host, however many web processes ``jobdesk serve --workers N`` runs.

Every web process's lifespan asks :class:`InAppWorkerSlot` to start the in-app worker. The slot takes
an exclusive ``flock`` on ``JOBDESK_DATA_DIR/in-app-worker.<host name>.lock``; the process that gets it
starts the worker, the others stand by and try again every :data:`TAKEOVER_INTERVAL_SECS`. The kernel
drops the lock when its holder exits, however it exits (``kill -9`` included), so a standby process
takes over within that interval. The lock is local to the host on purpose: several hosts each run
their own in-app worker, and a lock in PostgreSQL would not survive PgBouncer's transaction mode (a
session's advisory lock belongs to whichever client PgBouncer lends the server connection next).

The host name is part of the file's name so that a data directory shared between hosts (a network
file system, where ``flock`` may not reach across machines) still gives each host its own lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import structlog

from app.settings import Settings

log = structlog.get_logger("jobdesk.worker")

TAKEOVER_INTERVAL_SECS = 2.0
"""How often a standby web process tries to take the lock of a holder that may have exited."""


class WorkerHandle(Protocol):
    """What the lifespan gets back from starting the in-app worker (``app.worker.threaded.ThreadedWorker``)."""

    worker: Any

    def done(self) -> bool: ...

    async def stop_async(self) -> bool: ...


def lock_path(settings: Settings) -> Path:
    return settings.data_dir / f"in-app-worker.{socket.gethostname()}.lock"


class HostLock:
    """An exclusive, non-blocking ``flock`` on a file; released by :meth:`release` or by the process's exit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        # the holder's pid, for a person looking at the file; the lock itself is the flock
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class InAppWorkerSlot:
    """Starts the in-app worker in this process if it holds the host's lock, else stands by to take over.

    ``state`` (the app's ``state``) gets ``worker`` and ``worker_task`` once this process runs the worker;
    while it stands by both stay ``None``, so ``/readyz`` does not count a standby process as unready.
    """

    def __init__(self, settings: Settings, start: Callable[[], WorkerHandle], state: Any) -> None:
        self.lock = HostLock(lock_path(settings))
        self._start = start
        self._state = state
        self._handle: WorkerHandle | None = None
        self._standby: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._handle is not None

    async def start(self) -> None:
        if not await self._try_start():
            log.info("the in-app worker runs in another web process of this host", lock=str(self.lock.path))
            self._standby = asyncio.create_task(self._stand_by(), name="in-app-worker-standby")

    async def stop(self) -> None:
        if self._standby is not None:
            self._standby.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._standby
        try:
            if self._handle is not None:
                await self._handle.stop_async()  # graceful: running jobs drain
        finally:
            self.lock.release()

    async def _try_start(self) -> bool:
        if not self.lock.try_acquire():
            return False
        try:
            handle = await asyncio.to_thread(self._start)
        except BaseException:
            self.lock.release()
            raise
        self._handle = handle
        self._state.worker = handle.worker
        self._state.worker_task = handle  # done() like a task's, for /readyz
        return True

    async def _stand_by(self) -> None:
        while True:
            await asyncio.sleep(TAKEOVER_INTERVAL_SECS)
            try:
                if await self._try_start():
                    log.info("this web process took over the host's in-app worker", pid=os.getpid())
                    return
            except Exception as exc:  # keep standing by: the next try may work
                log.error("could not start the in-app worker", error=repr(exc))
