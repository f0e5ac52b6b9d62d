"""Enqueue-to-start latency on an idle worker.

    python bench/latency.py [--jobs 200] [--poll-jobs 30] [--runs 3]

One standalone worker (``python worker.py``, defaults, ``LOG_LEVEL=INFO`` into a file) waits with nothing
to do. Jobs are enqueued one at a time through ``queue.enqueue`` (own transaction each), each after the
previous one has finished. Latency = the worker's wall clock when the processor starts (job type
``bench.stamp`` returns ``time.time()``) minus the bench's wall clock when the enqueue's transaction has
committed (the job exists) — the same machine's clock, so this is commit → NOTIFY → wake → claim →
processor start. The table also gives p50 from just before the enqueue call (adds the enqueue itself,
measured on its own by ``bench/enqueue.py``).

* **notify** — the normal path: the worker's LISTEN connection hears the enqueue's NOTIFY.
* **poll** — the listener cut (``DATABASE_LISTEN_URL`` points at a closed port), so only the poll every
  ``JOB_PROCESSOR_POLL_INTERVAL`` (1 s by default) finds the job; jobs are enqueued at random moments of
  the poll cycle, so expect about half the interval on average.
* **baseline** — in the same run, the bench's own asyncpg LISTEN connection: enqueue call → its
  notification arriving. No NOTIFY-driven worker can start a job sooner after the call than this.

Figures are medians over ``--runs`` rounds (default 3) of each round's percentiles. Last line:
``p50_ms=… p95_ms=… p99_ms=…`` (notify path) then the poll and baseline figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path

import _common as c
import asyncpg
import bench_processors  # noqa: F401 - registers bench.stamp for enqueue's validation

from app.db import create_engine
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import load_settings

WARMUP = 5


async def one_round(url: str, user_id: int, n: int, *, poll: bool, work: Path) -> dict[str, list[float]]:
    """``n`` jobs through one fresh worker; latencies (ms) of the worker and of the raw listener."""
    settings = load_settings(database_url=url)
    engine = create_engine(url, pool_size=1)
    conn = await asyncpg.connect(c.dsn(url))
    listener = await asyncpg.connect(c.dsn(url))
    heard: list[float] = []
    await listener.add_listener(queue.JOBS_CHANNEL, lambda *_: heard.append(time.time()))
    extra = {"DATABASE_LISTEN_URL": "postgresql://127.0.0.1:1/unreachable"} if poll else {}
    log_path = work / f"latency-{'poll' if poll else 'notify'}-{time.time_ns()}.log"
    procs = [c.start_worker(url, log_path, 10, work / "data", **extra)]
    worker_ms: list[float] = []
    call_ms: list[float] = []
    raw_ms: list[float] = []
    offsets = [(k + 0.5) / (n + WARMUP) for k in range(n + WARMUP)]  # evenly over the poll cycle
    random.Random(7).shuffle(offsets)
    try:
        await conn.execute("TRUNCATE jobs, job_events, workers CASCADE")
        await c.wait_ready(conn, procs, listeners=not poll)
        await asyncio.sleep(1.0)
        for i in range(n + WARMUP):
            if poll:  # a random moment of the worker's poll cycle
                await asyncio.sleep(offsets[i])
            heard.clear()
            t0 = time.time()
            async with engine.begin() as db:
                job = (
                    await queue.enqueue(
                        db, NewJob(type="bench.stamp", input_data={}, user_id=user_id), settings
                    )
                ).job
            committed = time.time()
            deadline = time.monotonic() + 10
            while True:
                await asyncio.sleep(0.02 if not poll else 0.05)
                row = await conn.fetchrow("SELECT status, result_data FROM jobs WHERE id = $1", job["id"])
                if row["status"] == "completed":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"job {job['id']} did not complete: {row['status']}; see {log_path}")
            if i < WARMUP:
                continue
            started = json.loads(row["result_data"])["started"]
            worker_ms.append((started - committed) * 1000)
            call_ms.append((started - t0) * 1000)
            if heard:
                raw_ms.append((heard[0] - t0) * 1000)
            await asyncio.sleep(0.01 if not poll else 0.0)
        return {"worker": worker_ms, "call": call_ms, "raw": raw_ms}
    finally:
        c.stop(procs)
        await listener.close()
        await conn.close()
        await engine.dispose()


def pcts(values: list[float], call: list[float] | None = None) -> tuple[float, ...]:
    """p50, p95, p99 of ``values``, and p50 of ``call`` (NaN without it)."""
    return (
        c.percentile(values, 50),
        c.percentile(values, 95),
        c.percentile(values, 99),
        c.percentile(call, 50) if call else float("nan"),
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs per round through NOTIFY (default 200)")
    parser.add_argument(
        "--poll-jobs", type=int, default=30, help="jobs per round on the poll path (default 30)"
    )
    parser.add_argument("--runs", type=int, default=3, help="rounds; figures are medians (default 3)")
    args = parser.parse_args()
    print(f"machine: {c.machine()}")
    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-"))
    results: dict[str, list[tuple[float, ...]]] = {"notify": [], "poll": [], "baseline": []}
    async with c.scratch_database(c.scratch_name("latency")) as url:
        print(f"database: {await c.server_version(url)}")
        conn = await asyncpg.connect(c.dsn(url))
        try:
            (user_id,) = await c.make_users(conn, 1)
        finally:
            await conn.close()
        for i in range(args.runs):
            notify = await one_round(url, user_id, args.jobs, poll=False, work=work)
            results["notify"].append(pcts(notify["worker"], notify["call"]))
            results["baseline"].append(pcts([], notify["raw"]))
            if args.poll_jobs:
                polled = await one_round(url, user_id, args.poll_jobs, poll=True, work=work)
                results["poll"].append(pcts(polled["worker"], polled["call"]))
            print(
                f"  round {i + 1}: notify p50/p95/p99 = {'/'.join(f'{v:.2f}' for v in results['notify'][-1][:3])} ms",
                flush=True,
            )

    rows = []
    med: dict[str, tuple[float, ...]] = {}
    for name, label in (
        ("notify", "worker, NOTIFY"),
        ("poll", "worker, listener cut (poll)"),
        ("baseline", "raw LISTEN (baseline)"),
    ):
        if not results[name]:
            continue
        for i, figures in enumerate(results[name]):
            rows.append([f"{label} #{i + 1}", *figures])
        med[name] = tuple(c.median(r[k] for r in results[name]) for k in range(4))
        rows.append([f"{label} median", *med[name]])
    c.print_table(
        f"enqueue → processor start on an idle worker (ms); {args.jobs} jobs per NOTIFY round, "
        f"{args.poll_jobs} per poll round",
        ["path", "p50", "p95", "p99", "p50 from the call"],
        rows,
    )
    pairs = dict(zip(("p50_ms", "p95_ms", "p99_ms"), (round(v, 2) for v in med["notify"][:3]), strict=True))
    pairs["call_p50_ms"] = round(med["notify"][3], 2)
    if "poll" in med:
        pairs.update(
            zip(
                ("poll_p50_ms", "poll_p95_ms", "poll_p99_ms"),
                (round(v, 1) for v in med["poll"][:3]),
                strict=True,
            )
        )
    pairs["baseline_call_p50_ms"] = round(med["baseline"][3], 2)
    print(c.kv_line(**pairs))


if __name__ == "__main__":
    c.run(main)
