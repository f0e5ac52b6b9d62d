"""Crash and restart suite (marker ``chaos``).

Three standalone worker processes drain a mix of jobs — ``noop``, ``sleep`` (0.05 s up to 2 s), ``fail``
that recovers on its second attempt, ``test.effect`` jobs that append one row to ``side_effects``, and
chains of jobs that depend on an earlier one — while one worker after another is killed with
``kill -9`` and started again every few seconds, and the PostgreSQL server (owned by this test) is
restarted once mid-run, after which a second wave of jobs is enqueued. At the end:

* no job is lost, every job is ``completed``, none is left ``in_progress`` and none waits on a finished
  dependency (``queue.stuck_dependents``);
* every job has exactly one ``completed`` event;
* every side effect is recorded at least once, and more than once only for jobs whose worker was killed
  while they ran (they carry a ``rescued`` event) or that were running when the database went away.

CI runs a short version (2,000 jobs, sleeps up to 0.5 s, a kill every 3 s: about 20–40 s);
``pytest -m chaos --long`` sleeps up to 2 s. Kills stop in the last 5 % of the work (killing whoever holds
the last job over and over would only show that such a job runs out of attempts, as it should). The
counts are printed (``-s`` shows them). A negative control runs the same scenario with the rescue sweep
switched off and shows the checks catch the jobs a killed worker leaves behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db import asyncpg_dsn, create_engine, run_migrations
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings, load_settings
from tests.support import processors as support_processors
from tests.support.factories import make_user
from tests.support.pg_owned import OwnedPostgres
from tests.support.processors import SIDE_EFFECTS_DDL
from tests.support.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

WORKERS = 3


def plan(n: int, max_sleep: float, rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """``n`` (type, input) pairs: 40 % noop, 25 % sleep, 15 % fail-then-recover, 20 % side effects."""
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.40:
            out.append(("noop", {"i": i}))
        elif r < 0.65:
            out.append(("sleep", {"seconds": round(rng.uniform(0.05, max_sleep), 2)}))
        elif r < 0.80:
            out.append(("fail", {"times": 1, "message": "flaky on purpose"}))
        else:
            out.append(("test.effect", {"seconds": round(rng.uniform(0.05, max_sleep), 2)}))
    return out


async def enqueue_wave(
    engine: Any, settings: Settings, user_id: int, jobs: list[tuple[str, dict[str, Any]]], rng: random.Random
) -> list[Any]:
    """Enqueue ``jobs``: most in bulk, every tenth as a dependent of an earlier job of the wave."""
    ids: list[Any] = []
    bulk = [NewJob(type=t, input_data=d, user_id=user_id, max_attempts=50) for t, d in jobs]
    chained = [j for i, j in enumerate(bulk) if i % 10 == 9]
    plain = [j for i, j in enumerate(bulk) if i % 10 != 9]
    async with engine.begin() as conn:
        ids += await queue.enqueue_many(conn, plain, settings)
    for job in chained:
        job.depends_on = [rng.choice(ids)]
        async with engine.begin() as conn:
            ids.append((await queue.enqueue(conn, job, settings)).job["id"])
    return ids


class Watch:
    """A monitoring connection that survives the database restart."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: asyncpg.Connection | None = None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        for _ in range(100):
            try:
                if self.conn is None or self.conn.is_closed():
                    self.conn = await asyncpg.connect(asyncpg_dsn(self.url), timeout=5)
                return await self.conn.fetchval(sql, *args)
            except (
                OSError,
                asyncpg.PostgresConnectionError,
                asyncpg.InterfaceError,
                asyncpg.CannotConnectNowError,
            ):
                self.conn = None
                await asyncio.sleep(0.2)
        raise AssertionError("the database did not come back")

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


@dataclass
class Chaos:
    """What one run did and left behind."""

    n: int
    elapsed: float = 0.0
    kills: int = 0
    restarts: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    completed_events: dict[int, int] = field(default_factory=dict)
    stuck: list[Any] = field(default_factory=list)
    effect_jobs: set[Any] = field(default_factory=set)
    effects: dict[Any, int] = field(default_factory=dict)
    allowed_repeats: set[Any] = field(default_factory=set)
    summary: str = ""


async def run_chaos(
    n: int, max_sleep: float, kill_every: float, budget: float, *, restart: bool = True, sweep: bool = True
) -> Chaos:
    """Run the scenario of the module docstring on a server of its own; return what happened.

    ``sweep=False`` (negative control) gives the workers a one-hour sweep interval: the run then ends
    when nothing is left to claim, however many jobs are still held by killed workers."""
    rng = random.Random(20261129)
    result = Chaos(n=n)
    base = Path(tempfile.mkdtemp(prefix="jobdesk-chaos-"))
    with OwnedPostgres(base) as server:
        from sqlalchemy.engine import make_url

        url = make_url(server.url).set(database="jobdesk").render_as_string(hide_password=False)
        admin = await asyncpg.connect(asyncpg_dsn(server.url))
        await admin.execute("CREATE DATABASE jobdesk")
        await admin.close()
        await run_migrations(url)
        pg = await asyncpg.connect(asyncpg_dsn(url))
        await pg.execute(SIDE_EFFECTS_DDL)
        user = await make_user(pg)
        await pg.close()
        settings = load_settings(
            database_url=url,
            jobdesk_data_dir=base / "data",
            max_concurrent_jobs=10,
            job_processor_poll_interval=0.5,
            job_retry_intervals=[0.1, 0.2, 0.3],
            job_retry_jitter=0.0,
            worker_visibility_timeout_secs=3,
            worker_heartbeat_secs=0.5,
            worker_sweep_interval_secs=0.5 if sweep else 3600,
            worker_shutdown_grace_secs=5,
            job_cancel_grace_secs=0.5,
            log_level="WARNING",
        )
        engine = create_engine(url, pool_size=2)
        first = plan(n // 2 if restart else n, max_sleep, rng)
        second = plan(n - n // 2, max_sleep, rng) if restart else []
        ids = await enqueue_wave(engine, settings, user.id, first, rng)
        logs = base / "logs"
        logs.mkdir()
        procs = [WorkerProcess(settings, logs / f"w{i}-0.log") for i in range(WORKERS)]
        watch = Watch(url)
        restart_window: tuple[datetime, datetime] | None = None
        running_at_restart: set[Any] = set()
        started = time.monotonic()
        try:
            next_kill = time.monotonic() + kill_every
            restart_at = time.monotonic() + (12 if n > 1000 else 5)
            while True:
                left = await watch.fetchval(
                    "SELECT count(*) FROM jobs WHERE status IN ('queued', 'in_progress', 'waiting_approval')"
                )
                claimable = await watch.fetchval(
                    "SELECT count(*) FROM jobs WHERE (status = 'queued' AND pending_parents = 0) OR (status = 'in_progress' "
                    "AND lease_expires_at > now() - interval '2 seconds')"
                )
                done = (restarts_done := result.restarts >= (1 if restart else 0)) and len(ids) == n
                if done and (not left or (not sweep and not claimable and result.kills)):
                    break
                assert time.monotonic() - started < budget, f"{left} jobs unfinished after {budget} s"
                now = time.monotonic()
                victim = None
                # Kill while there is plenty of work, not in the tail: killing whoever holds the last job
                # again and again would only show that a job which keeps losing its worker runs out of
                # attempts (which it should).
                if now >= next_kill and left > max(20, n // 20) and (sweep or result.kills == 0):
                    victim = await _busy_worker(watch, procs, start=result.kills)
                if victim is not None:  # kill -9 a worker that holds jobs right now
                    procs[victim].kill()
                    procs[victim].close()
                    result.kills += 1
                    procs[victim] = WorkerProcess(settings, logs / f"w{victim}-{result.kills}.log")
                    next_kill = now + kill_every
                if restart and not restarts_done and now >= restart_at:
                    conn = await asyncpg.connect(asyncpg_dsn(url))
                    running_at_restart = {
                        r[0] for r in await conn.fetch("SELECT id FROM jobs WHERE status = 'in_progress'")
                    }
                    went = await conn.fetchval("SELECT clock_timestamp()")
                    await conn.close()
                    await asyncio.to_thread(server.restart, 1.0, "fast")
                    back = await watch.fetchval("SELECT clock_timestamp()")
                    restart_window = (went, back)
                    result.restarts += 1
                    await engine.dispose()
                    ids += await enqueue_wave(engine, settings, user.id, second, rng)
                await asyncio.sleep(0.25)
            result.elapsed = time.monotonic() - started
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(p.wait, 30)
                p.close()
            await watch.close()
            await engine.dispose()

        pg = await asyncpg.connect(asyncpg_dsn(url))
        try:
            result.counts = dict(await pg.fetch("SELECT status, count(*) FROM jobs GROUP BY status"))
            result.completed_events = dict(
                await pg.fetch(
                    "SELECT n, count(*) FROM (SELECT count(*) FILTER (WHERE e.kind = 'completed') AS n "
                    "FROM jobs j LEFT JOIN job_events e ON e.job_id = j.id GROUP BY j.id) s GROUP BY n"
                )
            )
            rescued = {
                r[0] for r in await pg.fetch("SELECT DISTINCT job_id FROM job_events WHERE kind = 'rescued'")
            }
            claimed_then: set[Any] = set()
            if restart_window is not None:  # claimed just before the server went down: running when it did
                claimed_then = {
                    r[0]
                    for r in await pg.fetch(
                        "SELECT job_id FROM job_events WHERE kind = 'claimed' AND at BETWEEN $1 AND $2",
                        restart_window[0] - timedelta(seconds=1),
                        restart_window[1],
                    )
                }
            result.allowed_repeats = rescued | running_at_restart | claimed_then
            result.effect_jobs = {
                r[0] for r in await pg.fetch("SELECT id FROM jobs WHERE type = 'test.effect'")
            }
            result.effects = dict(await pg.fetch("SELECT job_id, count(*) FROM side_effects GROUP BY job_id"))
            check = create_engine(url, pool_size=1)
            async with check.connect() as conn:
                result.stuck = await queue.stuck_dependents(conn)
            await check.dispose()
            attempts = await pg.fetchval("SELECT sum(attempts) FROM jobs")
            retries = await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'retry_scheduled'")
            dependents = await pg.fetchval("SELECT count(DISTINCT job_id) FROM job_dependencies")
            unfinished = [
                dict(r)
                for r in await pg.fetch(
                    "SELECT id, type, status, attempts, left(error_message, 300) AS error FROM jobs "
                    "WHERE status <> 'completed' LIMIT 10"
                )
            ]
            for u in unfinished:
                u["events"] = [
                    f"{e['kind']} {e['actor']} {(e['message'] or '')[:120]}"
                    for e in await pg.fetch(
                        "SELECT kind, actor, message FROM job_events WHERE job_id = $1 ORDER BY id", u["id"]
                    )
                ]
        finally:
            await pg.close()
    repeated = {j for j, c in result.effects.items() if c > 1}
    result.summary = (
        f"chaos: {n} jobs ({dependents} dependents) in {result.elapsed:.1f} s, {WORKERS} workers, "
        f"{result.kills} kill -9, {result.restarts} database restart; statuses {result.counts}; "
        f"completed events per job {result.completed_events}; attempts {attempts}, retries {retries}, "
        f"jobs rescued {len(rescued)}, running at the restart {len(running_at_restart)}; side-effect jobs "
        f"{len(result.effect_jobs)}, effects {sum(result.effects.values())}, jobs with a repeated effect "
        f"{len(repeated)} (all killed or cut off while running: {repeated <= result.allowed_repeats})"
    )
    if unfinished:
        result.summary += "\nnot completed: " + "\n".join(map(str, unfinished))
    print("\n" + result.summary)
    return result


async def _busy_worker(watch: Watch, procs: list[WorkerProcess], start: int) -> int | None:
    """Index of a worker (trying ``start`` first, round-robin) that holds a running job, or ``None``."""
    for k in range(len(procs)):
        i = (start + k) % len(procs)
        held = await watch.fetchval(
            "SELECT count(*) FROM jobs WHERE status = 'in_progress' AND locked_by LIKE $1",
            f"%-{procs[i].pid}-%",
        )
        if held:
            return i
    return None


async def test_no_job_is_lost_or_finished_twice_through_kills_and_a_database_restart(long_run: bool) -> None:
    """The suite: see the module docstring. CI: 2,000 jobs, sleeps up to 0.5 s; ``--long``:
    2,000 jobs, sleeps up to 2 s; a kill every 3 s in both."""
    n, max_sleep, kill_every, budget = (2000, 2.0, 3.0, 900) if long_run else (2000, 0.5, 3.0, 300)
    r = await run_chaos(n, max_sleep, kill_every, budget)
    assert r.counts == {"completed": n}, r.counts  # none lost, none left running, none failed for good
    assert r.completed_events == {1: n}, r.completed_events  # completed exactly once each
    assert r.stuck == []
    assert r.kills >= 3
    assert r.restarts == 1
    assert set(r.effects) == r.effect_jobs, "a side-effect job never recorded its effect"
    repeated = {j for j, c in r.effects.items() if c > 1}
    assert repeated <= r.allowed_repeats, (
        f"repeated effects without a kill or outage: {repeated - r.allowed_repeats}"
    )


async def test_negative_control_without_the_rescue_sweep_killed_workers_leave_jobs_running() -> None:
    """Negative control: the same checks catch a broken safety net. With the rescue sweep off, the jobs
    a killed worker held stay ``in_progress`` with expired leases and never complete."""
    r = await run_chaos(300, 1.5, 2.0, 120, restart=False, sweep=False)
    assert r.kills == 1
    assert r.counts.get("in_progress", 0) > 0, r.counts
    assert r.counts != {"completed": r.n}


# --- partitions and blocked loops ------------------------------------------------------------------------


async def _spans_by_job(pg: asyncpg.Connection) -> dict[Any, list[Any]]:
    spans: dict[Any, list[Any]] = {}
    for r in await pg.fetch("SELECT * FROM spans ORDER BY started_at"):
        spans.setdefault(r["job_id"], []).append(r)
    return spans


def _worst_overlap(spans: dict[Any, list[Any]]) -> float:
    """The longest time (seconds) any job ran in two places at once; negative: the shortest gap between
    one attempt's end and the next one's start."""
    worst = float("-inf")
    for runs in spans.values():
        for earlier, later in zip(runs, runs[1:], strict=False):
            assert earlier["ended_at"] is not None, f"a run of {earlier['job_id']} never ended"
            worst = max(worst, (earlier["ended_at"] - later["started_at"]).total_seconds())
    return worst


async def _finish_cleanly(pg: asyncpg.Connection, ids: list[Any], timeout: float) -> None:
    """Every job completes (none lost, none stuck) with exactly one ``completed`` event."""
    await wait_until(lambda: _all_completed(pg, ids), timeout=timeout, what=f"all {len(ids)} jobs completed")
    counts = await pg.fetch(
        "SELECT j.id, count(e.id) FILTER (WHERE e.kind = 'completed') AS n FROM jobs j "
        "LEFT JOIN job_events e ON e.job_id = j.id GROUP BY j.id"
    )
    assert {r["n"] for r in counts} == {1}, counts


async def _all_completed(pg: asyncpg.Connection, ids: list[Any]) -> bool:
    done = await pg.fetchval("SELECT count(*) FROM jobs WHERE id = ANY($1) AND status = 'completed'", ids)
    return done == len(ids)


async def _enqueue_spans(engine: Any, settings: Settings, user_id: int, seconds: list[float]) -> list[Any]:
    jobs = [
        NewJob(
            type="test.span",
            input_data={"seconds": s, "cooperative": i % 2 == 0},
            user_id=user_id,
            max_attempts=20,
        )
        for i, s in enumerate(seconds)
    ]
    async with engine.begin() as conn:
        return list(await queue.enqueue_many(conn, jobs, settings))


@pytest.mark.parametrize("cut", ["blackhole", "drop"])
async def test_a_worker_cut_off_from_the_database_stops_its_jobs_before_they_are_rescued(
    make_settings, db_url, engine, pg, tmp_path, tcp_proxy, long_run, cut
) -> None:
    """Two workers, A behind a TCP proxy. While A runs four 10 s jobs the proxy cuts it off for two leases
    (a partition: nothing gets through; or a refusal: connections reset). A's lease keeper cannot renew, and
    A stops each job a heartbeat before its lease ends by A's own clock; B rescues and runs them. No job
    runs on two workers at once (the spans, recorded on a connection that bypasses the proxy, never
    overlap), none is lost, none stuck, each completes exactly once."""
    if cut == "drop" and not long_run:
        pytest.skip("the refused-connection variant runs with --long")
    lease = 3.0
    common: dict[str, Any] = {
        "worker_visibility_timeout_secs": lease,
        "worker_sweep_interval_secs": 0.5,
        "max_concurrent_jobs": 4,
        "job_cancel_grace_secs": 0.5,
    }
    settings = make_settings(**common)
    cut_off = make_settings(database_url=tcp_proxy.url(db_url), **common)
    await pg.execute(support_processors.SIDE_EFFECTS_DDL)
    await pg.execute(support_processors.SPANS_DDL)
    user = await make_user(pg)
    direct = {support_processors.DIRECT_DB_ENV: asyncpg_dsn(db_url)}
    # A takes four jobs longer than the cut; B starts idle, so it can take over at once what A lets go.
    ids = await _enqueue_spans(engine, settings, user.id, [10.0] * 4)
    a = WorkerProcess(cut_off, tmp_path / "a.log", **direct)
    b: WorkerProcess | None = None
    try:
        await wait_until(
            lambda: pg.fetchval(
                "SELECT count(*) = 4 FROM jobs WHERE status = 'in_progress' AND locked_by LIKE $1",
                f"%-{a.pid}-%",
            ),
            what="A running the jobs",
        )
        b = WorkerProcess(settings, tmp_path / "b.log", **direct)
        await wait_until(lambda: pg.fetchval("SELECT count(*) = 2 FROM workers"), what="B started")
        tcp_proxy.cut(cut)
        ids += await _enqueue_spans(engine, settings, user.id, [0.5] * 8)  # B's own work meanwhile
        await asyncio.sleep(2 * lease)
        tcp_proxy.restore()
        await _finish_cleanly(pg, ids, timeout=90)
    finally:
        for p in (a, b):
            if p is not None:
                p.terminate()
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(p.wait, 30)
                p.close()
    spans = await _spans_by_job(pg)
    moved = [job for job, runs in spans.items() if len({r["worker"] for r in runs}) > 1]
    worst = _worst_overlap(spans)
    print(f"\n{cut}: {len(moved)} jobs moved from A to B; worst overlap {worst:+.2f} s (negative: a gap)")
    assert moved, "the cut should have moved some of A's jobs to B"
    assert worst <= 0.25, f"a job ran on two workers at once for {worst:.2f} s"
    assert "stopping the job before it can be rescued" in a.log_path.read_text()


async def test_a_loop_blocked_longer_than_the_lease_loses_no_lease(
    make_settings, engine, pg, tmp_path, db_url
) -> None:
    """Two workers run span jobs while processors block their event loops for twice the lease (3 s). The
    lease keepers renew from their own threads, without waiting for row locks the blocked loops hold, and a
    claim answered while a loop was blocked is handed back unrun: nothing runs twice, nothing is lost."""
    lease = 3.0
    settings = make_settings(
        worker_visibility_timeout_secs=lease, worker_sweep_interval_secs=0.5, max_concurrent_jobs=3
    )
    await pg.execute(support_processors.SIDE_EFFECTS_DDL)
    await pg.execute(support_processors.SPANS_DDL)
    user = await make_user(pg)
    direct = {support_processors.DIRECT_DB_ENV: asyncpg_dsn(db_url)}
    ids = await _enqueue_spans(engine, settings, user.id, [1.0 + (i % 3) * 0.5 for i in range(16)])
    async with engine.begin() as conn:
        for _ in range(2):
            new = NewJob(
                type="test.block", input_data={"seconds": 2 * lease}, user_id=user.id, max_attempts=5
            )
            ids.append((await queue.enqueue(conn, new, settings)).job["id"])
    procs = [WorkerProcess(settings, tmp_path / f"w{i}.log", **direct) for i in range(2)]
    try:
        await _finish_cleanly(pg, ids, timeout=90)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(p.wait, 30)
            p.close()
    spans = await _spans_by_job(pg)
    assert {len(runs) for runs in spans.values()} == {1}, "a span job ran more than once"
    # A claim whose answer arrives while its worker's loop is blocked is not run there but handed back (the
    # lease may be running out by then; the rescue may be first); so rescues may happen, repeated runs
    # may not.
    rescued_then_run_twice = await pg.fetchval(
        "SELECT count(*) FROM side_effects GROUP BY job_id HAVING count(*) > 1 LIMIT 1"
    )
    assert rescued_then_run_twice is None
    assert await pg.fetchval("SELECT count(*) FROM side_effects") == 2
    assert any("event loop blocked" in p.log_path.read_text() for p in procs)
