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
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from app import metrics
from app.db import is_transient
from app.jobs.outbox import error_fingerprint
from app.worker.faults import first_line

T = TypeVar("T")

BACKOFF_MAX_SECS = 300.0
"""The longest wait before a failing part is tried again: a fault fixed (a row mended, a file system
remounted) is picked up within five minutes without a restart."""

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

    def due(self, name: str) -> bool:
        failing = self.failing.get(name)
        return failing is None or time.monotonic() >= failing.retry_at

    async def run(self, name: str, fn: Callable[[], Awaitable[T]]) -> T | None:
        """``await fn()`` unless ``name`` is waiting out its backoff; its result, or ``None`` when it was
        not due or failed. A database outage is raised to the caller, the part's state left as it was."""
        if not self.due(name):
            return None
        try:
            result = await fn()
        except Exception as exc:
            if is_transient(exc):
                raise
            self.failed(name, exc)
            return None
        self.recovered(name)
        return result

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
