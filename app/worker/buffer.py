"""Claimed jobs waiting for a free slot: the worker's small buffer ahead of its slots.

With no-op or short jobs, a worker that claims only when a slot is free spends most of its time waiting
for the claim's round trip while its slots sit empty. So the claim loop keeps up to :attr:`capacity`
claimed jobs here (at most one per slot), and a slot that frees starts the next of them at once, without
waiting for the database; meanwhile the claim loop refills the buffer.

What a buffered job keeps:

* **its lease** — it is held (:class:`app.worker.leases.HeldJobs`) from its claim, so the lease keeper
  renews it like a running job's; if the lease cannot be renewed in time, the job is dropped from the
  buffer before the rescue can give it to another worker.
* **claim order** — the buffer is ordered like a claim (``priority DESC, run_at, id``), so a
  higher-priority job claimed later starts before the lower-priority jobs already waiting here: it waits
  behind at most the buffered jobs that start while the refill's claim is on its way, never behind the
  whole backlog.
* **its attempt** — on shutdown, buffered jobs are handed back (``released``: ``queued`` again, the
  attempt not counted) through the completer, as jobs cut short by the shutdown are.
"""

from __future__ import annotations

import heapq
import uuid
from typing import Any

from app.worker.executor import RunningJob


def _claim_key(row: Any) -> tuple[int, float, uuid.UUID]:
    # uuid.UUID orders by its 128-bit value, as PostgreSQL orders uuid (bytewise): the claim's ``id``.
    return (-int(row["priority"]), row["run_at"].timestamp(), row["id"])


class ClaimBuffer:
    """Held, not yet started jobs in claim order; :meth:`pop` gives the first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._heap: list[tuple[tuple[int, float, uuid.UUID], RunningJob]] = []
        """(claim order key, job): plain tuples, compared in C; the key is unique (it ends with the id),
        so the job itself is never compared."""
        self._ids: set[uuid.UUID] = set()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids

    def room(self) -> int:
        return max(0, self.capacity - len(self._ids))

    def add(self, job: RunningJob) -> None:
        heapq.heappush(self._heap, (_claim_key(job.row), job))
        self._ids.add(job.id)

    def pop(self) -> RunningJob | None:
        """The first buffered job in claim order (``None`` when empty), taken out of the buffer."""
        while self._heap:
            _, job = heapq.heappop(self._heap)
            if job.id in self._ids:
                self._ids.discard(job.id)
                return job
        return None

    def drop(self, job_ids: set[uuid.UUID]) -> list[RunningJob]:
        """Take these jobs out (their lease is gone or running out); returns those that were here."""
        dropped = [job for _, job in self._heap if job.id in job_ids and job.id in self._ids]
        for job in dropped:
            self._ids.discard(job.id)
        if dropped:
            self._heap = [e for e in self._heap if e[1].id in self._ids]
            heapq.heapify(self._heap)
        return dropped

    def take_all(self) -> list[RunningJob]:
        """Empty the buffer (shutdown); returns its jobs in claim order."""
        jobs = [job for _, job in sorted(self._heap, key=lambda e: e[0]) if job.id in self._ids]
        self._heap, self._ids = [], set()
        return jobs
