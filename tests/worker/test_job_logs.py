"""Live job logs: what a processor logs (``ctx.log``, Python ``logging``, a thread, a CPU-bound child
process) is kept as its job's log while it runs, bounded per job, storable, and deleted with the job."""

from __future__ import annotations

from typing import Any

import asyncpg

import tests.support.processors  # noqa: F401  (registers the test job types)
from app.jobs import joblog
from app.settings import Settings
from tests.support.factories import make_job, make_user
from tests.support.workers import running_worker, wait_status, wait_until


async def lines_of(pg: asyncpg.Connection, job_id: Any) -> list[dict[str, Any]]:
    rows = await pg.fetch("SELECT * FROM job_logs WHERE job_id = $1 ORDER BY seq", job_id)
    return [dict(r) for r in rows]


async def test_lines_are_written_while_the_job_runs_also_from_a_cpu_bound_process(
    engine: Any, settings: Settings, pg: asyncpg.Connection
) -> None:
    user = await make_user(pg)
    job = await make_job(engine, settings, user, "test.logs", {"lines": 6, "interval": 0.4, "nul": True})
    cpu = await make_job(engine, settings, user, "test.cpu_logs", {"lines": 3})
    async with running_worker(settings):
        await wait_status(pg, job["id"], {"in_progress"})
        # flushed at least every second: the first lines are there long before the job ends
        seen = await wait_until(
            lambda: lines_of(pg, job["id"]), timeout=2.0, interval=0.05, what="a first line"
        )
        still = await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job["id"])
        assert still == "in_progress" and seen[0]["text"] == "line 0"
        await wait_status(pg, job["id"], {"completed"})
        await wait_status(pg, cpu["id"], {"completed"}, timeout=30)
    lines = await lines_of(pg, job["id"])
    last = max(ln["attempt"] for ln in lines)  # a busy machine may have run it twice: each line says which
    texts = [ln["text"] for ln in lines if ln["attempt"] == last]
    assert texts[:6] == [f"line {i}" for i in range(6)]
    # NUL bytes are stored as U+FFFD; Python logging in the task and in a thread it started are kept
    assert "nul \ufffd byte where=here\ufffd" in texts
    assert texts[-2:] == ["from std logging ok", "from a thread"]
    # a CPU-bound processor's ctx.log and logging records come over from its child process
    rows = await lines_of(pg, cpu["id"])
    assert [(r["level"], r["text"]) for r in rows] == [
        ("info", "cpu line 0"),
        ("info", "cpu line 1"),
        ("info", "cpu line 2"),
        ("warning", "cpu std \ufffd warning"),
    ]


async def test_the_log_is_bounded_with_a_marker_and_pruned_with_its_job(
    engine: Any, settings: Settings, pg: asyncpg.Connection
) -> None:
    from app.jobs.queue import sweep

    user = await make_user(pg)
    many = await make_job(engine, settings, user, "test.logs", {"lines": 2500})
    wide = await make_job(engine, settings, user, "test.logs", {"lines": 300, "size": 2000})
    small = await make_job(engine, settings, user, "test.logs", {"lines": 2})
    async with running_worker(settings):
        for j in (many, wide, small):
            await wait_status(pg, j["id"], {"completed"})
    rows = await lines_of(pg, many["id"])
    kept = [r for r in rows if r["level"] != "cut"]
    markers = [r for r in rows if r["level"] == "cut"]
    assert len(kept) == joblog.MAX_LINES
    assert kept[-1]["text"] == "from a thread"
    # 2,502 lines logged, the newest 1,000 kept; the rest counted by one marker before them
    assert sum(m["cut"] for m in markers) == 1502
    assert markers[0]["seq"] < kept[0]["seq"] and markers[0]["text"] == "… 1502 earlier lines cut"
    wide_rows = await lines_of(pg, wide["id"])
    size = sum(len(r["text"].encode()) for r in wide_rows if r["level"] != "cut")
    assert size <= joblog.MAX_BYTES and len(wide_rows) < 200
    assert wide_rows[0]["level"] == "cut" and wide_rows[-1]["text"] == "from a thread"

    # deleting the job deletes its log, and so does retention
    await pg.execute("DELETE FROM jobs WHERE id = $1", many["id"])
    assert await pg.fetchval("SELECT count(*) FROM job_logs WHERE job_id = $1", many["id"]) == 0
    assert await pg.fetchval("SELECT count(*) FROM job_logs WHERE job_id = $1", small["id"]) == 4
    await pg.execute("UPDATE jobs SET completed_at = now() - interval '40 days' WHERE id = $1", small["id"])
    async with engine.begin() as conn:
        await sweep.prune(conn, 30)
    assert await pg.fetchval("SELECT count(*) FROM job_logs WHERE job_id = $1", small["id"]) == 0
