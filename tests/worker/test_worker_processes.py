"""Workers as real processes, and a database that goes away (cases C01, C03, C04, C11).

Timings are scaled down for CI (leases of a few seconds); ``pytest --long`` runs the cases' own numbers.
Every safety test also runs once with its mechanism switched off and shows the failure it prevents.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import tests.support.processors  # noqa: F401  (registers the test job types)
from app.db import asyncpg_dsn, create_engine, run_migrations
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support.factories import TestUser, event_kinds, make_user
from tests.support.netproxy import BlackholeProxy
from tests.support.pg_owned import OwnedPostgres
from tests.support.workers import WorkerProcess, running_worker, wait_status, wait_until

pytestmark = pytest.mark.slow


async def enqueue(
    engine: Any,
    settings: Settings,
    user: TestUser,
    type_: str,
    input_data: dict[str, Any] | None = None,
    **kw: Any,
) -> Any:
    async with engine.begin() as conn:
        return (
            await queue.enqueue(
                conn, NewJob(type=type_, input_data=input_data or {}, user_id=user.id, **kw), settings
            )
        ).job["id"]


@contextlib.contextmanager
def processes(*procs: WorkerProcess):
    try:
        yield procs
    finally:
        for p in procs:
            p.close()


async def effects(pg: asyncpg.Connection, job: Any) -> int:
    return await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job)


# --- C03: a worker killed mid-job ---------------------------------------------------------------------


@pytest.mark.parametrize("sweep", [True, False], ids=["sweep-on", "negative-control-off"])
async def test_a_job_whose_worker_is_killed_is_rescued_and_run_by_another(
    make_settings, engine, owner, pg, tmp_path, long_run, sweep
) -> None:
    """Case C03: ``kill -9`` the worker while J runs; a fresh worker rescues J within one lease plus one
    sweep interval (the lost attempt counted, the error saying the worker was lost) and runs it. With the
    sweep switched off, J stays ``in_progress`` with an expired lease forever."""
    lease = 10 if long_run else 3
    settings = make_settings(
        worker_visibility_timeout_secs=lease, worker_sweep_interval_secs=0.5 if sweep else 3600
    )
    job = await enqueue(
        engine, settings, owner, "test.effect", {"seconds": 60 if long_run else 4}, max_attempts=3
    )
    with processes(WorkerProcess(settings, tmp_path / "a.log")) as (a,):
        await wait_status(pg, job, {"in_progress"}, timeout=30)
        a.kill()
    killed_at = time.monotonic()
    with processes(WorkerProcess(settings, tmp_path / "b.log")) as (b,):
        if not sweep:
            await asyncio.sleep(lease + 2)
            row = await pg.fetchrow(
                "SELECT status, lease_expires_at < now() AS expired FROM jobs WHERE id = $1", job
            )
            assert row["status"] == "in_progress", "without the sweep the job is stuck"
            assert row["expired"], "without the sweep the job is stuck"
            return
        await wait_until(
            lambda: pg.fetchval(
                "SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = 'rescued'", job
            ),
            timeout=lease + 5,
            what="the rescue",
        )
        assert (
            time.monotonic() - killed_at < lease + 0.5 + 2
        )  # one lease plus one sweep interval (+ start-up)
        row = await wait_status(pg, job, {"completed"}, timeout=90)
        assert b.output().count("job started") == 1
    assert row["attempts"] == 2  # the lost attempt was counted
    kinds = await event_kinds(pg, job)
    assert kinds == ["enqueued", "claimed", "rescued", "claimed", "completed"]
    rescued = await pg.fetchrow(
        "SELECT message, to_status FROM job_events WHERE job_id = $1 AND kind = 'rescued'", job
    )
    assert rescued["to_status"] == "queued"
    assert rescued["message"].startswith("lease expired: worker lost")
    assert await effects(pg, job) == 1
    assert (
        await pg.fetchval(
            "SELECT count(*) FROM jobs WHERE status = 'in_progress' AND lease_expires_at < now()"
        )
        == 0
    )


async def test_a_killed_worker_on_the_last_attempt_fails_the_job_with_one_alert(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    settings = make_settings(worker_visibility_timeout_secs=2, worker_sweep_interval_secs=0.5)
    job = await enqueue(engine, settings, owner, "test.effect", {"seconds": 30}, max_attempts=1)
    with processes(WorkerProcess(settings, tmp_path / "a.log")) as (a,):
        await wait_status(pg, job, {"in_progress"}, timeout=30)
        a.kill()
    with processes(WorkerProcess(settings, tmp_path / "b.log")):
        row = await wait_status(pg, job, {"failed"}, timeout=15)
        # the sweeping worker counts it in its throughput sample (/admin's "failures in the last hour")
        deadline = asyncio.get_running_loop().time() + 15
        while await pg.fetchval("SELECT COALESCE(sum(failed), 0) FROM throughput_samples") != 1:
            assert asyncio.get_running_loop().time() < deadline, "the sweep's failure was not counted"
            await asyncio.sleep(0.2)
    assert row["error_message"].startswith("lease expired: worker lost")
    assert await pg.fetchval("SELECT array_agg(kind) FROM alert_outbox") == ["failed"]


# --- C04: graceful shutdown -----------------------------------------------------------------------------


async def _logged(worker: WorkerProcess, line: str) -> bool:
    return line in worker.output()


async def test_sigterm_lets_the_running_job_finish_while_renewing_its_lease(
    make_settings, engine, owner, pg, tmp_path, long_run
) -> None:
    """Case C04: SIGTERM to A while it runs J (longer than the lease). A claims nothing new, keeps
    renewing J's lease, commits ``completed`` and exits 0; B never claims J."""
    lease, seconds, grace = (10, 20, 30) if long_run else (2, 5, 15)
    settings = make_settings(
        worker_visibility_timeout_secs=lease, worker_shutdown_grace_secs=grace, worker_sweep_interval_secs=0.5
    )
    job = await enqueue(engine, settings, owner, "test.effect", {"seconds": seconds})
    with processes(WorkerProcess(settings, tmp_path / "a.log")) as (a,):
        await wait_status(pg, job, {"in_progress"}, timeout=30)
        with processes(WorkerProcess(settings, tmp_path / "b.log")) as (b,):
            await asyncio.sleep(1)
            a.terminate()
            # A takes the signal in asynchronously: a job enqueued before it has may still be A's to run.
            # What must hold is that A claims nothing once it has.
            await wait_until(lambda: _logged(a, "worker stopping"), what="A taking in SIGTERM")
            other = await enqueue(engine, settings, owner, "noop")
            await wait_status(pg, other, {"completed"}, timeout=10)  # B works; A claims nothing new
            assert (
                await pg.fetchval(
                    "SELECT locked_by FROM job_events e JOIN jobs j ON j.id = e.job_id WHERE false"
                )
                is None
            )
            exit_code = await asyncio.to_thread(a.wait, seconds + 20)
            row = await wait_status(pg, job, {"completed"}, timeout=5)
            assert "job started" not in b.output().split(str(other))[0] or str(job) not in b.output()
    assert exit_code == 0, a.output()[-3000:]
    kinds = await event_kinds(pg, job)
    assert kinds == ["enqueued", "claimed", "completed"]  # one execution, one terminal state
    assert row["attempts"] == 1
    assert await effects(pg, job) == 1
    claimer = await pg.fetchval("SELECT actor FROM job_events WHERE job_id = $1 AND kind = 'claimed'", other)
    assert claimer != await pg.fetchval(
        "SELECT actor FROM job_events WHERE job_id = $1 AND kind = 'claimed'", job
    )


async def test_sigterm_past_the_grace_period_releases_the_job_without_counting_the_attempt(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """Case C04, second half: the grace period runs out first, so A puts J back to ``queued`` itself
    (not left to the sweep), exits 0, and J ends with exactly one terminal state after B runs it."""
    settings = make_settings(
        worker_visibility_timeout_secs=30, worker_shutdown_grace_secs=1, worker_sweep_interval_secs=0.5
    )
    job = await enqueue(engine, settings, owner, "test.effect", {"seconds": 4})
    with processes(WorkerProcess(settings, tmp_path / "a.log")) as (a,):
        await wait_status(pg, job, {"in_progress"}, timeout=30)
        a.terminate()
        exit_code = await asyncio.to_thread(a.wait, 20)
    assert exit_code == 0, a.output()[-3000:]
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"]) == (
        "queued",
        0,
    )  # released, attempt not counted, lease 30 s not waited
    with processes(WorkerProcess(settings, tmp_path / "b.log")):
        await wait_status(pg, job, {"completed"}, timeout=30)
    kinds = await event_kinds(pg, job)
    assert kinds == ["enqueued", "claimed", "released", "claimed", "completed"]
    assert await effects(pg, job) == 1


# --- exactly once across processes --------------------------------------------------------------------------


async def test_four_worker_processes_run_two_thousand_jobs_exactly_once(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    # Processors' pools of 10, not the default 20: four workers at full load would otherwise open up to
    # 4 x 26 connections, more than a default server's 100 (the jobs wait for a connection instead).
    settings = make_settings(max_concurrent_jobs=20, db_pool_size=10)
    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn, [NewJob(type="test.effect", input_data={}, user_id=owner.id) for _ in range(2000)], settings
        )
    with processes(*[WorkerProcess(settings, tmp_path / f"w{i}.log") for i in range(4)]) as procs:
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 2000 FROM jobs WHERE status = 'completed'"),
            timeout=120,
            interval=0.5,
            what="2000 completions",
        )
        for p in procs:
            p.terminate()
        codes = [await asyncio.to_thread(p.wait, 30) for p in procs]
    assert codes == [0, 0, 0, 0]
    assert await pg.fetchval("SELECT count(*) FROM side_effects") == 2000
    assert await pg.fetchval("SELECT count(DISTINCT job_id) FROM side_effects") == 2000
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'in_progress'") == 0
    workers_used = await pg.fetchval("SELECT count(DISTINCT worker) FROM side_effects")
    assert workers_used == 4


# --- C11: the LISTEN connection drops -----------------------------------------------------------------------


async def _terminate_listeners(pg: asyncpg.Connection) -> int:
    return await pg.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'jobdesk-listener' "
        "AND datname = current_database()"
    )


@pytest.mark.parametrize("relisten", [True, False], ids=["relisten-on", "negative-control-off"])
async def test_a_killed_listener_reconnects_and_a_new_job_starts_within_two_seconds(
    make_settings, engine, owner, pg, relisten
) -> None:
    """Case C11: the listener's backend is killed with ``pg_terminate_backend``; with a 30 s polling
    fallback, a job enqueued afterwards still starts within 2 s. With re-LISTEN switched off, it does not
    start within 5 s (only polling would find it)."""
    settings = make_settings(job_processor_poll_interval=30)
    async with running_worker(settings) as worker:
        worker.listener.enabled = relisten
        await wait_until(lambda: _listening(pg), what="the listener")
        await asyncio.sleep(0.5)  # the worker is idle, sleeping for the poll interval
        assert await _terminate_listeners(pg) == 1
        await asyncio.sleep(0.3)
        started = time.monotonic()
        job = await enqueue(engine, settings, owner, "noop")
        if relisten:
            await wait_status(pg, job, {"completed"}, timeout=5)
            assert time.monotonic() - started < 2.0
            assert worker.listener.reconnects == 1
            assert worker.listener.connected
        else:
            await asyncio.sleep(5)
            assert (await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job)) == "queued"
            assert not worker.listener.connected


async def _listening(pg: asyncpg.Connection) -> bool:
    return bool(
        await pg.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobdesk-listener' AND datname = current_database()"
        )
    )


async def test_a_half_open_listener_connection_is_noticed_and_replaced(
    make_settings, engine, owner, pg, db_url
) -> None:
    """Case C11, black-holed TCP: the listener's connection stops delivering anything without closing.
    The periodic liveness check notices, the listener reconnects, and a job starts without waiting for
    the 30 s poll."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    proxy = BlackholeProxy(url.port or 5432)
    await proxy.start()
    listen_url = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    settings = make_settings(job_processor_poll_interval=30, database_listen_url=listen_url)
    try:
        async with running_worker(settings) as worker:
            await wait_until(lambda: _listening(pg), what="the listener")
            await asyncio.sleep(0.5)
            proxy.frozen = True
            job = await enqueue(engine, settings, owner, "noop")
            started = time.monotonic()
            await wait_status(pg, job, {"completed"}, timeout=15)
            took = time.monotonic() - started
            assert worker.listener.reconnects >= 1
    finally:
        await proxy.close()
    assert took < 8.0, f"took {took:.1f}s; the poll interval is 30 s"


async def test_the_worker_carries_on_by_itself_after_a_database_restart(long_run) -> None:
    """Case C11, on a PostgreSQL this test owns: restart it (a full outage of a few
    seconds; two minutes with --long). The worker never busy-spins while it is down, reconnects, LISTENs
    again and starts a job enqueued after the restart within about 2 s, with polling at 30 s."""
    base = Path(tempfile.mkdtemp(prefix="jobdesk-c11-"))
    with OwnedPostgres(base) as server:
        from sqlalchemy.engine import make_url

        url = make_url(server.url).set(database="jobdesk").render_as_string(hide_password=False)
        admin = await asyncpg.connect(asyncpg_dsn(server.url))
        await admin.execute("CREATE DATABASE jobdesk")
        await admin.close()
        await run_migrations(url)
        from app.settings import load_settings
        from tests.conftest import TEST_SETTINGS

        settings = load_settings(
            **{
                **TEST_SETTINGS,
                "database_url": url,
                "jobdesk_data_dir": base / "data",
                "job_processor_poll_interval": 30,
            }
        )
        pg = await asyncpg.connect(asyncpg_dsn(url))
        user = await make_user(pg)
        await pg.close()
        engine = create_engine(url, pool_size=2)
        log_lines: list[str] = []
        try:
            async with running_worker(settings) as worker:
                original_warning = worker.log.warning

                def counting_warning(event: str, **kw: Any) -> Any:
                    log_lines.append(event)
                    return original_warning(event, **kw)

                worker.log = worker.log.bind()
                worker.listener.log = type(
                    "L",
                    (),
                    {"warning": staticmethod(counting_warning), "info": staticmethod(lambda *a, **k: None)},
                )()
                first = await enqueue(engine, settings, user, "noop")
                pg = await asyncpg.connect(asyncpg_dsn(url))
                await wait_status(pg, first, {"completed"}, timeout=10)
                await pg.close()
                down = 120 if long_run else 3
                await asyncio.to_thread(server.stop, "fast")
                await asyncio.sleep(down)
                await asyncio.to_thread(server.start)
                back = time.monotonic()
                await engine.dispose()
                job = await enqueue(engine, settings, user, "noop")
                pg = await asyncpg.connect(asyncpg_dsn(url))
                row = await wait_status(pg, job, {"completed"}, timeout=15)
                took = time.monotonic() - back
                await pg.close()
                assert worker.listener.reconnects >= 1
        finally:
            await engine.dispose()
    assert row["status"] == "completed"
    assert took < 4.0, f"the job started {took:.1f}s after the database came back"
    # No busy spin: reconnect attempts back off (0.2 s doubling to 10 s), so a 3 s outage costs a handful.
    attempts = sum(1 for line in log_lines if "could not connect" in line)
    assert attempts <= (12 if not long_run else 40), f"{attempts} reconnect attempts in the outage"


async def test_outcomes_are_kept_and_retried_when_the_worker_loses_its_connections(
    make_settings, engine, owner, pg
) -> None:
    """A finishing write that fails because the connection dropped is retried on the same
    lease once the database answers, instead of losing the outcome and running the job again."""
    settings = make_settings(worker_visibility_timeout_secs=30)
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.effect", {"seconds": 1.0})
        await wait_status(pg, job, {"in_progress"})
        await asyncio.sleep(0.8)
        # Drop every worker connection (claim, finish, leases) just as the job finishes.
        for _ in range(5):
            await pg.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'jobdesk-worker%' "
                "AND datname = current_database()"
            )
            await asyncio.sleep(0.1)
        row = await wait_status(pg, job, {"completed"}, timeout=20)
    assert row["attempts"] == 1
    assert await effects(pg, job) == 1
    assert "rescued" not in await event_kinds(pg, job)
