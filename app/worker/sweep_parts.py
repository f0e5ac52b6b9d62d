"""The sweep's parts kept apart from one another and from the worker (:class:`Parts`).

A part of the sweep (the rescue of expired leases, schedule firing, approval timeouts, retention, upkeep,
callbacks) that raises an error other than a database outage is not the worker's end: its cause (a bad
row, a bug in a template or a processor's hook, a file-system error) is usually still there at the next
start, so a worker that stopped on it would stop again on every start and no job would run anywhere. Such
a part is logged at error level with its traceback (once for each distinct error: it is retried every
few seconds, and the same traceback each time would bury everything else), counted in
``jobdesk_sweep_failures``, shown to admins on ``/admin`` (the worker's ``workers.health`` row, through
:func:`app.worker.health.report`), and tried again after a growing delay; the other parts and the jobs go
on. A database outage is not handled here: the caller waits it out as before.

A part that hangs — a statement that never answers: a lock another transaction holds, a path gone
silent behind a proxy, a file system that stopped answering — is given a bound (``bound_secs``): past it
the part is abandoned (cancelled, which ends a lock wait on the server, then its open connections closed,
:class:`app.silence.Watch`, so that nothing waits on them), and it counts as that part's failure (logged, counted, retried after the same growing
delay) while the rest of the sweep goes on. Without it the sweep waited behind the hung part, and a
connection closed by its own bound passed for a database outage that ended the whole pass, every pass:
one row lock held elsewhere kept every schedule from firing. A run abandoned but not yet ended (work in
a thread cannot be stopped) keeps its part from running again alongside it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from app import metrics
from app.db import is_transient
from app.jobs.outbox import error_fingerprint
from app.silence import Watch, watching
from app.worker.faults import first_line

T = TypeVar("T")

BACKOFF_MAX_SECS = 300.0
"""The longest wait before a failing part is tried again: a fault fixed (a row mended, a file system
remounted) is picked up within five minutes without a restart."""

ABANDON_SECS = 1.0
"""How long an abandoned part (its connections closed, its task cancelled) is given to end before the sweep
goes on without it."""


class NoAnswer(Exception):
    """A part of the sweep that was not over within its bound: abandoned, its connections closed."""


WHAT = {
    "rescue": "rescue of expired leases",
    "schedules": "schedule firing",
    "approvals": "approval timeouts",
    "retention": "retention",
    "upkeep": "upkeep",
    "callbacks": "callbacks",
}
"""Each part in words, for admins."""


@dataclass
class Failing:
    """A part whose last run raised: its error's first line, which error it is (its type and its first
    line with numbers and ids blanked, so that the same fault with another id is not logged again), when
    it began failing (wall clock, for admins), how many runs failed in a row, and when it may run again
    (monotonic)."""

    error: str
    key: str
    since: float
    failures: int
    retry_at: float


class Parts:
    """The failures of the sweep's parts, each part on its own: :meth:`run` one part if it is due."""

    def __init__(self, log: Any, first_delay_secs: float) -> None:
        self.log = log
        self.first_delay_secs = max(first_delay_secs, 0.01)
        self.failing: dict[str, Failing] = {}
        self.abandoned: dict[str, asyncio.Task[Any]] = {}
        """Runs given up on that had not ended yet when the sweep went on, by part."""

    def due(self, name: str) -> bool:
        left = self.abandoned.get(name)
        if left is not None:
            if not left.done():
                return False
            del self.abandoned[name]
        failing = self.failing.get(name)
        return failing is None or time.monotonic() >= failing.retry_at

    async def run(
        self, name: str, fn: Callable[[], Awaitable[T]], bound_secs: float | None = None
    ) -> T | None:
        """``await fn()`` unless ``name`` is waiting out its backoff (or an abandoned run of it has not
        ended); its result, or ``None`` when it was not due, failed or was not over within
        ``bound_secs`` (``None``: no bound). A database outage is raised to the caller, the part's state
        left as it was."""
        if not self.due(name):
            return None
        watch = Watch()
        # The part runs in a task of its own, in a context where its connections are watched, so that
        # the sweep can stop waiting for it at the bound and close what it holds.
        task = asyncio.get_running_loop().create_task(_run(fn), context=watching(watch))
        try:
            await asyncio.wait({task}, timeout=bound_secs)
        finally:
            abandoned = not task.done()
            if abandoned:  # past its bound, or the sweep itself is being stopped
                await self._abandon(name, task, watch)
        if abandoned or (watch.gave_up and bound_secs is not None):
            # A bound closed its connection (the part's own, or one of its transactions'): the part's
            # silence, not an outage of the database, whatever error its closed connection then raised.
            # (A part run without a bound, the callbacks, keeps its transactions' lost connections for
            # outages, waited out by its loop.)
            if task.done() and not task.cancelled():
                task.exception()
            self.failed(name, NoAnswer(f"no answer within {bound_secs:g} s; given up"))
            return None
        exc = task.exception()
        if exc is None:
            self.recovered(name)
            return task.result()
        if is_transient(exc) or not isinstance(exc, Exception):
            raise exc
        self.failed(name, exc)
        return None

    async def _abandon(self, name: str, task: asyncio.Task[Any], watch: Watch) -> None:
        """Give up on ``task``: cancel it (a statement waiting for a lock is cancelled on the server, and
        its transaction rolled back, if the server answers), then close what it still holds, and go on
        without it if it has not ended after :data:`ABANDON_SECS` more (a thread cannot be stopped)."""
        task.cancel()
        await asyncio.wait({task}, timeout=ABANDON_SECS)
        if not task.done():
            watch.close_all()
            await asyncio.wait({task}, timeout=ABANDON_SECS)
        if not task.done():
            self.abandoned[name] = task
            task.add_done_callback(_retrieve)

    def failed(self, name: str, exc: Exception) -> None:
        before = self.failing.get(name)
        failures = before.failures + 1 if before else 1
        delay = min(self.first_delay_secs * 2 ** min(failures - 1, 30), BACKOFF_MAX_SECS)
        key = f"{type(exc).__name__}: {error_fingerprint(str(exc))}"
        metrics.SWEEP_FAILURES.labels(name).inc()
        metrics.SWEEP_FAILING.labels(name).set(1)
        if before is None or before.key != key:
            self.log.error(
                "a part of the sweep failed; the others go on and it is tried again later",
                part=name,
                error=first_line(exc),
                retry_in_secs=round(delay, 2),
                exc_info=exc,
            )
        self.failing[name] = Failing(
            error=first_line(exc),
            key=key,
            since=before.since if before else time.time(),
            failures=failures,
            retry_at=time.monotonic() + delay,
        )

    def recovered(self, name: str) -> None:
        before = self.failing.pop(name, None)
        if before is not None:
            metrics.SWEEP_FAILING.labels(name).set(0)
            self.log.warning("a part of the sweep works again", part=name, failed_runs=before.failures)

    def report(self) -> dict[str, Any]:
        """``{part: {"what", "error", "since" (ISO, UTC), "failures"}}`` for the worker's health row."""
        return {
            name: {
                "what": WHAT.get(name, name),
                "error": f.error,
                "since": datetime.fromtimestamp(f.since, UTC).isoformat(),
                "failures": f.failures,
            }
            for name, f in sorted(self.failing.items())
        }


async def _run(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Read an abandoned run's outcome when it ends, so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
