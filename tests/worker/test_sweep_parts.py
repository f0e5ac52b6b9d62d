"""A part of the sweep that raises is that part's problem alone: the worker goes on running jobs, the
other parts go on (an expired lease is rescued while schedule firing raises, and the other way round),
the error is logged once with its traceback, counted, written to the worker's health row for ``/admin``,
and the part runs again once its fault is gone."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest
from structlog.testing import capture_logs

from app import metrics
from app.jobs import queue
from app.settings import Settings
from app.worker import maintenance
from app.worker.maintenance import ExpiredLeaseRescue, Retention, ScheduleFiring, Upkeep
from tests.support import processors as support_processors  # noqa: F401  (registers test.effect)
from tests.support.factories import TestUser, make_job
from tests.support.workers import running_worker, wait_status, wait_until

FAILED_LINE = "a part of the sweep failed; the others go on and it is tried again later"


@pytest.fixture
def fast(make_settings: Any) -> Settings:
    return make_settings(worker_sweep_interval_secs=0.1, worker_visibility_timeout_secs=3)


async def lost_job(engine: Any, settings: Settings, owner: TestUser, lease: float) -> Any:
    """A job claimed by a worker that is gone, its lease expiring in ``lease`` seconds: then only the
    rescue brings it back. Made before the test's worker starts, which would claim it first."""
    job = (await make_job(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=3))["id"]
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.claim(conn, "gone-worker", 10, lease)] == [job]
    return job


def failures(part: str) -> float:
    return metrics.SWEEP_FAILURES.labels(part)._value.get()


async def test_schedule_firing_that_always_raises_stops_neither_the_worker_nor_the_rescue(
    engine: Any, fast: Settings, owner: TestUser, pg: asyncpg.Connection, monkeypatch: Any
) -> None:
    runs = 0

    async def broken(self: Any) -> Any:
        nonlocal runs
        runs += 1
        raise RuntimeError(f"bug in a schedule's template (run {runs})")

    monkeypatch.setattr(ScheduleFiring, "run_once", broken)
    before = failures("schedules")
    # its lease expires after schedule firing has failed a few times
    job = await lost_job(engine, fast, owner, lease=2)
    with capture_logs() as logs:
        async with running_worker(fast) as worker:
            await wait_until(lambda: asyncio.sleep(0, runs >= 3), what="three failed runs of schedule firing")
            row = await wait_status(pg, job, {"completed"}, timeout=20)
            fresh = (await make_job(engine, fast, owner, "test.effect", {"seconds": 0}))["id"]
            await wait_status(pg, fresh, {"completed"}, timeout=20)
            health = await wait_until(
                lambda: pg.fetchval("SELECT health->'sweep_failing' FROM workers WHERE id = $1", worker.id),
                timeout=20,
                what="the failing part in the worker's health row",
            )
            assert worker.fatal is None
            assert worker.dead_side_tasks() == []
    assert row["attempts"] == 2  # claimed by the gone worker, rescued, claimed and run by this one
    failing = json.loads(health)
    assert list(failing) == ["schedules"]
    assert failing["schedules"]["what"] == "schedule firing"
    assert failing["schedules"]["error"].startswith("bug in a schedule's template")
    assert failing["schedules"]["failures"] >= 1
    # logged once at error level with its traceback, though it failed on several runs (the run number
    # differs, the error does not)
    failed = [e for e in logs if e["event"] == FAILED_LINE]
    assert len(failed) == 1, failed
    assert failed[0]["log_level"] == "error"
    assert failed[0]["part"] == "schedules"
    assert isinstance(failed[0]["exc_info"], RuntimeError)
    assert runs >= 3
    assert failures("schedules") - before == runs
    # the backoff grows: not one run per sweep (0.1 s) for the whole test
    assert runs < 12


async def test_a_failing_rescue_does_not_keep_schedules_or_jobs_from_running_and_recovers(
    engine: Any, fast: Settings, owner: TestUser, pg: asyncpg.Connection, monkeypatch: Any
) -> None:
    broken = True
    real = ExpiredLeaseRescue.run_once
    rescue_runs = 0

    async def flaky(self: Any) -> Any:
        nonlocal rescue_runs
        rescue_runs += 1
        if broken:
            raise ValueError("unexpected value in a lease row")
        return await real(self)

    fired = 0
    real_fire = ScheduleFiring.run_once

    async def counting(self: Any) -> Any:
        nonlocal fired
        fired += 1
        return await real_fire(self)

    monkeypatch.setattr(ExpiredLeaseRescue, "run_once", flaky)
    monkeypatch.setattr(ScheduleFiring, "run_once", counting)
    job = await lost_job(engine, fast, owner, lease=0.01)
    with capture_logs() as logs:
        async with running_worker(fast) as worker:
            await wait_until(lambda: asyncio.sleep(0, rescue_runs >= 2), what="two failed rescues")
            fired_then = fired
            await wait_until(
                lambda: asyncio.sleep(0, fired >= fired_then + 5), what="schedule firing going on"
            )
            fresh = (await make_job(engine, fast, owner, "test.effect", {"seconds": 0}))["id"]
            await wait_status(pg, fresh, {"completed"}, timeout=20)
            assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "in_progress"
            assert "rescue" in worker.maintenance.parts.failing
            broken = False
            row = await wait_status(pg, job, {"completed"}, timeout=30)
            assert worker.maintenance.parts.failing == {}
            assert worker.fatal is None
    assert row["attempts"] == 2
    assert len([e for e in logs if e["event"] == FAILED_LINE]) == 1
    recovered = [e for e in logs if e["event"] == "a part of the sweep works again"]
    assert [e["part"] for e in recovered] == ["rescue"]


async def test_a_worker_stop_ends_a_sweep_whose_part_keeps_failing_promptly(
    fast: Settings, monkeypatch: Any
) -> None:
    async def broken(self: Any) -> Any:
        raise ValueError("bad row")

    monkeypatch.setattr(ScheduleFiring, "run_once", broken)
    async with running_worker(fast) as worker:
        await wait_until(
            lambda: asyncio.sleep(0, "schedules" in worker.maintenance.parts.failing), what="a failing part"
        )
        sweep = worker._side["sweep"]
        worker.stop()
        await asyncio.wait_for(worker.stopped.wait(), 10)
    assert sweep.done()


async def test_a_file_system_error_in_retention_is_its_own_failure_not_a_database_outage(
    fast: Settings, monkeypatch: Any
) -> None:
    """An ``OSError`` naming a file (the files folder unreadable) is retention's failure: logged as such
    once, while upkeep, after it in the same pass, still runs. Taken for a lost connection (as
    ``is_transient`` once took every ``OSError``), it left upkeep unrun for ever and logged "database
    unavailable"."""
    upkeeps = 0

    async def unreadable(self: Any) -> None:
        raise PermissionError(13, "Permission denied", "/data/files/ab")

    async def counting(self: Any) -> None:
        nonlocal upkeeps
        upkeeps += 1

    monkeypatch.setattr(maintenance, "MAINTENANCE_INTERVAL_SECS", 0.1)
    monkeypatch.setattr(Retention, "run_once", unreadable)
    monkeypatch.setattr(Upkeep, "run_once", counting)
    with capture_logs() as logs:
        async with running_worker(fast) as worker:
            await wait_until(lambda: asyncio.sleep(0, upkeeps >= 3), what="upkeep running")
            failing = worker.maintenance.parts.failing
            assert list(failing) == ["retention"]
            assert "Permission denied" in failing["retention"].error
    failed = [e for e in logs if e["event"] == FAILED_LINE]
    assert [e["part"] for e in failed] == ["retention"]
    assert not [e for e in logs if e["event"] == "sweep failed: database unavailable"]
