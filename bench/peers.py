"""Jobdesk side by side with PgQueuer and Procrastinate, and the raw SQL limits, in one run.

    python bench/peers.py [--jobs 10000] [--rounds 3] [--single 1000] [--latency 100] [--quick]
                          [--libs jobdesk,pgqueuer,procrastinate]

The peers come from the ``bench`` extra (``pip install -e '.[bench]'``, best in a venv of its own). Each
library gets a fresh database of its own on the server of ``DATABASE_URL`` (created and dropped here), its
schema installed with its own tool (``alembic`` migrations, ``pgq install``, ``procrastinate schema
--apply``), and is used through its documented public API at its defaults, except that every library runs
**one worker process with 10 concurrent jobs**:

* Jobdesk: ``python worker.py`` (the same as ``jobdesk worker``) with ``MAX_CONCURRENT_JOBS=10``,
  ``LOG_LEVEL=INFO``, the job type ``bench.noop_stamp`` loaded with ``JOBDESK_PROCESSOR_MODULES``;
  enqueue with ``queue.enqueue`` / ``queue.enqueue_many`` on an ``app.db.create_engine`` engine.
* PgQueuer: what ``pgq run peer_pgqueuer:main`` runs, at its defaults: batches of 10, no limit per
  entrypoint (``--pgqueuer-limit 10`` adds a hard cap of 10); enqueue with ``Queries.enqueue`` on an
  ``AsyncpgDriver``.
* Procrastinate: ``procrastinate worker --concurrency=10``; enqueue with ``Task.defer_async`` /
  ``Task.batch_defer_async`` on a ``PsycopgConnector``.

Every job does the same thing: it appends its tag and start time to a shared file (``peer_stamp.py``).
Per library and round:

1. **bulk enqueue** ``--jobs`` jobs in chunks of 10,000 (one transaction or statement each), jobs/s; then
   ``VACUUM ANALYZE`` of the library's database;
2. **drain** those queued jobs with one fresh worker: jobs/s from the first job's start to the last
   job's recorded finish (Jobdesk ``jobs.completed_at``, PgQueuer ``pgqueuer_log.created``,
   Procrastinate's ``succeeded`` event), and the same counted from the worker's launch; the worker's
   CPU use from the first start to the end;
3. **enqueue one at a time** ``--single`` jobs through the Python API, each committed on its own, jobs/s;
4. **latency**: with a worker idle, ``--latency`` jobs one after the other, each after the previous one
   started: enqueue call → the job's recorded start (p50, p95); for Jobdesk also from the enqueue's
   commit (its transaction is the caller's).

The raw SQL limits, in a fourth database, one asyncpg connection: claim+complete batches of 100 with
``FOR UPDATE SKIP LOCKED`` (``raw_claim.py``), autocommit single-row ``INSERT`` one at a time, and ``COPY``
of ``--jobs`` rows, all into a minimal table. The order of the libraries rotates from round to round.

Figures are medians over the rounds; ratios are the medians of each round's ratio (measured minutes
apart at most, so load on a shared machine cancels out better). The last line gives the ratios of Jobdesk
to PgQueuer, then the figures behind them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import _common as c
import asyncpg
import bench_processors  # noqa: F401 - registers bench.noop_stamp for enqueue's validation
import peer_pgqueuer
import peer_procrastinate
import peer_stamp
import raw_claim
import throughput
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries
from procrastinate import PsycopgConnector
from sqlalchemy import text

from app.db import create_engine
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import load_settings

BENCH = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
CHUNK = 10_000
CONCURRENCY = 10
WARMUP = 5  # latency jobs not counted: the first one also waits for the worker to start


def peer_env(dsn: str, stamp_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PROCRASTINATE_"))}
    env.update(BENCH_PEER_DSN=dsn, BENCH_STAMP_FILE=str(stamp_file), PYTHONPATH=str(BENCH))
    return env


def spawn(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, env=env, cwd=BENCH, stdout=log, stderr=subprocess.STDOUT)


class Peer:
    """One library under test: how to install it, enqueue, start a worker and see what finished.

    ``client`` opens what a caller of the library's API holds (an engine, a connection, an app) for the
    whole round; the timed calls use it warm.
    """

    name = ""
    label = ""
    has_commit_time = False

    def __init__(self, url: str, work: Path) -> None:
        self.url = url
        self.dsn = c.dsn(url)
        self.work = work

    async def install(self, conn: asyncpg.Connection) -> None:
        raise NotImplementedError

    async def reset(self, conn: asyncpg.Connection) -> None:
        raise NotImplementedError

    def client(self) -> contextlib.AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    async def bulk(self, client: Any, first: int, n: int) -> None:
        """Enqueue jobs tagged ``first`` … ``first + n - 1``."""
        raise NotImplementedError

    async def enqueue_one(self, client: Any, tag: int) -> float:
        """Enqueue the job tagged ``tag``, committed; the wall clock at its commit."""
        raise NotImplementedError

    def start_worker(self, stamp_file: Path, log_path: Path) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    async def finished(self, conn: asyncpg.Connection) -> tuple[int, float | None]:
        """Jobs finished so far and the wall clock (epoch seconds) of the last one's finish."""
        raise NotImplementedError


class Jobdesk(Peer):
    name = "jobdesk"
    label = "Jobdesk defaults"
    has_commit_time = True
    job_type = "bench.noop_stamp"

    async def install(self, conn: asyncpg.Connection) -> None:
        (self.user_id,) = await c.make_users(conn, 1)  # migrated by scratch_database

    async def reset(self, conn: asyncpg.Connection) -> None:
        await throughput.reset(conn)

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        engine = create_engine(self.url, pool_size=1)
        self.settings = load_settings(database_url=self.url)
        try:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            yield engine
        finally:
            await engine.dispose()

    async def bulk(self, client: Any, first: int, n: int) -> None:
        assert first == 0
        await throughput.enqueue_in_chunks(client, self.settings, self.user_id, n, self.job_type)

    async def enqueue_one(self, client: Any, tag: int) -> float:
        # Given the engine, the enqueue commits on its own (one autocommit statement).
        await queue.enqueue(
            client, NewJob(type=self.job_type, input_data={"i": tag}, user_id=self.user_id), self.settings
        )
        return time.time()

    def start_worker(self, stamp_file: Path, log_path: Path) -> subprocess.Popen[bytes]:
        return c.start_worker(
            self.url, log_path, CONCURRENCY, self.work / "data", BENCH_STAMP_FILE=str(stamp_file)
        )

    async def finished(self, conn: asyncpg.Connection) -> tuple[int, float | None]:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, extract(epoch FROM max(completed_at))::float8 AS last "
            "FROM jobs WHERE status = 'completed'"
        )
        return row["n"], row["last"]


class PgQueuer(Peer):
    name = "pgqueuer"
    label = "PgQueuer"

    async def install(self, conn: asyncpg.Connection) -> None:
        subprocess.run(
            [str(BIN / "pgq"), "--pg-dsn", self.dsn, "install"],
            check=True,
            capture_output=True,
            env=peer_env(self.dsn, self.work / "unused"),
        )

    async def reset(self, conn: asyncpg.Connection) -> None:
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        conn = await asyncpg.connect(self.dsn)
        try:
            yield Queries(AsyncpgDriver(conn))
        finally:
            await conn.close()

    async def bulk(self, client: Any, first: int, n: int) -> None:
        for start in range(first, first + n, CHUNK):
            k = min(first + n, start + CHUNK) - start
            await client.enqueue(
                [peer_pgqueuer.ENTRYPOINT] * k,
                [str(i).encode() for i in range(start, start + k)],
                [0] * k,
            )

    async def enqueue_one(self, client: Any, tag: int) -> float:
        await client.enqueue(peer_pgqueuer.ENTRYPOINT, str(tag).encode())
        return time.time()

    limit = 0

    def start_worker(self, stamp_file: Path, log_path: Path) -> subprocess.Popen[bytes]:
        env = peer_env(self.dsn, stamp_file)
        env["BENCH_PGQUEUER_LIMIT"] = str(self.limit)
        return spawn([sys.executable, str(BENCH / "peer_pgqueuer.py")], env, log_path)

    async def finished(self, conn: asyncpg.Connection) -> tuple[int, float | None]:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, extract(epoch FROM max(created))::float8 AS last "
            "FROM pgqueuer_log WHERE status = 'successful'"
        )
        return row["n"], row["last"]


class Procrastinate(Peer):
    name = "procrastinate"
    label = "Procrastinate"
    app_path = "peer_procrastinate.app"

    async def install(self, conn: asyncpg.Connection) -> None:
        subprocess.run(
            [str(BIN / "procrastinate"), f"--app={self.app_path}", "schema", "--apply"],
            check=True,
            capture_output=True,
            env=peer_env(self.dsn, self.work / "unused"),
            cwd=BENCH,
        )

    async def reset(self, conn: asyncpg.Connection) -> None:
        await conn.execute("TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers CASCADE")

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        app = peer_procrastinate.app
        with app.replace_connector(PsycopgConnector(conninfo=self.dsn)):
            async with app.open_async():
                yield peer_procrastinate.noop

    async def bulk(self, client: Any, first: int, n: int) -> None:
        for start in range(first, first + n, CHUNK):
            await client.batch_defer_async(*({"i": i} for i in range(start, min(first + n, start + CHUNK))))

    async def enqueue_one(self, client: Any, tag: int) -> float:
        await client.defer_async(i=tag)
        return time.time()

    def start_worker(self, stamp_file: Path, log_path: Path) -> subprocess.Popen[bytes]:
        return spawn(
            [
                str(BIN / "procrastinate"),
                f"--app={self.app_path}",
                "worker",
                f"--concurrency={CONCURRENCY}",
            ],
            peer_env(self.dsn, stamp_file),
            log_path,
        )

    async def finished(self, conn: asyncpg.Connection) -> tuple[int, float | None]:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, extract(epoch FROM max(at))::float8 AS last "
            "FROM procrastinate_events WHERE type = 'succeeded'"
        )
        return row["n"], row["last"]


PEERS: dict[str, type[Peer]] = {
    "pgqueuer": PgQueuer,
    "procrastinate": Procrastinate,
    "jobdesk": Jobdesk,
}


# --- the phases -------------------------------------------------------------------------------------


async def wait_for_stamp(path: Path, tag: str, proc: subprocess.Popen[bytes], timeout: float) -> float:
    """The start time recorded for ``tag``, polling the stamp file every 2 ms."""
    deadline = time.monotonic() + timeout
    while True:
        started = peer_stamp.read(path).get(tag)
        if started is not None:
            return started
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {tag} did not start within {timeout:.0f} s")
        await asyncio.sleep(0.002)


async def xacts(conn: asyncpg.Connection) -> int:
    """Transactions committed or rolled back in this database so far (each autocommit statement is one)."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return await conn.fetchval(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    )


async def backend_pids(conn: asyncpg.Connection) -> list[int]:
    """The server processes of every other connection to this database (the worker's, once it runs)."""
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    return [r["pid"] for r in rows]


async def drain(peer: Peer, conn: asyncpg.Connection, client: Any, n: int) -> dict[str, float]:
    """Bulk-enqueue ``n`` jobs, then drain them with one fresh worker."""
    await peer.reset(conn)
    t = time.perf_counter()
    await peer.bulk(client, 0, n)
    bulk_secs = time.perf_counter() - t
    await conn.execute("VACUUM ANALYZE")
    stamps = peer.work / f"{peer.name}-drain-{time.time_ns()}.stamps"
    log_path = peer.work / f"{peer.name}-worker.log"
    xacts_before = await xacts(conn)
    launched = time.time()
    proc = peer.start_worker(stamps, log_path)
    try:
        while not stamps.exists() or not stamps.stat().st_size:
            if proc.poll() is not None:
                raise RuntimeError(f"{peer.name}'s worker exited with {proc.returncode}; see {log_path}")
            await asyncio.sleep(0.005)
        cpu_at_first = c.cpu_secs(proc.pid)
        backends = await backend_pids(conn)
        pg_at_first = sum(c.cpu_secs(b) for b in backends if Path(f"/proc/{b}").exists())
        wall_at_first = time.time()
        deadline = time.monotonic() + max(120.0, n / 40)
        while True:
            done, last = await peer.finished(conn)
            if done >= n:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{peer.name}: {done} of {n} jobs finished; see {log_path}")
            await asyncio.sleep(0.1)
        cpu = c.cpu_secs(proc.pid) - cpu_at_first
        pg_cpu = sum(c.cpu_secs(b) for b in backends if Path(f"/proc/{b}").exists()) - pg_at_first
        cpu_wall = time.time() - wall_at_first
    finally:
        c.stop([proc])
    await asyncio.sleep(0.5)  # the worker's backends report their counters as they exit
    xacts_used = await xacts(conn) - xacts_before
    starts = peer_stamp.read(stamps)
    assert len(starts) == n, f"{peer.name}: {len(starts)} of {n} jobs recorded a start"
    assert last is not None
    first = min(starts.values())
    return {
        "bulk_per_s": n / bulk_secs,
        "drain_per_s": n / (last - first),
        "launch_per_s": n / (last - launched),
        "cpu_pct": 100 * cpu / cpu_wall,
        "pg_cpu_pct": 100 * pg_cpu / cpu_wall,
        "xacts_per_job": xacts_used / n,
        # CPU per job drained: steadier than the rates on a shared machine, where waits swing with the load
        "cpu_us_per_job": 1e6 * cpu / n,
        "pg_cpu_us_per_job": 1e6 * pg_cpu / n,
    }


async def single(peer: Peer, conn: asyncpg.Connection, client: Any, n: int) -> dict[str, float]:
    """``n`` enqueues one after the other (after 10 not counted), no worker running."""
    await peer.reset(conn)
    for i in range(10):
        await peer.enqueue_one(client, -1 - i)
    t = time.perf_counter()
    for i in range(n):
        await peer.enqueue_one(client, i)
    return {"single_per_s": n / (time.perf_counter() - t)}


async def latency(peer: Peer, conn: asyncpg.Connection, client: Any, n: int) -> dict[str, float]:
    """Enqueue → start on an idle worker, ``n`` jobs one after the other (ms)."""
    await peer.reset(conn)
    stamps = peer.work / f"{peer.name}-latency-{time.time_ns()}.stamps"
    proc = peer.start_worker(stamps, peer.work / f"{peer.name}-worker.log")
    call_ms: list[float] = []
    commit_ms: list[float] = []
    try:
        for i in range(n + WARMUP):
            t0 = time.time()
            committed = await peer.enqueue_one(client, i)
            started = await wait_for_stamp(stamps, str(i), proc, 60 if i == 0 else 10)
            if i >= WARMUP:
                call_ms.append((started - t0) * 1000)
                commit_ms.append((started - committed) * 1000)
            await asyncio.sleep(0.03)  # let the worker finish the job and go idle
    finally:
        c.stop([proc])
    figures = {"call_p50_ms": c.percentile(call_ms, 50), "call_p95_ms": c.percentile(call_ms, 95)}
    if peer.has_commit_time:
        figures["commit_p50_ms"] = c.percentile(commit_ms, 50)
        figures["commit_p95_ms"] = c.percentile(commit_ms, 95)
    return figures


async def one_library(peer: Peer, n: int, n_single: int, n_latency: int) -> dict[str, float]:
    conn = await asyncpg.connect(peer.dsn)
    try:
        async with peer.client() as client:
            r = await drain(peer, conn, client, n)
            r.update(await single(peer, conn, client, n_single))
            if n_latency:
                r.update(await latency(peer, conn, client, n_latency))
        await peer.reset(conn)
        return r
    finally:
        await conn.close()


async def raw_limits(url: str, n: int, n_single: int) -> dict[str, float]:
    r = {"drain_per_s": await raw_claim.measure(url, n)}
    conn = await asyncpg.connect(c.dsn(url))
    try:
        r["single_per_s"] = await raw_claim.insert_one_at_a_time(conn, n_single)
        r["bulk_per_s"] = await raw_claim.copy_in(conn, n)
        await conn.execute("DROP TABLE raw_jobs")
    finally:
        await conn.close()
    return r


# --- the run --------------------------------------------------------------------------------------------

METRICS = [  # key, row label, decimals
    ("drain_per_s", "drain {n:,} queued jobs, jobs/s (first start → last finish)", 0),
    ("launch_per_s", "same, counted from the worker's launch", 0),
    ("cpu_pct", "worker CPU % while draining", 0),
    ("pg_cpu_pct", "its PostgreSQL backends' CPU % meanwhile", 0),
    ("cpu_us_per_job", "worker CPU per job drained, µs", 0),
    ("pg_cpu_us_per_job", "its backends' CPU per job drained, µs", 0),
    ("xacts_per_job", "database transactions per job (whole worker run)", 2),
    ("single_per_s", "enqueue one at a time (Python API), jobs/s", 0),
    ("bulk_per_s", "bulk enqueue {n:,} (chunks of 10,000), jobs/s", 0),
    ("call_p50_ms", "enqueue call → processor start p50, ms", 2),
    ("call_p95_ms", "enqueue call → processor start p95, ms", 2),
    ("commit_p50_ms", "enqueue commit → processor start p50, ms", 2),
]
RAW_LABELS = {
    "drain_per_s": "claim+complete ×100, 1 conn",
    "single_per_s": "autocommit INSERT",
    "bulk_per_s": "COPY",
}


def versions() -> str:
    return ", ".join(f"{p} {version(p)}" for p in ("pgqueuer", "procrastinate", "psycopg", "asyncpg"))


def ratio(rounds: list[dict[str, dict[str, float]]], key: str, a: str, b: str) -> float:
    """Median over the rounds of ``a``'s figure over ``b``'s."""
    return c.median(
        r[a][key] / r[b][key] if key in r.get(a, {}) and key in r.get(b, {}) else float("nan") for r in rounds
    )


def whole(value: float) -> float | int:
    """``value`` rounded to an integer, NaN kept (a library left out)."""
    return round(value) if value == value else value


def cell(value: float, digits: int) -> str:
    if value != value:
        return ""
    return f"{value:,.{digits}f}"


def report(rounds: list[dict[str, dict[str, float]]], libs: list[str], n: int) -> None:
    columns = ["raw", *[name for name in PEERS if name in libs]]
    med = {
        lib: {k: c.median(r[lib].get(k, float("nan")) for r in rounds) for k, _, _ in METRICS}
        for lib in columns
    }
    headers = ["", "raw SQL limit", *[PEERS[lib].label for lib in columns[1:]]]
    compare = "jobdesk" in libs
    if compare:
        headers += ["Jobdesk / PgQueuer", "Jobdesk / raw"]
    rows = []
    for key, label, digits in METRICS:
        row = [label.format(n=n)]
        for lib in columns:
            value = cell(med[lib][key], digits)
            if lib == "raw" and value:
                value += f" ({RAW_LABELS[key]})"
            row.append(value)
        if compare:
            row.append(cell(ratio(rounds, key, "jobdesk", "pgqueuer"), 2))
            row.append(cell(ratio(rounds, key, "jobdesk", "raw"), 3))
        rows.append(row)
    c.print_table(f"side by side, medians of {len(rounds)} round(s)", headers, rows)


def last_line(rounds: list[dict[str, dict[str, float]]]) -> str:
    """Jobdesk's ratios to PgQueuer, then the figures behind them, as ``key=value`` pairs."""

    def med(lib: str, key: str) -> float:
        if lib not in rounds[0]:
            return float("nan")
        return round(c.median(r[lib].get(key, float("nan")) for r in rounds), 2)

    pairs: dict[str, Any] = {}
    for key, name in (
        ("drain_per_s", "drain"),
        ("launch_per_s", "launch"),
        ("single_per_s", "single"),
        ("bulk_per_s", "bulk"),
        ("call_p50_ms", "latency"),
        ("cpu_us_per_job", "worker_cpu"),
        ("pg_cpu_us_per_job", "backend_cpu"),
    ):
        pairs[f"{name}_ratio"] = round(ratio(rounds, key, "jobdesk", "pgqueuer"), 3)
    pairs["jobdesk_commit_p50_ms"] = med("jobdesk", "commit_p50_ms")
    for lib in ("jobdesk", "pgqueuer", "procrastinate", "raw"):
        pairs[f"{lib}_drain_per_s"] = whole(med(lib, "drain_per_s"))
    pairs["jobdesk_raw_drain_ratio"] = round(ratio(rounds, "drain_per_s", "jobdesk", "raw"), 3)
    return c.kv_line(**pairs)


def options() -> argparse.Namespace:
    """The command line, with ``--quick``'s smaller defaults filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per drain and bulk (default 10,000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds; figures are medians (default 3)")
    parser.add_argument("--single", type=int, default=None, help="one-at-a-time enqueues (default 1,000)")
    parser.add_argument("--latency", type=int, default=None, help="latency jobs per round (default 100)")
    parser.add_argument("--libs", default=",".join(PEERS), help="which libraries (default all three)")
    parser.add_argument(
        "--pgqueuer-limit", type=int, default=0, help="PgQueuer's concurrency_limit (default 0: none)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, 2,000 jobs, fewer of all")
    args = parser.parse_args()
    args.jobs = args.jobs or (2_000 if args.quick else 10_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.single is None:
        args.single = 200 if args.quick else 1_000
    if args.latency is None:
        args.latency = 20 if args.quick else 100
    args.libs = [lib for lib in args.libs.split(",") if lib]
    if unknown := set(args.libs) - set(PEERS):
        parser.error(f"unknown libraries: {', '.join(sorted(unknown))}")
    return args


async def main() -> None:
    args = options()
    n, n_single, n_latency, libs = args.jobs, args.single, args.latency, args.libs
    PgQueuer.limit = args.pgqueuer_limit
    if PgQueuer.limit:
        PgQueuer.label = f"PgQueuer, limit {PgQueuer.limit}"
    print(f"machine: {c.machine()}")
    print(f"peers: {versions()}")
    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-peers-"))
    print(
        f"jobs: {n:,} per drain and bulk, {n_single:,} one at a time, {n_latency} for latency; logs in {work}"
    )
    rounds: list[dict[str, dict[str, float]]] = []
    async with contextlib.AsyncExitStack() as stack:
        raw_url = await stack.enter_async_context(
            c.scratch_database(c.scratch_name("peers_raw"), migrate=False)
        )
        print(f"database: {await c.server_version(raw_url)}")
        peers: dict[str, Peer] = {}
        for lib in libs:
            url = await stack.enter_async_context(
                c.scratch_database(c.scratch_name(f"peers_{lib}"), migrate=lib == "jobdesk")
            )
            peer = PEERS[lib](url, work)
            conn = await asyncpg.connect(peer.dsn)
            try:
                await peer.install(conn)
            finally:
                await conn.close()
            peers[lib] = peer
        for i in range(args.rounds):
            order = libs[i % len(libs) :] + libs[: i % len(libs)]
            r = {"raw": await raw_limits(raw_url, n, n_single)}
            for lib in order:
                r[lib] = await one_library(peers[lib], n, n_single, n_latency)
            rounds.append(r)
            print(f"  round {i + 1} ({', '.join(order)}; load {os.getloadavg()[0]:.1f}):", flush=True)
            for lib, figures in r.items():
                print(f"    {lib}: " + ", ".join(f"{k}={v:,.2f}" for k, v in figures.items()), flush=True)

    report(rounds, libs, n)
    print(last_line(rounds))


if __name__ == "__main__":
    c.run(main)
