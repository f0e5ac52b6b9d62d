"""The queue core against a real PostgreSQL: enqueue, claim, finish, cancel, retry, rescue,
retention, data limits. Calls the queue functions directly, with no worker and no sleeps.

Cases covered here in part: C05 (backoff in the DB), C06 (cancel vs completion), C12 (NUL), C13 (huge
errors and payloads), C23 (manual retry). Safety mechanisms are each shown once to fail when switched off.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, a public type)
from app.errors import BadInput, Conflict, NotFound, TooLarge
from app.jobs import queue
from app.jobs.backoff import RetryPolicy, retry_delay
from app.jobs.payload import ERROR_CAP_BYTES, result_json
from app.jobs.queue import NewJob, Outcome
from app.settings import Settings
from tests.support.factories import TestUser, event_kinds, job_row, make_job

W1, W2 = "host-1-aaaa", "host-2-bbbb"


async def enqueue(
    engine: AsyncEngine,
    settings: Settings,
    user: TestUser,
    type_: str = "noop",
    input_data: Any = None,
    **kw: Any,
) -> Any:
    async with engine.begin() as conn:
        result = await queue.enqueue(
            conn,
            NewJob(
                type=type_, input_data=input_data if input_data is not None else {}, user_id=user.id, **kw
            ),
            settings,
        )
    return result


async def claim(engine: AsyncEngine, worker: str = W1, limit: int = 10, lease: float = 30) -> list[Any]:
    async with engine.begin() as conn:
        return await queue.claim(conn, worker, limit, lease)


async def finish(
    engine: AsyncEngine, settings: Settings, outcomes: list[Outcome], worker: str = W1
) -> queue.FinishReport:
    async with engine.begin() as conn:
        return await queue.finish(conn, worker, outcomes, settings)


def done(job_id: uuid.UUID, result: Any = None) -> Outcome:
    return Outcome(
        job_id=job_id, kind="completed", result=result_json(result if result is not None else {"ok": True})
    )


def failed(job_id: uuid.UUID, error: str = "boom", *, permanent: bool = False, delay: float = 0.0) -> Outcome:
    return Outcome(job_id=job_id, kind="failed", error=error, permanent=permanent, delay=delay)


# --- enqueue ------------------------------------------------------------------------------------


async def test_enqueue_inserts_a_queued_job_with_its_event(engine, settings, owner, pg) -> None:
    result = await enqueue(engine, settings, owner, "sleep", {"seconds": 2})
    assert result.created
    row = await job_row(pg, result.job["id"])
    assert row["status"] == "queued"
    assert row["attempts"] == 0
    assert row["is_active"]
    assert row["input_data"] == '{"seconds": 2.0}'  # normalised by the input schema
    assert row["max_attempts"] == settings.default_max_attempts
    assert result.job["id"].version == 7
    assert await event_kinds(pg, row["id"]) == ["enqueued"]


async def test_enqueue_rejects_unknown_types_and_bad_input_naming_the_field(
    engine, settings, owner, pg
) -> None:
    with pytest.raises(BadInput) as unknown:
        await enqueue(engine, settings, owner, "nope", {})
    assert "type" in unknown.value.errors
    assert "unknown job type" in unknown.value.detail
    with pytest.raises(BadInput) as bad:
        await enqueue(engine, settings, owner, "sleep", {"seconds": 5000, "extra": 1})
    assert set(bad.value.errors) == {"input_data.seconds", "input_data.extra"}
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


@pytest.mark.parametrize("max_attempts", [0, -1, 1001, 10**9])
async def test_enqueue_rejects_max_attempts_outside_the_documented_range(
    engine, settings, owner, max_attempts
) -> None:
    # Case C05: "Enqueue rejects a max_attempts outside the documented range with a 422".
    with pytest.raises(BadInput) as err:
        await enqueue(engine, settings, owner, max_attempts=max_attempts)
    assert err.value.errors == {"max_attempts": "must be a whole number from 1 to 1000"}


async def test_enqueue_rejects_run_at_without_an_offset(engine, settings, owner) -> None:
    with pytest.raises(BadInput) as err:
        await enqueue(engine, settings, owner, run_at=datetime(2030, 1, 1, 9, 0))
    assert "run_at" in err.value.errors


async def test_idempotency_key_returns_the_existing_job_untouched(engine, settings, owner, other, pg) -> None:
    first = await enqueue(engine, settings, owner, "noop", {"a": 1}, idempotency_key="order-42")
    again = await enqueue(engine, settings, owner, "noop", {"a": 1}, idempotency_key="order-42")
    assert first.created
    assert not again.created
    assert again.job["id"] == first.job["id"]
    assert again.job["input_data"] == {"a": 1}
    # the key with a different request is refused (tests/test_idempotency_keys.py: every path)
    with pytest.raises(BadInput) as refused:
        await enqueue(engine, settings, owner, "noop", {"a": 2}, idempotency_key="order-42")
    assert "idempotency_key" in refused.value.errors
    # Keys are unique per owner: another user's identical key is a different job.
    theirs = await enqueue(engine, settings, other, "noop", {}, idempotency_key="order-42")
    assert theirs.created
    assert theirs.job["id"] != first.job["id"]


async def test_concurrent_repeats_of_an_idempotency_key_create_exactly_one_row(
    engine, settings, owner, pg
) -> None:
    results = await asyncio.gather(
        *[enqueue(engine, settings, owner, "noop", {"i": 1}, idempotency_key="same") for i in range(20)]
    )
    assert sum(r.created for r in results) == 1
    assert len({r.job["id"] for r in results}) == 1
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_transactional_enqueue_is_rolled_back_with_the_callers_transaction(
    engine, settings, owner, pg
) -> None:
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=owner.id), settings)
            raise RuntimeError("the application's own write failed")
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_enqueue_many_inserts_all_or_nothing(engine, settings, owner, pg) -> None:
    jobs = [NewJob(type="noop", input_data={"i": i}, user_id=owner.id) for i in range(1000)]
    async with engine.begin() as conn:
        ids = await queue.enqueue_many(conn, jobs, settings)
    assert len(ids) == 1000
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'enqueued'") == 1000
    bad = [*jobs[:3], NewJob(type="sleep", input_data={"seconds": -1}, user_id=owner.id)]
    with pytest.raises(BadInput) as err:
        async with engine.begin() as conn:
            await queue.enqueue_many(
                conn, [NewJob(type=j.type, input_data=j.input_data, user_id=owner.id) for j in bad], settings
            )
    assert "jobs[3].input_data.seconds" in err.value.errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1000


# --- data limits (cases C12, C13) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("input_data", "path"),
    [
        ({"name": "a\u0000b"}, "input_data.name"),
        ({"a\u0000b": 1}, "input_data.a\\u0000b"),
        ({"items": ["ok", {"deep": ["x", "y\u0000"]}]}, "input_data.items[1].deep[1]"),
    ],
)
async def test_nul_in_input_is_a_422_naming_the_field_and_inserts_nothing(
    engine, settings, owner, pg, input_data, path
) -> None:
    with pytest.raises(BadInput) as err:
        await enqueue(engine, settings, owner, "noop", input_data)
    assert path in err.value.errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_escaped_nul_text_is_legal_and_stored_unchanged(engine, settings, owner, pg) -> None:
    # Case C12 (d): backslash + "u0000" is ordinary text.
    result = await enqueue(engine, settings, owner, "noop", {"name": "\\u0000"})
    assert result.job["input_data"] == {"name": "\\u0000"}


async def test_input_above_the_size_limit_is_refused_with_the_limit_in_the_message(
    make_settings, engine, owner, pg
) -> None:
    settings = make_settings(job_max_input_bytes=1024 * 1024)
    with pytest.raises(TooLarge) as err:
        await enqueue(engine, settings, owner, "noop", {"blob": "x" * (20 * 1024 * 1024)})
    assert "1 MiB" in err.value.detail
    assert "20 MiB" in err.value.detail
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_nul_in_result_or_error_is_replaced_so_the_job_still_finishes(
    engine, settings, owner, pg
) -> None:
    # Case C12 (b), (c): one shared sanitiser; the status transition never fails because of data.
    a = (await make_job(engine, settings, owner))["id"]
    b = (await make_job(engine, settings, owner, max_attempts=1))["id"]
    await claim(engine)
    report = await finish(engine, settings, [done(a, {"text": "x\u0000y"}), failed(b, "bad \x00 byte")])
    assert report.status == {a: "completed", b: "failed"}
    assert (await job_row(pg, a))["result_data"] == '{"text": "x\ufffdy"}'
    assert (await job_row(pg, b))["error_message"] == "bad \ufffd byte"


async def test_a_huge_error_is_capped_and_the_job_still_moves_on(engine, settings, owner, pg) -> None:
    # Case C13: a 5 MB error message is truncated with a marker; the job still goes to retry, then failed.
    job = (await make_job(engine, settings, owner, max_attempts=2))["id"]
    huge = "E" * (5 * 1024 * 1024)
    for expected in ("queued", "failed"):
        await claim(engine)
        report = await finish(engine, settings, [failed(job, huge)])
        assert report.status == {job: expected}
        row = await job_row(pg, job)
        assert len(row["error_message"].encode()) < ERROR_CAP_BYTES + 100
        assert row["error_message"].endswith(f"…[truncated, {len(huge)} bytes]")


# --- claim --------------------------------------------------------------------------------------


async def test_claim_takes_due_jobs_in_priority_then_run_at_then_id_order(engine, settings, owner) -> None:
    now = datetime.now(UTC)
    low = (await make_job(engine, settings, owner, priority=-5))["id"]
    early = (await make_job(engine, settings, owner, run_at=now - timedelta(minutes=5)))["id"]
    first = (await make_job(engine, settings, owner))["id"]
    second = (await make_job(engine, settings, owner))["id"]
    high = (await make_job(engine, settings, owner, priority=10))["id"]
    future = (await make_job(engine, settings, owner, run_at=now + timedelta(hours=1)))["id"]
    rows = await claim(engine, limit=10)
    assert [r["id"] for r in rows] == [high, early, first, second, low]
    assert future not in {r["id"] for r in rows}


async def test_claim_takes_no_more_than_the_free_slots(engine, settings, owner) -> None:
    for _ in range(5):
        await enqueue(engine, settings, owner)
    assert len(await claim(engine, limit=3)) == 3
    assert len(await claim(engine, limit=0)) == 0
    assert len(await claim(engine, limit=10)) == 2


async def test_claim_sets_lease_attempt_and_event(engine, settings, owner, pg) -> None:
    job = (await make_job(engine, settings, owner))["id"]
    [row] = await claim(engine, lease=30)
    db = await job_row(pg, job)
    assert db["status"] == "in_progress"
    assert db["locked_by"] == W1
    assert db["attempts"] == 1
    assert db["started_at"] is not None
    lease_left = (db["lease_expires_at"] - datetime.now(UTC)).total_seconds()
    assert 25 < lease_left <= 30.5
    assert await event_kinds(pg, job) == ["enqueued", "claimed"]


async def test_concurrent_claimers_never_claim_a_job_twice(engine, settings, owner, pg, db_url) -> None:
    from app.db import create_engine

    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn, [NewJob(type="noop", input_data={}, user_id=owner.id) for _ in range(600)], settings
        )
    engines = [create_engine(db_url, pool_size=1) for _ in range(8)]
    claimed: list[uuid.UUID] = []

    async def claimer(i: int) -> None:
        while True:
            async with engines[i].begin() as conn:
                rows = await queue.claim(conn, f"w{i}", 7, 30)
            if not rows:
                return
            claimed.extend(r["id"] for r in rows)

    try:
        await asyncio.gather(*[claimer(i) for i in range(8)])
    finally:
        for e in engines:
            await e.dispose()
    assert len(claimed) == 600
    assert len(set(claimed)) == 600
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'claimed'") == 600


async def test_priority_order_holds_for_retried_and_rescued_jobs_alike(engine, settings, owner, pg) -> None:
    low = (await make_job(engine, settings, owner, priority=1))["id"]
    high_retried = (await make_job(engine, settings, owner, priority=5))["id"]
    high_rescued = (await make_job(engine, settings, owner, priority=5))["id"]
    await claim(engine, limit=3)
    await finish(engine, settings, [failed(high_retried, delay=0), done(low)])
    await pg.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", high_rescued
    )
    async with engine.begin() as conn:
        await queue.rescue_expired(conn)
    fresh_low = (await make_job(engine, settings, owner, priority=1))["id"]
    order = [r["id"] for r in await claim(engine, limit=10)]
    # Both priority-5 jobs (one retried, one rescued) before the fresh priority-1 job; ties by run_at, id.
    assert order[-1] == fresh_low
    assert set(order[:2]) == {high_retried, high_rescued}


# --- finishing ----------------------------------------------------------------------------------


async def test_complete_stores_the_result_and_frees_the_lease(engine, settings, owner, pg) -> None:
    job = (await make_job(engine, settings, owner))["id"]
    await claim(engine)
    report = await finish(engine, settings, [done(job, {"answer": 42})])
    assert report.status == {job: "completed"}
    assert not report.lost
    db = await job_row(pg, job)
    assert db["status"] == "completed"
    assert db["locked_by"] is None
    assert db["lease_expires_at"] is None
    assert db["completed_at"] is not None
    assert db["result_data"] == '{"answer": 42}'
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "completed"]


@pytest.mark.parametrize("guarded", [True, False], ids=["guard-on", "guard-off-negative-control"])
async def test_a_stale_worker_cannot_overwrite_a_rescued_job(
    engine, settings, owner, pg, monkeypatch, guarded
) -> None:
    """Guarded finish (cases C01, C03): after the sweep rescued W1's job and W2 claimed it, W1's late
    completion must change nothing. With the ``locked_by`` guard removed, the same script overwrites W2's
    run — proving the test can fail."""
    if not guarded:
        monkeypatch.setattr(
            queue.outcomes,
            "COMPLETE_MANY",
            text(
                queue.COMPLETE_MANY.text.replace(
                    "AND j.locked_by = :worker AND j.is_active", "AND CAST(:worker AS text) IS NOT NULL"
                )
            ),
        )
    job = (await make_job(engine, settings, owner))["id"]
    await claim(engine, W1, lease=30)
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    async with engine.begin() as conn:
        rescued = await queue.rescue_expired(conn)
    assert [r["id"] for r in rescued] == [job]
    await claim(engine, W2)
    report = await finish(engine, settings, [done(job, {"by": "W1"})], worker=W1)
    db = await job_row(pg, job)
    if guarded:
        assert report.lost == {job}
        assert db["status"] == "in_progress"
        assert db["locked_by"] == W2
    else:
        assert db["status"] == "completed"  # the stale worker won: exactly what the guard prevents


async def test_failure_with_attempts_left_goes_back_to_queued_after_the_backoff(
    engine, settings, owner, pg
) -> None:
    job = (await make_job(engine, settings, owner, max_attempts=3))["id"]
    await claim(engine)
    report = await finish(engine, settings, [failed(job, "transient", delay=120)])
    assert report.status == {job: "queued"}
    db = await job_row(pg, job)
    assert db["error_message"] == "transient"
    assert db["attempts"] == 1
    assert db["completed_at"] is None
    wait = (db["run_at"] - datetime.now(UTC)).total_seconds()
    assert 110 < wait <= 120
    assert await claim(engine) == []  # not due yet
    assert await event_kinds(pg, job) == ["enqueued", "claimed", "retry_scheduled"]


async def test_last_failed_attempt_fails_the_job_and_records_one_alert(engine, settings, owner, pg) -> None:
    job = (await make_job(engine, settings, owner, max_attempts=2))["id"]
    for _ in range(2):
        await claim(engine)
        await finish(engine, settings, [failed(job, "still broken")])
    db = await job_row(pg, job)
    assert db["status"] == "failed"
    assert db["attempts"] == 2
    assert db["completed_at"] is not None
    kinds = await pg.fetch("SELECT kind, payload->>'job_id' AS job FROM alert_outbox")
    assert [(k["kind"], k["job"]) for k in kinds] == [("failed", str(job))]


async def test_a_permanent_error_fails_at_once_without_retries(engine, settings, owner, pg) -> None:
    job = (await make_job(engine, settings, owner, max_attempts=5))["id"]
    await claim(engine)
    report = await finish(engine, settings, [failed(job, "400 Bad Request", permanent=True)])
    assert report.status == {job: "failed"}
    assert (await job_row(pg, job))["attempts"] == 1


async def test_a_failure_at_attempt_5000_schedules_a_retry_within_the_cap(
    engine, settings, owner, pg
) -> None:
    # Case C05 integration: attempts set to 5000 directly, max_attempts 10000; the next failure's run_at
    # lies in (now, now + cap] with no interval/timestamp overflow.
    job = (await make_job(engine, settings, owner))["id"]
    await pg.execute("UPDATE jobs SET attempts = 4999, max_attempts = 10000 WHERE id = $1", job)
    [row] = await claim(engine)
    assert row["attempts"] == 5000
    policy = RetryPolicy(base=1.0, cap=3600.0, jitter=0.3)
    before = await pg.fetchval("SELECT now()")
    await finish(engine, settings, [failed(job, delay=retry_delay(policy, row["attempts"]))])
    db = await job_row(pg, job)
    assert db["status"] == "queued"
    assert before < db["run_at"] <= before + timedelta(seconds=3600) + timedelta(seconds=1)


# --- cancel (case C06) ----------------------------------------------------------------------------


async def test_cancelling_a_queued_job_cancels_it_at_once(engine, settings, owner, pg) -> None:
    job = (await make_job(engine, settings, owner))["id"]
    async with engine.begin() as conn:
        row = await queue.cancel(conn, job, owner)
    assert row["status"] == "cancelled"
    assert not row["is_active"]
    assert await claim(engine) == []
    assert await event_kinds(pg, job) == ["enqueued", "cancelled"]


async def test_cancel_of_a_running_job_wins_over_its_later_completion(engine, settings, owner, pg) -> None:
    # C06 variant 2: the processor ignores the signal and returns success; the job still ends cancelled.
    job = (await make_job(engine, settings, owner))["id"]
    await claim(engine)
    async with engine.begin() as conn:
        row = await queue.cancel(conn, job, owner)
    assert row["status"] == "in_progress"
    assert not row["is_active"]  # "Cancelling…"
    report = await finish(engine, settings, [done(job)])
    assert report.status == {job: "cancelled"}
    kinds = await event_kinds(pg, job)
    assert kinds == ["enqueued", "claimed", "cancel_requested", "cancelled"]
    assert "completed" not in kinds


async def test_cancelling_a_finished_job_is_a_409_that_changes_nothing(engine, settings, owner, pg) -> None:
    # C06 variant 3: cancel arrives just after the worker committed "completed".
    job = (await make_job(engine, settings, owner))["id"]
    await claim(engine)
    await finish(engine, settings, [done(job)])
    with pytest.raises(Conflict, match=r"already finished \(Done\)"):
        async with engine.begin() as conn:
            await queue.cancel(conn, job, owner)
    db = await job_row(pg, job)
    assert db["status"] == "completed"
    assert db["is_active"]


@pytest.mark.parametrize("guarded", [True, False], ids=["guard-on", "guard-off-negative-control"])
async def test_cancel_and_completion_racing_have_exactly_one_winner(
    engine, settings, owner, pg, db_url, monkeypatch, guarded
) -> None:
    """Every interleaving of an owner's cancel and a worker's completion ends with exactly one winner:
    either the cancel was refused (409) and the job completed, or the cancel was accepted and the job
    ended cancelled. Without the ``is_active`` guard, some runs accept the cancel yet end completed."""
    if not guarded:
        monkeypatch.setattr(
            queue.outcomes, "COMPLETE_MANY", text(queue.COMPLETE_MANY.text.replace("AND j.is_active", ""))
        )
    from app.db import create_engine

    other_engine = create_engine(db_url, pool_size=2)
    outcomes = []
    try:
        for i in range(30):
            job = (await make_job(engine, settings, owner))["id"]
            await claim(engine)

            async def do_cancel(job: uuid.UUID = job, pause: float = (i % 5) * 0.001) -> bool:
                await asyncio.sleep(pause)
                try:
                    async with other_engine.begin() as conn:
                        await queue.cancel(conn, job, owner)
                    return True
                except Conflict:
                    return False

            async def do_complete(job: uuid.UUID = job, pause: float = (i % 3) * 0.001) -> None:
                await asyncio.sleep(pause)
                await finish(engine, settings, [done(job)])

            accepted, _ = await asyncio.gather(do_cancel(), do_complete())
            status = (await job_row(pg, job))["status"]
            outcomes.append((accepted, status))
    finally:
        await other_engine.dispose()
    consistent = all(
        (accepted and status == "cancelled") or (not accepted and status == "completed")
        for accepted, status in outcomes
    )
    if guarded:
        assert consistent, outcomes
    else:
        assert not consistent, (
            "the negative control should show a cancel accepted yet overwritten by completion"
        )


# --- manual retry (case C23) ------------------------------------------------------------------------


async def _exhaust(engine, settings, owner, max_attempts: int = 3) -> uuid.UUID:
    # a type everyone may submit: a retry needs its owner to be allowed it (app.jobs.queue.owner_rule);
    # the attempts fail by hand, whatever it would do
    job = (await make_job(engine, settings, owner, "test.form", {"name": "Ann"}, max_attempts=max_attempts))[
        "id"
    ]
    for _ in range(max_attempts):
        await claim(engine)
        await finish(engine, settings, [failed(job, "downstream is down")])
    return job


async def test_manual_retry_grants_a_fresh_budget_and_keeps_the_history(
    engine, settings, owner, admin, pg
) -> None:
    job = await _exhaust(engine, settings, owner)
    assert (await job_row(pg, job))["status"] == "failed"
    async with engine.begin() as conn:
        row = await queue.retry(conn, job, admin)
    assert row["status"] == "queued"
    assert row["attempts"] == 0
    [claimed] = await claim(engine)
    assert claimed["id"] == job
    assert claimed["attempts"] == 1  # the processor really runs again
    kinds = await event_kinds(pg, job)
    assert kinds.count("retry_scheduled") == 2
    assert kinds.count("failed") == 1
    assert kinds[-2:] == ["retried", "claimed"]


async def test_a_double_clicked_retry_retries_once(engine, settings, owner, admin, pg) -> None:
    job = await _exhaust(engine, settings, owner)
    async with engine.begin() as conn:
        await queue.retry(conn, job, admin)
    with pytest.raises(Conflict, match="not failed"):
        async with engine.begin() as conn:
            await queue.retry(conn, job, admin)
    assert (await event_kinds(pg, job)).count("retried") == 1


async def test_retry_is_for_the_owner_or_an_admin_and_only_for_failed_jobs(
    engine, settings, owner, other, admin, pg
) -> None:
    job = await _exhaust(engine, settings, owner)
    with pytest.raises(NotFound):
        async with engine.begin() as conn:
            await queue.retry(conn, job, other)
    async with engine.begin() as conn:
        assert (await queue.retry(conn, job, owner))["status"] == "queued"  # the owner fixes their own
    job = await _exhaust(engine, settings, owner)
    completed = (await make_job(engine, settings, owner))["id"]
    await claim(engine)
    await finish(engine, settings, [done(completed)])
    cancelled = (await make_job(engine, settings, owner))["id"]
    async with engine.begin() as conn:
        await queue.cancel(conn, cancelled, owner)
    for jid, status in ((completed, "Done"), (cancelled, "Cancelled")):
        with pytest.raises(Conflict, match=f"it is {status}, not failed"):
            async with engine.begin() as conn:
                await queue.retry(conn, jid, admin)
    assert (await job_row(pg, job))["status"] == "failed"


async def test_other_users_get_the_same_not_found_as_an_unknown_id(engine, settings, owner, other) -> None:
    job = (await make_job(engine, settings, owner))["id"]
    async with engine.begin() as conn:
        with pytest.raises(NotFound) as theirs:
            await queue.get_job(conn, job, other)
        with pytest.raises(NotFound) as unknown:
            await queue.get_job(conn, uuid.uuid4(), other)
        with pytest.raises(NotFound):
            await queue.cancel(conn, job, other)
    assert type(theirs.value) is type(unknown.value)


# --- rescue -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced-negative-control"])
async def test_a_late_release_of_a_lost_attempt_leaves_the_newer_attempt_running(
    engine, settings, owner, pg, monkeypatch, fenced
) -> None:
    """A release (a stopping worker's hand-back) is fenced by its attempt like a completion: after the
    rescue, the same worker claimed the job again, and the late release of its first attempt must not
    hand back the second. Without the attempt in the guard, ``locked_by`` alone matches and it does."""
    if not fenced:
        monkeypatch.setattr(
            queue.outcomes,
            "RELEASE_MANY",
            text(queue.RELEASE_MANY.text.replace("AND (input.claim IS NULL OR j.claims = input.claim)", "")),
        )
    job = (await make_job(engine, settings, owner, max_attempts=5))["id"]
    [first] = await claim(engine, W1)
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    async with engine.begin() as conn:
        await queue.rescue_expired(conn)
    [second] = await claim(engine, W1)
    assert second["attempts"] == first["attempts"] + 1
    late = Outcome(
        job_id=job, kind="released", message="released: worker shutting down", claim=first["claims"]
    )
    await finish(engine, settings, [late], worker=W1)
    db = await job_row(pg, job)
    if fenced:
        assert (db["status"], db["attempts"], db["locked_by"]) == ("in_progress", second["attempts"], W1)
    else:
        assert db["status"] == "queued"  # the stale release handed back the newer attempt


async def test_rescue_requeues_an_expired_lease_counting_the_lost_attempt(
    engine, settings, owner, pg
) -> None:
    job = (await make_job(engine, settings, owner, max_attempts=3))["id"]
    await claim(engine, W1)
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    async with engine.begin() as conn:
        rows = await queue.rescue_expired(conn)
    assert [r["status"] for r in rows] == ["queued"]
    db = await job_row(pg, job)
    assert db["attempts"] == 1
    assert db["locked_by"] is None
    assert db["error_message"] == f"lease expired: worker lost ({W1})"
    assert (await event_kinds(pg, job))[-1] == "rescued"


async def test_rescue_on_the_last_attempt_fails_the_job_with_one_alert(engine, settings, owner, pg) -> None:
    job = (await make_job(engine, settings, owner, max_attempts=1))["id"]
    await claim(engine)
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    async with engine.begin() as conn:
        await queue.rescue_expired(conn)
    assert (await job_row(pg, job))["status"] == "failed"
    assert await pg.fetchval("SELECT array_agg(kind) FROM alert_outbox") == ["failed"]


async def test_rescue_leaves_a_renewed_lease_alone(engine, settings, owner, pg) -> None:
    job = (await make_job(engine, settings, owner))["id"]
    await claim(engine, lease=30)
    async with engine.begin() as conn:
        assert await queue.rescue_expired(conn) == []
        report = await queue.heartbeat(conn, W1, [job], 30)
    assert report.renewed == {job}
    assert not report.lost
    assert (await job_row(pg, job))["status"] == "in_progress"


async def test_only_one_process_sweeps_at_a_time(engine, settings, owner, pg, db_url) -> None:
    from app.db import create_engine

    job = (await make_job(engine, settings, owner))["id"]
    await claim(engine)
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    other_engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as a, other_engine.begin() as b:
            await a.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": queue.RESCUE_LOCK_KEY})
            assert await queue.rescue_expired(b) == []  # someone else is sweeping
    finally:
        await other_engine.dispose()


async def test_heartbeat_reports_lost_and_cancel_requested_jobs(engine, settings, owner, pg) -> None:
    a = (await make_job(engine, settings, owner))["id"]
    b = (await make_job(engine, settings, owner))["id"]
    c = (await make_job(engine, settings, owner))["id"]
    await claim(engine, W1, limit=3)
    async with engine.begin() as conn:
        await queue.cancel(conn, b, owner)
    await pg.execute("UPDATE jobs SET locked_by = $2 WHERE id = $1", c, W2)  # someone else's now
    async with engine.begin() as conn:
        report = await queue.heartbeat(conn, W1, [a, b, c], 30)
        assert await queue.cancel_requested(conn, W1, [a, b, c]) == {b}
    assert report.renewed == {a, b}
    assert report.cancelled == {b}
    assert report.lost == {c}


# --- retention ----------------------------------------------------------------------------------


async def test_prune_deletes_old_finished_jobs_with_their_events_only(engine, settings, owner, pg) -> None:
    old = (await make_job(engine, settings, owner))["id"]
    recent = (await make_job(engine, settings, owner))["id"]
    waiting = (await make_job(engine, settings, owner, run_at=datetime.now(UTC) + timedelta(days=1)))["id"]
    await claim(engine, limit=2)
    await finish(engine, settings, [done(old), done(recent)])
    await pg.execute("UPDATE jobs SET completed_at = now() - interval '31 days' WHERE id = $1", old)
    async with engine.begin() as conn:
        result = await queue.prune(conn, 30)
    assert result["jobs"] == 1
    remaining = {r["id"] for r in await pg.fetch("SELECT id FROM jobs")}
    assert remaining == {recent, waiting}
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE job_id = $1", old) == 0


async def test_retention_deletes_the_files_of_deleted_jobs_and_old_unused_uploads(
    engine, settings, owner, pg, tmp_path
) -> None:
    """Uploads a job used go with the job; files a pipeline's steps produced go
    with the pipeline; uploads no job ever used go after the retention period; recent ones stay."""
    from app.files import FileStore

    store = FileStore(tmp_path / "files")

    async def upload(name: str) -> Any:
        async with engine.begin() as conn:
            return (await store.save(conn, user_id=owner.id, name=name, data=b"x"))["id"]

    used, unused_old, unused_new = await upload("used.csv"), await upload("old.csv"), await upload("new.csv")
    async with engine.begin() as conn:
        job = (
            await queue.enqueue(
                conn,
                NewJob(type="report.csv_check", input_data={"file": str(used)}, user_id=owner.id),
                settings,
            )
        ).job["id"]
    assert await pg.fetchval("SELECT job_id FROM files WHERE id = $1", used) == job  # linked at submission
    [claimed] = await claim(engine)
    assert claimed["id"] == job
    await finish(engine, settings, [done(job)])
    await pg.execute("UPDATE jobs SET completed_at = now() - interval '40 days' WHERE id = $1", job)
    await pg.execute(
        "UPDATE files SET created_at = now() - interval '40 days' WHERE id IN ($1, $2)", used, unused_old
    )
    async with engine.begin() as conn:
        pruned = await queue.prune(conn, 30)
    store.remove(pruned["files"])
    assert pruned["jobs"] == 1
    assert set(pruned["files"]) == {used, unused_old}
    assert {r["id"] for r in await pg.fetch("SELECT id FROM files")} == {unused_new}
    assert not store.path(used).exists()
    assert store.path(unused_new).exists()
