"""Burn-down throughput of ``noop`` jobs, against the raw-SQL baseline, plus worker memory.

    python bench/throughput.py [--jobs N] [--workers K] [--runs R] [--quick] [--concurrency C]

Each round, on a fresh ``jobs`` table:

1. **raw** — ``bench/raw_claim.py``: one asyncpg connection drains N rows of a minimal table, claiming
   with ``FOR UPDATE SKIP LOCKED`` in batches of 100;
2. **1 worker** — N ``noop`` jobs are enqueued (``queue.enqueue_many``) while every type is paused, one
   standalone worker (``python worker.py``) starts and registers, then the pause is lifted and the time
   until the last job is ``completed`` is measured (database clock: lift → latest ``completed_at``).
   The worker's RSS is read before the lift and after the burn-down;
3. **K workers** — the same with K standalone worker processes.

Workers run with their defaults except ``MAX_CONCURRENT_JOBS`` (``--concurrency``, default 200) and log
at ``LOG_LEVEL=INFO`` (two JSON lines per job) into a file, as in production. Figures are medians over
the rounds (``--runs``, default 3); ``ratio`` is the median of each round's ``1 worker / raw``.

Last line: ``jobs_per_s=… raw_per_s=… ratio=… workers_k_per_s=… rss_growth_mb=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
import asyncpg
import raw_claim
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import create_engine
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings, load_settings

SEED_CHUNK = 10_000


async def enqueue_in_chunks(
    engine: AsyncEngine, settings: Settings, user_id: int, n: int, job_type: str = "noop"
) -> None:
    """N valid jobs of ``job_type`` (input ``{"i": k}``) with their ``enqueued`` events, through
    ``queue.enqueue_many`` in chunks of 10,000, each chunk in its own transaction."""
    for start in range(0, n, SEED_CHUNK):
        jobs = [
            NewJob(type=job_type, input_data={"i": i}, user_id=user_id)
            for i in range(start, min(n, start + SEED_CHUNK))
        ]
        async with engine.begin() as conn:
            await queue.enqueue_many(conn, jobs, settings)


async def seed_noops(url: str, user_id: int, n: int) -> None:
    """N valid ``noop`` jobs with their ``enqueued`` events (see :func:`enqueue_in_chunks`)."""
    engine = create_engine(url, pool_size=1)
    try:
        await enqueue_in_chunks(engine, load_settings(database_url=url), user_id, n)
    finally:
        await engine.dispose()


async def reset(conn: asyncpg.Connection) -> None:
    await conn.execute("TRUNCATE jobs, job_events, job_dependencies, workers, throughput_samples CASCADE")
    await conn.execute("DELETE FROM job_type_controls")


async def burn(
    url: str, user_id: int, n: int, workers: int, concurrency: int, work: Path
) -> dict[str, float]:
    """One burn-down of ``n`` noop jobs with ``workers`` processes; jobs/s, RSS before/after (1st worker)."""
    conn = await asyncpg.connect(c.dsn(url))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        await reset(conn)
        await conn.execute(
            "INSERT INTO job_type_controls (type, paused, paused_by) VALUES ('*', true, 'bench')"
        )
        await seed_noops(url, user_id, n)
        await conn.execute("VACUUM ANALYZE jobs")
        await conn.execute("VACUUM ANALYZE job_events")
        log_path = work / f"worker-{workers}-{time.time_ns()}.log"
        procs = [c.start_worker(url, log_path, concurrency, work / "data") for _ in range(workers)]
        await c.wait_ready(conn, procs)
        await asyncio.sleep(0.5)
        rss_before = c.rss_mb(procs[0].pid)
        cpu_before = c.cpu_secs(procs[0].pid)
        backends = [
            r[0]
            for r in await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ]
        pg_before = sum(c.cpu_secs(b) for b in backends if Path(f"/proc/{b}").exists())
        profiler = None
        if os.environ.get("BENCH_PROFILE"):  # py-spy collapsed stacks of the first worker, for profiling
            profiler = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(procs[0].pid),
                    "-r",
                    "250",
                    "-f",
                    "raw",
                    "-o",
                    os.environ["BENCH_PROFILE"],
                    # e.g. "--gil --native" (native frames need a pausing profiler)
                    *os.environ.get("BENCH_PROFILE_FLAGS", "--nonblocking").split(),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        lifted = await conn.fetchval(
            "WITH d AS (DELETE FROM job_type_controls WHERE type = '*') "
            "SELECT clock_timestamp() FROM pg_notify('jobdesk_jobs', '')"
        )
        deadline = time.monotonic() + max(120.0, n / 200)
        while True:
            left = await conn.fetchval(
                "SELECT count(*) FROM jobs WHERE status IN ('queued', 'in_progress', 'waiting_approval')"
            )
            if left == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{left} jobs left after the deadline; see {log_path}")
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a worker died (exit {p.returncode}); see {log_path}")
            await asyncio.sleep(0.1)
        if profiler is not None:
            profiler.send_signal(2)
            profiler.wait(30)
        cpu_used = c.cpu_secs(procs[0].pid) - cpu_before
        pg_used = sum(c.cpu_secs(b) for b in backends if Path(f"/proc/{b}").exists()) - pg_before
        last = await conn.fetchval("SELECT max(completed_at) FROM jobs")
        completed = await conn.fetchval("SELECT count(*) FROM jobs WHERE status = 'completed'")
        assert completed == n, f"{completed} of {n} jobs completed"
        await asyncio.sleep(1.0)
        rss_after = c.rss_mb(procs[0].pid)
        secs = (last - lifted).total_seconds()
        lines = sum(1 for _ in open(log_path, "rb"))
        return {
            "per_s": n / secs,
            "secs": secs,
            "rss_before": rss_before,
            "rss_after": rss_after,
            "log_lines": lines,
            "cpu_pct": 100 * cpu_used / secs,
            "pg_cpu_pct": 100 * pg_used / secs,
        }
    finally:
        c.stop(procs)
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per burn-down (default 100,000)")
    parser.add_argument("--workers", type=int, default=2, help="K for the multi-process run (default 2)")
    parser.add_argument("--runs", type=int, default=3, help="rounds; figures are medians (default 3)")
    parser.add_argument("--quick", action="store_true", help="10,000 jobs per burn-down")
    parser.add_argument("--concurrency", type=int, default=200, help="MAX_CONCURRENT_JOBS (default 200)")
    parser.add_argument("--no-raw", action="store_true", help="skip the baseline (profiling runs)")
    parser.add_argument("--only-one", action="store_true", help="skip the K-worker runs")
    args = parser.parse_args()
    n = args.jobs or (10_000 if args.quick else 100_000)

    print(f"machine: {c.machine()}")
    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-"))
    rounds: list[dict[str, float]] = []
    async with c.scratch_database(c.scratch_name("throughput")) as url:
        print(f"database: {await c.server_version(url)}")
        print(
            f"jobs per burn-down: {n:,}; MAX_CONCURRENT_JOBS={args.concurrency}; worker logs at "
            f"{os.environ.get('BENCH_WORKER_LOG_LEVEL', 'INFO')} into {work}"
        )
        conn = await asyncpg.connect(c.dsn(url))
        try:
            (user_id,) = await c.make_users(conn, 1)
        finally:
            await conn.close()
        for i in range(args.runs):
            r: dict[str, float] = {}
            if not args.no_raw:
                r["raw"] = await raw_claim.measure(url, n)
            one = await burn(url, user_id, n, 1, args.concurrency, work)
            r.update(
                one=one["per_s"],
                rss_before=one["rss_before"],
                rss_after=one["rss_after"],
                log_lines=one["log_lines"],
                cpu_pct=one["cpu_pct"],
                pg_cpu_pct=one["pg_cpu_pct"],
            )
            if not args.only_one:
                r["many"] = (await burn(url, user_id, n, args.workers, args.concurrency, work))["per_s"]
            rounds.append(r)
            print(f"  round {i + 1}: " + ", ".join(f"{k}={v:,.1f}" for k, v in r.items()), flush=True)

    rows: list[list[Any]] = []
    for i, r in enumerate(rounds):
        ratio = r["one"] / r["raw"] if "raw" in r else float("nan")
        rows.append(
            [
                i + 1,
                r.get("raw", float("nan")),
                r["one"],
                ratio,
                r.get("many", float("nan")),
                r["rss_before"],
                r["rss_after"] - r["rss_before"],
            ]
        )
    med = {k: c.median(r.get(k, float("nan")) for r in rounds) for k in ("raw", "one", "many")}
    ratio = c.median(row[3] for row in rows)
    growth = c.median(r["rss_after"] - r["rss_before"] for r in rounds)
    rows.append(
        [
            "median",
            med["raw"],
            med["one"],
            ratio,
            med["many"],
            c.median(r["rss_before"] for r in rounds),
            growth,
        ]
    )
    c.print_table(
        f"noop burn-down of {n:,} jobs (jobs/s), baseline = raw batch-100 loop",
        ["run", "raw rows/s", "1 worker", "ratio", f"{args.workers} workers", "RSS MB", "RSS growth MB"],
        rows,
    )
    print(
        c.kv_line(
            jobs_per_s=round(med["one"]),
            raw_per_s=round(med["raw"]) if med["raw"] == med["raw"] else float("nan"),
            ratio=round(ratio, 3),
            workers_k_per_s=round(med["many"]) if med["many"] == med["many"] else float("nan"),
            rss_growth_mb=round(growth, 1),
        )
    )


if __name__ == "__main__":
    c.run(main)
