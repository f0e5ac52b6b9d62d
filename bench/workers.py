"""Throughput with several worker processes against one database, directly and through PgBouncer.

    python bench/workers.py [--jobs N] [--runs R] [--workers 1,2,4] [--high 200]

For each path (``direct``: ``DATABASE_POOLER=none`` on PostgreSQL; ``pgbouncer``: Debian's PgBouncer in
transaction mode with its stock settings, ``DATABASE_POOLER=transaction``, LISTEN directly), each
``MAX_CONCURRENT_JOBS`` (the default, 10, and ``--high``) and each number of worker processes: N ``noop``
jobs are enqueued while every type is paused, the workers start and register, the pause is lifted, and
the time until the last job is ``completed`` is measured (database clock: lift → latest
``completed_at``), as in ``bench/throughput.py``. Figures are medians over ``--runs`` rounds (default 3).

Last line: ``<path>_<concurrency>_<k>=jobs/s`` for every cell.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
import asyncpg
from sqlalchemy.engine import make_url
from throughput import reset, seed_noops

from tests.support.pgbouncer import PgBouncer, start_pgbouncer

DEFAULT_CONCURRENCY = 10


async def burn(
    url: str, worker_url: str, user_id: int, n: int, k: int, concurrency: int, work: Path, **extra: str
) -> float:
    """Jobs per second of ``k`` workers on ``worker_url`` draining ``n`` noop jobs."""
    conn = await asyncpg.connect(c.dsn(url))
    procs: list[Any] = []
    try:
        await reset(conn)
        await conn.execute(
            "INSERT INTO job_type_controls (type, paused, paused_by) VALUES ('*', true, 'bench')"
        )
        await seed_noops(url, user_id, n)
        await conn.execute("VACUUM ANALYZE jobs")
        log_path = work / f"workers-{k}-{concurrency}-{time.time_ns()}.log"
        procs = [c.start_worker(worker_url, log_path, concurrency, work / "data", **extra) for _ in range(k)]
        await c.wait_ready(conn, procs, timeout=300)  # a busy machine starts processes slowly
        await asyncio.sleep(0.5)
        lifted = await conn.fetchval(
            "WITH d AS (DELETE FROM job_type_controls WHERE type = '*') "
            "SELECT clock_timestamp() FROM pg_notify('jobdesk_jobs', '')"
        )
        deadline = time.monotonic() + max(180.0, n / 100)
        while await conn.fetchval("SELECT count(*) FROM jobs WHERE status IN ('queued', 'in_progress')"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"jobs left after the deadline; see {log_path}")
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a worker died (exit {p.returncode}); see {log_path}")
            await asyncio.sleep(0.1)
        last = await conn.fetchval("SELECT max(completed_at) FROM jobs")
        completed = await conn.fetchval("SELECT count(*) FROM jobs WHERE status = 'completed'")
        assert completed == n, f"{completed} of {n} jobs completed"
        return float(n / (last - lifted).total_seconds())
    finally:
        c.stop(procs)
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per burn-down (default 5,000)")
    parser.add_argument("--runs", type=int, default=3, help="rounds; figures are medians (default 3)")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts (default 1,2,4)")
    parser.add_argument("--high", type=int, default=200, help="the high MAX_CONCURRENT_JOBS (default 200)")
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    concurrencies = [DEFAULT_CONCURRENCY, args.high]

    print(f"machine: {c.machine()}")
    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-workers-"))
    results: dict[tuple[str, int, int], list[float]] = {}
    async with c.scratch_database(c.scratch_name("workers")) as url:
        print(
            f"database: {await c.server_version(url)}; jobs per burn-down: {args.jobs:,}; runs: {args.runs}"
        )
        conn = await asyncpg.connect(c.dsn(url))
        try:
            (user_id,) = await c.make_users(conn, 1)
        finally:
            await conn.close()
        bouncer: PgBouncer = start_pgbouncer(url, "transaction", Path(tempfile.mkdtemp(dir=work)))
        try:
            database = str(make_url(url).database)
            paths: dict[str, tuple[str, dict[str, str]]] = {
                "direct": (url, {}),
                "pgbouncer": (
                    bouncer.url(database),
                    {"DATABASE_POOLER": "transaction", "DATABASE_LISTEN_URL": url},
                ),
            }
            for _ in range(args.runs):
                for path, (worker_url, extra) in paths.items():
                    for concurrency in concurrencies:
                        for k in counts:
                            per_s = await burn(
                                url, worker_url, user_id, args.jobs, k, concurrency, work, **extra
                            )
                            results.setdefault((path, concurrency, k), []).append(per_s)
                            print(
                                f"  {path:9} MAX_CONCURRENT_JOBS={concurrency:<4} {k} workers: {per_s:8.0f} jobs/s"
                            )
        finally:
            bouncer.stop()
    rows = []
    for path in ("direct", "pgbouncer"):
        for concurrency in concurrencies:
            rows.append(
                [path, concurrency, *(c.fmt(c.median(results[(path, concurrency, k)]), 0) for k in counts)]
            )
    c.print_table(
        f"jobs/s, median of {args.runs}",
        ["path", "MAX_CONCURRENT_JOBS", *(f"{k} workers" for k in counts)],
        rows,
    )
    print(c.kv_line(**{f"{p}_{cc}_{k}": round(c.median(v)) for (p, cc, k), v in sorted(results.items())}))


if __name__ == "__main__":
    c.run(main)
