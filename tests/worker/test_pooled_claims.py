"""Claims behind PgBouncer in transaction mode whose answer never reaches the worker: the server process
of a claim is PgBouncer's to choose, so the worker cannot end a claim's session by its process id as it
does on direct connections (:func:`app.jobs.queue.end_sessions`); what a given-up claim took must still be
run exactly once, on the attempt it was claimed for."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from typing import Any

import pytest
from sqlalchemy.engine import make_url

import tests.support.processors  # noqa: F401  (registers the test job types)
from app.db import create_engine
from app.worker import claim_loop, claiming
from app.worker.runner import Worker
from tests.support.factories import event_kinds
from tests.support.netproxy import BlackholeProxy
from tests.support.workers import wait_status
from tests.worker.test_hostile import _enqueue

pytestmark = pytest.mark.slow
pytest_plugins = ("tests.support.pgbouncer",)


EXECUTE = b"E\x00\x00\x00\x09\x00"
"""An Execute message of the unnamed portal (type, length 9, the portal's empty name)."""


class SilentAfterExecute(BlackholeProxy):
    """Once :attr:`armed`, the next statement a client sends to be run (its Execute message; asyncpg has
    had the answer to its Describe already) reaches the server, and from then on no answer comes back on
    the connections open."""

    armed = False
    cut_new = False
    """Whether connections made once silent (a cancel request) get nowhere either."""

    async def _pipe(self, reader: Any, writer: Any, born_frozen: bool, answers: bool) -> None:
        with contextlib.suppress(Exception):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self.frozen and (answers if not born_frozen else self.cut_new):
                    continue
                writer.write(data)
                await writer.drain()
                if self.armed and not answers and EXECUTE in data:
                    self.armed, self.answers_only, self.frozen = False, True, True


async def test_a_claim_committed_behind_pgbouncer_whose_answer_never_came_is_handed_back_and_run_once(
    make_settings, engine, owner, pg, db_url, pgbouncer, monkeypatch
) -> None:
    """A claim through PgBouncer (transaction mode) takes a job on its last attempt and commits; its
    answer never comes back (the path from PgBouncer goes silent). The worker gives the claim up within
    the lease, knows no server process to end (PgBouncer's own is no server's), and hands back what the
    claim took on a fresh connection: the job goes back to the queue with its attempt not counted, and
    runs once."""
    lease = 4.0
    settings = make_settings(worker_visibility_timeout_secs=lease, job_processor_poll_interval=30)
    bouncer = pgbouncer("transaction")
    proxy = SilentAfterExecute(bouncer.port)
    await proxy.start()
    through = (
        make_url(bouncer.url(make_url(db_url).database or ""))
        .set(port=proxy.port)
        .render_as_string(hide_password=False)
    )
    monkeypatch.setattr(claim_loop, "CLAIM_ARRIVAL_SECS", 1.0)
    monkeypatch.setattr(claiming, "LIMITS_RECHECK_SECS", 3600.0)
    worker = Worker(settings, settings.database_url or "", concurrency=1, buffer=0)  # one claim at a time
    claims = create_engine(
        through, pool_size=2, application_name=worker.application_name, pooler="transaction"
    )
    worker.claimer = claiming.Claimer(
        claims,
        claims.execution_options(isolation_level="AUTOCOMMIT"),
        worker_id=worker.id,
        lease_secs=worker.lease_secs,
    )
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        await asyncio.sleep(1.0)  # the first claim is in; the kept connection idles
        proxy.armed = True
        job = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=1)
        row = await wait_status(pg, job, {"in_progress"})
        silent_at = time.monotonic()
        assert row["locked_by"] == worker.id and job not in worker.held  # committed; the answer held back
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=3 * lease)
        took = time.monotonic() - silent_at
        assert not task.done()
    finally:
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 30)
        await claims.dispose(close=False)
        await proxy.close()
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "released", "claimed", "completed"]
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job) == 1
    assert took < lease, took


async def test_a_claim_given_up_behind_pgbouncer_while_it_waits_for_a_lock_takes_nothing_after_the_hand_back(
    make_settings, engine, owner, pg, db_url, pgbouncer, monkeypatch
) -> None:
    """A claim through PgBouncer waits on the server for a lock when its path goes silent, for good:
    nothing the worker sends on it arrives, its cancel request neither. The worker gives it up within the
    lease and hands back what it took (nothing), knowing no server process to end. The lock is then
    freed: the claim must not take the job after the hand-back, where it would be locked by a worker that
    never received it until the rescue counted an attempt it never ran. Behind PgBouncer every statement is
    prepared anew, and a lock is waited for while it is prepared, before the worker has sent it to be
    run: the job stays queued, and runs once, on its one attempt, once the path is back."""
    import asyncpg

    from app.db import asyncpg_dsn
    from app.jobs import queue

    lease = 4.0
    settings = make_settings(worker_visibility_timeout_secs=lease, job_processor_poll_interval=30)
    bouncer = pgbouncer("transaction")
    proxy = SilentAfterExecute(bouncer.port)
    await proxy.start()
    through = (
        make_url(bouncer.url(make_url(db_url).database or ""))
        .set(port=proxy.port)
        .render_as_string(hide_password=False)
    )
    monkeypatch.setattr(claim_loop, "CLAIM_ARRIVAL_SECS", 1.0)
    monkeypatch.setattr(claiming, "LIMITS_RECHECK_SECS", 3600.0)
    worker = Worker(settings, settings.database_url or "", concurrency=1, buffer=0)
    claims = create_engine(
        through, pool_size=2, application_name=worker.application_name, pooler="transaction"
    )
    worker.claimer = claiming.Claimer(
        claims,
        claims.execution_options(isolation_level="AUTOCOMMIT"),
        worker_id=worker.id,
        lease_secs=worker.lease_secs,
    )
    blocker = await asyncpg.connect(asyncpg_dsn(db_url))
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        await asyncio.sleep(1.0)
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
        proxy.armed = proxy.cut_new = True
        await pg.execute(f"NOTIFY {queue.JOBS_CHANNEL}")  # the worker claims
        for _ in range(200):
            if not proxy.armed:
                break
            await asyncio.sleep(0.05)
        assert not proxy.armed, "the claim was not sent"
        for _ in range(200):  # given up, and the hand-back found nothing
            if worker.claimer.unanswered:
                break
            await asyncio.sleep(0.05)
        for _ in range(200):
            if not worker.claimer.unanswered:
                break
            await asyncio.sleep(0.05)
        await blocker.execute("COMMIT")  # a claim still on its way on the server would take the job now
        await asyncio.sleep(1.0)
        row = await pg.fetchrow("SELECT status, attempts, locked_by FROM jobs WHERE id = $1", job)
        assert dict(row) == {"status": "queued", "attempts": 0, "locked_by": None}
        proxy.sever()  # the path is back
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=4 * lease)
        assert not task.done()
    finally:
        with contextlib.suppress(Exception):
            await blocker.execute("ROLLBACK")
        await blocker.close()
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 30)
        await claims.dispose(close=False)
        await proxy.close()
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job) == 1


SLOW_CLAIMS = """
CREATE FUNCTION test_slow_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(4242);
    RETURN NEW;
END $$;
CREATE TRIGGER test_slow_claim BEFORE INSERT ON job_events
    FOR EACH ROW WHEN (NEW.kind = 'claimed') EXECUTE FUNCTION test_slow_claim();
"""


async def test_a_claim_given_up_behind_pgbouncer_that_commits_afterwards_has_its_jobs_handed_back_promptly(
    make_settings, engine, owner, pg, db_url, pgbouncer, monkeypatch
) -> None:
    """A claim through PgBouncer runs long on the server (here: its event's insert waits for a lock), so
    the worker gives it up within the lease and hands back what it took — nothing yet. Its connection
    closed, PgBouncer's server session runs on (the worker knows no server process to end) and, the lock
    let go, commits: the job, on its last attempt, is locked by a worker that never received it. It sat
    there until its lease ran out and the rescue failed it, an attempt it never ran. The worker looks
    again for what a claim it gave up on behind a pooler took, until that claim's leases would have run
    out, and hands it back: the job runs once, on its one attempt."""
    lease = 6.0
    settings = make_settings(worker_visibility_timeout_secs=lease, job_processor_poll_interval=30)
    bouncer = pgbouncer("transaction")
    through = bouncer.url(make_url(db_url).database or "")
    monkeypatch.setattr(claim_loop, "CLAIM_ARRIVAL_SECS", 1.0)
    monkeypatch.setattr(claiming, "LIMITS_RECHECK_SECS", 3600.0)
    worker = Worker(settings, settings.database_url or "", concurrency=1, buffer=0)
    claims = create_engine(
        through, pool_size=2, application_name=worker.application_name, pooler="transaction"
    )
    worker.claimer = claiming.Claimer(
        claims,
        claims.execution_options(isolation_level="AUTOCOMMIT"),
        worker_id=worker.id,
        lease_secs=worker.lease_secs,
    )
    await pg.execute(SLOW_CLAIMS)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        await asyncio.sleep(1.0)  # the first claim (the locking path) is in; later ones are one statement
        await pg.execute("SELECT pg_advisory_lock(4242)")
        job = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=1)
        for _ in range(200):  # given up within the lease
            if worker.claimer.unanswered:
                break
            await asyncio.sleep(0.05)
        assert worker.claimer.unanswered, "the claim was not given up"
        for _ in range(200):  # the hand-back found nothing: the claim has not committed
            if not worker.claimer.unanswered:
                break
            await asyncio.sleep(0.05)
        assert not worker.claimer.unanswered
        assert await pg.fetchval("SELECT locked_by FROM jobs WHERE id = $1", job) is None
        # the worker has looked again and found nothing, and idles (its poll interval is 30 s): its next
        # look must still come on time, not after that idle sleep
        await asyncio.sleep(0.6)
        await pg.execute("SELECT pg_advisory_unlock(4242)")  # the claim commits now, unseen
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=4 * lease)
        assert not task.done()
    finally:
        with contextlib.suppress(Exception):
            await pg.execute("SELECT pg_advisory_unlock_all()")
        worker.stop()
        await asyncio.wait_for(task, 30)
        await claims.dispose(close=False)
        await pg.execute("DROP TRIGGER test_slow_claim ON job_events; DROP FUNCTION test_slow_claim()")
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "released", "claimed", "completed"]
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job) == 1
