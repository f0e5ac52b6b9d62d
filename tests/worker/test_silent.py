"""A worker whose connections to PostgreSQL go silent while it runs (packets dropped, nothing closed: a
partition, a dead NAT entry): every statement it waits on must end within a bound tied to the lease, and
what the statement did must be handed back or recorded, never left to the rescue or run twice."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

import tests.support.processors  # noqa: F401  (registers the test job types)
from app import silence
from app.db import create_engine, is_transient
from app.processors import JobContext, processor
from app.processors.builtin import AnyInput
from app.worker.runner import Worker
from tests.support.factories import event_kinds
from tests.support.netproxy import BlackholeProxy
from tests.support.silent_link import SilentLink
from tests.support.silent_link import available as silent_link_available
from tests.support.workers import wait_status
from tests.worker.test_hostile import _claiming_through, _enqueue

pytestmark = pytest.mark.slow


@processor(
    "test.silent_outputs",
    title="Outputs",
    description="Reports its progress, then stores a file.",
    input=AnyInput,
    diagnostic=True,
)
async def outputs(ctx: JobContext[AnyInput]) -> dict[str, Any]:
    await ctx.report_progress(0.5, "Half way")
    return {"file": await ctx.files.save("out.txt", b"made", content_type="text/plain")}


@pytest.fixture
async def blackhole(db_url: str) -> AsyncIterator[tuple[BlackholeProxy, str]]:
    """A :class:`BlackholeProxy` in front of the test database, and the database URL through it."""
    url = make_url(db_url)
    proxy = BlackholeProxy(url.port or 5432)
    await proxy.start()
    try:
        yield proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    finally:
        proxy.sever()
        await proxy.close()


async def test_a_claim_whose_answer_never_comes_is_given_up_within_the_lease_and_its_job_handed_back(
    make_settings, engine, owner, pg, blackhole, monkeypatch
) -> None:
    """A claim reaches the database and takes a job on its last attempt, and its connection then goes
    silent for good while the worker runs. Nothing bounded the wait: the claim waited for ever (the
    kernel sees nothing wrong with a connection that has nothing unacknowledged in flight), its job
    stayed locked by the worker until the rescue counted the attempt it never ran and failed it as
    "lease expired: worker lost". An answer later than the lease less its margin would be handed back
    anyway, so the claim gives up then, and its job goes through the hand-back of a failed claim:
    ``released`` (its session ended first, fenced by the attempt), and run once on a fresh connection."""
    proxy, proxied = blackhole
    lease = 4.0
    settings = make_settings(
        worker_visibility_timeout_secs=lease, worker_sweep_interval_secs=0.5, job_processor_poll_interval=30
    )
    worker, claims = _claiming_through(settings, proxied, monkeypatch)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        await asyncio.sleep(1.0)  # the first claim is in and nothing is on its way: the kept connection idles
        proxy.answers_only = proxy.frozen = True  # what is open now goes silent; new connections work
        job = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=1)
        row = await wait_status(pg, job, {"in_progress"})
        silent_at = time.monotonic()
        assert row["locked_by"] == worker.id and job not in worker.held  # the answer is held back
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=3 * lease)
        took = time.monotonic() - silent_at
        assert not task.done()
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
        await claims.dispose(close=False)
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "released", "claimed", "completed"]
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job) == 1
    assert took < lease, took


async def test_an_outcome_write_whose_answer_never_comes_is_tried_again_on_a_fresh_connection(
    make_settings, engine, owner, pg, blackhole
) -> None:
    """A job (one that does not use the database) finishes while every connection its worker has open
    goes silent. The outcome's write waited
    for ever on its kept connection, while the lease keeper, which gives up on a silent renewal and
    takes a fresh connection, went on renewing the job's lease: the job stayed ``in_progress`` for good,
    neither recorded nor rescued. The write gives up after the lease less its margin, on a connection
    closed at once, and is written again on a fresh one: the job completes, once."""
    proxy, proxied = blackhole
    lease = 4.0
    settings = make_settings(worker_visibility_timeout_secs=lease, job_processor_poll_interval=30)
    through = make_settings(
        database_url=proxied, worker_visibility_timeout_secs=lease, job_processor_poll_interval=30
    )
    worker = Worker(through, proxied)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        first = await _enqueue(engine, settings, owner, "noop", {})
        await wait_status(pg, first, {"completed"})  # the completer's kept connection is open now
        job = await _enqueue(engine, settings, owner, "sleep", {"seconds": 1.0})
        await wait_status(pg, job, {"in_progress"})
        proxy.frozen = True  # nothing gets through either way; the job finishes in about a second
        silent_at = time.monotonic()
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=3 * lease)
        took = time.monotonic() - silent_at
        for _ in range(100):  # the worker has the answer: it let go of the job
            if job not in worker.held:
                break
            await asyncio.sleep(0.05)
        assert job not in worker.held and not task.done()
    finally:
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "completed"]
    assert took < 1.0 + lease, took


@pytest.fixture
def silent_link(pg_server_url: str) -> Iterator[SilentLink]:
    if not silent_link_available():
        pytest.skip("needs root and the ip command (a network namespace)")
    target = make_url(pg_server_url)
    link = SilentLink(target.host or "127.0.0.1", target.port or 5432)
    try:
        yield link.start()
    finally:
        link.close()


@pytest.fixture
def short_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds on silence, short enough for a test (probes every second)."""
    monkeypatch.setattr(silence, "KEEPALIVE_IDLE_SECS", 1)
    monkeypatch.setattr(silence, "KEEPALIVE_INTERVAL_SECS", 1)
    monkeypatch.setattr(silence, "KEEPALIVE_COUNT", 2)
    monkeypatch.setattr(silence, "USER_TIMEOUT_SECS", 2)


async def test_a_statement_on_a_path_gone_silent_fails_with_a_connection_error_within_the_bound(
    db_url, silent_link, short_silence
) -> None:
    """A pooled connection (as a web request's, or a processor's) runs a statement after the path to the
    database went silent for good. Nothing acknowledged what it sent, and it waited for the kernel's
    retransmissions to give up (about 15 minutes); with keepalive and ``TCP_USER_TIMEOUT`` on its socket
    it fails within the bound with a connection error, which the pool and the worker treat as transient,
    and the pool's next connection is a fresh one."""
    engine = create_engine(silent_link.url(db_url), pool_size=1)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))  # the connection is made, and kept in the pool
        silent_link.cut()
        started = time.monotonic()
        with pytest.raises(Exception) as failed:
            async with asyncio.timeout(12):
                async with engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        took = time.monotonic() - started
    finally:
        await engine.dispose(close=False)
    assert not isinstance(failed.value, TimeoutError), f"still waiting after {took:.1f} s"
    assert is_transient(failed.value), repr(failed.value)
    assert took < 8, took


async def test_an_idle_connection_on_a_path_gone_silent_is_noticed_without_a_statement(
    db_url, silent_link, short_silence
) -> None:
    """An idle connection (a listener waiting for notifications, a pooled connection between requests)
    whose path goes silent: with nothing in flight, TCP never noticed, and the connection looked open for
    ever. Keepalive probes notice it within the bound: asyncpg sees it closed."""
    import asyncpg

    from app.db import asyncpg_dsn
    from app.silence import SilenceBoundConnection

    conn = await asyncpg.connect(
        asyncpg_dsn(silent_link.url(db_url)), timeout=5, connection_class=SilenceBoundConnection
    )
    try:
        silent_link.cut()
        started = time.monotonic()
        while not conn.is_closed() and time.monotonic() - started < 12:
            await asyncio.sleep(0.1)
        took = time.monotonic() - started
        closed = conn.is_closed()
    finally:
        conn.terminate()
    assert closed, f"still open after {took:.1f} s"
    assert took < 8, took


def _bounded(raw: Any) -> bool:
    sock = raw._transport.get_extra_info("socket")
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == silence.KEEPALIVE_IDLE_SECS
        and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == silence.USER_TIMEOUT_SECS * 1000
    )


@pytest.mark.parametrize("pooler", ["none", "transaction", "session"])
async def test_every_kind_of_connection_has_the_bound_on_silence(db_url, make_settings, pooler) -> None:
    """The engines' connections in every ``DATABASE_POOLER`` mode (socket options: PgBouncer sees nothing
    of them) and the worker's LISTEN connection, made on its own, carry keepalive and the user timeout."""
    from app.worker.listener import Listener

    engine = create_engine(db_url, pool_size=1, pooler=pooler)
    try:
        async with engine.connect() as conn:
            raw = (await conn.get_raw_connection()).dbapi_connection._connection
            assert _bounded(raw)
    finally:
        await engine.dispose()
    if pooler != "none":
        return
    listener = Listener(
        db_url.replace("postgresql+asyncpg://", "postgresql://", 1),
        on_jobs=lambda: None,
        on_cancel=print,
        log=None,
    )
    running = asyncio.create_task(listener.run())
    try:
        for _ in range(100):
            if listener.connected:
                break
            await asyncio.sleep(0.05)
        assert listener._conn is not None and _bounded(listener._conn)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await listener.aclose()


async def test_a_claim_transaction_gone_silent_is_given_up_within_the_lease_and_the_worker_claims_on(
    make_settings, engine, owner, pg, blackhole, monkeypatch
) -> None:
    """The claims that look at the limits run in a transaction. Its connection goes silent while it waits
    for its BEGIN's answer (nothing claimed yet). Given up by cancelling it, its rollback waited on the same
    silent connection, the claim stayed on its way, and the job enqueued meanwhile waited past the lease;
    with its connection closed at the bound, every wait on it ends at once and the next claim, on a fresh
    connection, runs the job, once."""
    from app.worker import claiming

    proxy, proxied = blackhole
    lease = 4.0
    settings = make_settings(worker_visibility_timeout_secs=lease, job_processor_poll_interval=30)
    worker, claims = _claiming_through(settings, proxied, monkeypatch)
    monkeypatch.setattr(claiming, "LIMITS_RECHECK_SECS", 0.0)  # every claim takes the locking path
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        await asyncio.sleep(1.0)
        proxy.answers_only = proxy.frozen = True
        silent_at = time.monotonic()
        job = await _enqueue(engine, settings, owner, "test.effect", {"seconds": 0}, max_attempts=1)
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=3 * lease)
        took = time.monotonic() - silent_at
        assert not task.done()
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
        await claims.dispose(close=False)
    assert (row["status"], row["attempts"], row["error_message"]) == ("completed", 1, None)
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job) == 1
    assert took < lease, took


async def test_a_hand_back_whose_path_goes_silent_before_its_connection_closes_does_not_hold_the_worker(
    make_settings, blackhole, monkeypatch
) -> None:
    """A worker hands back what a failed claim took (before its next claim, or at its stop), the database
    answers, and the path goes silent just after, as the hand-back closes its connection. The graceful
    close waited for the server to close its end, which never came: the claim loop, or the stop, waited
    for ever. The close is given a second, then the connection is dropped."""
    from sqlalchemy import event

    from app.worker import lifecycle

    proxy, proxied = blackhole
    settings = make_settings(database_url=proxied)
    worker = Worker(settings, proxied)
    worker.claimer.unanswered = True  # a claim failed without its answer
    made = lifecycle.create_engine
    silenced: list[bool] = []

    def silence_path(*_: Any) -> None:
        proxy.frozen = True
        silenced.append(True)

    def going_silent(*args: Any, **kwargs: Any) -> Any:
        engine = made(*args, **kwargs)
        # once the hand-back's transaction is over and its connection back in the pool
        event.listen(engine.sync_engine.pool, "checkin", silence_path)
        return engine

    monkeypatch.setattr(lifecycle, "create_engine", going_silent)
    try:
        started = time.monotonic()
        done = await asyncio.wait_for(lifecycle.release_unreceived(worker, stopping=False), 15)
        took = time.monotonic() - started
    finally:
        proxy.sever()
        await worker.engine.dispose()
        await worker.app_engine.dispose()
    assert done and not worker.claimer.unanswered and silenced
    assert took < 1.0 + lifecycle.CLOSE_SECS, took


async def test_a_sweep_whose_connection_goes_silent_gives_it_up_and_rescues_on_a_fresh_one(
    make_settings, engine, owner, pg, blackhole
) -> None:
    """Every connection a worker has open goes silent (a proxy or pooler in between keeps the TCP
    connection alive, so no keepalive notices) while another worker's job has a lease that has run out.
    The sweep's next transaction took a pooled connection from before the silence and waited for its
    answer for ever: nothing was rescued again, nor any schedule fired, by this worker. Bounded as the
    completer's writes are, the transaction is given up after a heartbeat, its connection closed and
    dropped from the pool, and the next pass, on a fresh connection, rescues the job."""
    from app.jobs import queue

    proxy, proxied = blackhole
    lease = 3.0
    common: dict[str, Any] = {
        "worker_visibility_timeout_secs": lease,
        "worker_sweep_interval_secs": 0.2,
        "job_processor_poll_interval": 30,
    }
    settings = make_settings(**common)
    through = make_settings(database_url=proxied, **common)
    worker = Worker(through, proxied, job_types=["sleep"])  # never claims the lost job itself
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        await asyncio.sleep(1.0)  # the sweep has run; its connection waits in the pool
        proxy.frozen = True
        lost = await _enqueue(engine, settings, owner, "noop", {})
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            assert await queue.claim(conn, "gone-worker", 1, 0.5, types=["noop"])
        silent_at = time.monotonic()
        row = await wait_status(pg, lost, {"queued"}, timeout=4 * lease)
        took = time.monotonic() - silent_at
        assert not task.done()
    finally:
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert row["attempts"] == 1 and row["locked_by"] is None
    assert (row["error_message"] or "").startswith("lease expired"), row["error_message"]
    assert took < 0.5 + lease, took


async def test_a_processors_progress_and_outputs_on_a_connection_gone_silent_are_given_up_and_retried(
    make_settings, engine, owner, pg, blackhole
) -> None:
    """Every pooled connection of a worker goes silent (a proxy keeps the TCP connection alive, so no
    keepalive notices) and the next job reports its progress and stores an output, each through the
    worker's helpers on a pooled connection from before the silence. Both waited for their answer for
    ever: the processor never returned, its job stayed ``in_progress`` with its lease renewed (the lease
    keeper gives up on silence and renews on a fresh connection). Bounded as the completer's writes are,
    each is given up after a heartbeat, its connection closed and dropped from the pool: the progress is
    skipped, the attempt fails on the lost connection, and the retry, on fresh connections, completes."""
    proxy, proxied = blackhole
    lease = 3.0
    common: dict[str, Any] = {
        "worker_visibility_timeout_secs": lease,
        "job_processor_poll_interval": 30,
        "job_retry_intervals": [0.1],
        "job_retry_jitter": 0,
    }
    settings = make_settings(**common)
    through = make_settings(database_url=proxied, **common)
    worker = Worker(through, proxied, job_types=["test.silent_outputs"])
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        first = await _enqueue(engine, settings, owner, "test.silent_outputs", {})
        await wait_status(pg, first, {"completed"})  # the pools hold connections now
        await asyncio.sleep(0.5)
        proxy.frozen = True
        job = await _enqueue(engine, settings, owner, "test.silent_outputs", {}, max_attempts=2)
        row = await wait_status(pg, job, {"completed", "failed"}, timeout=6 * lease)
        assert not task.done()
    finally:
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert row["status"] == "completed", row["error_message"]
    assert await pg.fetchval("SELECT count(*) FROM files WHERE job_id = $1", job) == 1


async def test_a_worker_whose_connections_all_went_silent_stops_at_once_and_unregisters(
    make_settings, engine, owner, pg, blackhole
) -> None:
    """Every connection a worker has open goes silent (new ones still get through), with nothing held
    or claimed, and the worker is stopped. Its stop waited on each of them: the kept connections' RESET
    and graceful close (2 s each), the lease keeper's pool closed gracefully (up to 5 s), the unregister on
    a silent pooled connection until the step's 5 s bound: 16 s, and the worker's row left behind. The
    stop needs none of them but the unregister: the connections are closed without a word to the server,
    and the row deleted on a fresh connection."""
    proxy, proxied = blackhole
    common: dict[str, Any] = {"worker_visibility_timeout_secs": 30, "job_processor_poll_interval": 30}
    settings = make_settings(**common)
    through = make_settings(database_url=proxied, **common)
    worker = Worker(through, proxied)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        job = await _enqueue(engine, settings, owner, "noop", {})
        await wait_status(pg, job, {"completed"})  # the kept connections and the pools are in use
        await asyncio.sleep(1.0)
        proxy.frozen = True
        stopping_at = time.monotonic()
        worker.stop()
        await asyncio.wait_for(asyncio.shield(task), 30)
        took = time.monotonic() - stopping_at
    finally:
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert took < 3.0, took
    assert await pg.fetchval("SELECT count(*) FROM workers WHERE id = $1", worker.id) == 0


async def test_a_stop_hands_back_a_waiting_job_when_the_completers_connection_went_silent(
    make_settings, engine, owner, pg, blackhole
) -> None:
    """A worker with one slot runs a long job and holds the next one, on its last attempt, claimed for
    the slot; every connection it has open goes silent (new ones still get through) and it is stopped.
    The hand-back of the waiting job went to the completer's kept connection and waited for its answer
    a heartbeat (10 s here), longer than the stop waits for the completer: the stop went on without it,
    the job stayed locked by the stopped worker until the rescue counted the attempt it never ran and
    failed it. At the stop the completer's writes wait no longer than a stop can: the hand-back is
    written again on a fresh connection, the job goes back to the queue on its attempt."""
    proxy, proxied = blackhole
    common: dict[str, Any] = {
        "worker_visibility_timeout_secs": 30,
        "job_processor_poll_interval": 30,
        "max_concurrent_jobs": 1,
        "worker_shutdown_grace_secs": 0.5,
    }
    settings = make_settings(**common)
    through = make_settings(database_url=proxied, **common)
    worker = Worker(through, proxied)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        first = await _enqueue(engine, settings, owner, "noop", {})
        await wait_status(pg, first, {"completed"})  # the completer's kept connection is open now
        running = await _enqueue(engine, settings, owner, "sleep", {"seconds": 60})
        await wait_status(pg, running, {"in_progress"})
        waiting = await _enqueue(engine, settings, owner, "noop", {}, max_attempts=1)
        await wait_status(pg, waiting, {"in_progress"})
        assert waiting in worker.buffer
        proxy.frozen = True
        worker.stop()
        await asyncio.wait_for(asyncio.shield(task), 30)
    finally:
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 30)
    row = await pg.fetchrow("SELECT status, attempts, locked_by FROM jobs WHERE id = $1", waiting)
    assert dict(row) == {"status": "queued", "attempts": 0, "locked_by": None}


async def test_a_job_that_finishes_during_a_stop_is_recorded_when_the_completers_connection_went_silent(
    make_settings, engine, owner, pg, blackhole
) -> None:
    """A job finishes during the stop's grace period while every connection its worker has open has gone
    silent (new ones still get through). Its completion went to the completer's kept connection and
    waited for the answer a heartbeat (20 s here), longer than the stop waits for outcomes (10 s) and
    for the completer (5 s more): the stop went on without it, and the job, left ``in_progress``, would
    run again after the rescue. A stopping worker's writes wait no longer than a stop can: written again
    on a fresh connection, the job completes, once, and the stop is over in seconds."""
    proxy, proxied = blackhole
    common: dict[str, Any] = {
        "worker_visibility_timeout_secs": 60,
        "job_processor_poll_interval": 30,
        "worker_shutdown_grace_secs": 5,
    }
    settings = make_settings(**common)
    through = make_settings(database_url=proxied, **common)
    worker = Worker(through, proxied)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_started(), 20)
        first = await _enqueue(engine, settings, owner, "noop", {})
        await wait_status(pg, first, {"completed"})  # the completer's kept connection is open now
        job = await _enqueue(engine, settings, owner, "sleep", {"seconds": 1.5})
        await wait_status(pg, job, {"in_progress"})
        proxy.frozen = True
        stopping_at = time.monotonic()
        worker.stop()
        await asyncio.wait_for(asyncio.shield(task), 40)
        took = time.monotonic() - stopping_at
    finally:
        proxy.sever()
        worker.stop()
        await asyncio.wait_for(task, 40)
    row = await pg.fetchrow("SELECT status, attempts, locked_by FROM jobs WHERE id = $1", job)
    assert dict(row) == {"status": "completed", "attempts": 1, "locked_by": None}
    assert took < 6.0, took


async def test_the_callback_senders_transaction_on_a_connection_gone_silent_is_given_up_within_a_heartbeat(
    make_settings, blackhole
) -> None:
    """The sweep's callback sender claims due callbacks in a transaction of its own. On a pooled
    connection gone silent (a proxy keeps the TCP connection alive) it waited for the answer for ever,
    and every callback of this worker with it. Bounded as the sweep's other transactions are, it fails
    within a heartbeat as a lost connection, which the sweep waits out on a fresh one."""
    proxy, proxied = blackhole
    settings = make_settings(
        database_url=proxied, callback_signing_secret="s", worker_visibility_timeout_secs=3
    )
    worker = Worker(settings, proxied)
    sender = worker.maintenance.callbacks
    try:
        assert await sender.run_once() == 0  # its connection is made, and waits in the pool
        proxy.frozen = True
        started = time.monotonic()
        round_ = asyncio.create_task(sender.run_once())
        done, _ = await asyncio.wait({round_}, timeout=settings.heartbeat_secs + 4)
        took = time.monotonic() - started
    finally:
        proxy.sever()
    try:
        assert done, f"still waiting after {took:.1f} s"
        assert is_transient(round_.exception()), repr(round_.exception())
        assert took < settings.heartbeat_secs + 2, took
    finally:
        if not round_.done():
            round_.cancel()
        await asyncio.gather(round_, return_exceptions=True)
        await worker.engine.dispose(close=False)
        await worker.app_engine.dispose(close=False)
