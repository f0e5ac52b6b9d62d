"""Where a worker's memory goes over a long drain: one :class:`~app.worker.runner.Worker` run in this
process, with ``tracemalloc`` snapshots and counts of live objects at every ``--every`` completions.

    python bench/worker_memory.py [--jobs 200000] [--every 20000] [--concurrency 10] [--frames 8]
                                  [--no-trace] [--log-level INFO]

Seeds ``--jobs`` ``noop`` jobs in a scratch database with every type paused, starts the worker in this
process (the command's start-up: imports frozen out of the collector, logging configured; the worker's
log lines go to a file, this script's report to standard error), lifts the pause and, at each mark:

* RSS, the traced Python heap (``tracemalloc``, ``--frames`` frames per allocation) and the objects the
  collector tracks, by type, against the first mark (the warm-up is behind it by then);
* the sizes of the worker's own collections (running, held, leases, buffer, lingering, pending log
  buffers), its tasks, and the metric children;
* at the end, the allocations that grew most between the first and the last mark, by traceback.

A leak is a line that keeps growing from mark to mark; a warm-up is growth that stops after the first
marks. ``--no-trace`` leaves ``tracemalloc`` off (it slows the worker down three- to fourfold), for the
RSS alone. Last line: ``rss_start_mb=… rss_growth_mb=… traced_growth_mb=… objects_growth=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import _common as c
import asyncpg
from throughput import seed_noops

from app.logs import configure_logging
from app.settings import load_settings


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def object_counts() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def metric_children() -> int:
    """Label children across every metric in the default registry."""
    from prometheus_client import REGISTRY

    n = 0
    for collector in list(REGISTRY._collector_to_names):
        metrics = getattr(collector, "_metrics", None)
        if isinstance(metrics, dict):
            n += len(metrics)
    return n


def sizes(worker: Any) -> dict[str, int]:
    joblog = worker.executor.joblog
    return {
        "running": len(worker.running),
        "held": len(worker.held),
        "leases": len(worker.held._leases),
        "buffer": len(worker.buffer),
        "lingering": len(worker.executor.lingering),
        "joblog_pending": len(joblog._pending) if joblog is not None else 0,
        "tasks": len(asyncio.all_tasks()),
        "metric_children": metric_children(),
        "gc_tracked": len(gc.get_objects()),
        "gc_frozen": gc.get_freeze_count(),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--every", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--no-trace", action="store_true")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-memory-"))
    log_path = work / "worker.log"
    say(f"machine: {c.machine()}; worker log: {log_path}")
    async with c.scratch_database(c.scratch_name("memory")) as url:
        conn = await asyncpg.connect(c.dsn(url))
        try:
            (user_id,) = await c.make_users(conn, 1)
            await conn.execute(
                "INSERT INTO job_type_controls (type, paused, paused_by) VALUES ('*', true, 'bench')"
            )
            await seed_noops(url, user_id, args.jobs)
            await conn.execute("VACUUM ANALYZE jobs")
            say(f"seeded {args.jobs:,} noop jobs")

            os.environ["JOBDESK_PROCESSOR_MODULES"] = "bench_processors"
            settings = load_settings(
                database_url=url,
                max_concurrent_jobs=args.concurrency,
                log_level=args.log_level,
                jobdesk_data_dir=work / "data",
            )
            sys.stdout = open(log_path, "w")  # the worker's log lines, until the end
            configure_logging(settings)
            from app.worker.runner import Worker

            gc.collect()
            gc.freeze()  # as the command leaves its start-up heap
            worker = Worker(settings, url)
            task = asyncio.create_task(worker.run())
            await worker.wait_started()
            await asyncio.sleep(1.0)
            if not args.no_trace:
                tracemalloc.start(args.frames)
            rss0 = c.rss_mb(os.getpid())
            say(f"worker started; RSS {rss0:.1f} MB; concurrency {args.concurrency}")
            await conn.execute(
                "WITH d AS (DELETE FROM job_type_controls WHERE type = '*') SELECT pg_notify('jobdesk_jobs', '')"
            )
            t0 = time.monotonic()
            marks: list[dict[str, Any]] = []
            snaps: list[tracemalloc.Snapshot] = []
            counts: list[collections.Counter[str]] = []
            next_mark = args.every
            while True:
                done = worker.tally.completed
                if done >= next_mark or done >= args.jobs:
                    gc.collect()
                    mark = {"done": done, "secs": time.monotonic() - t0, "rss": c.rss_mb(os.getpid())}
                    if tracemalloc.is_tracing():
                        mark["traced"] = tracemalloc.get_traced_memory()[0] / 2**20
                        snaps.append(tracemalloc.take_snapshot())
                    counts.append(object_counts())
                    mark.update(sizes(worker))
                    marks.append(mark)
                    say(
                        "  "
                        + ", ".join(
                            f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v:,}" for k, v in mark.items()
                        )
                    )
                    next_mark += args.every
                    if done >= args.jobs:
                        break
                await asyncio.sleep(0.2)
            worker.stop()
            await task
        finally:
            await conn.close()
    sys.stdout.close()
    sys.stdout = sys.__stdout__

    first, last = marks[0], marks[-1]
    say(f"\nfrom {first['done']:,} to {last['done']:,} completions:")
    grown = (counts[-1] - counts[0]).most_common(args.top)
    say("objects tracked by the collector, grown most: " + ", ".join(f"{k} +{v:,}" for k, v in grown))
    if len(snaps) >= 2:
        say("\nallocations grown most (by traceback):")
        for stat in snaps[-1].compare_to(snaps[0], "traceback")[: args.top]:
            if stat.size_diff <= 0:
                continue
            say(f"  {stat.size_diff / 1024:+,.1f} KiB, {stat.count_diff:+,} blocks")
            for line in stat.traceback.format(limit=args.frames)[-2 * args.frames :]:
                say(f"      {line}")
    print(
        c.kv_line(
            rss_start_mb=round(rss0, 1),
            rss_first_mark_mb=round(first["rss"], 1),
            rss_growth_mb=round(last["rss"] - rss0, 1),
            rss_growth_after_first_mark_mb=round(last["rss"] - first["rss"], 1),
            traced_growth_mb=round(last.get("traced", float("nan")) - first.get("traced", float("nan")), 2),
            objects_growth=last["gc_tracked"] - first["gc_tracked"],
        )
    )


if __name__ == "__main__":
    c.run(main)
