"""What a worker says about its own health: :func:`problem` for ``GET /readyz`` (the in-app worker), and
:func:`report` for its ``workers.health`` row, which the lease keeper writes with each heartbeat and the
admin health page reads. Both are called from other threads than the worker's loop: they only read."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the worker imports this module
    from app.worker.runner import Worker


def problem(worker: Worker) -> str | None:
    """``None`` while the worker is doing its job, else a plain reason: not started yet (the database may
    be unreachable), stopping, a side task (listener, checks, sweep, completer) or the lease keeper
    stopped, its event loop blocked, or no heartbeat written for two heartbeat intervals and 30 s."""
    if worker.fatal is not None:
        return f"a side task died: {worker.fatal!r}"[:300]
    if worker.stopping:
        return "the worker is stopping"
    if not worker.started:
        return "the worker has not started yet (is the database reachable?)"
    dead = worker.dead_side_tasks()
    if not worker.leases.alive:
        dead.append("lease keeper")
    if dead:
        return f"its {', '.join(dead)} task stopped"
    stall = worker.watchdog.current
    if stall is not None:
        jobs = ", ".join(f"{j['type']} {j['id']}" for j in stall.jobs) or "no job"
        return f"its event loop has been blocked for {worker.watchdog.stalled_secs():.0f} s ({jobs})"
    silent = time.monotonic() - worker.last_beat
    if silent > 2 * worker.settings.heartbeat_secs + 30:
        return f"no heartbeat written for {silent:.0f} s: the worker cannot reach the database"
    return None


def report(worker: Worker) -> dict[str, Any]:
    """Loop stalls (``loop_stalled`` now, ``last_loop_stall``, ``loop_stalls`` counted), processor tasks
    lingering after their job was stopped (``lingering_tasks``), for how long lease renewal has been
    failing (``lease_renewal_failing_secs``), and the parts of the sweep that keep failing
    (``sweep_failing``, :meth:`app.worker.sweep_parts.Parts.report`)."""
    out = worker.watchdog.describe()
    out["lingering_tasks"] = len(worker.executor.lingering)
    failing = worker.leases.renewal_failing_since
    if failing is not None:
        out["lease_renewal_failing_secs"] = round(time.monotonic() - failing, 1)
    sweep_failing = worker.maintenance.parts.report()
    if sweep_failing:
        out["sweep_failing"] = sweep_failing
    return out
