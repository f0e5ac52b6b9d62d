"""The worker's writes are all-or-nothing when the database connection dies at any of their statements,
the COMMIT included, and what the worker does next (its retry of the write, or the next sweep's run)
ends with exactly one effect: a job's completion and its event, the next jobs a processor asked for, a
pipeline's released step, an owner's notice, a schedule's job for one fire time.

The worker's engine goes through :class:`tests.support.splitproxy.SplitProxy`, which cuts the
connection at the Nth round trip, before the statement reaches the server or after the server ran it
(its answer lost). N goes up until a write ends before its Nth round trip.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
import structlog
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.step)
from app.db import create_engine, is_transient
from app.jobs import queue
from app.jobs.queue import Outcome
from app.processors import NextJob
from app.schedules import create_schedule
from app.settings import Settings
from app.worker.completer import Completer
from app.worker.maintenance import ScheduleFiring
from tests.support.factories import TestUser, make_job
from tests.support.splitproxy import SplitProxy, cut_plan
from tests.support.workers import standalone_completer

WORKER = "split-worker"
MAX_ROUND_TRIPS = 40

JOBS_OUT_OF_STEP_WITH_EVENTS = """
    SELECT j.id, j.status, e.to_status
    FROM jobs j
    LEFT JOIN LATERAL (
        SELECT to_status FROM job_events WHERE job_id = j.id AND to_status IS NOT NULL ORDER BY id DESC LIMIT 1
    ) e ON true
    WHERE e.to_status IS DISTINCT FROM j.status
"""


@pytest.fixture
async def proxy(db_url: str, long_run: bool) -> AsyncIterator[SplitProxy]:
    target = make_url(db_url)
    split = SplitProxy(target.host or "127.0.0.1", target.port or 5432, every_cut=long_run).start()
    yield split
    split.close()


@pytest.fixture
async def cut_engine(proxy: SplitProxy, db_url: str) -> AsyncIterator[AsyncEngine]:
    """The worker's engine, through the proxy."""
    engine = create_engine(proxy.url(db_url), pool_size=3)
    yield engine
    await engine.dispose()


async def _consistent(pg: asyncpg.Connection, where: str) -> None:
    out = await pg.fetch(JOBS_OUT_OF_STEP_WITH_EVENTS)
    assert not out, f"{where}: jobs out of step with their events: {[dict(r) for r in out]}"


async def cut_everywhere(
    proxy: SplitProxy,
    pg: asyncpg.Connection,
    setup: Callable[[], Awaitable[Any]],
    act: Callable[[Any], Awaitable[Any]],
    check: Callable[[Any, str], Awaitable[None]],
) -> None:
    """``act`` on a fresh ``setup``, cut at each of its round trips (after the statement; before it, at
    the first, or at each with ``--long``: :func:`cut_plan`); then ``check`` (exactly one effect, after
    whatever retry ``act`` itself makes) and every job in step with its events."""
    for after, most in cut_plan(proxy.every_cut, MAX_ROUND_TRIPS):
        for n in range(1, most + 1):
            where = f"cut {'after' if after else 'before'} round trip {n}"
            target = await setup()
            proxy.arm(n, after=after)
            await asyncio.wait_for(act(target), 15)
            count, cut = proxy.disarm()
            where += f" ({proxy.cut_statement!r})" if cut else f" (none of {count})"
            await _consistent(pg, where)
            await check(target, where)
            if not cut:
                break
        else:
            if most == MAX_ROUND_TRIPS:
                raise AssertionError(f"still cut at round trip {MAX_ROUND_TRIPS}")


@pytest.fixture
async def completer(settings: Settings, cut_engine: AsyncEngine) -> AsyncIterator[Completer]:
    async with standalone_completer(settings, cut_engine, WORKER) as completer:
        yield completer


async def _claimed(engine: AsyncEngine, job_id: uuid.UUID) -> int:
    async with engine.begin() as conn:
        rows = await queue.claim(conn, WORKER, 10, 60)
    claims = {r["id"]: r["claims"] for r in rows}
    assert job_id in claims, "the job was not claimed"
    return int(claims[job_id])


async def test_a_completion_with_its_event_notice_and_next_jobs(
    engine: AsyncEngine,
    settings: Settings,
    owner: TestUser,
    pg: asyncpg.Connection,
    proxy: SplitProxy,
    completer: Completer,
) -> None:
    """A standalone job's completion, written by the worker's completer through a split: completed once,
    with one ``completed`` event, one notice to its owner and the one child its processor asked for."""

    async def setup() -> tuple[uuid.UUID, int]:
        job = (await make_job(engine, settings, owner, title=f"split {uuid.uuid4()}"))["id"]
        return job, await _claimed(engine, job)

    reported: dict[uuid.UUID, str | None] = {}

    async def act(target: tuple[uuid.UUID, int]) -> None:
        job, attempt = target
        child = NextJob(type="noop", input_data={"from": str(job)}, key="child")
        report = await completer.write(
            [Outcome(job, "completed", result='{"n": 1}', claim=attempt, next_jobs=[child])]
        )
        reported[job] = report.status.get(job)

    async def check(target: tuple[uuid.UUID, int], where: str) -> None:
        job, _ = target
        # a write whose COMMIT went through unanswered, written again, is reported recorded: not a lease lost
        assert reported[job] == "completed", f"{where}: reported {reported[job]}"
        row = await pg.fetchrow("SELECT status, result_data FROM jobs WHERE id = $1", job)
        assert (row["status"], json.loads(row["result_data"])) == ("completed", {"n": 1}), where
        events = await pg.fetchval(
            "SELECT count(*) FROM job_events WHERE job_id = $1 AND to_status = 'completed'", job
        )
        children = await pg.fetchval("SELECT count(*) FROM jobs WHERE created_by_job = $1", job)
        assert (events, children) == (1, 1), f"{where}: events, children"
        # Alike notices fold into one row (its count): one counted per completed job of the owner's.
        notices = await pg.fetchval(
            "SELECT coalesce(sum(count), 0) FROM notifications WHERE user_id = $1 AND kind = 'job_completed'",
            owner.id,
        )
        completed = await pg.fetchval(
            "SELECT count(*) FROM jobs WHERE user_id = $1 AND status = 'completed'", owner.id
        )
        assert notices == completed, f"{where}: {notices} notices of {completed} completed jobs"

    await cut_everywhere(proxy, pg, setup, act, check)


async def test_a_pipeline_steps_completion_releases_its_dependent_once(
    engine: AsyncEngine,
    settings: Settings,
    owner: TestUser,
    pg: asyncpg.Connection,
    proxy: SplitProxy,
    completer: Completer,
) -> None:
    """A step's completion and the release of the step after it are one write: never the step completed
    with its dependent still waiting, nor released twice."""

    async def setup() -> tuple[uuid.UUID, uuid.UUID, int]:
        first = (await make_job(engine, settings, owner))["id"]
        second = (await make_job(engine, settings, owner, depends_on=[first]))["id"]
        return first, second, await _claimed(engine, first)

    reported: dict[uuid.UUID, str | None] = {}

    async def act(target: tuple[uuid.UUID, uuid.UUID, int]) -> None:
        first, _, attempt = target
        report = await completer.write([Outcome(first, "completed", result="{}", claim=attempt)])
        reported[first] = report.status.get(first)

    async def check(target: tuple[uuid.UUID, uuid.UUID, int], where: str) -> None:
        first, second, _ = target
        assert reported[first] == "completed", f"{where}: reported {reported[first]}"
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", first) == "completed", where
        pending = await pg.fetchval("SELECT pending_parents FROM jobs WHERE id = $1", second)
        assert pending == 0, f"{where}: the dependent still waits for {pending}"

    await cut_everywhere(proxy, pg, setup, act, check)


async def test_a_schedule_fires_once_for_its_time(
    engine: AsyncEngine,
    cut_engine: AsyncEngine,
    settings: Settings,
    owner: TestUser,
    pg: asyncpg.Connection,
    proxy: SplitProxy,
) -> None:
    """A sweep whose firing is cut is run again (as the next sweep would): one job for the due time, and
    the schedule moved past it."""
    firing = ScheduleFiring(cut_engine, settings, log=structlog.get_logger("test"), on_fired=lambda: None)

    async def setup() -> uuid.UUID:
        async with engine.begin() as conn:
            row = await create_schedule(
                conn,
                cron="0 0 1 1 *",
                job_type="test.step",
                name=f"split {uuid.uuid4()}",
                owner=owner,
                settings=settings,
            )
        await pg.execute(
            "UPDATE schedules SET next_fire_at = now() - interval '1 second' WHERE id = $1", row["id"]
        )
        await pg.execute("UPDATE schedules SET enabled = false WHERE id <> $1", row["id"])
        return uuid.UUID(str(row["id"]))

    async def act(schedule: uuid.UUID) -> None:
        try:
            await firing.run_once()
        except Exception:
            await firing.run_once()  # the next sweep

    async def check(schedule: uuid.UUID, where: str) -> None:
        jobs = await pg.fetchval(
            "SELECT count(*) FROM jobs WHERE idempotency_key LIKE 'schedule:' || $1 || ':%'", str(schedule)
        )
        row = await pg.fetchrow(
            "SELECT next_fire_at > now() AS moved, last_job_id FROM schedules WHERE id = $1", schedule
        )
        assert (jobs, row["moved"], row["last_job_id"] is not None) == (1, True, True), where

    await cut_everywhere(proxy, pg, setup, act, check)


async def test_a_bulk_enqueue_by_copy_is_all_or_nothing_and_leaves_the_pool_sound(
    cut_engine: AsyncEngine, settings: Settings, owner: TestUser, pg: asyncpg.Connection, proxy: SplitProxy
) -> None:
    """Enough jobs at once to go in by ``COPY`` (straight on asyncpg): a cut at any round trip leaves all
    of them or none, and the next enqueue on the same engine goes in (the lost connection was not given
    back to the pool)."""

    def jobs(marker: str) -> list[queue.NewJob]:
        return [
            queue.NewJob(type="noop", input_data={"i": i}, user_id=owner.id, title=marker) for i in range(64)
        ]

    async def enqueue(marker: str) -> None:
        async with cut_engine.begin() as conn:
            await queue.enqueue_many(conn, jobs(marker), settings)

    async def count(marker: str) -> int:
        return int(await pg.fetchval("SELECT count(*) FROM jobs WHERE title = $1", marker))

    for after in (False, True):
        for n in range(1, MAX_ROUND_TRIPS + 1):
            where = f"cut {'after' if after else 'before'} round trip {n}"
            marker = str(uuid.uuid4())
            proxy.arm(n, after=after)
            try:
                await asyncio.wait_for(enqueue(marker), 15)
            except Exception as exc:
                assert is_transient(exc), f"{where}: {exc!r}"
            _, cut = proxy.disarm()
            assert await count(marker) in (0, 64), where
            await _consistent(pg, where)
            following = str(uuid.uuid4())
            await asyncio.wait_for(enqueue(following), 15)
            assert await count(following) == 64, f"{where}, then the next enqueue"
            if not cut:
                break
        else:
            raise AssertionError(f"still cut at round trip {MAX_ROUND_TRIPS}")
