"""Prometheus metrics, incremented by the worker and read by ``GET /metrics``.

Counters and histograms live in this process's default registry; the gauges that describe the whole
queue (jobs by status, workers alive, dead tuples) are computed by the ``/metrics`` handler from cheap
queries at scrape time rather than kept here.
"""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

CLAIMED = Counter("jobdesk_jobs_claimed", "Jobs claimed by this process's worker", ["type"])
COMPLETED = Counter("jobdesk_jobs_completed", "Jobs completed by this process's worker", ["type"])
FAILED = Counter("jobdesk_jobs_failed", "Jobs that failed for good in this process's worker", ["type"])
RETRIED = Counter("jobdesk_jobs_retried", "Failed attempts scheduled for a retry", ["type"])
CANCELLED = Counter("jobdesk_jobs_cancelled", "Running jobs stopped after a cancel request", ["type"])
RESCUED = Counter("jobdesk_jobs_rescued", "Jobs whose lease expired, rescued by this process's sweep")
LOST = Counter("jobdesk_jobs_lost_lease", "Jobs this worker stopped because its lease was taken away")

_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600)
DURATION = Histogram(
    "jobdesk_job_duration_seconds", "Time a processor ran, per attempt", ["type"], buckets=_BUCKETS
)
QUEUE_WAIT = Histogram(
    "jobdesk_job_queue_wait_seconds", "Time from due (run_at) to claim", ["type"], buckets=_BUCKETS
)
SWEEP_FAILURES = Counter(
    "jobdesk_sweep_failures",
    "Runs of a part of this process's sweep that raised an unexpected error or were abandoned at their bound "
    "(the part is retried later)",
    ["part"],
)
SWEEP_FAILING = Gauge(
    "jobdesk_sweep_part_failing", "1 while a part of this process's sweep keeps failing", ["part"]
)
LISTENER_CONNECTED = Gauge("jobdesk_listener_connected", "1 while this worker's LISTEN connection is up")
RUNNING = Gauge("jobdesk_worker_running_jobs", "Jobs this process's worker is running now")
LINGERING = Gauge(
    "jobdesk_worker_lingering_tasks",
    "Processor tasks that did not stop when their job was stopped (timeout, cancel) and still run, each "
    "holding a slot",
)
LOOP_STALLED = Gauge(
    "jobdesk_worker_loop_stalled_seconds", "Seconds this process's worker's event loop has been blocked now"
)


@functools.lru_cache(maxsize=8192)
def by_type(metric: Any, job_type: str) -> Any:
    """``metric.labels(job_type)``, cached: the worker calls this several times per job, and
    ``labels()`` takes a lock and builds a key each time (it showed in ``bench/throughput.py``'s profile)."""
    return metric.labels(job_type)
