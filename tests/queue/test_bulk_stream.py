"""A large bulk enqueue checks its jobs while their ``COPY`` is under way: whatever stops it part-way (a
bad job, one too large, a file of someone else, a check that fails unexpectedly), nothing is left written
and the caller's transaction goes on as if the batch had been refused before the first row; the refusal
is the one a batch checked in full before writing gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.errors import BadInput, TooLarge
from app.files import FileStore
from app.jobs import queue
from app.jobs.queue import NewJob, many_jobs
from app.settings import Settings
from tests.support.factories import TestUser

N = 600


@pytest.fixture(params=["streamed", "checked-first"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every case on both paths: the streamed copy, and the batch checked in full before its copy."""
    monkeypatch.setattr(many_jobs, "COPY_FROM", 1)
    monkeypatch.setattr(many_jobs, "STREAM_FROM", 1 if request.param == "streamed" else 10**9)
    return str(request.param)


def _noops(owner: TestUser, n: int = N) -> list[NewJob]:
    return [NewJob(type="noop", input_data={"i": i}, user_id=owner.id) for i in range(n)]


async def _refused_then_go_on(
    engine: Any, settings: Settings, pg: asyncpg.Connection, jobs: list[NewJob], owner: TestUser
) -> BaseException:
    """Enqueue ``jobs`` in a transaction that catches the refusal and then enqueues one good job and
    commits; nothing of ``jobs`` may be there afterwards, the good job must be."""
    after = NewJob(type="noop", input_data={"after": True}, user_id=owner.id)
    caught: BaseException | None = None
    async with engine.begin() as conn:
        try:
            await queue.enqueue_many(conn, jobs, settings)
        except Exception as exc:
            caught = exc
        await queue.enqueue_many(conn, [after], settings)
    assert caught is not None, "the batch went in"
    rows = await pg.fetch("SELECT id FROM jobs")
    assert [r["id"] for r in rows] == [after.id], (
        f"{len(rows) - 1} jobs of the refused batch were left written"
    )
    assert await pg.fetchval("SELECT count(*) FROM job_events") == 1
    return caught


async def test_a_bad_job_part_way_leaves_nothing_and_every_bad_job_is_named(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, path: str
) -> None:
    jobs = _noops(owner)
    jobs[N // 2] = NewJob(type="sleep", input_data={"seconds": -1}, user_id=owner.id)
    jobs[N - 1] = NewJob(type="noop", input_data={}, user_id=owner.id, priority=1000)
    refused = await _refused_then_go_on(engine, settings, pg, jobs, owner)
    assert isinstance(refused, BadInput)
    assert set(refused.errors) == {f"jobs[{N // 2}].input_data.seconds", f"jobs[{N - 1}].priority"}
    assert "1 more bad jobs" in refused.detail


async def test_an_input_too_large_part_way_leaves_nothing(
    engine: Any, make_settings: Any, owner: TestUser, pg: asyncpg.Connection, path: str
) -> None:
    settings = make_settings(job_max_input_bytes=1024)
    jobs = _noops(owner)
    jobs[N - 2] = NewJob(type="noop", input_data={"big": "x" * 2000}, user_id=owner.id)
    refused = await _refused_then_go_on(engine, settings, pg, jobs, owner)
    assert isinstance(refused, TooLarge) and refused.field == f"jobs[{N - 2}].input_data"


async def test_a_file_of_someone_else_leaves_nothing(
    engine: Any,
    settings: Settings,
    owner: TestUser,
    other: TestUser,
    pg: asyncpg.Connection,
    tmp_path: Path,
    path: str,
) -> None:
    async with engine.begin() as conn:
        theirs = (await FileStore(tmp_path / "files").save(conn, user_id=other.id, name="a.csv", data=b"x"))[
            "id"
        ]
    jobs = _noops(owner)
    jobs[N - 3] = NewJob(type="report.csv_check", input_data={"file": str(theirs)}, user_id=owner.id)
    refused = await _refused_then_go_on(engine, settings, pg, jobs, owner)
    assert isinstance(refused, BadInput) and f"jobs[{N - 3}].input_data.file" in refused.errors
    assert await pg.fetchval("SELECT job_id FROM files WHERE id = $1", theirs) is None


async def test_a_check_that_fails_unexpectedly_part_way_leaves_nothing(
    engine: Any,
    settings: Settings,
    owner: TestUser,
    pg: asyncpg.Connection,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error no check expects (a type's own check that breaks) reaches the caller as it is, after the
    copy has ended cleanly: the driver is never handed an exception mid-copy (it would abort the
    ``COPY`` and send a cancel request that can land on a later statement of the transaction)."""
    real = many_jobs.prepare

    def breaking(job: NewJob, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if job.input_data.get("i") == N - 5:
            raise RuntimeError("a check broke")
        return real(job, *args, **kwargs)

    monkeypatch.setattr(many_jobs, "prepare", breaking)
    refused = await _refused_then_go_on(engine, settings, pg, _noops(owner), owner)
    assert isinstance(refused, RuntimeError) and str(refused) == "a check broke"


async def test_a_streamed_batch_with_due_times_writes_every_job_once(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, path: str
) -> None:
    """Jobs with their own due time go in by a second copy after the stream; each job once, each with
    one event."""
    from datetime import UTC, datetime, timedelta

    due = datetime.now(UTC) + timedelta(hours=1)
    jobs = _noops(owner)
    for k in range(0, N, 7):
        jobs[k].run_at = due
    async with engine.begin() as conn:
        ids = await queue.enqueue_many(conn, jobs, settings)
    assert ids == [j.id for j in jobs]
    rows = await pg.fetch("SELECT id, run_at > now() + interval '30 minutes' AS later FROM jobs")
    assert {r["id"]: r["later"] for r in rows} == {j.id: j.run_at is not None for j in jobs}
    assert await pg.fetchval("SELECT count(DISTINCT job_id) FROM job_events WHERE kind = 'enqueued'") == N
