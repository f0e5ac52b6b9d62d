"""Noticing a blocked event loop, from another thread.

A processor that blocks the event loop (``time.sleep`` or heavy computation inside ``async def``) stops
everything else in that loop. The worker's loop ticks :attr:`LoopWatchdog.ticked_at` a few times a second;
the lease keeper's thread calls :meth:`LoopWatchdog.check` and, when the loop has not ticked for
``stall_secs``, looks at the loop thread's stack to name the job whose processor is running (a blocked
loop runs exactly one task: the culprit) and the line it is blocked at. The stall is logged when it is
noticed and when it ends, counted, and kept for the worker's health and its heartbeat row.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import CodeType, FrameType
from typing import Any

TICK_SECS = 0.2
"""How often the worker's loop ticks."""
STALL_SECS = 2.0
"""A loop that has not ticked for this long is reported as stalled."""


@dataclass
class Stall:
    """One stall of the event loop: since when (wall clock and monotonic), the jobs running in it and
    where the loop's thread was found."""

    since: datetime
    since_mono: float
    jobs: list[dict[str, str]] = field(default_factory=list)
    where: str = ""
    secs: float = 0.0

    def describe(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "secs": round(self.secs, 1),
            "jobs": self.jobs,
            "where": self.where,
        }


class LoopWatchdog:
    """Stall detection for one event loop. ``job_frame`` is the code of the function that calls a
    processor, whose local ``job`` (a running job with ``row`` and ``log``) names the job it runs."""

    def __init__(self, job_frame: CodeType, log: Any, *, stall_secs: float = STALL_SECS) -> None:
        self.job_frame = job_frame
        self.log = log
        self.stall_secs = stall_secs
        self.ticked_at = time.monotonic()
        self.thread_id: int | None = None
        self.current: Stall | None = None
        self.last: Stall | None = None
        self.count = 0
        self._lock = threading.Lock()

    def tick(self) -> None:
        """Called by the watched loop (see :data:`TICK_SECS`)."""
        self.ticked_at = time.monotonic()

    def check(self) -> None:
        """Called by another thread: notice a stall starting or ending, and log it."""
        now = time.monotonic()
        silent = now - self.ticked_at
        with self._lock:
            current = self.current
            if current is not None and silent < self.stall_secs:
                current.secs = max(current.secs, self.ticked_at - current.since_mono)
                self.current, self.last = None, current
                self.log.warning(
                    "event loop running again after a stall",
                    stalled_secs=round(current.secs, 1),
                    jobs=current.jobs,
                    where=current.where,
                )
                return
            if current is not None:
                current.secs = now - current.since_mono
                return
            if silent < self.stall_secs:
                return
            self.count += 1
            stall = Stall(
                since=datetime.now(UTC).replace(microsecond=0), since_mono=self.ticked_at, secs=silent
            )
            stall.jobs, stall.where = self._culprit()
            self.current = stall
        self.log.error(
            "event loop blocked: a processor is holding it (use `await`, or cpu_bound=True for heavy work)",
            stalled_secs=round(silent, 1),
            jobs=stall.jobs,
            where=stall.where,
        )

    def stalled_secs(self) -> float:
        """Seconds the loop has been stalled now (0 when it is not)."""
        current = self.current
        return time.monotonic() - current.since_mono if current is not None else 0.0

    def describe(self) -> dict[str, Any]:
        """The current and the last stall and their count, for health reports."""
        with self._lock:
            out: dict[str, Any] = {"loop_stalls": self.count}
            if self.current is not None:
                out["loop_stalled"] = self.current.describe()
            if self.last is not None:
                out["last_loop_stall"] = self.last.describe()
            return out

    def _culprit(self) -> tuple[list[dict[str, str]], str]:
        """The jobs whose processor is on the loop thread's stack, and the innermost line of that stack."""
        jobs, where = self.culprits()
        return [{"id": str(job.row["id"]), "type": str(job.row["type"])} for job in jobs], where

    def culprits(self) -> tuple[list[Any], str]:
        """The running jobs (``job`` of each processor call on the loop thread's stack, innermost first)
        and the innermost line of that stack: while the loop is blocked, the jobs that block it."""
        frame = sys._current_frames().get(self.thread_id) if self.thread_id is not None else None
        where = _where(frame)
        jobs = []
        while frame is not None:
            if frame.f_code is self.job_frame:
                job = frame.f_locals.get("job")
                if job is not None:
                    jobs.append(job)
            frame = frame.f_back
        return jobs, where


def _where(frame: FrameType | None) -> str:
    if frame is None:
        return ""
    code = frame.f_code
    return f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
