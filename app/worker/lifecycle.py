"""The worker's start (its registration, its side tasks) and graceful stop, and what happens to jobs it
claimed but has not started.

* **Start** — bring the code's schedules up to date and write the worker's row, waiting out an outage;
  once the first claim's answer is in, start the side tasks (:func:`side_tasks`).

* **Buffered jobs** (:mod:`app.worker.buffer`) are handed back first: each gets a ``released`` outcome,
  recorded by the completer through :func:`app.jobs.queue.finish` — ``queued`` again, the attempt not
  counted, a ``released`` event — so another worker can run them at once instead of after their lease.
* **Running jobs** get ``WORKER_SHUTDOWN_GRACE_SECS`` to finish (cut short by a second stop signal:
  :meth:`~app.worker.runner.Worker.hurry`); the rest are cancelled and released the same way (the
  executor turns a shutdown cancel into a ``released`` outcome).
* Then the worker waits (a while) for the completer to record every outcome; jobs whose outcome could
  not be recorded are left to the rescue sweep.
* **Jobs never received** — a claim whose answer had not come when the worker stopped (or that failed)
  may have taken jobs: they are locked by this worker, which never saw them. Once no such claim can still
  commit, they are handed back (:func:`release_unreceived`), so the rescue does not count the attempt
  they never ran. A claim that fails while the worker runs is followed by the same hand-back, once the
  database answers again and before the next claim (:mod:`app.worker.claim_loop`). Behind a pooler, where
  a claim's server session cannot be ended, the worker looks again for what such a claim took while it
  may still commit (:func:`release_late`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

from app import __version__, controls
from app.db import create_engine, is_transient
from app.jobs import queue
from app.jobs.queue import Outcome
from app.silence import answered_within
from app.worker.faults import first_line, retrying

if TYPE_CHECKING:
    from app.worker.runner import Worker

LINGERING_LAST_SECS = 1.0
"""How long a stopping worker still waits for processor tasks that ignored their cancellation."""

CANCELLED_UNSTARTED = "cancelled before it started"

RELEASED_DROPPED = "released: claimed ahead of a free slot, not started while the database was out of reach"

RELEASED_UNSTARTED = "released: claimed ahead of a free slot, not started before the worker stopped"

RELEASED_UNRECEIVED = "released: its worker's claim took it, but the claim's answer never reached the worker"

UNRECEIVED_SECS = 5.0
"""The longest a stopping worker spends handing back jobs it never received (the database may be out of
reach: they are then left to the rescue)."""
CLOSE_SECS = 1.0
"""How long the hand-back waits for its connection's graceful close (a round trip, normally)."""


async def register(worker: Worker) -> None:
    """Bring the code's schedules up to date and write this worker's row, waiting out an outage."""
    await retrying(
        worker.engine,
        "sync schedules",
        lambda conn: controls.sync_code_schedules(conn, worker.settings, worker.log),
        worker.log,
    )
    await retrying(
        worker.autocommit,  # one statement: no BEGIN and COMMIT round trips before the first claim
        "register",
        lambda conn: queue.register_worker(
            conn,
            worker_id=worker.id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            concurrency=worker.concurrency,
            version=__version__,
            types=worker.claimer.types,
        ),
        worker.log,
    )


def side_tasks(worker: Worker) -> dict[str, asyncio.Task[None]]:
    """Start the worker's side tasks but the watchdog's ticker: LISTEN, the durable cancel checks, the
    sweep, alert delivery, the job log writer and the notice mailer.

    The worker starts them once its first claim's answer is in (or a second after its start, whichever
    comes first): started before, their first steps (the LISTEN connection, the sweep's first round, the
    processors' pool's first connections) ran on the loop between the claim's request and its answer
    and put off the first jobs by 10-25 ms (measured with ``bench/startup.py``). No claim needs them:
    the listener polls once when it connects, so a job enqueued meanwhile is claimed then.
    """
    # Imported here, not at the worker's import: no claim needs them, and they cost its start 5-6 ms.
    from app import alerts
    from app.notifications import Mailer

    wid, app_engine, settings = worker.id, worker.app_engine, worker.settings
    deliverer = alerts.Deliverer(app_engine, settings, logger=worker.log.bind(task="alerts"))
    return {
        "listener": asyncio.create_task(worker.listener.run(), name=f"{wid}:listener"),
        "checks": asyncio.create_task(worker.checks.run(), name=f"{wid}:checks"),
        "sweep": asyncio.create_task(worker.maintenance.run(), name=f"{wid}:sweep"),
        # Alert delivery: its own task on the processors' pool, never on the job path.
        "alerts": asyncio.create_task(deliverer.run(), name=f"{wid}:alerts"),
        "joblog": asyncio.create_task(worker.executor.write_logs(), name=f"{wid}:joblog"),
        "notices": asyncio.create_task(Mailer(app_engine, settings, log=worker.log).run()),
    }


def release_buffered(worker: Worker) -> int:
    """Hand every buffered job back to the queue through the completer; returns how many."""
    jobs = worker.buffer.take_all()
    for job in jobs:
        worker.completer.submit(job.released(RELEASED_UNSTARTED))
    if jobs:
        worker.log.info("releasing claimed jobs that have not started", count=len(jobs))
    return len(jobs)


def cancel_buffered(worker: Worker, job_id: uuid.UUID) -> None:
    """A cancel was requested for a job claimed ahead of a free slot: it never starts, and its cancel is
    recorded now, not once a slot frees (its page read "Cancelling" that long, and then it ran until the
    durable check, which looks at running jobs only, caught up)."""
    for job in worker.buffer.drop({job_id}):
        job.log.info("cancel requested before the job started; it will not start")
        worker.completer.submit(
            Outcome(
                job.id,
                "cancelled",
                message=CANCELLED_UNSTARTED,
                pipeline_id=job.row["pipeline_id"],
                claim=job.row["claims"],
            )
        )


def drop_buffered(worker: Worker, job_ids: set[uuid.UUID], why: str, *, hand_back: bool = False) -> None:
    """Drop buffered jobs whose lease is lost or about to run out: they must not start here. With
    ``hand_back`` (a lease about to run out unrenewed, the database out of reach) each is released
    through the completer, which writes it once the database answers: fenced by the claim, it changes
    nothing if the job was rescued meanwhile, and otherwise spares the job the rescue, which counts the
    attempt it never ran (failing a job on its last one). A lost lease has nothing to hand back."""
    for job in worker.buffer.drop(job_ids):
        job.log.warning(f"{why}; dropping the claimed job before it started")
        if hand_back:
            worker.completer.submit(job.released(RELEASED_DROPPED))
        else:
            worker.completer.forget(job)


async def _finished_within(worker: Worker, tasks: list[asyncio.Task[None]], grace: float) -> set[Any]:
    """Wait until ``tasks`` are done, the grace period is over or the stop is hurried (a second stop
    signal); returns the tasks not done."""
    everything = asyncio.ensure_future(asyncio.wait(tasks, timeout=grace))
    hurried = asyncio.ensure_future(worker.hurried.wait())
    try:
        await asyncio.wait({everything, hurried}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        everything.cancel()  # cancels the wait, not the tasks
        hurried.cancel()
    return {task for task in tasks if not task.done()}


async def drain(worker: Worker) -> None:
    """Release buffered jobs, let running jobs finish within the grace period; then release the rest and
    wait (a while) for the outcomes to be recorded."""
    release_buffered(worker)
    grace = worker.settings.worker_shutdown_grace_secs
    tasks = [j.task for j in worker.running.values() if j.task is not None]
    if tasks:
        worker.log.info("waiting for running jobs to finish", count=len(tasks), grace_secs=grace)
        pending = await _finished_within(worker, tasks, grace)
        if pending:
            worker.log.warning(
                "stop forced; releasing unfinished jobs"
                if worker.hurried.is_set()
                else "grace period over; releasing unfinished jobs",
                count=len(pending),
            )
            for job in list(worker.running.values()):
                job.stop_reason = job.stop_reason or "shutdown"
                job.cancel_event.set()
                worker.force_stop(job, "shutdown")
            await asyncio.wait(pending, timeout=10)
    deadline = time.monotonic() + max(10.0, grace)
    recorded = worker.completer.recorded
    while worker.held and worker.fatal is None and time.monotonic() < deadline:  # outcomes being recorded
        recorded.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(recorded.wait(), timeout=max(0.0, deadline - time.monotonic()))
    if worker.held:
        worker.log.warning(
            "stopping with outcomes not recorded; the sweep will rescue these jobs", count=len(worker.held)
        )
    if worker.executor.lingering:  # their outcomes are recorded; give them a last chance to end
        # Short: they had the grace period and the cancel grace already. A second grace period here made
        # a stop with such a processor take twice as long as documented.
        await asyncio.wait(set(worker.executor.lingering), timeout=min(grace, LINGERING_LAST_SECS))


async def release_unreceived(worker: Worker, *, stopping: bool = True) -> bool:
    """Hand back the jobs a claim of this worker's took without the worker ever receiving them (a claim
    cancelled at the stop, its answer not in; or a claim that failed on its way), if the database
    answers within :data:`UNRECEIVED_SECS`, on a new connection: the claims' own may be dead or silent.
    Call it only while no claim of the worker's is on its way: a job such a claim took would look
    unreceived. Returns whether it was done (then :attr:`~app.worker.claiming.Claimer.unanswered` is
    cleared); while the worker runs (not ``stopping``) the caller tries again later, also when a claim's
    session could not be ended yet.

    Such a claim may still be running on the server, and commit after a release that looked for its
    jobs too early. So first its server session is ended (its process, recorded when the claim failed or
    was cut short, filtered by the worker's connection name) and the release waits until it is gone: a
    claim rolled back took nothing, a claim committed before is seen by the release. Closing the
    connection on our side would not do: the server notices a closed client only when it next writes to
    it, which is after the commit. (Fencing each claim by the worker's row instead would put a row lock on
    every claim of the hot path, for a case that happens at a stop or after a failure.) Behind a pooler
    the server's process is not known and nothing stops the claim: what it commits later is found and
    handed back by :func:`release_late` while the worker runs (after a stop it is left to the rescue).
    """
    claimer = worker.claimer
    known = (
        set(worker.held) | set(worker.running) | set(worker.completer.unrecorded) | worker.completer.given_up
    )
    name = f"jobdesk-{'stop' if stopping else 'handback'}:{worker.id}"[:63]
    engine = create_engine(worker.url, pool_size=1, application_name=name)
    answered = False
    try:
        async with asyncio.timeout(UNRECEIVED_SECS):
            if claimer.cut_short:
                async with engine.connect() as conn:
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                    pids = sorted(claimer.cut_short)
                    gone = await queue.end_sessions(
                        conn,
                        pids,
                        worker.application_name,
                        started=[claimer.cut_short[pid] for pid in pids],
                    )
                if not gone and not stopping:
                    worker.log.warning("a failed claim still runs on the server; handing back its jobs later")
                    answered = True
                    return False
                if not gone:  # what it commits later is left to the rescue; what it did is handed back
                    worker.log.warning(
                        "a claim cut short at the stop still runs; the sweep will rescue its jobs"
                    )
            async with engine.begin() as conn:
                report = await queue.release_unreceived(
                    conn, worker.id, sorted(known), RELEASED_UNRECEIVED, worker.settings
                )
        answered = True
        claimer.handed_back()
        if report.status:
            worker.log.info("handed back jobs claimed but never received", count=len(report.status))
        return True
    except Exception as exc:  # TimeoutError included: the database is out of reach
        worker.log.warning(
            "could not hand back jobs claimed but never received; the sweep will rescue them"
            if stopping
            else "could not hand back jobs claimed but never received yet; trying again",
            error=repr(exc)[:200],
        )
        return False
    finally:
        await _dispose(engine, close=answered)


async def release_late(worker: Worker) -> None:
    """Hand back jobs that a claim the worker gave up on behind a pooler took after its hand-back (see
    :attr:`~app.worker.claiming.Claimer.late_until`). Call it only while no claim of the worker's is on
    its way, as :func:`release_unreceived`: each job is released fenced by the claim read here, so a job
    rescued or claimed again meanwhile is left alone. The database answered the hand-back just before,
    so this uses the worker's own connections, bounded by a heartbeat; a failure is tried again at the
    next look."""
    claimer = worker.claimer
    claimer.late_checked()
    known = (
        set(worker.held) | set(worker.running) | set(worker.completer.unrecorded) | worker.completer.given_up
    )
    try:
        async with answered_within(worker.engine.begin(), worker.settings.heartbeat_secs) as conn:
            report = await queue.release_unreceived(
                conn, worker.id, sorted(known), RELEASED_UNRECEIVED, worker.settings
            )
    except Exception as exc:
        if not is_transient(exc):
            raise
        worker.log.warning("could not look for jobs a given-up claim took late", error=first_line(exc))
        return
    if report.status:
        worker.log.warning(
            "a claim given up on committed after its hand-back; handed back what it took",
            count=len(report.status),
        )


async def _dispose(engine: Any, *, close: bool) -> None:
    """Let go of the hand-back's engine. A graceful close waits for the server to close its end, which on
    a path gone silent since the last answer never happens: the claim loop (which hands back before its
    next claim) or the stop would wait for ever. Past :data:`CLOSE_SECS` the connection is dropped
    (asyncpg aborts a close it could not finish)."""
    if close:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_SECS):
                await engine.dispose()
                return
    await engine.dispose(close=False)
