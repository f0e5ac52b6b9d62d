"""The worker's side tasks that keep leases honest (issue 4 §4–5; issue 3 §8–9).

* :func:`lease_loop` — every tick (at most 1 s) checks, durably, whether a cancel was requested for a
  running job (NOTIFY is only the fast path: a lost notification must not lose the cancel); every
  ``heartbeat_secs`` (a third of the visibility timeout by default) renews the lease of every job the
  worker holds in one statement, stops jobs whose lease was taken away, writes pending progress, and
  refreshes the worker's row. Renewal continues during a graceful shutdown until every outcome is
  recorded (case C04).
* :func:`sweep_loop` — every ``WORKER_SWEEP_INTERVAL_SECS`` rescues jobs whose lease expired (one process
  at a time, by advisory lock) and fires due schedules (issue 11, :func:`app.controls.fire_due`); every
  minute deletes finished jobs past retention and does upkeep.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from app import auth, controls, metrics
from app.db import is_transient
from app.jobs import queue
from app.jobs.backoff import retry_delay
from app.processors import registry

if TYPE_CHECKING:
    from app.worker.runner import Worker

MAINTENANCE_INTERVAL_SECS = 60.0


async def lease_loop(worker: Worker) -> None:
    """Run until cancelled (after the worker's outcomes are all recorded)."""
    settings = worker.settings
    tick = min(1.0, settings.heartbeat_secs)
    last_renewal = time.monotonic()
    assert worker.engine is not None
    while True:
        await asyncio.sleep(tick)
        renew = time.monotonic() - last_renewal >= settings.heartbeat_secs
        try:
            if renew:
                await _renew(worker)
                last_renewal = time.monotonic()
            elif worker.running:
                async with worker.engine.connect() as conn:
                    cancelled = await queue.cancel_requested(conn, worker.id, list(worker.running))
                for job_id in cancelled:
                    worker.request_cancel(job_id)
            for job in list(worker.running.values()):
                if job.progress_pending is not None and time.monotonic() - job.progress_at >= 0.5:
                    await worker.flush_progress(job)
        except Exception as exc:
            if not is_transient(exc):
                raise
            worker.log.warning(
                "lease upkeep failed: database unavailable",
                error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
            )


async def _renew(worker: Worker) -> None:
    assert worker.engine is not None
    held = list(worker.held)
    completed, failed = worker.finished_since_touch
    async with worker.engine.begin() as conn:
        report = None
        if held and worker.renew_leases:
            report = await queue.heartbeat(conn, worker.id, held, worker.lease_secs)
        await queue.touch_worker(
            conn,
            worker.id,
            running=len(worker.running),
            stopping=worker.stopping,
            listener_connected=bool(worker.listener and worker.listener.connected),
            completed=completed,
            failed=failed,
        )
    worker.finished_since_touch[0] -= completed
    worker.finished_since_touch[1] -= failed
    worker.last_beat = time.monotonic()
    if report is None:
        return
    if worker.debug:
        worker.log.debug("leases renewed", renewed=len(report.renewed), lost=len(report.lost))
    for job_id in report.cancelled:
        worker.request_cancel(job_id)
    if report.lost:
        worker.lost(set(report.lost))


def _delays() -> dict[str, object]:
    """Per-type backoff for rescued jobs, so a job that keeps killing its worker is not retried at once."""
    result: dict[str, object] = {}
    for spec in registry.all():
        if spec.retry is not None:
            policy = spec.retry
            result[spec.type] = lambda attempt, p=policy: retry_delay(p, attempt)
    return result


async def sweep_loop(worker: Worker) -> None:
    """Run until cancelled."""
    settings = worker.settings
    assert worker.engine is not None
    last_maintenance = 0.0
    while True:
        await asyncio.sleep(settings.worker_sweep_interval_secs)
        if not worker.sweep_enabled:
            continue
        try:
            async with worker.engine.begin() as conn:
                rescued = await queue.rescue_expired(conn, delays=_delays())
            if rescued:
                metrics.RESCUED.inc(len(rescued))
                # jobs failed by the sweep (no attempts left) count in this worker's throughput sample,
                # which /admin's "failures in the last hour" reads
                worker.finished_since_touch[1] += sum(1 for r in rescued if r["status"] == "failed")
                worker.log.warning(
                    "rescued jobs whose lease expired",
                    count=len(rescued),
                    jobs={str(r["id"]): r["status"] for r in rescued[:20]},
                )
                worker.wake()
            async with worker.engine.begin() as conn:
                fired = await controls.fire_due(conn, settings)
            if fired:
                worker.log.info(
                    "schedules fired", count=len(fired), schedules=sorted({f["schedule"] for f in fired})
                )
                worker.wake()
            if time.monotonic() - last_maintenance >= MAINTENANCE_INTERVAL_SECS:
                last_maintenance = time.monotonic()
                await _maintenance(worker)
        except Exception as exc:
            if not is_transient(exc):
                raise
            worker.log.warning(
                "sweep failed: database unavailable",
                error=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
            )


async def _maintenance(worker: Worker) -> None:
    """Retention (issue 3 §9) in small batches, then upkeep: old worker rows, expired sessions, old
    sign-in attempts."""
    assert worker.engine is not None
    for _ in range(20):  # at most 20 batches per pass; the rest waits for the next pass
        async with worker.engine.begin() as conn:
            pruned = await queue.prune(conn, worker.settings.job_retention_days)
        worker.files.remove(pruned["files"])
        if pruned["jobs"] or pruned["pipelines"]:
            worker.log.info(
                "retention: deleted finished jobs", jobs=pruned["jobs"], pipelines=pruned["pipelines"]
            )
        if (
            pruned["jobs"] < queue.PRUNE_BATCH
            and pruned["pipelines"] == 0
            and len(pruned["files"]) < queue.PRUNE_BATCH
        ):
            break
    async with worker.engine.begin() as conn:
        await queue.forget_old(conn)
        await auth.prune_auth_rows(conn)
