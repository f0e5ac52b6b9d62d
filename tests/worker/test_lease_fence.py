"""The lease keeper's word that a lease was lost, or runs out unrenewed, is about one claim of the job: a
job this worker has claimed again since (a retry or a rerun set its attempt back, so only ``claims`` tells
the two apart) is not the one lost, and runs on."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import structlog

from app.worker.executor import RunningJob
from app.worker.runner import Worker


def _held(worker: Worker, claims: int) -> RunningJob:
    job_id = uuid.uuid4()
    row = {"id": job_id, "claims": claims, "attempts": 1, "pipeline_id": None, "type": "noop"}
    job = RunningJob(
        row=row, started=time.monotonic(), log=structlog.get_logger(), claim_sent=time.monotonic()
    )
    worker.held[job_id] = job
    worker.running[job_id] = job
    return job


async def test_a_lost_lease_of_an_earlier_claim_does_not_stop_the_new_one(settings) -> None:
    worker = Worker(settings, settings.database_url or "", concurrency=1, buffer=0)
    try:
        job = _held(worker, claims=2)
        worker.lost({job.id}, {job.id: 1})  # a renewal sent for the first claim, answered after the second
        assert job.stop_reason is None and not job.cancel_event.is_set()
        worker.lost({job.id}, {job.id: 2})
        assert job.stop_reason == "lost"
    finally:
        await worker.engine.dispose()
        await worker.app_engine.dispose()


async def test_a_lease_running_out_for_an_earlier_claim_does_not_stop_or_hand_back_the_new_one(
    settings,
) -> None:
    """The lease keeper's thread reads which leases run out unrenewed and tells the worker's loop; the
    loop may read it after the job was rescued and claimed here again. Keyed by the job alone, that word
    about the dead claim dropped the new claim from the buffer and handed it back (or stopped it once it
    ran): the new claim, with a fresh lease, lost its run for nothing."""
    worker = Worker(settings, settings.database_url or "", concurrency=1, buffer=1)
    try:
        first = _held(worker, claims=1)
        first.claim_sent = time.monotonic() - worker.lease_secs  # never renewed since its claim
        word = worker.held.running_out(time.monotonic())  # the keeper's thread, as its guard ticks
        assert list(word) == [first.id] and word[first.id] == 1
        # rescued meanwhile (the database was away for the worker only), and claimed here again
        row = {
            **first.row,
            "claims": 2,
            "priority": 0,
            "run_at": datetime.now(UTC),
            "lease_expires_at": datetime.now(UTC) + timedelta(seconds=worker.lease_secs),
            "request_id": None,
        }
        worker.hold(row, time.monotonic())
        assert first.stop_reason == "lost" and first.id in worker.buffer
        worker.lease_running_out(word)  # the word about the first claim reaches the loop only now
        assert first.id in worker.buffer, "the new claim was dropped for the old claim's lease"
        assert worker.completer.unrecorded == {}  # nor handed back
        worker.lease_running_out({first.id: 2})
        assert first.id not in worker.buffer
        assert [o.claim for o in worker.completer.unrecorded.values()] == [2]  # handed back, fenced
    finally:
        await worker.engine.dispose()
        await worker.app_engine.dispose()
