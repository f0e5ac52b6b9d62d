"""Drain rate as the table grows, and the worker's memory over a long drain.

    python bench/scale.py [--sizes 10000,100000,1000000] [--finished 100000] [--runs R] [--big-runs 1]
                          [--first 10000] [--concurrency 10] [--log-level INFO] [--quick] [--keep]
                          [--no-vacuum]

A queue that claims in index order should drain a backlog of a million jobs as fast as one of ten
thousand, and a table full of finished jobs should cost a claim nothing. Each drain, on an emptied
table:

1. every type is paused (``job_type_controls`` row ``'*'``);
2. with ``--finished F`` (the "finished" drain only): F ``noop`` jobs go through ``queue.enqueue_many``
   and are then marked completed by one ``UPDATE`` (finished within the last day, inside the 30-day
   retention), with the ``claimed`` and ``completed`` events a worker would have written;
3. N ``noop`` jobs are enqueued through ``queue.enqueue_many`` in chunks of 10,000, then ``VACUUM
   ANALYZE`` (as autovacuum would eventually leave the table);
4. one ``python worker.py`` starts with the defaults a user gets (``MAX_CONCURRENT_JOBS=10`` unless
   ``--concurrency``; ``LOG_LEVEL=INFO``, two JSON lines per job, into a file), registers and listens;
5. the pause is lifted and the drain runs to the last completion.

Each claim and each completion leaves a dead entry at the front of the claim index (``ix_jobs_claim``),
which every later claim walks past until a ``VACUUM`` removes it, so a drain's rate depends on
autovacuum keeping up. On a server with ``autovacuum = off`` (shared test servers often run so) the
benchmark stands in for it during the drains (:class:`Autovacuum`: autovacuum's thresholds, naptime and
cost throttling, carried out from here) unless ``--no-vacuum`` asks for a table that is never vacuumed.

Rates come from the database afterwards (``completed_at`` of the k-th completion, on the database clock
from the lift): **first** = the first ``--first`` completions (10,000; a steady-state rate that every
size shares), **whole** = the whole drain (a claim that slows as the backlog shrinks or the table of
finished rows grows shows up here). The largest size is also cut into ten segments (100,000 jobs each at
1,000,000): the rate within each, and the worker's RSS at its end. RSS is sampled from ``/proc`` every
0.5 s without touching the database and matched to the completion times afterwards; the start is read
once the worker is ready, before the lift.

Sizes of 500,000 and more run in the first ``--big-runs`` rounds only (default 1): their drain is a long
steady state already. Figures are medians over the rounds; ratios are each drain's rate over the
smallest size's rate in the same round (then the median).

Last line: ``first_<size>_per_s=… whole_<size>_per_s=… first_ratio_<size>=… whole_ratio_<size>=…``
(the same for ``finished``), ``rss_start_mb``, ``rss_growth_mb`` (over the largest drain) and
``rss_growth_first_segment_mb``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c
import asyncpg
from throughput import seed_noops

BIG = 500_000
"""Sizes from here on run in the first ``--big-runs`` rounds only."""

RSS_EVERY = 0.5
"""Seconds between RSS samples of the worker."""


@dataclass
class Drain:
    """One drain: what was asked, the rates, and the worker's memory."""

    name: str
    queued: int
    finished: int
    first_n: int
    first_per_s: float = float("nan")
    whole_per_s: float = float("nan")
    secs: float = float("nan")
    rss_start: float = float("nan")
    rss_end: float = float("nan")
    cpu_us_per_job: float = float("nan")
    autovacuums: int = 0
    vacuum_secs: float = 0.0
    dead_rows_end: int = 0
    segments: list[tuple[int, float, float, float]] = field(default_factory=list)
    """Per segment: completions at its end, seconds since the lift, jobs/s within it, worker RSS MB."""


async def reset(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "TRUNCATE jobs, job_events, job_dependencies, workers, throughput_samples, notifications, "
        "job_type_starts CASCADE"
    )
    await conn.execute("DELETE FROM job_type_controls")


# Marks the jobs queued so far (the seeded ones) as completed by a worker within the last day, with the
# events that worker would have written. Every row keeps to the table's CHECK constraints.
FINISH_SEEDED = """
WITH t AS (
    SELECT id, now() - make_interval(secs => 86400 * random()) - interval '1 minute' AS at FROM jobs
    WHERE status = 'queued'
), upd AS (
    UPDATE jobs j
    SET status = 'completed', attempts = 1, created_at = t.at - interval '2 seconds',
        run_at = t.at - interval '2 seconds', started_at = t.at - interval '1 second', completed_at = t.at,
        updated_at = t.at, progress = 1, result_data = 'null'::jsonb
    FROM t WHERE j.id = t.id
    RETURNING j.id, j.completed_at
), ev AS (
    INSERT INTO job_events (job_id, kind, from_status, to_status, actor, data, at)
    SELECT id, 'claimed', 'queued', 'in_progress', 'worker:seed', '{"attempt": 1}'::jsonb,
           completed_at - interval '1 second'
    FROM upd
)
INSERT INTO job_events (job_id, kind, from_status, to_status, actor, at)
SELECT id, 'completed', 'in_progress', 'completed', 'worker:seed', completed_at FROM upd
"""

# The completion times at the given ranks (1-based) among the jobs completed since the lift.
AT_RANKS = """
SELECT rn, completed_at FROM (
    SELECT completed_at, row_number() OVER (ORDER BY completed_at) AS rn
    FROM jobs WHERE status = 'completed' AND completed_at >= $1
) s WHERE rn = ANY($2::bigint[])
"""

VACUUM_STATS = "SELECT autovacuum_count, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'"

# What autovacuum reads to decide (``relation_needs_vacanalyze`` in PostgreSQL's autovacuum.c): the
# table's own storage parameters, else the server's settings.
TABLE_STATE = """
SELECT c.reltuples, s.n_dead_tup, s.n_ins_since_vacuum, s.n_mod_since_analyze,
       COALESCE(c.reloptions, '{}') AS options
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = $1
"""


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class Autovacuum:
    """Autovacuum's decisions for ``jobs`` and ``job_events``, carried out from the benchmark: for servers
    that run with ``autovacuum = off`` (shared test servers often do), where a drain would otherwise
    measure a table that is never vacuumed, which no production server runs. Every
    ``autovacuum_naptime`` it applies autovacuum's thresholds (the tables' storage parameters, else the
    server's settings) and runs ``VACUUM`` / ``ANALYZE`` throttled by the same cost delay and limit."""

    TABLES = ("jobs", "job_events")

    def __init__(self, url: str) -> None:
        self.url = url
        self.vacuums = 0
        self.analyzes = 0
        self.busy_secs = 0.0

    async def run(self) -> None:
        conn = await asyncpg.connect(c.dsn(self.url))
        try:
            server = {
                r["name"]: float(r["setting"])
                for r in await conn.fetch(
                    "SELECT name, setting FROM pg_settings WHERE name LIKE 'autovacuum_%'"
                )
                if _number(r["setting"])
            }
            limit = await conn.fetchval("SHOW vacuum_cost_limit")
            cost_limit = server["autovacuum_vacuum_cost_limit"]
            await conn.execute(f"SET vacuum_cost_limit = {int(cost_limit) if cost_limit > 0 else limit}")
            while True:
                await asyncio.sleep(server["autovacuum_naptime"])
                for table in self.TABLES:
                    await self._maybe(conn, table, server)
        finally:
            await conn.close()

    async def _maybe(self, conn: asyncpg.Connection, table: str, server: dict[str, float]) -> None:
        row = await conn.fetchrow(TABLE_STATE, table)
        opts = {k: float(v) for k, v in (o.split("=", 1) for o in row["options"]) if _number(v)}

        def setting(name: str) -> float:
            return opts.get(name, server[name])

        tuples = max(0.0, row["reltuples"])
        vacuum = row["n_dead_tup"] > (
            setting("autovacuum_vacuum_threshold") + setting("autovacuum_vacuum_scale_factor") * tuples
        ) or row["n_ins_since_vacuum"] > (
            setting("autovacuum_vacuum_insert_threshold")
            + setting("autovacuum_vacuum_insert_scale_factor") * tuples
        )
        analyze = row["n_mod_since_analyze"] > (
            setting("autovacuum_analyze_threshold") + setting("autovacuum_analyze_scale_factor") * tuples
        )
        if not (vacuum or analyze):
            return
        await conn.execute(f"SET vacuum_cost_delay = {setting('autovacuum_vacuum_cost_delay')}")
        started = time.perf_counter()
        if vacuum:
            await conn.execute(f"VACUUM {'(ANALYZE) ' if analyze else ''}{table}")
            self.vacuums += table == "jobs"
        else:
            await conn.execute(f"ANALYZE {table}")
        self.analyzes += analyze and table == "jobs"
        self.busy_secs += time.perf_counter() - started


async def rss_sampler(pid: int, samples: list[tuple[float, float]]) -> None:
    """Append ``(wall clock, RSS MB)`` of process ``pid`` every :data:`RSS_EVERY` seconds."""
    with contextlib.suppress(OSError, RuntimeError):
        while True:
            samples.append((time.time(), c.rss_mb(pid)))
            await asyncio.sleep(RSS_EVERY)


def rss_at(samples: list[tuple[float, float]], when: float) -> float:
    """The first RSS sample taken at or after ``when`` (the last one if none is)."""
    for t, rss in samples:
        if t >= when:
            return rss
    return samples[-1][1] if samples else float("nan")


async def drain(
    url: str,
    user_id: int,
    d: Drain,
    concurrency: int,
    work: Path,
    segment: int | None,
    keep_logs: bool,
    stand_in: bool,
) -> Drain:
    """Seed and run drain ``d`` (see the module's docstring); fills in its figures. ``stand_in``: run
    :class:`Autovacuum` during the drain (the server's own is off)."""
    conn = await asyncpg.connect(c.dsn(url))
    proc: subprocess.Popen[bytes] | None = None
    sampler: asyncio.Task[None] | None = None
    vacuuming: asyncio.Task[None] | None = None
    autovacuum = Autovacuum(url)
    log_path = work / f"worker-{d.name}-{time.time_ns()}.log"
    try:
        await reset(conn)
        await conn.execute(
            "INSERT INTO job_type_controls (type, paused, paused_by) VALUES ('*', true, 'bench')"
        )
        t0 = time.perf_counter()
        if d.finished:
            await seed_noops(url, user_id, d.finished)
            await conn.execute(FINISH_SEEDED)
        await seed_noops(url, user_id, d.queued)
        await conn.execute("VACUUM ANALYZE jobs")
        await conn.execute("VACUUM ANALYZE job_events")
        print(f"    seeded in {time.perf_counter() - t0:,.1f} s", flush=True)
        proc = c.start_worker(url, log_path, concurrency, work / "data")
        await c.wait_ready(conn, [proc])
        await asyncio.sleep(0.5)
        d.rss_start = c.rss_mb(proc.pid)
        cpu_before = c.cpu_secs(proc.pid)
        autovacuums_before = (await conn.fetchrow(VACUUM_STATS))["autovacuum_count"]
        samples: list[tuple[float, float]] = [(time.time(), d.rss_start)]
        sampler = asyncio.create_task(rss_sampler(proc.pid, samples))
        if stand_in:
            vacuuming = asyncio.create_task(autovacuum.run())
        lifted = await conn.fetchval(
            "WITH d AS (DELETE FROM job_type_controls WHERE type = '*') "
            "SELECT clock_timestamp() FROM pg_notify('jobdesk_jobs', '')"
        )
        started = time.monotonic()
        deadline = started + max(300.0, d.queued / 100)
        next_report = started + 30
        while True:
            busy = await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE status IN ('queued', 'in_progress', 'waiting_approval'))"
            )
            if not busy:
                break
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"jobs left after the deadline; see {log_path}")
            if proc.poll() is not None:
                raise RuntimeError(f"the worker died (exit {proc.returncode}); see {log_path}")
            if now >= next_report:  # progress of a long drain, twice a minute (an index-only count)
                done = await conn.fetchval(
                    "SELECT count(*) FROM jobs WHERE status = 'completed' AND completed_at >= $1", lifted
                )
                print(
                    f"    {now - started:,.0f} s: {done:,} of {d.queued:,} done, RSS {samples[-1][1]:.1f} MB",
                    flush=True,
                )
                next_report = now + 30
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)
        d.rss_end = c.rss_mb(proc.pid)
        cpu_used = c.cpu_secs(proc.pid) - cpu_before
        sampler.cancel()
        if vacuuming is not None:
            vacuuming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await vacuuming
        stats = await conn.fetchrow(VACUUM_STATS)
        d.autovacuums = stats["autovacuum_count"] - autovacuums_before + autovacuum.vacuums
        d.vacuum_secs = autovacuum.busy_secs
        d.dead_rows_end = stats["n_dead_tup"]

        completed = await conn.fetchval(
            "SELECT count(*) FROM jobs WHERE status = 'completed' AND completed_at >= $1", lifted
        )
        assert completed == d.queued, f"{completed} of {d.queued} jobs completed"
        marks = {d.first_n, d.queued}
        if segment:
            marks.update(range(segment, d.queued + 1, segment))
        at = {r["rn"]: r["completed_at"] for r in await conn.fetch(AT_RANKS, lifted, sorted(marks))}
        secs = {k: (v - lifted).total_seconds() for k, v in at.items()}
        d.first_per_s = d.first_n / secs[d.first_n]
        d.secs = secs[d.queued]
        d.whole_per_s = d.queued / d.secs
        d.cpu_us_per_job = 1e6 * cpu_used / d.queued
        if segment:
            prev_k, prev_s = 0, 0.0
            for k in range(segment, d.queued + 1, segment):
                rss = rss_at(samples, lifted.timestamp() + secs[k])
                d.segments.append((k, secs[k], (k - prev_k) / (secs[k] - prev_s), rss))
                prev_k, prev_s = k, secs[k]
        return d
    finally:
        if sampler is not None:
            sampler.cancel()
        if vacuuming is not None:
            vacuuming.cancel()
        if proc is not None:
            c.stop([proc])
        await conn.close()
        if not keep_logs:
            log_path.unlink(missing_ok=True)


def parse_sizes(text: str) -> list[int]:
    return sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=None, help="backlogs to drain (default 10000,100000,1000000)")
    parser.add_argument(
        "--finished",
        type=int,
        default=None,
        help="finished jobs in the table for the extra drain of the "
        "smallest size (default 100,000; 0 skips it)",
    )
    parser.add_argument("--first", type=int, default=10_000, help="completions of the 'first' rate")
    parser.add_argument("--runs", type=int, default=None, help="rounds; figures are medians (default 3)")
    parser.add_argument("--big-runs", type=int, default=1, help=f"rounds of sizes ≥ {BIG:,} (default 1)")
    parser.add_argument("--concurrency", type=int, default=10, help="MAX_CONCURRENT_JOBS (default 10)")
    parser.add_argument("--log-level", default=None, help="the worker's LOG_LEVEL (default INFO)")
    parser.add_argument("--quick", action="store_true", help="sizes 2000,20000, 20,000 finished, 1 run")
    parser.add_argument("--keep", action="store_true", help="keep the worker logs (and print where)")
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="on a server with autovacuum off, do not stand in for it (the table is then never vacuumed)",
    )
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes or ("2000,20000" if args.quick else "10000,100000,1000000"))
    finished = args.finished if args.finished is not None else (20_000 if args.quick else 100_000)
    runs = args.runs or (1 if args.quick else 3)
    if args.log_level:
        os.environ["BENCH_WORKER_LOG_LEVEL"] = args.log_level
    first_n = min(args.first, sizes[0])
    largest = sizes[-1]
    segment = largest // 10 if largest >= 10 * first_n else None

    print(f"machine: {c.machine()}")
    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-scale-"))
    plan = [(f"{n:,}", n, 0) for n in sizes]
    if finished:
        plan.insert(1, (f"{sizes[0]:,} + {finished:,} finished", sizes[0], finished))
    rounds: list[dict[str, Drain]] = []
    try:
        async with c.scratch_database(c.scratch_name("scale")) as url:
            print(f"database: {await c.server_version(url)}")
            conn = await asyncpg.connect(c.dsn(url))
            try:
                server_autovacuum = await conn.fetchval("SHOW autovacuum") == "on"
            finally:
                await conn.close()
            stand_in = not server_autovacuum and not args.no_vacuum
            print(
                "autovacuum: the server's"
                if server_autovacuum
                else "autovacuum: off on the server; "
                + ("the benchmark stands in for it (see Autovacuum)" if stand_in else "none (--no-vacuum)")
            )
            print(
                f"sizes: {', '.join(f'{n:,}' for n in sizes)}; finished: {finished:,}; first: {first_n:,}; "
                f"MAX_CONCURRENT_JOBS={args.concurrency}; worker logs at "
                f"{os.environ.get('BENCH_WORKER_LOG_LEVEL', 'INFO')} into {work}"
            )
            conn = await asyncpg.connect(c.dsn(url))
            try:
                (user_id,) = await c.make_users(conn, 1)
            finally:
                await conn.close()
            for i in range(runs):
                r: dict[str, Drain] = {}
                for name, n, fin in plan:
                    if n >= BIG and i >= args.big_runs:
                        continue
                    print(f"  round {i + 1}: {name}", flush=True)
                    d = await drain(
                        url,
                        user_id,
                        Drain(name, n, fin, first_n),
                        args.concurrency,
                        work,
                        segment if n == largest and not fin else None,
                        args.keep,
                        stand_in,
                    )
                    print(
                        f"    first {d.first_per_s:,.0f}/s, whole {d.whole_per_s:,.0f}/s ({d.secs:,.1f} s), "
                        f"RSS {d.rss_start:.1f} → {d.rss_end:.1f} MB, worker CPU {d.cpu_us_per_job:.0f} µs/job, "
                        f"vacuums of jobs {d.autovacuums} ({d.vacuum_secs:.1f} s), "
                        f"dead rows at the end {d.dead_rows_end:,}",
                        flush=True,
                    )
                    r[name] = d
                rounds.append(r)
    finally:
        if args.keep:
            print(f"worker logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(plan, rounds, sizes, largest)


def report(
    plan: list[tuple[str, int, int]], rounds: list[dict[str, Drain]], sizes: list[int], largest: int
) -> None:
    base = plan[0][0]

    def med(name: str, attr: str) -> float:
        return c.median(getattr(r[name], attr) for r in rounds if name in r)

    def ratio(name: str, attr: str) -> float:
        return c.median(getattr(r[name], attr) / getattr(r[base], attr) for r in rounds if name in r)

    rows: list[list[Any]] = []
    for name, _n, _fin in plan:
        rows.append(
            [
                name,
                sum(1 for r in rounds if name in r),
                med(name, "first_per_s"),
                ratio(name, "first_per_s"),
                med(name, "whole_per_s"),
                ratio(name, "whole_per_s"),
                med(name, "cpu_us_per_job"),
                med(name, "rss_start"),
                c.median(r[name].rss_end - r[name].rss_start for r in rounds if name in r),
                med(name, "autovacuums"),
            ]
        )
    first_n = rounds[0][base].first_n
    c.print_table(
        f"drain of a noop backlog by one worker (jobs/s; ratio = over the {base} drain of the same round)",
        [
            "backlog",
            "runs",
            f"first {first_n:,}/s",
            "ratio",
            "whole/s",
            "ratio",
            "worker µs/job",
            "RSS MB",
            "RSS growth MB",
            "vacuums",
        ],
        rows,
    )
    big = next(
        (r[f"{largest:,}"] for r in rounds if f"{largest:,}" in r and r[f"{largest:,}"].segments), None
    )
    pairs: dict[str, Any] = {}
    for name, n, fin in plan:
        key = f"{n}_finished_{fin}" if fin else str(n)
        pairs[f"first_{key}_per_s"] = round(med(name, "first_per_s"))
        pairs[f"whole_{key}_per_s"] = round(med(name, "whole_per_s"))
        pairs[f"first_ratio_{key}"] = round(ratio(name, "first_per_s"), 3)
        pairs[f"whole_ratio_{key}"] = round(ratio(name, "whole_per_s"), 3)
    if big is not None:
        c.print_table(
            f"the {largest:,} drain in segments (RSS at the start: {big.rss_start:.1f} MB)",
            ["completed", "seconds", "jobs/s in segment", "RSS MB", "growth MB"],
            [[k, s, rate, rss, rss - big.rss_start] for k, s, rate, rss in big.segments],
        )
        pairs["rss_start_mb"] = round(big.rss_start, 1)
        pairs["rss_growth_mb"] = round(big.rss_end - big.rss_start, 1)
        pairs["rss_growth_first_segment_mb"] = round(big.segments[0][3] - big.rss_start, 1)
        pairs["segment_rate_min_over_max"] = round(
            min(s[2] for s in big.segments) / max(s[2] for s in big.segments), 3
        )
    print(c.kv_line(**pairs))


if __name__ == "__main__":
    c.run(main)
