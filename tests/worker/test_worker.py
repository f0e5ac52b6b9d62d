"""The worker runtime in-process: end to end, retries, timeouts, cancellation, CPU-bound work,
leases, durable cancel checks, pool starvation (case C15), side-task supervision."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

import tests.support.processors  # noqa: F401  (registers the test job types)
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support.factories import TestUser, event_kinds
from tests.support.workers import running_worker, wait_status, wait_until


async def enqueue(
    engine: Any,
    settings: Settings,
    user: TestUser,
    type_: str,
    input_data: dict[str, Any] | None = None,
    **kw: Any,
) -> uuid.UUID:
    async with engine.begin() as conn:
        result = await queue.enqueue(
            conn, NewJob(type=type_, input_data=input_data or {}, user_id=user.id, **kw), settings
        )
    return result.job["id"]


async def test_a_noop_job_runs_to_completion_with_one_event_per_transition(
    engine, settings, owner, pg
) -> None:
    async with running_worker(settings) as worker:
        job = await enqueue(engine, settings, owner, "noop", {"hello": "world"})
        row = await wait_status(pg, job, {"completed"})
    assert row["result_data"] == '{"hello": "world"}'
    assert row["attempts"] == 1
    assert row["locked_by"] is None
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "completed"]
    claimed = await pg.fetchval("SELECT actor FROM job_events WHERE job_id = $1 AND kind = 'claimed'", job)
    assert claimed == f"worker:{worker.id}"


async def test_notify_starts_a_job_at_once_even_with_a_long_poll_interval(
    make_settings, engine, owner, pg
) -> None:
    settings = make_settings(job_processor_poll_interval=30)
    async with running_worker(settings):
        await asyncio.sleep(0.3)  # idle, listening
        started = time.monotonic()
        job = await enqueue(engine, settings, owner, "noop")
        await wait_status(pg, job, {"completed"}, timeout=5)
        assert time.monotonic() - started < 2.0


async def test_a_scheduled_job_starts_when_due_without_a_notify(make_settings, engine, owner, pg) -> None:
    settings = make_settings(job_processor_poll_interval=30)
    async with running_worker(settings):
        run_at = (await pg.fetchval("SELECT now()")) + __import__("datetime").timedelta(seconds=1.0)
        job = await enqueue(engine, settings, owner, "noop", run_at=run_at)
        row = await wait_status(pg, job, {"completed"}, timeout=5)
    assert row["started_at"] >= run_at


async def test_a_job_that_fails_twice_then_succeeds_is_completed_with_its_history(
    engine, settings, owner, pg
) -> None:
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "fail", {"times": 2, "message": "flaky"})
        row = await wait_status(pg, job, {"completed"})
    assert row["attempts"] == 3
    assert row["error_message"] is None
    assert await event_kinds(pg, job) == [
        "enqueued",
        "claimed",
        "retry_scheduled",
        "claimed",
        "retry_scheduled",
        "claimed",
        "completed",
    ]
    assert (
        await pg.fetchval("SELECT count(*) FROM alert_outbox") == 0
    )  # case C22: no alert for a recovered job


async def test_an_unexpected_exception_is_a_failed_attempt_with_the_traceback(
    engine, settings, owner, pg
) -> None:
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "fail", {"message": "kaboom"}, max_attempts=2)
        row = await wait_status(pg, job, {"failed"})
    assert row["attempts"] == 2
    assert row["error_message"].startswith("RuntimeError: kaboom")
    assert "Traceback" in row["error_message"]
    assert "builtin.py" in row["error_message"]
    assert await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'failed'") == 1


async def test_a_permanent_error_fails_without_retrying(engine, settings, owner, pg) -> None:
    async with running_worker(settings):
        job = await enqueue(
            engine, settings, owner, "fail", {"permanent": True, "message": "bad input"}, max_attempts=5
        )
        row = await wait_status(pg, job, {"failed"})
    assert row["attempts"] == 1
    assert row["error_message"] == "bad input"


async def test_an_attempt_past_its_timeout_is_a_failure_saying_so(engine, settings, owner, pg) -> None:
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.hang", {"seconds": 10}, max_attempts=1)
        row = await wait_status(pg, job, {"failed"}, timeout=5)
    assert row["error_message"] == "took longer than its 0.5 s limit"


@pytest.mark.parametrize("mode", ["big", "recursion"])
async def test_a_huge_error_or_deep_traceback_is_capped_and_the_job_still_fails(
    engine, settings, owner, pg, mode
) -> None:
    # Case C13: a 5 MB message or a 10 000-frame traceback must not stop the job from reaching failed.
    from app.jobs.payload import ERROR_CAP_BYTES

    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.huge_error", {"mode": mode}, max_attempts=2)
        row = await wait_status(pg, job, {"failed"})
    assert row["attempts"] == 2
    assert len(row["error_message"].encode()) <= ERROR_CAP_BYTES + 100
    if mode == "big":
        assert "[truncated," in row["error_message"]
    else:
        assert row["error_message"].startswith("RecursionError: went 10 000 frames deep")


async def test_cancelling_a_cooperative_running_job_ends_cancelled_within_two_seconds(
    engine, settings, owner, pg
) -> None:
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "sleep", {"seconds": 30})
        await wait_status(pg, job, {"in_progress"})
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)
        asked = time.monotonic()
        row = await wait_status(pg, job, {"cancelled"}, timeout=5)
        assert time.monotonic() - asked < 2.0
    kinds = await event_kinds(pg, job)
    assert kinds[-2:] == ["cancel_requested", "cancelled"]
    assert "completed" not in kinds
    assert row["attempts"] == 1


async def test_a_processor_that_ignores_cancel_still_ends_cancelled_not_completed(
    make_settings, engine, owner, pg
) -> None:
    # C06 variant 2 through the worker: the stubborn processor swallows the cancellation and returns
    # success; the completion loses to the accepted cancel.
    settings = make_settings(job_cancel_grace_secs=0.3)
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.stubborn", {"seconds": 1.5})
        await wait_status(pg, job, {"in_progress"})
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)
        await wait_status(pg, job, {"cancelled"}, timeout=5)
    assert "completed" not in await event_kinds(pg, job)


async def test_a_non_cooperative_job_is_cancelled_within_grace_plus_one_second(
    make_settings, engine, owner, pg
) -> None:
    settings = make_settings(job_cancel_grace_secs=0.5)
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.effect", {"seconds": 20, "cooperative": False})
        await wait_status(pg, job, {"in_progress"})
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)
        asked = time.monotonic()
        await wait_status(pg, job, {"cancelled"}, timeout=5)
        assert time.monotonic() - asked < 0.5 + 1.0
    assert await pg.fetchval("SELECT count(*) FROM side_effects") == 0


@pytest.mark.parametrize("durable_check", [True, False], ids=["durable-check-on", "negative-control-off"])
async def test_a_lost_cancel_notification_does_not_lose_the_cancel(
    engine, settings, owner, pg, monkeypatch, durable_check
) -> None:
    """The worker also checks ``is_active`` durably. With the NOTIFY lost, the running job is
    still stopped within about a second; with the durable check switched off too, nothing stops it and it
    runs its full 4 seconds (its completion then loses to the cancel, but the work was not stopped)."""
    if not durable_check:

        async def never(*_a: Any, **_k: Any) -> set[uuid.UUID]:
            return set()

        monkeypatch.setattr(queue, "cancel_requested", never)
        for name, returned in (
            ("RENEW_LEASES", "jobs.id, jobs.is_active"),
            ("KEEP_LEASES", "jobs.id, jobs.is_active"),
        ):
            statement = getattr(queue.leases, name)
            patched = statement.text.replace(
                f"RETURNING {returned}", f"RETURNING {returned.split(',')[0]}, true"
            )
            assert patched != statement.text
            monkeypatch.setattr(queue.leases, name, queue._sql(patched))
    async with running_worker(settings) as worker:
        worker.listener.on_cancel = lambda payload: None  # the notification is lost
        job = await enqueue(engine, settings, owner, "sleep", {"seconds": 4})
        await wait_status(pg, job, {"in_progress"})
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)
        asked = time.monotonic()
        row = await wait_status(pg, job, {"cancelled", "completed"}, timeout=10)
        took = time.monotonic() - asked
    assert row["status"] == "cancelled"
    if durable_check:
        assert took < 2.5
    else:
        assert took > 3.0, "without the durable check the processor should not have been stopped"


async def test_cpu_bound_work_does_not_stall_the_event_loop(engine, settings, owner, pg) -> None:
    # While a CPU-bound job runs, the loop's lag stays far below the job's 2 s of work. Were the work run
    # on the loop, one lag would be about 2 s; 0.5 s leaves room for a busy 2-core machine, where a
    # scheduler hiccup alone has measured just over 100 ms.
    lags: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)

    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "cpu", {"seconds": 2})
        await wait_status(pg, job, {"in_progress"})
        task = asyncio.create_task(probe())
        row = await wait_status(pg, job, {"completed"}, timeout=30)
        stop.set()
        await task
    assert row["result_data"]
    assert '"rounds"' in row["result_data"]
    assert len(lags) > 50
    assert max(lags) < 0.5, f"max event loop lag {max(lags) * 1000:.0f} ms"


async def test_cancelling_a_cpu_bound_job_kills_its_process(make_settings, engine, owner, pg) -> None:
    settings = make_settings(job_cancel_grace_secs=0.2)
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "cpu", {"seconds": 60})
        await wait_status(pg, job, {"in_progress"})
        await asyncio.sleep(0.5)
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)
        await wait_status(pg, job, {"cancelled"}, timeout=5)


async def test_progress_reports_reach_the_job_row(engine, settings, owner, pg) -> None:
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "sleep", {"seconds": 3})
        row = await wait_until(
            lambda: pg.fetchrow(
                "SELECT progress, progress_message FROM jobs WHERE id = $1 AND progress > 0", job
            ),
            timeout=5,
            what="a progress report",
        )
        assert 0 < row["progress"] < 1
        assert row["progress_message"].startswith("Waited")
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)


@pytest.mark.parametrize("renewal", [True, False], ids=["renewal-on", "negative-control-off"])
async def test_a_job_longer_than_its_lease_runs_exactly_once(
    make_settings, engine, owner, pg, renewal
) -> None:
    """Case C01 (scaled: lease 2 s, renewal every 0.5 s, two workers, job 5 s). With renewal switched
    off the sweep rescues the job while it still runs and it is claimed and run again."""
    settings = make_settings(
        worker_visibility_timeout_secs=2, worker_heartbeat_secs=0.5, worker_sweep_interval_secs=0.3
    )
    async with running_worker(settings) as a, running_worker(settings) as b:
        a.renew_leases = b.renew_leases = renewal
        job = await enqueue(
            engine, settings, owner, "test.effect", {"seconds": 5, "cooperative": False}, max_attempts=3
        )
        first = await wait_status(pg, job, {"in_progress"})
        lease_1 = first["lease_expires_at"]
        await asyncio.sleep(1.5)
        second = await pg.fetchrow("SELECT lease_expires_at FROM jobs WHERE id = $1", job)
        await wait_status(pg, job, {"completed", "failed"}, timeout=30)
        await asyncio.sleep(0.5)
    effects = await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job)
    owners = await pg.fetchval(
        "SELECT count(DISTINCT actor) FROM job_events WHERE job_id = $1 AND kind = 'claimed'", job
    )
    row = await pg.fetchrow("SELECT attempts FROM jobs WHERE id = $1", job)
    if renewal:
        assert (await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job)) == "completed"
        assert effects == 1
        assert owners == 1
        assert row["attempts"] == 1
        assert second["lease_expires_at"] > lease_1  # the deadline moved forward while it ran
        assert "rescued" not in await event_kinds(pg, job)
    else:
        claims = await pg.fetchval(
            "SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = 'claimed'", job
        )
        # Rescued and claimed again while its first attempt still ran. (Whether that attempt's side effect
        # also lands depends on which worker claims it again: a worker that re-claims a job it still runs
        # stops the stale attempt, so counting effects here would be a coin toss.)
        kinds = await event_kinds(pg, job)
        assert claims >= 2, "without renewal the job should have been rescued and run again"
        assert "rescued" in kinds, "without renewal the job should have been rescued and run again"


async def test_internal_operations_are_not_starved_by_processors_holding_the_pool(
    make_settings, engine, owner, pg
) -> None:
    """Case C15 (scaled): app pool of 4, concurrency 10, each processor holds a pooled connection for
    1 s. Claims, lease renewals and finishes use the worker's own connections, so every job completes
    exactly once and no lease expires on a running job."""
    settings = make_settings(
        db_pool_size=4,
        max_concurrent_jobs=10,
        db_pool_timeout_secs=60,
        worker_visibility_timeout_secs=3,
        worker_heartbeat_secs=0.5,
    )
    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn,
            [NewJob(type="test.pgsleep", input_data={"seconds": 1}, user_id=owner.id) for _ in range(20)],
            settings,
        )
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 20 FROM jobs WHERE status = 'completed'"),
            timeout=60,
            what="all 20 jobs completed",
        )
    assert await pg.fetchval("SELECT count(*) FROM side_effects") == 20
    assert await pg.fetchval("SELECT count(DISTINCT job_id) FROM side_effects") == 20
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'rescued'") == 0


async def test_processor_created_next_jobs_fan_out_and_fan_in(engine, settings, owner, pg) -> None:
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.fanout", {"n": 4})
        creator = await wait_status(pg, job, {"completed"})
        pipeline_id = creator["pipeline_id"]
        assert pipeline_id is not None
        collect = await wait_until(
            lambda: pg.fetchrow(
                "SELECT * FROM jobs WHERE pipeline_id = $1 AND step_key = 'collect' AND status = 'completed'",
                pipeline_id,
            ),
            what="the fan-in job",
        )
    assert '"parents": ["child-0", "child-1", "child-2", "child-3"]' in collect["result_data"]
    owners = await pg.fetch(
        "SELECT DISTINCT user_id, created_by_job FROM jobs WHERE pipeline_id = $1 AND id <> $2",
        pipeline_id,
        job,
    )
    assert [(r["user_id"], r["created_by_job"]) for r in owners] == [
        (owner.id, job)
    ]  # case C20: owner inherited
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pipeline_id) == "completed"


@pytest.mark.parametrize("bad", ["cycle", "unknown"])
async def test_processor_next_jobs_with_a_cycle_or_unknown_dependency_create_nothing(
    engine, settings, owner, pg, bad
) -> None:
    # Case C09 (c), (d) through the processor path: the job fails permanently naming the problem.
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.fanout", {"n": 2, "bad": bad})
        row = await wait_status(pg, job, {"failed"})
    assert ("dependency cycle: x → y → x" if bad == "cycle" else "unknown dependency") in row["error_message"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_a_side_task_that_dies_stops_the_worker_loudly(engine, settings, owner, monkeypatch) -> None:
    # Not the sweep: a part of it that raises is retried on its own (tests/worker/test_sweep_parts.py).
    from app.notifications import Mailer

    async def broken(*_a: Any, **_k: Any) -> Any:
        raise ValueError("bug in the notice mailer")

    monkeypatch.setattr(Mailer, "run", broken)
    from app.worker.runner import Worker

    worker = Worker(settings, settings.database_url or "")
    with pytest.raises(RuntimeError, match="side task died"):
        await asyncio.wait_for(worker.run(), 20)


async def test_cpu_bound_processors_report_progress_from_their_process(engine, settings, owner, pg) -> None:
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "cpu", {"seconds": 3})
        row = await wait_until(
            lambda: pg.fetchrow(
                "SELECT progress, progress_message FROM jobs WHERE id = $1 AND progress > 0", job
            ),
            timeout=10,
            what="a progress report from the child process",
        )
        assert 0 < row["progress"] < 1
        assert row["progress_message"].endswith("rounds")
        await wait_status(pg, job, {"completed"}, timeout=20)


async def test_a_retryable_error_is_stored_as_its_message_for_people(engine, settings, owner, pg) -> None:
    """A ``RetryableError``'s message is written for people: no class name, no traceback."""
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.retryable", max_attempts=1)
        row = await wait_status(pg, job, {"failed"})
    assert row["error_message"] == "The printer is out of paper; it will be tried again."


async def test_a_connection_left_mid_operation_is_replaced_and_the_write_retried(engine) -> None:
    """A pooled connection whose server went away can be handed out while asyncpg still consumes the
    server's farewell: using it raises InternalClientError ("another operation is in progress"), not a
    connection error. Like a dropped connection it is replaced and the write retried; a finished job's
    outcome was recorded as a failure ("the outcome could not be recorded") in a CI run."""
    import asyncpg
    import structlog

    from app.worker.faults import retrying
    from app.worker.held import HeldConnection

    held = HeldConnection(engine)
    used: list[Any] = []

    async def write(conn: Any) -> Any:
        used.append(conn)
        if len(used) == 1:
            raise asyncpg.exceptions.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            )
        return (await conn.exec_driver_sql("SELECT 1")).scalar()

    try:
        assert await asyncio.wait_for(retrying(held, "test", write, structlog.get_logger()), 10) == 1
    finally:
        await held.close()
    assert len(used) == 2 and used[0] is not used[1]


async def test_a_worker_transaction_left_open_holds_its_rows_no_longer_than_half_a_lease(
    engine, make_settings, owner, pg
) -> None:
    """A worker host cut off in the middle of a transaction (behind PgBouncer TCP does not even notice)
    leaves its job rows locked until the server ends that transaction; the rescue, due when the lease runs
    out, waits for them. With a 2 s lease the worker's own connections end an idle transaction after 1 s,
    not after the 30 s ``DB_IDLE_IN_TRANSACTION_TIMEOUT_MS`` the processors' connections keep."""
    import asyncpg
    from sqlalchemy import text

    from app.worker.runner import Worker

    settings = make_settings(worker_visibility_timeout_secs=2, db_idle_in_transaction_timeout_ms=30_000)
    job = await enqueue(engine, settings, owner, "noop")
    worker = Worker(settings, settings.database_url or "")
    try:
        conn = await worker.engine.connect()
        await conn.begin()
        await conn.execute(text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"), {"id": job})
        # the worker is cut off here: its transaction idles with the row locked
        await asyncio.sleep(1.6)
        async with pg.transaction():
            try:
                await pg.fetchval("SELECT id FROM jobs WHERE id = $1 FOR UPDATE NOWAIT", job)
            except asyncpg.LockNotAvailableError:
                pytest.fail("the row is still locked by the worker's idle transaction after 1.6 s")
        with pytest.raises(Exception, match="idle-in-transaction timeout|closed|terminat"):
            await conn.execute(text("SELECT 1"))
        await conn.invalidate()
    finally:
        await worker.engine.dispose()
        await worker.app_engine.dispose()
