"""A worker's reports are fenced by the claim (``jobs.claims``, never reset), not by the attempt.

A retry, a step's rerun and a hand-back set ``attempts`` back, so the same worker claiming the job again
gets an attempt number an earlier claim of it already had. A report of that earlier claim arriving late
(a lingering task, a write retried after its answer was lost in a network split) matched the job by
``locked_by`` and the attempt, and was taken for the new claim's: it ended, failed, cancelled or handed
back the new run. Here each path that sets the attempt back is followed by a claim by the same worker,
then each kind of report of the first claim: every one must be refused and the new claim run on.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.jobs import queue
from app.jobs.queue import Outcome
from app.settings import Settings
from tests.support.factories import TestUser, job_row, make_job

W = "host-1-fence"


async def _claim(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.begin() as conn:
        [row] = await queue.claim(conn, W, 1, 30)
    return dict(row)


async def _finish(engine: AsyncEngine, settings: Settings, outcome: Outcome) -> queue.FinishReport:
    async with engine.begin() as conn:
        return await queue.finish(conn, W, [outcome], settings)


async def _retried(engine: AsyncEngine, settings: Settings, admin: TestUser, pg: Any, job: uuid.UUID) -> None:
    """The first claim's lease ran out on its last attempt (rescued: failed), then an admin retried it."""
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    async with engine.begin() as conn:
        assert [r["status"] for r in await queue.rescue_expired(conn)] == ["failed"]
    async with engine.begin() as conn:
        await queue.retry(conn, job, admin)


async def _rerun(engine: AsyncEngine, settings: Settings, admin: TestUser, pg: Any, job: uuid.UUID) -> None:
    """The first claim's completion waits for an approval; an admin asks for a fresh run."""
    claim = await pg.fetchval("SELECT claims FROM jobs WHERE id = $1", job)
    report = await _finish(engine, settings, Outcome(job, "completed", result="{}", claim=claim))
    assert report.status == {job: "waiting_approval"}
    async with engine.begin() as conn:
        await queue.rerun(conn, job, admin)


async def _handed_back(
    engine: AsyncEngine, settings: Settings, admin: TestUser, pg: Any, job: uuid.UUID
) -> None:
    """The first claim was handed back (its attempt taken back) before it started."""
    claim = await pg.fetchval("SELECT claims FROM jobs WHERE id = $1", job)
    report = await _finish(engine, settings, Outcome(job, "released", message="released", claim=claim))
    assert report.status == {job: "queued"}


RESETS = {"retry": _retried, "rerun": _rerun, "hand-back": _handed_back}


@pytest.fixture(params=list(RESETS))
async def reclaimed(request, engine, settings, admin, pg) -> tuple[uuid.UUID, dict[str, Any], dict[str, Any]]:
    """A job claimed by ``W``, set back to attempt 0 by one of :data:`RESETS`, and claimed by ``W`` again:
    the job, its first claim and its second."""
    # an admin's job: noop is for admins, and a retry or rerun needs its owner to be allowed it
    job = (
        await make_job(engine, settings, admin, max_attempts=1, requires_approval=request.param == "rerun")
    )["id"]
    first = await _claim(engine)
    await RESETS[request.param](engine, settings, admin, pg, job)
    second = await _claim(engine)
    assert second["id"] == job
    assert second["attempts"] == first["attempts"] == 1  # what people see: a fresh first attempt
    assert second["claims"] == first["claims"] + 1
    return job, first, second


async def _runs_on(engine, settings, pg, job: uuid.UUID, second: dict[str, Any]) -> None:
    """The second claim is untouched, and its own completion is still the one that ends the job."""
    db = await job_row(pg, job)
    assert (db["status"], db["locked_by"], db["claims"]) == ("in_progress", W, second["claims"])
    assert db["progress"] is None and db["result_data"] is None
    report = await _finish(
        engine, settings, Outcome(job, "completed", result='{"by": "second"}', claim=second["claims"])
    )
    assert report.status[job] in ("completed", "waiting_approval")
    assert json.loads((await job_row(pg, job))["result_data"]) == {"by": "second"}


@pytest.mark.parametrize("kind", ["completed", "failed", "cancelled", "released"])
async def test_a_late_outcome_of_an_earlier_claim_is_refused(engine, settings, pg, reclaimed, kind) -> None:
    job, first, second = reclaimed
    stale = Outcome(job, kind, result='{"by": "first"}', error="first claim's failure", claim=first["claims"])
    report = await _finish(engine, settings, stale)
    assert report.lost == {job}, f"the first claim's late {kind} outcome was applied to the second claim"
    await _runs_on(engine, settings, pg, job, second)


async def test_a_late_standalone_completion_of_an_earlier_claim_is_refused(
    engine, settings, pg, reclaimed
) -> None:
    job, first, second = reclaimed
    stale = Outcome(job, "completed", result='{"by": "first"}', claim=first["claims"])
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        report = await queue.complete_standalone(conn, W, [stale])
        assert report.status == {}, "the first claim's late completion ended the second claim"
        # nor is it taken for a write of its own whose answer was lost
        assert await queue.recorded_earlier(conn, W, [stale]) == {}
    await _runs_on(engine, settings, pg, job, second)


async def test_an_earlier_claim_neither_renews_nor_reports_progress_on_the_new_one(
    engine, settings, pg, reclaimed
) -> None:
    job, first, second = reclaimed
    await pg.execute("UPDATE jobs SET lease_expires_at = now() + interval '5 seconds' WHERE id = $1", job)
    before = (await job_row(pg, job))["lease_expires_at"]
    async with engine.begin() as conn:
        renewed = await queue.heartbeat(conn, W, {job: first["claims"]}, 300)
        kept = await queue.keep_leases(conn, W, {job: first["claims"]}, 300)
        progressed = await queue.set_progress(conn, W, job, 0.5, "first claim", claim=first["claims"])
    assert (renewed.renewed, renewed.lost) == (frozenset(), frozenset({job}))
    assert (kept.renewed, kept.lost) == (frozenset(), frozenset({job}))
    assert not progressed
    assert (await job_row(pg, job))["lease_expires_at"] == before
    await pg.execute("UPDATE jobs SET is_active = false WHERE id = $1", job)
    async with engine.begin() as conn:
        assert await queue.cancel_requested(conn, W, {job: first["claims"]}) == set()
        assert await queue.cancel_requested(conn, W, {job: second["claims"]}) == {job}
        # the second claim's own reports still count
        assert (await queue.heartbeat(conn, W, {job: second["claims"]}, 300)).renewed == {job}
        assert await queue.set_progress(conn, W, job, 0.5, "second claim", claim=second["claims"])
