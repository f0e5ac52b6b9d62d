"""The claim loop: when a worker claims, how many jobs it asks for, and how it waits in between.

As soon as a slot frees, one claim takes as many due jobs as there are free slots plus room in the small
buffer of claimed jobs ahead of the slots (:mod:`app.worker.buffer`, at most one per slot), from which a
freed slot starts its next job without a round trip. Up to :data:`CLAIMS_IN_FLIGHT` claims are on their
way at once, each asking only for room the others have not asked for. After a short claim the loop sleeps
until a NOTIFY, the next scheduled ``run_at``, or the poll interval (``JOB_PROCESSOR_POLL_INTERVAL``,
only the fallback); while a limit held jobs back, until an outcome recorded here lifts it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from app.db import is_transient
from app.jobs.queue import Outcome
from app.worker import lifecycle
from app.worker.completer import COMPLETER_BATCH
from app.worker.faults import first_line

if TYPE_CHECKING:
    from app.worker.runner import Worker

CLAIMS_IN_FLIGHT = 2
"""Claims a worker may have on their way at once. With one, a worker whose jobs are short runs at most
one claim's worth of jobs per round trip, its slots empty while it waits; the buffer's bound (at most one
claimed job per slot waiting) holds however many claims fly, since each asks only for room not yet asked
for."""

UNRECORDED_MAX = COMPLETER_BATCH
"""Finished jobs that may wait for the completer before the claim loop takes fewer. Unbounded, a completer
that fell behind let the claims run on (``bench/scale.py``, 500 slots: 290,000 held jobs, 1.5 GB), and
renewing all those leases in one transaction held up the very completions it waited for."""

CLAIM_ARRIVAL_SECS = 5.0
"""How long a stopping worker waits for the answers of claims on their way (normally milliseconds)."""

RELEASED_LATE = "released: the claim's answer came too late to run the job safely"

CLAIM_RETRY_FIRST_SECS = 0.2
"""First wait after a claim failed because the database is unreachable (doubled up to the poll interval
or 5 s)."""


async def claim_loop(worker: Worker) -> None:
    """Claim whenever there is room, with up to :data:`CLAIMS_IN_FLIGHT` claims on their way at once
    (each asks only for room the others have not asked for), until :meth:`Worker.stop`."""
    flying: dict[asyncio.Task[tuple[int, float | None]], int] = {}
    """Claims on their way, and how many jobs each asked for."""
    try:
        await _claim_until_stopped(worker, flying)
    finally:
        # Whatever a claim on its way brings is ours: let it arrive, so that its jobs are buffered and
        # handed back by the drain rather than left to the rescue. Not for ever: on a connection that
        # went silent (a partition) the answer may never come, and the worker could not stop.
        if flying:
            _, late = await asyncio.wait(flying, timeout=CLAIM_ARRIVAL_SECS)
            worker.claimer.gave_up(late)
            for task in late:
                task.cancel()
            if late:
                worker.log.warning(
                    "stopping without the answer of a claim; handing back what it took",
                    waited_secs=CLAIM_ARRIVAL_SECS,
                )
            worker.start_side_tasks()  # a first claim's jobs may be running: their logs need the writer
        if worker.claimer.unanswered:
            # Its jobs are locked by us unseen: left to the rescue, each would lose an attempt it never ran.
            await lifecycle.release_unreceived(worker)


async def _claim_until_stopped(
    worker: Worker, flying: dict[asyncio.Task[tuple[int, float | None]], int]
) -> None:
    poll = worker.settings.job_processor_poll_interval
    error_delay = CLAIM_RETRY_FIRST_SECS
    most = worker.concurrency + worker.buffer.capacity + UNRECORDED_MAX  # jobs held at most
    while not worker.stopping:
        if worker.claimer.unanswered and not flying:
            # A claim failed without its answer (its connection cut, say) and may have taken jobs, locked
            # by this worker unseen: left to the rescue, each would lose an attempt it never ran. Handed
            # back once the database answers again, before the next claim: with no claim on its way, a
            # job locked by this worker and not received is one of those (the fence, the attempt, leaves
            # a job rescued meanwhile alone). Only after a failure: the claims themselves cost nothing more.
            if await lifecycle.release_unreceived(worker, stopping=False):
                error_delay = CLAIM_RETRY_FIRST_SECS
            elif worker.claimer.unanswered_secs() >= worker.lease_secs:
                # Not for ever (a claim's session that cannot be ended, a hand-back the database keeps
                # refusing): once the leases of what the claim took have run out, the rescue hands those
                # jobs on, and waiting on would only keep this worker from claiming at all.
                worker.claimer.give_up_hand_back()
                worker.log.warning(
                    "gave up handing back jobs a failed claim took; the sweep will rescue them",
                    waited_secs=round(worker.lease_secs),
                )
            else:
                await worker.sleep(error_delay)
                error_delay = min(error_delay * 2, max(poll, 5.0))
            continue
        if worker.claimer.late_check_due() and not flying:
            # A claim given up on behind a pooler may have committed since its hand-back (its server
            # session could not be ended): with no claim on its way, a job locked by this worker and not
            # received is one it took, handed back now rather than left to its lease and the rescue,
            # which would count an attempt it never ran.
            await lifecycle.release_late(worker)
        worker.fill_slots()
        free = worker.free_slots() - sum(flying.values())
        # A slot held by a task that ignored its cancel frees at an unknown time: no job waits for it.
        room = max(
            0,
            min(
                worker.buffer.room(),
                worker.buffer.capacity - len(worker.executor.lingering) - len(worker.buffer),
            ),
        )
        # Held jobs (buffered, running, finished but not recorded) stay within the slots, the buffer
        # and UNRECORDED_MAX, however far behind the completer is.
        bound = most - len(worker.held) - sum(flying.values())
        behind = bound < free + room
        want = max(0, min(free + room, bound))
        if (
            len(flying) < CLAIMS_IN_FLIGHT
            and not worker.claimer.unanswered
            and not worker.claimer.late_check_due()  # let the claims on their way land first
            and want >= (1 if free > 0 else max(1, worker.buffer.capacity // 2))
        ):
            worker.woken.clear()  # a NOTIFY from now on is for a later claim than this one
            worker.completer.recorded.clear()  # an outcome recorded during the claim may lift a limit
            task = asyncio.create_task(_claim_and_start(worker, want), name=f"{worker.id}:claim")
            flying[task] = want
            continue
        # Every slot busy (or asked for) and the buffer mostly full: wait for a slot or a claim.
        worker.slot_freed.clear()
        waits = {asyncio.ensure_future(worker.slot_freed.wait())}
        if behind:  # and for the completer, whose next recorded batch makes room
            worker.completer.recorded.clear()
            waits.add(asyncio.ensure_future(worker.completer.recorded.wait()))
        try:
            await asyncio.wait({*waits, *flying}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        for task in [t for t in flying if t.done()]:
            worker.start_side_tasks()  # the first claim's answer is in (see Worker.run)
            asked = flying.pop(task)
            try:
                claimed, next_due = task.result()
                error_delay = CLAIM_RETRY_FIRST_SECS
            except Exception as exc:
                if not is_transient(exc):
                    raise
                worker.log.warning(
                    "claim failed: database unavailable", error=first_line(exc), retry_in_secs=error_delay
                )
                await worker.sleep(error_delay)
                error_delay = min(error_delay * 2, max(poll, 5.0))
                continue
            if claimed >= asked or flying:
                # A full batch: the next claim goes out as soon as there is room (the jobs just
                # started run meanwhile). A short one with another claim still on its way: that one
                # says whether there is more.
                continue
            await _idle(worker, claimed, next_due)


async def _idle(worker: Worker, claimed: int, next_due: float | None) -> None:
    """After a short claim: sleep until a NOTIFY, the next due job, the poll interval, or (when a limit
    held jobs back) an outcome recorded here."""
    poll = worker.settings.job_processor_poll_interval
    timeout = poll if next_due is None else max(0.0, min(poll, next_due))
    if worker.claimer.held_back:
        # Claimable jobs were left behind by a limit: an outcome recorded here (or the per-minute
        # window moving on) lifts it, so wait for that rather than a whole poll interval.
        timeout = worker.claimer.sleep_limit(timeout)
    late = worker.claimer.late_check_in()
    if late is not None:  # a claim given up on behind a pooler may still commit: look for it on time
        timeout = min(timeout, late)
    if worker.debug:
        worker.log.debug("poll", claimed=claimed, free=worker.free_slots(), sleep_secs=round(timeout, 3))
    await worker.sleep(timeout, finished=bool(worker.claimer.held_back))


async def _claim_and_start(worker: Worker, want: int) -> tuple[int, float | None]:
    """Claim up to ``want`` jobs and start them; returns how many were claimed and, when fewer than
    ``want``, the seconds until the next scheduled job is due (``None``: nothing scheduled)."""
    sent = time.monotonic()  # the leases start no earlier than this, by our clock
    # Bounded: on a connection gone silent (a partition, a dead NAT entry) the answer may never come, and
    # nothing else ends the wait soon (TCP sees nothing wrong while nothing it sent is unacknowledged). An
    # answer later than this would be handed back below anyway; given up here (its connection closed),
    # the claim counts as failed without its answer, and what it took goes through the hand-back of a
    # failed claim (its session ended first, each job fenced by its attempt). A client-side timer: no
    # round trip more.
    answer_secs = claim_answer_secs(worker)
    rows = await worker.claimer.claim(want, answer_secs)
    if time.monotonic() - sent >= worker.lease_secs - worker.leases.margin:
        # The answer came too late to run these safely (the loop was blocked while it waited): their
        # leases may be running out already. Handed back at once, not left to the rescue, which would
        # count the attempt the claim took (failing a job on its last attempt that never started) and
        # wait for the lease to end. Each release is fenced by the claim: a job rescued or claimed
        # again meanwhile is left as it is.
        worker.log.warning("claimed jobs arrived too late to run; handing them back", count=len(rows))
        for row in rows:
            worker.completer.submit(
                Outcome(
                    row["id"],
                    "released",
                    message=RELEASED_LATE,
                    pipeline_id=row["pipeline_id"],
                    claim=row["claims"],
                )
            )
        return len(rows), None
    for row in rows:  # start at once: the lookup below must not delay them (latency)
        worker.hold(row, sent)
    worker.fill_slots()
    if rows and worker.debug:
        worker.log.debug("claimed", count=len(rows), ids=[str(r["id"]) for r in rows])
    if len(rows) >= want:
        return len(rows), None
    return len(rows), await worker.claimer.seconds_until_next_due(answer_secs)


def claim_answer_secs(worker: Worker) -> float:
    """How long a claim waits for its answer: the lease less the keeper's margin, the point from which
    jobs arriving would be handed back unstarted (at least a second, for a margin set close to the
    lease)."""
    return max(1.0, worker.lease_secs - worker.leases.margin)
