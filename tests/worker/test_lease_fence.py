"""The lease keeper's word that a lease was lost is about one claim of the job: a job this worker has
claimed again since (a retry or a rerun set its attempt back, so only ``claims`` tells the two apart)
is not the one lost, and runs on."""

from __future__ import annotations

import time
import uuid

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
