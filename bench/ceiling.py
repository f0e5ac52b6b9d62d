"""The worker's own statements without the worker: how fast the database alone lets a worker drain.

    python bench/ceiling.py [--jobs N] [--runs R] [--concurrency C] [--window W]

Each round, on a fresh ``jobs`` table of N ``noop`` jobs:

1. **statements** — no worker process and no processor: the claim a worker sends (``queue.claim`` on an
   autocommit connection, up to :data:`app.worker.claim_loop.CLAIMS_IN_FLIGHT` on their way at once) and
   the completions it writes (``queue.complete_standalone``, one writer, each batch what has arrived),
   as if every job finished the moment its claim's answer came. The claims keep at most W jobs asked
   for and not yet answered: by default the worker's window, its slots plus its buffer (one per slot),
   ``2 × MAX_CONCURRENT_JOBS``. A claim asks for at most ``W / CLAIMS_IN_FLIGHT`` jobs;
2. **worker** — the same N jobs drained by one ``python worker.py`` at ``MAX_CONCURRENT_JOBS=C``, as in
   ``bench/throughput.py``.

``worker / statements`` is how much of what the database allows the worker gets; the rest is the
worker's own time (tasks, logs, metrics, the event loop's turns between a claim's answer and the next
claim). ``--window`` larger than the default shows what a bigger window would allow.

Last line: ``statements_per_s=… worker_per_s=… ratio=… claim_p50_ms=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

import _common as c
import asyncpg
from throughput import burn, reset, seed_noops

from app.db import create_engine
from app.jobs import queue
from app.jobs.queue import Outcome
from app.worker.claim_loop import CLAIMS_IN_FLIGHT


async def statements(url: str, user_id: int, n: int, window: int) -> tuple[float, float]:
    """Drain ``n`` fresh noop jobs with the worker's statements alone; ``(jobs/s, claim p50 in ms)``."""
    conn = await asyncpg.connect(c.dsn(url))
    try:
        await reset(conn)
        await seed_noops(url, user_id, n)
        await conn.execute("VACUUM ANALYZE jobs")
        await conn.execute("VACUUM ANALYZE job_events")
    finally:
        await conn.close()
    engine = create_engine(url, pool_size=CLAIMS_IN_FLIGHT + 1).execution_options(
        isolation_level="AUTOCOMMIT"
    )
    worker_id = f"ceiling-{uuid.uuid4().hex[:8]}"
    per_claim = max(1, window // CLAIMS_IN_FLIGHT)
    finished: asyncio.Queue[Outcome] = asyncio.Queue()
    state = {"asked": 0, "empty": False}  # jobs asked for and not answered; whether a claim came back empty
    recorded = 0
    room = asyncio.Condition()

    def may_ask() -> bool:
        return state["asked"] < window or bool(state["empty"])

    latencies: list[float] = []

    async def claimer() -> None:
        async with engine.connect() as cn:
            while not state["empty"]:
                async with room:
                    await room.wait_for(may_ask)
                    want = min(per_claim, window - state["asked"])
                    state["asked"] += want
                sent = time.perf_counter()
                rows = await queue.claim(cn, worker_id, want, 60.0, types=["noop"])
                latencies.append(time.perf_counter() - sent)
                for row in rows:  # finished the moment it arrived
                    finished.put_nowait(Outcome(row["id"], "completed", result="null", claim=row["claims"]))
                async with room:
                    state["asked"] -= want
                    state["empty"] = state["empty"] or not rows
                    room.notify_all()

    async def completer() -> None:
        nonlocal recorded
        async with engine.connect() as cn:
            while recorded < n:
                batch = [await finished.get()]
                while not finished.empty():
                    batch.append(finished.get_nowait())
                report = await queue.complete_standalone(cn, worker_id, batch)
                assert len(report.status) == len(batch), "a completion was not applied"
                recorded += len(batch)

    started = time.perf_counter()
    tasks = [asyncio.create_task(claimer()) for _ in range(CLAIMS_IN_FLIGHT)]
    try:
        await asyncio.wait_for(completer(), timeout=max(120.0, n / 200))
        secs = time.perf_counter() - started
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await engine.dispose()
    return n / secs, c.median(latencies) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30_000, help="jobs per drain (default 30,000)")
    parser.add_argument("--runs", type=int, default=3, help="rounds; figures are medians (default 3)")
    parser.add_argument("--concurrency", type=int, default=10, help="MAX_CONCURRENT_JOBS (default 10)")
    parser.add_argument("--window", type=int, default=None, help="jobs asked for at once (default 2 × C)")
    args = parser.parse_args()
    window = args.window or 2 * args.concurrency

    print(f"machine: {c.machine()}")
    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-"))
    rows = []
    async with c.scratch_database(c.scratch_name("ceiling")) as url:
        print(f"database: {await c.server_version(url)}")
        print(f"jobs per drain: {args.jobs:,}; MAX_CONCURRENT_JOBS={args.concurrency}; window {window}")
        conn = await asyncpg.connect(c.dsn(url))
        try:
            (user_id,) = await c.make_users(conn, 1)
        finally:
            await conn.close()
        for i in range(args.runs):
            alone, claim_ms = await statements(url, user_id, args.jobs, window)
            drained = await burn(url, user_id, args.jobs, 1, args.concurrency, work)
            worker = drained["per_s"]
            cpu_us = drained["cpu_pct"] / 100 / worker * 1e6  # the worker's CPU per job drained
            rows.append([i + 1, alone, claim_ms, worker, worker / alone, cpu_us])
            print(
                f"  round {i + 1}: statements={alone:,.0f} claim_p50_ms={claim_ms:.2f} worker={worker:,.0f}"
                f" worker_cpu_us={cpu_us:.0f}"
            )
    med = [c.median(r[k] for r in rows) for k in range(1, 6)]
    c.print_table(
        f"drain of {args.jobs:,} noop jobs (jobs/s): the worker's statements alone, and the worker",
        ["run", "statements", "claim p50 ms", "worker", "worker / statements", "worker CPU µs/job"],
        [*rows, ["median", *med]],
    )
    print(
        c.kv_line(
            statements_per_s=round(med[0]),
            worker_per_s=round(med[2]),
            ratio=round(med[3], 3),
            claim_p50_ms=round(med[1], 2),
            worker_cpu_us=round(med[4]),
        )
    )


if __name__ == "__main__":
    c.run(main)
