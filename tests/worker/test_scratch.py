"""A CPU-bound job's scratch directory (its ``ctx.output_dir``) is removed when its attempt ends, whatever
the outcome — completed (its outputs stored first), failed after writing outputs, past its time limit,
cancelled, handed back at a worker's stop — and retention removes the directories a dead process left:
old ones whose claim is not running on any worker, never a running claim's, never a young one."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

import tests.support.processors  # noqa: F401  (registers the test job types)
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from app.worker import scratch
from app.worker.maintenance import SCRATCH_MIN_AGE_SECS, Retention
from tests.support.factories import TestUser
from tests.support.workers import running_worker, wait_status, wait_until


async def enqueue(
    engine: Any, settings: Settings, user: TestUser, type_: str, data: dict[str, Any]
) -> uuid.UUID:
    async with engine.begin() as conn:
        result = await queue.enqueue(
            conn, NewJob(type=type_, input_data=data, user_id=user.id, max_attempts=1), settings
        )
    return result.job["id"]


def left_in(settings: Settings) -> list[str]:
    folder = scratch.root(settings.data_dir)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


async def scratch_made(settings: Settings) -> None:
    async def made() -> bool:
        return bool(left_in(settings))

    await wait_until(made, timeout=20, what="a scratch directory")


async def test_a_cpu_job_leaves_no_scratch_directory_whatever_its_outcome(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection
) -> None:
    settings = make_settings(job_cancel_grace_secs=0.2)
    async with running_worker(settings):
        done = await enqueue(engine, settings, owner, "test.cpu_files", {"files": 3})
        row = await wait_status(pg, done, {"completed", "failed"}, timeout=30)
        assert row["status"] == "completed", row["error_message"]
        assert await pg.fetchval("SELECT count(*) FROM files WHERE job_id = $1", done) == 3  # stored first
        assert left_in(settings) == []

        failed = await enqueue(engine, settings, owner, "test.cpu_files", {"files": 3, "fail": True})
        row = await wait_status(pg, failed, {"completed", "failed"}, timeout=30)
        assert row["status"] == "failed" and "on purpose" in row["error_message"]
        assert left_in(settings) == []

        slow = await enqueue(engine, settings, owner, "test.cpu_files_limited", {"files": 1, "seconds": 60})
        row = await wait_status(pg, slow, {"completed", "failed"}, timeout=30)
        assert "longer than its 3 s limit" in row["error_message"]
        assert left_in(settings) == []

        cancelled = await enqueue(engine, settings, owner, "test.cpu_files", {"files": 1, "seconds": 60})
        await wait_status(pg, cancelled, {"in_progress"})
        await scratch_made(settings)
        async with engine.begin() as conn:
            await queue.cancel(conn, cancelled, owner)
        await wait_status(pg, cancelled, {"cancelled"}, timeout=10)
        assert left_in(settings) == []


async def test_a_worker_stopping_removes_the_scratch_directory_of_the_job_it_hands_back(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection
) -> None:
    settings = make_settings(worker_shutdown_grace_secs=0.5, job_cancel_grace_secs=0.2)
    async with running_worker(settings):
        job = await enqueue(engine, settings, owner, "test.cpu_files", {"files": 1, "seconds": 60})
        await wait_status(pg, job, {"in_progress"})
        await scratch_made(settings)
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job) != "in_progress"
    assert left_in(settings) == []


class _Quiet:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append({"event": event, **kw})


async def test_retention_removes_old_scratch_directories_of_claims_not_running(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    running = await enqueue(engine, settings, owner, "noop", {})
    finished = await enqueue(engine, settings, owner, "noop", {})
    # as a worker on another host holds it: its third claim runs now, its second attempt
    await pg.execute(
        "UPDATE jobs SET status = 'in_progress', attempts = 2, claims = 3, max_attempts = 3, "
        "locked_by = 'elsewhere', lease_expires_at = now() + interval '1 hour', started_at = now() "
        "WHERE id = $1",
        running,
    )
    await pg.execute(
        "UPDATE jobs SET status = 'completed', attempts = 1, claims = 1, completed_at = now() WHERE id = $1",
        finished,
    )
    old = time.time() - SCRATCH_MIN_AGE_SECS - 60

    def made(job_id: uuid.UUID, claim: int, *, written: float = old, legacy: str = "") -> str:
        path = scratch.make(settings.data_dir, job_id, claim)
        if legacy == "job":  # named before anything but the job was in the name
            path = path.rename(path.with_name(f"job-{job_id}-x{claim}k2"))
        elif legacy == "attempt":  # named by the attempt, which says nothing of the claim
            path = path.rename(path.with_name(f"job-{job_id}-a{claim}-k2x"))
        (path / "out.bin").write_bytes(b"x" * 100)
        os.utime(path, (written, written))
        return path.name

    doomed = {
        made(finished, 1),  # its process died before it removed its directory
        made(running, 2),  # the running job's earlier claim
        made(uuid.uuid4(), 1),  # a job deleted since
        made(finished, 1, legacy="job"),
        made(finished, 1, legacy="attempt"),
    }
    kept = {
        made(running, 3),  # the claim running now, however old its directory
        made(running, 3, legacy="job"),
        made(running, 1, legacy="attempt"),  # it may be the running claim's: kept while the job runs
        made(finished, 1, written=time.time()),  # young: not looked at
    }
    other = scratch.root(settings.data_dir) / "notes"
    other.mkdir()
    os.utime(other, (old, old))
    kept.add("notes")  # not a name Jobdesk writes
    log = _Quiet()
    await Retention(engine, settings, files=_NoFiles(), log=log).run_once()  # type: ignore[arg-type]
    assert set(left_in(settings)) == kept, doomed
    assert [x.get("dirs") for x in log.lines if "scratch" in x["event"]] == [5]


async def test_an_earlier_claim_s_scratch_directory_is_removed_though_its_attempt_number_runs_again(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """A retry (or a rerun, or a hand-back) sets a job's attempt back, so the claim running now can have
    the attempt number of an earlier claim whose process died: named by the attempt, the dead claim's
    directory was taken for the running one's and kept for as long as the job ran."""
    job = await enqueue(engine, settings, owner, "noop", {})
    async with engine.begin() as conn:
        [first] = await queue.claim(conn, "dead-worker", 1, 3600)
    dead = scratch.make(settings.data_dir, job, first["claims"])  # its process dies before it ends
    # an admin's retry after the rescue failed it: attempt 1 again, as the first claim's was
    await pg.execute(
        "UPDATE jobs SET status = 'queued', attempts = 0, locked_by = NULL, lease_expires_at = NULL "
        "WHERE id = $1",
        job,
    )
    async with engine.begin() as conn:
        [second] = await queue.claim(conn, "live-worker", 1, 3600)
    assert (second["attempts"], second["claims"]) == (first["attempts"], first["claims"] + 1)
    live = scratch.make(settings.data_dir, job, second["claims"])
    old = time.time() - SCRATCH_MIN_AGE_SECS - 60
    for path in (dead, live):
        os.utime(path, (old, old))
    await Retention(engine, settings, files=_NoFiles(), log=_Quiet()).run_once()  # type: ignore[arg-type]
    assert left_in(settings) == [live.name], "the dead claim's directory was kept, or the live one removed"


class _NoFiles:
    """A files folder with nothing in it (the bytes' own sweep is tested elsewhere)."""

    def unrecorded_candidates(self, before: float) -> tuple[list[Any], list[Path]]:
        return [], []

    def remove(self, ids: Any) -> None:
        pass
