"""Enqueue given the engine (one autocommit statement: the row, its event and the NOTIFY together), also
behind PgBouncer in transaction mode, and bulk enqueue reporting every bad job by its index."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.db import asyncpg_dsn, create_engine
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob, many_jobs
from app.server import UNSTORABLE_MESSAGE
from app.server import _classify as server_classify
from app.settings import Settings
from tests.support.factories import TestUser, event_kinds, job_row

pytest_plugins = ("tests.support.pgbouncer",)

REFUSE_EVENTS = """
CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.actor = 'test:refused' THEN RAISE EXCEPTION 'event refused'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_event BEFORE INSERT ON job_events FOR EACH ROW EXECUTE FUNCTION refuse_event();
"""


async def _listen(pg: asyncpg.Connection) -> asyncio.Queue[str]:
    got: asyncio.Queue[str] = asyncio.Queue()
    await pg.add_listener(queue.JOBS_CHANNEL, lambda *args: got.put_nowait(args[3]))
    return got


async def test_engine_enqueue_writes_the_job_its_event_and_the_notify_together(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, db_url: str
) -> None:
    """Given the engine, the row, its ``enqueued`` event and the NOTIFY commit together; when the event
    cannot be written, neither the job nor the NOTIFY exists (one statement, not a job row followed by
    separate writes)."""
    listener = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        notes = await _listen(listener)
        done = await queue.enqueue(engine, NewJob(type="noop", input_data={}, user_id=owner.id), settings)
        assert done.created and done.job["status"] == "queued"
        assert await event_kinds(pg, done.job["id"]) == ["enqueued"]
        await asyncio.wait_for(notes.get(), 5)

        await pg.execute(REFUSE_EVENTS)
        refused = NewJob(type="noop", input_data={}, user_id=owner.id)
        with pytest.raises(Exception, match="event refused"):
            await queue.enqueue(engine, refused, settings, actor="test:refused")
        assert await pg.fetchval("SELECT count(*) FROM jobs WHERE id = $1", refused.id) == 0
        await asyncio.sleep(0.3)
        assert notes.empty(), "a NOTIFY went out for a job that was never committed"
    finally:
        await listener.close()


async def test_engine_enqueue_validates_and_repeats_idempotently(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """The engine path validates as the connection path does, returns the existing job for a repeated
    idempotency key, and a job with dependencies still gets its edges (in a transaction of its own)."""
    with pytest.raises(BadInput) as err:
        await queue.enqueue(
            engine, NewJob(type="sleep", input_data={"seconds": -1}, user_id=owner.id), settings
        )
    assert "input_data.seconds" in err.value.errors
    first = await queue.enqueue(
        engine, NewJob(type="noop", input_data={}, user_id=owner.id, idempotency_key="k"), settings
    )
    again = await queue.enqueue(
        engine, NewJob(type="noop", input_data={}, user_id=owner.id, idempotency_key="k"), settings
    )
    assert (first.created, again.created, again.job["id"]) == (True, False, first.job["id"])
    child = await queue.enqueue(
        engine, NewJob(type="noop", input_data={}, user_id=owner.id, depends_on=[first.job["id"]]), settings
    )
    row = await job_row(pg, child.job["id"])
    assert row["pending_parents"] == 1
    assert await pg.fetchval("SELECT count(*) FROM job_dependencies WHERE job_id = $1", child.job["id"]) == 1


async def test_engine_enqueue_behind_pgbouncer_in_transaction_mode(
    pgbouncer: Any, db_url: str, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """Through a transaction-mode PgBouncer with two server connections shared by two engines, concurrent
    engine enqueues each create their own job with its event, and no prepared statement is left behind."""
    bouncer = pgbouncer("transaction", default_pool_size=2)
    url = bouncer.url(str(make_url(db_url).database))
    engines = [create_engine(url, pool_size=4, pooler="transaction") for _ in range(2)]
    try:
        jobs = [NewJob(type="noop", input_data={"n": i}, user_id=owner.id, title=f"t{i}") for i in range(60)]
        done = await asyncio.gather(*(queue.enqueue(engines[i % 2], j, settings) for i, j in enumerate(jobs)))
        assert [d.job["id"] for d in done] == [j.id for j in jobs]
        assert [d.job["title"] for d in done] == [f"t{i}" for i in range(60)]
        counted = await pg.fetchval(
            "SELECT count(*) FROM job_events WHERE kind = 'enqueued' AND job_id = ANY($1::uuid[])",
            [j.id for j in jobs],
        )
        assert counted == 60
        for engine in engines:  # both server connections
            async with engine.connect() as conn:
                assert (await conn.execute(text("SELECT count(*) FROM pg_prepared_statements"))).scalar() == 0
    finally:
        for engine in engines:
            await engine.dispose()


async def test_bulk_enqueue_names_every_bad_job_by_its_index(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """A bulk enqueue with several bad jobs rejects the batch and names each bad one by its index, so a
    caller can fix them all at once; nothing is inserted."""
    jobs = [NewJob(type="noop", input_data={}, user_id=owner.id) for _ in range(6)]
    jobs[1] = NewJob(type="sleep", input_data={"seconds": -1}, user_id=owner.id)
    jobs[4] = NewJob(type="noop", input_data={}, user_id=owner.id, priority=1000)
    jobs[5] = NewJob(type="no.such.type", input_data={}, user_id=owner.id)
    async with engine.begin() as conn:
        with pytest.raises(BadInput) as err:
            await queue.enqueue_many(conn, jobs, settings)
    assert set(err.value.errors) == {"jobs[1].input_data.seconds", "jobs[4].priority", "jobs[5].type"}
    assert "2 more bad jobs" in err.value.detail
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    async with engine.begin() as conn:
        ids = await queue.enqueue_many(conn, [jobs[0], jobs[2]], settings)
    assert len(ids) == 2
    kinds = await pg.fetch("SELECT kind FROM job_events WHERE job_id = ANY($1::uuid[])", ids)
    assert [k["kind"] for k in kinds] == ["enqueued", "enqueued"]


async def test_bulk_enqueue_refuses_nul_and_lone_surrogates_by_index(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """The storage check of a bulk enqueue runs on each input's JSON text, not a walk of it: a NUL or a
    lone surrogate, in a value or a key, at any depth, still refuses the batch and names the job's index
    and the field; text that only looks like an escape is stored."""
    import tests.support.text_processors  # noqa: F401 - registers text.bad_result (a free text field)

    def job(type_: str, data: dict[str, Any]) -> NewJob:
        return NewJob(type=type_, input_data=data, user_id=owner.id)

    jobs = [
        job("text.bad_result", {"name": "fine \\u0000 \\ud800"}),
        job("text.bad_result", {"name": "a\x00b"}),
        job("noop", {}),
        job("text.bad_result", {"name": "x\ud800"}),
        job("noop", {"items": [1, {"k\udc00": 1}]}),
    ]
    async with engine.begin() as conn:
        with pytest.raises(BadInput) as err:
            await queue.enqueue_many(conn, jobs, settings)
    errors = err.value.errors or {}
    assert set(errors) == {
        "jobs[1].input_data.name",
        "jobs[3].input_data.name",
        "jobs[4].input_data.items[1].k\\udc00",
    }
    assert "NUL" in errors["jobs[1].input_data.name"]
    assert "lone surrogate" in errors["jobs[3].input_data.name"]
    assert "lone surrogate" in errors["jobs[4].input_data.items[1].k\\udc00"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    async with engine.begin() as conn:
        await queue.enqueue_many(conn, [jobs[0], jobs[2]], settings)
    stored = await pg.fetchval("SELECT input_data->>'name' FROM jobs WHERE id = $1", jobs[0].id)
    assert stored == "fine \\u0000 \\ud800"


async def test_jobs_without_an_idempotency_key_skip_the_conflict_check_and_keyed_ones_keep_it(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    def batch() -> list[NewJob]:
        return [
            NewJob(type="noop", input_data={}, user_id=owner.id, idempotency_key="nightly"),
            NewJob(type="noop", input_data={}, user_id=owner.id),
        ]

    for _ in range(2):  # a mixed batch, twice: the keyed job once, the others each time
        async with engine.begin() as conn:
            await queue.enqueue_many(conn, batch(), settings)
    for _ in range(2):  # one at a time, in a transaction and on the engine alike
        async with engine.begin() as conn:
            for job in batch():
                await queue.enqueue(conn, job, settings)
        for job in batch():
            await queue.enqueue(engine, job, settings)
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE idempotency_key = 'nightly'") == 1
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE idempotency_key IS NULL") == 6


async def test_a_bulk_copy_writes_what_the_insert_statement_writes(
    engine: Any,
    settings: Settings,
    owner: TestUser,
    pg: asyncpg.Connection,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large batch without idempotency keys is written by ``COPY``; the insert statement (a small batch,
    or no asyncpg connection to copy on) writes the same rows and events: every column, a job without a
    due time due at the transaction's start and one with its own, the pending parents, the actor. The
    NOTIFY goes out only when some job can run without waiting for a parent."""
    due = datetime.now(UTC) + timedelta(hours=3)

    def batch() -> list[NewJob]:
        return [
            NewJob(
                type="noop",
                input_data={"i": 1},
                user_id=owner.id,
                title="first",
                priority=7,
                request_id="r-9",
            ),
            NewJob(
                type="noop", input_data={}, user_id=owner.id, run_at=due, max_attempts=2, step_key="later"
            ),
            NewJob(type="noop", input_data={"w": [1]}, user_id=owner.id, requires_approval=True),
        ]

    async def write(jobs: list[NewJob], waiting: set[int]) -> tuple[list[Any], list[str]]:
        listener = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            notes = await _listen(listener)
            async with engine.begin() as conn:
                ids = await queue.enqueue_many(
                    conn, jobs, settings, actor="test:bulk", pending={jobs[k].id: 2 for k in waiting}
                )
            assert ids == [j.id for j in jobs]
            await asyncio.sleep(0.3)
            return ids, [notes.get_nowait() for _ in range(notes.qsize())]
        finally:
            await listener.close()

    async def written(ids: list[Any]) -> list[dict[str, Any]]:
        rows = []
        for job_id in ids:
            row = await job_row(pg, job_id)
            row["run_at"] = "at the start" if row["run_at"] == row["created_at"] else row["run_at"]
            for volatile in ("id", "created_at", "updated_at"):
                row.pop(volatile)
            trail = await pg.fetch(
                "SELECT kind, from_status, to_status, actor, data, pipeline_id, at = $2 AS at_start "
                "FROM job_events WHERE job_id = $1 ORDER BY id",
                job_id,
                await pg.fetchval("SELECT created_at FROM jobs WHERE id = $1", job_id),
            )
            rows.append({**row, "events": [dict(e) for e in trail]})
        return rows

    monkeypatch.setattr(many_jobs, "COPY_FROM", 1)
    copied, copied_notes = await write(batch(), waiting={1})
    assert copied_notes == [""]
    _, none_free = await write(batch(), waiting={0, 1, 2})
    assert none_free == [], "a NOTIFY for jobs that all wait for parents"

    monkeypatch.setattr(many_jobs, "STREAM_FROM", 1)
    streamed, streamed_notes = await write(batch(), waiting={1})
    assert streamed_notes == [""]
    _, none_free = await write(batch(), waiting={0, 1, 2})
    assert none_free == [], "a NOTIFY for streamed jobs that all wait for parents"

    monkeypatch.setattr(many_jobs, "STREAM_FROM", 10**9)
    monkeypatch.setattr(many_jobs, "COPY_FROM", 10**9)
    inserted, inserted_notes = await write(batch(), waiting={1})
    assert inserted_notes == [""]
    assert await written(copied) == await written(inserted)
    assert await written(streamed) == await written(inserted)
    first, later, _ = await written(copied)
    assert (first["run_at"], later["run_at"], later["pending_parents"]) == ("at the start", due, 2)
    assert first["events"] == [
        {"kind": "enqueued", "from_status": None, "to_status": "queued", "actor": "test:bulk", "data": None,
         "pipeline_id": None, "at_start": True}
    ]  # fmt: skip


@pytest.mark.parametrize(
    "fields",
    [{"step_key": "\ud800"}, {"user_id": 2**40}, {"request_id": "a\x00b"}],
    ids=["lone-surrogate", "out-of-range", "nul"],
)
@pytest.mark.parametrize("stream_from", [1, 10**9], ids=["streamed", "checked-first"])
async def test_a_value_the_copy_cannot_store_is_refused_as_a_statement_would_refuse_it(
    engine: Any,
    settings: Settings,
    owner: TestUser,
    pg: asyncpg.Connection,
    fields: dict[str, Any],
    stream_from: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A value the bulk enqueue's ``COPY`` cannot write (a Python caller's text with a lone surrogate or a
    NUL, a number out of its column's range) is the driver's ``DataError``, as for a statement's
    parameter, which the web layer answers as input it cannot store (422, not 500); nothing is written."""
    monkeypatch.setattr(many_jobs, "COPY_FROM", 1)
    monkeypatch.setattr(many_jobs, "STREAM_FROM", stream_from)
    job = NewJob(**{"type": "noop", "input_data": {}, "user_id": owner.id, **fields})
    with pytest.raises(asyncpg.DataError) as err:
        async with engine.begin() as conn:
            await queue.enqueue_many(conn, [job], settings)
    status, detail, _, _ = server_classify(err.value, settings)
    assert (status, detail) == (422, UNSTORABLE_MESSAGE)
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
