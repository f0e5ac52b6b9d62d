"""One claim order for every job type, limits that cost no speed, and workers that claim only the types they
run — each through real workers.

* A type whose concurrency limit is below the worker's free slots runs at the speed its limit allows: a
  job of it finishing wakes the claim loop (before, the loop slept a whole poll interval after each
  claim the limit cut short).
* Priority, then due time, then id, across limited and unlimited types (before, limited types were
  always claimed first, in order of type name). Priority is strict: a low-priority job waits while
  higher-priority jobs keep coming, and ``/admin`` shows how long it has waited.
* During a rolling deploy a worker without a type's processor leaves its jobs to a worker that has it
  (before, it claimed them and failed them for good), and ``/admin`` names the types no live worker runs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

import tests.support.processors as support_processors
from app import controls
from app.db import asyncpg_dsn
from app.jobs import queue
from app.jobs.queue import NewJob
from app.web.admin.health import OLDEST_WAITING
from tests.support.factories import make_user
from tests.support.webkit import add_user, app_client, login
from tests.support.workers import WorkerProcess, running_worker, wait_until

HIGHER_DUE = text("SELECT count(*) FROM jobs WHERE status = 'queued' AND priority > 0")


class Admin:
    def __init__(self, uid: int, email: str) -> None:
        self.id, self.email, self.is_admin = uid, email, True


@pytest.fixture
async def admin(pg: asyncpg.Connection) -> Admin:
    await pg.execute(support_processors.SIDE_EFFECTS_DDL)
    u = await make_user(pg, admin=True)
    return Admin(u.id, u.email)


async def limit(engine: Any, admin: Admin, job_type: str, **limits: int | None) -> None:
    async with engine.begin() as conn:
        await controls.set_limits(
            conn,
            job_type,
            max_running=limits.get("max_running"),
            max_per_minute=limits.get("max_per_minute"),
            admin=admin,
        )


async def enqueue(
    engine: Any, settings: Any, user: Any, jobs: list[tuple[str, dict[str, Any], int]]
) -> list[Any]:
    """``(type, input, priority)`` each, in one transaction; returns the ids in the same order."""
    async with engine.begin() as conn:
        return await queue.enqueue_many(
            conn, [NewJob(type=t, input_data=i, priority=p, user_id=user.id) for t, i, p in jobs], settings
        )


def all_of(pg: asyncpg.Connection, where: str, n: int) -> Any:
    """A wait_until predicate: ``n`` jobs match ``where``."""
    return lambda: pg.fetchval(f"SELECT count(*) = $1 FROM jobs WHERE {where}", n)


class PeakRunning:
    """The most jobs of a type in progress at once, sampled every few milliseconds on its own connection."""

    def __init__(self, dsn: str, job_type: str) -> None:
        self.dsn, self.job_type, self.peak = dsn, job_type, 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PeakRunning:
        conn = await asyncpg.connect(self.dsn)

        async def run() -> None:
            try:
                while not self._stop.is_set():
                    n = await conn.fetchval(
                        "SELECT count(*) FROM jobs WHERE status = 'in_progress' AND type = $1", self.job_type
                    )
                    self.peak = max(self.peak, n)
                    await asyncio.sleep(0.003)
            finally:
                await conn.close()

        self._task = asyncio.create_task(run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


# Case N08 (docs/cases.md).
async def test_a_type_limited_below_the_free_slots_runs_at_the_speed_its_limit_allows(
    make_settings, engine, admin, pg, db_url
) -> None:
    """max_running=2 on a worker of 4 slots, 10 ms jobs, poll interval 2 s: 60 jobs take about 30 rounds
    of 10 ms, not 30 poll intervals (a minute) — a job of the limited type finishing wakes the claim loop,
    and the limit still holds."""
    settings = make_settings(max_concurrent_jobs=4, job_processor_poll_interval=2.0)
    await limit(engine, admin, "sleep", max_running=2)
    await enqueue(engine, settings, admin, [("sleep", {"seconds": 0.01}, 0)] * 60)
    async with PeakRunning(asyncpg_dsn(db_url), "sleep") as sampler, running_worker(settings):
        started = time.monotonic()
        await wait_until(
            all_of(pg, "status = 'completed'", 60),
            timeout=8,
            interval=0.02,
            what="60 limited jobs at the speed of their limit",
        )
        took = time.monotonic() - started
    assert sampler.peak == 2, f"{sampler.peak} ran at once; the limit is 2"
    assert took < 8, took


async def claim_order(pg: asyncpg.Connection) -> list[Any]:
    return [
        r["job_id"]
        for r in await pg.fetch("SELECT job_id FROM job_events WHERE kind = 'claimed' ORDER BY id")
    ]


async def test_one_claim_order_across_limited_and_unlimited_types(make_settings, engine, admin, pg) -> None:
    """Priority, then due time, then id — whatever each type's limits (none, a concurrency limit, a rate
    limit) and whatever its name: a one-slot worker claims them one by one in exactly that order."""
    settings = make_settings(max_concurrent_jobs=1)
    await limit(engine, admin, "noop", max_running=3)
    await limit(engine, admin, "test.collect", max_per_minute=1000)
    kinds = [("noop", {}), ("test.collect", {}), ("sleep", {"seconds": 0})]
    jobs = [(*kinds[i % 3], (i * 7) % 5 - 2) for i in range(24)]
    await enqueue(engine, settings, admin, jobs)
    expected = [r["id"] for r in await pg.fetch("SELECT id FROM jobs ORDER BY priority DESC, run_at, id")]
    async with running_worker(settings):
        await wait_until(all_of(pg, "status = 'completed'", 24), what="all")
    assert await claim_order(pg) == expected


async def test_a_high_priority_job_does_not_wait_behind_a_limited_types_backlog(
    make_settings, engine, admin, pg
) -> None:
    """300 low-priority jobs of a type limited to 2 at once, then one high-priority job of another type:
    the high-priority job is claimed next (it waited behind the whole limited backlog before)."""
    settings = make_settings(max_concurrent_jobs=4)
    await limit(engine, admin, "sleep", max_running=2)
    await enqueue(engine, settings, admin, [("sleep", {"seconds": 0.05}, -5)] * 300)
    (urgent,) = await enqueue(engine, settings, admin, [("noop", {}, 5)])
    async with running_worker(settings):
        row = await wait_until(
            lambda: pg.fetchrow("SELECT status FROM jobs WHERE id = $1 AND status = 'completed'", urgent),
            timeout=5,
            what="the high-priority job",
        )
        assert row["status"] == "completed"
        assert (
            await pg.fetchval("SELECT count(*) FROM jobs WHERE type = 'sleep' AND status = 'completed'") < 60
        )
    assert (await claim_order(pg))[:1] == [urgent]


async def test_priority_is_strict_and_admin_shows_how_long_a_starved_job_has_waited(
    make_settings, engine, admin, pg
) -> None:
    """Strict priority (README, "Claim order"): while higher-priority jobs keep arriving, a low-priority job
    waits — however long — and the oldest-waiting figure of ``/admin`` names it with its age; it runs as
    soon as no higher-priority job is due."""
    settings = make_settings(max_concurrent_jobs=1)
    (low,) = await enqueue(engine, settings, admin, [("noop", {}, -1)])
    higher = [("sleep", {"seconds": 0.02}, 1)] * 5
    await enqueue(engine, settings, admin, higher)
    stop = asyncio.Event()

    async def stream() -> None:  # keeps higher-priority jobs due, on its own connections
        while not stop.is_set():
            async with engine.connect() as conn:
                due = (await conn.execute(HIGHER_DUE)).scalar_one()
            if due < 5:
                await enqueue(engine, settings, admin, higher)
            await asyncio.sleep(0.01)

    feeder = asyncio.create_task(stream())
    try:
        async with running_worker(settings):
            await asyncio.sleep(2.0)
            assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", low) == "queued"
            assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'completed'") >= 20
            oldest = await pg.fetchrow(str(OLDEST_WAITING))
            assert oldest["id"] == low
            assert oldest["age"].total_seconds() >= 1.9
            stop.set()
            await feeder
            await wait_until(
                lambda: pg.fetchval("SELECT status = 'completed' FROM jobs WHERE id = $1", low),
                timeout=5,
                what="the low-priority job once the stream stops",
            )
    finally:
        stop.set()
        await feeder


async def test_workers_of_two_versions_claim_only_the_types_they_run(
    make_settings, engine, admin, pg, tmp_path, db_url
) -> None:
    """A rolling deploy: worker A lacks the processor of ``test.effect`` (no JOBDESK_PROCESSOR_MODULES), B
    has it. With only A running, ``test.effect`` jobs wait — not failed — and ``/admin`` says no worker
    runs the type; once B starts they run, all on B, while ``noop`` runs on either."""
    settings = make_settings(max_concurrent_jobs=4)
    old = WorkerProcess(settings, tmp_path / "a.log", JOBDESK_PROCESSOR_MODULES="")
    new: WorkerProcess | None = None
    try:
        await wait_until(lambda: pg.fetchval("SELECT count(*) = 1 FROM workers"), what="worker A")
        await enqueue(engine, settings, admin, [("test.effect", {}, 0)] * 5 + [("noop", {}, 0)] * 5)
        await wait_until(all_of(pg, "type = 'noop' AND status = 'completed'", 5), what="noop on A")
        await asyncio.sleep(1.0)
        assert await _statuses(pg, "test.effect") == {"queued": 5}
        assert "test.effect" not in await pg.fetchval("SELECT types FROM workers")
        async with engine.connect() as conn:
            assert [(r["type"], r["waiting"]) for r in await queue.types_without_workers(conn)] == [
                ("test.effect", 5)
            ]
        await _admin_page_says_no_worker_runs(make_settings(worker_enabled=False), db_url)

        new = WorkerProcess(settings, tmp_path / "b.log")
        await wait_until(all_of(pg, "status = 'completed'", 10), timeout=30, what="test.effect on B")
        await enqueue(engine, settings, admin, [("test.effect", {}, 0)] * 10 + [("noop", {}, 0)] * 10)
        await wait_until(all_of(pg, "status = 'completed'", 30), timeout=30, what="both running")
        assert set(await pg.fetchval("SELECT array_agg(DISTINCT pid) FROM side_effects")) == {new.pid}
        async with engine.connect() as conn:
            assert await queue.types_without_workers(conn) == []
    finally:
        for p in (old, new):
            if p is not None:
                p.close()


async def _statuses(pg: asyncpg.Connection, job_type: str) -> dict[str, int]:
    rows = await pg.fetch("SELECT status, count(*) AS n FROM jobs WHERE type = $1 GROUP BY status", job_type)
    return {r["status"]: r["n"] for r in rows}


async def _admin_page_says_no_worker_runs(settings: Any, db_url: str) -> None:
    await add_user(db_url, "ops@example.com", admin=True)
    async with app_client(settings) as client:
        assert (await login(client, "ops@example.com")).status_code == 303
        page = (await client.get("/admin/health")).text
    assert "no worker runs this type" in page
    assert "<code>test.effect</code>" in page
