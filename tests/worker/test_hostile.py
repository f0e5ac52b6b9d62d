"""Corners found by attacking the worker as a hostile environment would: a cancel request that meets a
stop, claimed jobs the worker will not run, a worker whose clock is not the database's."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import tests.support.processors  # noqa: F401  (registers the test job types)
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from app.worker.runner import Worker
from tests.support.factories import TestUser, event_kinds
from tests.support.workers import WorkerProcess, wait_status


async def _enqueue(
    engine: Any, settings: Settings, user: TestUser, type_: str, data: dict[str, Any], **kw: Any
) -> uuid.UUID:
    async with engine.begin() as conn:
        result = await queue.enqueue(
            conn, NewJob(type=type_, input_data=data, user_id=user.id, **kw), settings
        )
    return result.job["id"]


async def test_a_job_whose_cancel_meets_the_end_of_the_stops_grace_ends_cancelled_not_held(
    make_settings, engine, owner, pg
) -> None:
    """A cancel is requested for a running job whose processor does not stop at once (its cancel grace is
    long), and the worker is stopped meanwhile with a short grace: the job is stopped for the shutdown. The
    cancel was accepted, so the job ends ``cancelled``; handed back to the queue it stayed ``queued`` with
    its cancel flag, which reads "Held" and is never claimed nor cancelled."""
    settings = make_settings(job_cancel_grace_secs=10, worker_shutdown_grace_secs=0.3)
    worker = Worker(settings, settings.database_url or "")
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        job = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 30, "cooperative": False})
        await wait_status(pg, job, {"in_progress"})
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)
        await asyncio.sleep(0.5)  # the worker saw the request (NOTIFY) and asked the processor to stop
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    row = await wait_status(pg, job, {"cancelled", "queued"}, timeout=5)
    assert (row["status"], row["is_active"]) == ("cancelled", False), row
    assert row["locked_by"] is None and row["completed_at"] is not None
    assert (await event_kinds(pg, job))[-2:] == ["cancel_requested", "cancelled"]


async def test_jobs_claimed_too_late_to_run_are_handed_back_without_costing_an_attempt(
    make_settings, engine, owner, pg, monkeypatch
) -> None:
    """A claim's answer reaches the worker only after its loop was blocked for a whole lease (a processor
    blocked it, or the answer was slow): the worker does not run those jobs, their lease may be over. Left
    to the rescue, each lost the attempt the claim counted, so a job on its last attempt failed with "lease
    expired: worker lost" without ever having started. Handed back at once (fenced by the attempt), the
    job runs on its one attempt."""
    lease = 2.0
    settings = make_settings(worker_visibility_timeout_secs=lease, worker_sweep_interval_secs=0.3)
    job = await _enqueue(engine, settings, owner, "noop", {}, max_attempts=1)
    worker = Worker(settings, settings.database_url or "")
    claim = worker.claimer.claim
    blocked = []

    async def late(want: int, *args: Any) -> Any:
        rows = await claim(want, *args)
        if rows and not blocked:
            blocked.append(rows)
            time.sleep(lease - worker.leases.margin / 2)  # noqa: ASYNC251  (the loop blocked meanwhile)
        return rows

    monkeypatch.setattr(worker.claimer, "claim", late)
    task = asyncio.create_task(worker.run())
    try:
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=15)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert blocked, "the claim was not held up"
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "released", "claimed", "completed"]


async def test_a_cancel_of_a_claimed_job_waiting_for_a_slot_ends_it_before_it_starts(
    make_settings, engine, owner, pg
) -> None:
    """A job claimed ahead of a free slot (buffered: ``in_progress``, leased, not started) is cancelled. It
    ends ``cancelled`` at once, and never starts: the cancel was seen only for running jobs, so it read
    "Cancelling" until a slot freed, then started and ran its side effect before the durable check caught
    up."""
    settings = make_settings(max_concurrent_jobs=1)
    worker = Worker(settings, settings.database_url or "")
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        first = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 3, "cooperative": False})
        await wait_status(pg, first, {"in_progress"})
        waiting = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0, "cooperative": False})
        await wait_status(pg, waiting, {"in_progress"})  # claimed into the buffer
        assert waiting in worker.buffer
        async with engine.begin() as conn:
            await queue.cancel(conn, waiting, owner)
        row = await wait_status(pg, waiting, {"cancelled", "completed"}, timeout=1.5)
        await wait_status(pg, first, {"completed"})
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert row["status"] == "cancelled"
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", waiting) == 0
    assert (await event_kinds(pg, waiting))[-2:] == ["cancel_requested", "cancelled"]


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.mark.slow
@pytest.mark.skipif(not FAKETIME_LIB.exists(), reason="libfaketime is not installed")
async def test_workers_whose_clocks_are_minutes_off_keep_every_time_on_the_databases_clock(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """Two worker processes, one clock five minutes fast and one five minutes slow (libfaketime), share
    jobs whose leases must be renewed, a retry with its backoff, a scheduled job and a job that logs. None
    is rescued or run twice, the retry and the scheduled job start on time by the database's clock, and
    the logged lines carry times within their job's run: stamped by the worker's own clock they read five
    minutes after the job had finished (or before it started)."""
    lease = 2.0
    settings = make_settings(worker_visibility_timeout_secs=lease, worker_sweep_interval_secs=0.3)
    db_now = await pg.fetchval("SELECT now()")
    ids = {
        "renewed": await _enqueue(engine, settings, owner, "sleep", {"seconds": 2.5 * lease}),
        "retried": await _enqueue(engine, settings, owner, "fail", {"times": 1}),
        "scheduled": await _enqueue(
            engine, settings, owner, "noop", {}, run_at=db_now + datetime.timedelta(seconds=3)
        ),
    }
    ids.update(
        {f"logs{i}": await _enqueue(engine, settings, owner, "test.logs", {"lines": 3}) for i in range(4)}
    )
    procs = [
        WorkerProcess(
            settings,
            tmp_path / f"w{skew}.log",
            LD_PRELOAD=str(FAKETIME_LIB),
            FAKETIME=f"{skew}m",
            FAKETIME_NO_CACHE="1",
        )
        for skew in ("+5", "-5")
    ]
    try:
        for job in ids.values():
            await wait_status(pg, job, {"completed", "failed"}, timeout=20)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            await asyncio.to_thread(p.wait, 30)
            p.close()
    rows = {name: await pg.fetchrow("SELECT * FROM jobs WHERE id = $1", job) for name, job in ids.items()}
    assert {name: r["status"] for name, r in rows.items()} == dict.fromkeys(ids, "completed")
    kinds = {name: await event_kinds(pg, job) for name, job in ids.items()}
    assert not [name for name, k in kinds.items() if "rescued" in k], kinds
    assert rows["renewed"]["attempts"] == 1
    assert rows["retried"]["attempts"] == 2
    assert rows["retried"]["completed_at"] - db_now < datetime.timedelta(seconds=10)
    assert db_now + datetime.timedelta(seconds=3) <= rows["scheduled"]["started_at"]
    assert rows["scheduled"]["started_at"] < db_now + datetime.timedelta(seconds=8)
    for name, r in rows.items():
        if name.startswith("logs"):
            ats = [a for (a,) in await pg.fetch("SELECT at FROM job_logs WHERE job_id = $1", ids[name])]
            assert ats, name
            slack = datetime.timedelta(seconds=2)
            assert all(r["started_at"] - slack <= at <= r["completed_at"] + slack for at in ats), (
                name,
                r["started_at"],
                r["completed_at"],
                ats,
            )


async def _disable(pg: Any, engine: Any, user: TestUser) -> None:
    """Disable ``user`` as the admin's action does: the account, then its waiting jobs held."""
    await pg.execute("UPDATE users SET is_active = false WHERE id = $1", user.id)
    async with engine.begin() as conn:
        await queue.hold_user_jobs(conn, user.id, "test")


async def test_a_running_job_of_a_disabled_owner_that_goes_back_to_waiting_is_held(
    make_settings, engine, owner, pg
) -> None:
    """A job runs while its owner is disabled; it is left to finish, but its attempt fails (a retry is
    due) and, on another, the worker stops before it finishes (it is handed back). Each went back to
    ``queued`` as claimable and ran again for the disabled owner: the hold covers only the jobs waiting at
    the disable. Both are held now, as a processor's next jobs for a disabled owner are."""
    settings = make_settings(worker_shutdown_grace_secs=0.3)
    worker = Worker(settings, settings.database_url or "")
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        retried = await _enqueue(engine, settings, owner, "test.hang", {"seconds": 10}, max_attempts=3)
        handed_back = await _enqueue(engine, settings, owner, "sleep", {"seconds": 30})
        await wait_status(pg, retried, {"in_progress"})
        await wait_status(pg, handed_back, {"in_progress"})
        await _disable(pg, engine, owner)
        await asyncio.sleep(1.5)  # the timeout (0.5 s) fails the attempt; its retry is due at once
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    for job, attempts in ((retried, 1), (handed_back, 0)):
        row = await pg.fetchrow("SELECT status, is_active, attempts FROM jobs WHERE id = $1", job)
        assert dict(row) == {"status": "queued", "is_active": False, "attempts": attempts}, (job, dict(row))
        assert (await event_kinds(pg, job))[-1] == "held"


async def test_a_disabled_owners_job_rescued_from_a_lost_worker_is_held(
    make_settings, engine, owner, pg
) -> None:
    """The rescue puts a lost worker's job back to waiting: for a disabled owner it waits held."""
    settings = make_settings()
    job = await _enqueue(engine, settings, owner, "noop", {})
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.claim(conn, "lost-worker", 1, 30)] == [job]
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    await _disable(pg, engine, owner)
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.rescue_expired(conn)] == [job]
    row = await pg.fetchrow("SELECT status, is_active, attempts FROM jobs WHERE id = $1", job)
    assert dict(row) == {"status": "queued", "is_active": False, "attempts": 1}
    assert (await event_kinds(pg, job))[-2:] == ["rescued", "held"]


@pytest.mark.slow
async def test_a_claimed_job_dropped_unstarted_in_a_partition_is_handed_back_not_failed(
    make_settings, engine, owner, pg, tcp_proxy
) -> None:
    """A worker is cut off (packets vanish) while one job runs and another, on its last attempt, waits
    in its buffer. Its leases cannot be renewed, so before they end it stops the running job and drops the
    waiting one. The dropped job never started: handed back once the database is in reach again (fenced by
    its attempt), it runs on its one attempt; left to the rescue, it failed as "lease expired: worker
    lost" without having run."""
    lease = 3.0
    common: dict[str, Any] = {"worker_visibility_timeout_secs": lease, "max_concurrent_jobs": 1}
    settings = make_settings(**common)
    cut_off = make_settings(database_url=tcp_proxy.url(settings.database_url or ""), **common)
    worker = Worker(cut_off, cut_off.database_url or "")
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        running = await _enqueue(engine, settings, owner, "sleep", {"seconds": 30})
        await wait_status(pg, running, {"in_progress"})
        waiting = await _enqueue(engine, settings, owner, "noop", {}, max_attempts=1)
        await wait_status(pg, waiting, {"in_progress"})
        assert waiting in worker.buffer
        tcp_proxy.cut("blackhole")
        for _ in range(100):  # dropped a heartbeat before the lease ends by the worker's clock
            if waiting not in worker.buffer:
                break
            await asyncio.sleep(0.05)
        assert waiting not in worker.buffer
        tcp_proxy.restore()
        row = await wait_status(pg, waiting, {"completed", "failed"}, timeout=15)
    finally:
        tcp_proxy.restore()
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)


def _claiming_through(settings: Any, url: str, monkeypatch: Any) -> tuple[Worker, Any]:
    """A worker whose claims go to ``url`` (a proxy the test controls) on an engine of their own, named as
    the worker's connections are; every claim after the first runs on the kept connection, and a stop
    waits 1 s for a claim's answer. A long poll (``settings``): the worker waits idle for a NOTIFY, on a
    listener whose connection is not proxied."""
    from app.db import create_engine
    from app.worker import claim_loop, claiming

    monkeypatch.setattr(claim_loop, "CLAIM_ARRIVAL_SECS", 1.0)
    monkeypatch.setattr(claiming, "LIMITS_RECHECK_SECS", 3600.0)
    worker = Worker(settings, settings.database_url or "")
    claims = create_engine(url, pool_size=2, application_name=worker.application_name)
    worker.claimer = claiming.Claimer(
        claims,
        claims.execution_options(isolation_level="AUTOCOMMIT"),
        worker_id=worker.id,
        lease_secs=worker.lease_secs,
    )
    return worker, claims


@contextlib.asynccontextmanager
async def _behind_blackhole(
    settings: Any, db_url: str, monkeypatch: Any
) -> AsyncIterator[tuple[Worker, Any, asyncio.Task[None]]]:
    """A running worker (``settings``) whose claims go to ``db_url`` through a blackhole proxy the test
    controls, started, its first claim in and nothing on its way (the kept connection idles):
    ``(worker, proxy, its task)``. Stopped, and the proxy closed, at the end."""
    from sqlalchemy.engine import make_url

    from tests.support.netproxy import BlackholeProxy

    url = make_url(db_url)
    proxy = BlackholeProxy(url.port or 5432)
    await proxy.start()
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    worker, claims = _claiming_through(settings, proxied, monkeypatch)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        await asyncio.sleep(1.0)
        yield worker, proxy, task
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
        await claims.dispose(close=False)
        await proxy.close()


async def _runs_once_more(settings: Any, pg: Any, job: Any) -> None:
    """A fresh worker runs the handed-back ``job`` once: completed on the attempt it was given back."""
    again = Worker(settings, settings.database_url or "")
    task = asyncio.create_task(again.run())
    try:
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=15)
    finally:
        again.stop()
        await asyncio.wait_for(task, 30)
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job) == 1


async def test_a_claim_whose_answer_had_not_come_at_the_stop_is_handed_back_not_left_to_the_rescue(
    make_settings, engine, owner, pg, db_url, monkeypatch
) -> None:
    """A claim reaches the database and takes a job on its last attempt, but its answer is held on the way
    back (a silent connection) when the worker stops. The worker gives up waiting for it and cancels it:
    the job, locked by the stopped worker, was left to the rescue, which counted the attempt it never ran
    and failed it as "lease expired: worker lost". The stopping worker reaches the database on a new
    connection, ends the claim's session and hands the job back: ``queued``, its attempt not counted, and
    it runs later exactly once."""
    settings = make_settings(worker_visibility_timeout_secs=30, job_processor_poll_interval=30)
    ended: list[int] = []
    end_sessions = queue.end_sessions

    async def recorded(conn: Any, pids: list[int], name: str, **kw: Any) -> bool:
        ended.extend(pids)
        return await end_sessions(conn, pids, name, **kw)

    monkeypatch.setattr(queue, "end_sessions", recorded)
    async with _behind_blackhole(settings, db_url, monkeypatch) as (worker, proxy, _):
        proxy.answers_only = proxy.frozen = True
        job = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=1)
        row = await wait_status(pg, job, {"in_progress"})
        assert row["locked_by"] == worker.id
        await asyncio.sleep(0.3)
        assert job not in worker.held  # the claim's answer has not come
    row = await pg.fetchrow("SELECT status, attempts, locked_by FROM jobs WHERE id = $1", job)
    assert dict(row) == {"status": "queued", "attempts": 0, "locked_by": None}
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "released"]
    # the claim's session was ended before the release: a claim still running could not commit after it
    cut = sorted(ended)
    assert cut and not await pg.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", cut)
    await _runs_once_more(settings, pg, job)


async def test_a_claim_that_failed_while_the_worker_runs_is_handed_back_once_the_database_answers(
    make_settings, engine, owner, pg, db_url, monkeypatch
) -> None:
    """A claim reaches the database and takes a job on its last attempt, and its connection is cut before
    the answer comes back: the claim fails, the worker goes on. The job, locked by the running worker that
    never received it, stayed claimed until its lease ended, and the rescue then counted the attempt it
    never ran and failed it as "lease expired: worker lost". Once the database answers again, the worker
    hands it back (``queued``, its attempt not counted, a ``released`` event) before its next claim, and
    then runs it, exactly once, on its one attempt."""
    settings = make_settings(worker_visibility_timeout_secs=30, job_processor_poll_interval=30)
    async with _behind_blackhole(settings, db_url, monkeypatch) as (worker, proxy, task):
        proxy.answers_only = proxy.frozen = True
        job = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=1)
        row = await wait_status(pg, job, {"in_progress"})
        assert row["locked_by"] == worker.id and job not in worker.held  # committed; the answer held back
        proxy.sever()  # the answer is lost and the claim fails; the database answers on new connections
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=10)
        assert not task.done()  # the worker ran on
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "released", "claimed", "completed"]
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job) == 1


async def test_a_failed_claim_whose_jobs_cannot_be_handed_back_stops_the_worker_claiming_no_longer_than_a_lease(
    make_settings, engine, owner, pg, db_url, monkeypatch
) -> None:
    """A claim fails without its answer and its server session cannot be ended (it never goes away), so
    what it took cannot be handed back safely. The worker claims nothing while it tries, but not for
    ever: once a lease has passed, whatever the claim took is the rescue's, and the worker claims again
    (a job enqueued meanwhile runs). Trying for ever stopped the worker for good."""

    async def never_gone(*args: Any, **kwargs: Any) -> bool:
        return False

    settings = make_settings(worker_visibility_timeout_secs=3, job_processor_poll_interval=30)
    monkeypatch.setattr(queue, "end_sessions", never_gone)
    async with _behind_blackhole(settings, db_url, monkeypatch) as (_, proxy, task):
        proxy.answers_only = proxy.frozen = True
        lost = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=3)
        await wait_status(pg, lost, {"in_progress"})
        proxy.sever()
        proxy.answers_only = proxy.frozen = False
        later = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0})
        row = await wait_status(pg, later, {"completed", "failed"}, timeout=15)
        assert not task.done()
    assert row["status"] == "completed"
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", later) == 1


@pytest.mark.slow
async def test_a_claim_still_running_on_the_server_at_the_stop_cannot_commit_after_the_hand_back(
    make_settings, engine, owner, pg, db_url, tcp_proxy, monkeypatch
) -> None:
    """A claim is on its way and still running on the server (waiting for a lock) when the worker, cut
    off from it (nothing it sends on that path arrives, the cancel request neither), stops. The stop's
    hand-back, on a path that works, found nothing yet; the claim then committed, and its job stayed
    locked by the stopped worker until the rescue counted an attempt it never ran. The stop ends the
    claim's server session first: the claim is rolled back, the job waits on its one attempt."""
    import asyncpg

    from app.db import asyncpg_dsn

    settings = make_settings(worker_visibility_timeout_secs=30, job_processor_poll_interval=30)
    worker, claims = _claiming_through(settings, tcp_proxy.url(db_url), monkeypatch)
    blocker = await asyncpg.connect(asyncpg_dsn(db_url))
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        db_now = await pg.fetchval("SELECT now()")
        job = await _enqueue(
            engine,
            settings,
            owner,
            "test.effect",
            {"seconds": 0},
            max_attempts=1,
            run_at=db_now + datetime.timedelta(hours=1),
        )
        # The claim's statement waits for this lock before it starts, and sees the job due once it has it.
        await blocker.execute(
            "BEGIN; LOCK TABLE job_events IN SHARE MODE;"
            f"UPDATE jobs SET run_at = now() - interval '1 second' WHERE id = '{job}'"
        )
        await pg.execute(f"NOTIFY {queue.JOBS_CHANNEL}")  # the worker claims
        for _ in range(200):
            waiting = await pg.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                worker.application_name,
            )
            if waiting:
                break
            await asyncio.sleep(0.05)
        assert waiting, "the claim did not reach the lock"
        tcp_proxy.cut("blackhole")
        worker.stop()
        await asyncio.wait_for(task, 30)
    finally:
        worker.stop()
        await blocker.execute("COMMIT")  # a claim still running would commit now
        await blocker.close()
        tcp_proxy.restore()
        await asyncio.wait_for(task, 30)
        await claims.dispose(close=False)
    await asyncio.sleep(0.5)
    row = await pg.fetchrow("SELECT status, attempts, locked_by FROM jobs WHERE id = $1", job)
    assert dict(row) == {"status": "queued", "attempts": 0, "locked_by": None}
    await _runs_once_more(settings, pg, job)
