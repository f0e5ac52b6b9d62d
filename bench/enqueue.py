"""Enqueue speed: one job at a time through the Python API and through ``POST /api/jobs``,
and 100,000 at once through ``queue.enqueue_many``, each against a raw asyncpg baseline in the same run.

    python bench/enqueue.py [--single 1000] [--http 500] [--bulk 100000] [--runs 3]

* **single, Python API** — ``queue.enqueue`` in its own transaction per job (validation, the ``jobs`` row,
  its ``enqueued`` event, NOTIFY), one after the other. Baseline: a raw asyncpg single-statement
  ``INSERT`` of the same row into ``jobs`` (autocommit), one after the other.
* **single, HTTP** — ``POST /api/jobs`` with a Bearer token, one after the other over one keep-alive
  connection, to a real ``jobdesk serve`` (uvicorn, no in-app worker, ``LOG_LEVEL=WARNING``) on
  loopback: HTTP parsing, auth, JSON, the handler, the session's commit.
* **bulk** — ``queue.enqueue_many`` with 100,000 ``noop`` jobs in one transaction (all validated, rows and
  events). Baseline: asyncpg ``COPY`` of the same 100,000 rows into ``jobs`` (no events). Target
  ≥ 0.2 × COPY.

Each round starts from an empty ``jobs`` table; figures are medians of ``--runs`` rounds (default 3).
Last line: ``single_per_s=… single_raw_per_s=… http_per_s=… http_p50_ms=… bulk_per_s=… copy_per_s=…
bulk_ratio=…``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import _common as c
import asyncpg
import httpx

from app.db import create_engine
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import load_settings
from app.tokens import create_token

RAW_INSERT = (
    "INSERT INTO jobs (id, type, user_id, input_data, max_attempts) VALUES ($1, 'noop', $2, $3::jsonb, 11)"
)
COPY_COLUMNS = ["id", "type", "user_id", "input_data", "max_attempts"]


async def reset(conn: asyncpg.Connection) -> None:
    await conn.execute("TRUNCATE jobs, job_events CASCADE")


async def single_api(url: str, user_id: int, n: int, *, in_transaction: bool = False) -> list[float]:
    """``queue.enqueue`` given the engine (one autocommit statement), or with ``in_transaction`` given a
    connection in ``engine.begin()`` (BEGIN, the statement, COMMIT)."""
    settings = load_settings(database_url=url)
    engine = create_engine(url, pool_size=1)
    times = []
    try:
        for i in range(n):
            job = NewJob(type="noop", input_data={"i": i}, user_id=user_id)
            t = time.perf_counter()
            if in_transaction:
                async with engine.begin() as conn:
                    await queue.enqueue(conn, job, settings)
            else:
                await queue.enqueue(engine, job, settings)
            times.append(time.perf_counter() - t)
    finally:
        await engine.dispose()
    return times


async def single_raw(url: str, user_id: int, n: int) -> list[float]:
    conn = await asyncpg.connect(c.dsn(url))
    times = []
    try:
        stmt = await conn.prepare(RAW_INSERT)
        for i in range(n):
            t = time.perf_counter()
            await stmt.fetch(uuid.uuid4(), user_id, f'{{"i":{i}}}')
            times.append(time.perf_counter() - t)
    finally:
        await conn.close()
    return times


@contextlib.contextmanager
def serving(url: str, data_dir: str, **extra_env: str) -> Iterator[str]:
    """``jobdesk serve`` (no in-app worker, ``LOG_LEVEL=WARNING``, and ``extra_env``) on a free loopback
    port; its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB", "WORKER", "DB_"))}
    env.update(
        DATABASE_URL=url,
        WORKER_ENABLED="false",
        LOG_LEVEL="WARNING",
        SECRET_KEY="bench-secret-key-0123456789abcdef0123456789",
        JOBDESK_DATA_DIR=data_dir,
        **extra_env,
    )
    jobdesk = Path(sys.executable).parent / "jobdesk"
    log = open(Path(data_dir) / "serve.log", "ab")
    proc = subprocess.Popen(
        [str(jobdesk), "serve", "--port", str(port), "--no-migrate"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jobdesk serve did not start; see {data_dir}/serve.log")
            time.sleep(0.2)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


async def single_http(base: str, token: str, n: int) -> list[float]:
    """``n`` sequential ``POST /api/jobs`` over one keep-alive HTTP/1.1 connection."""
    times = []
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        for i in range(n + 20):
            t = time.perf_counter()
            r = await client.post("/api/jobs", json={"type": "noop", "input_data": {"i": i}})
            if i >= 20:  # warm-up: connections, prepared statements
                times.append(time.perf_counter() - t)
            if r.status_code != 201:
                raise RuntimeError(f"POST /api/jobs answered {r.status_code}: {r.text[:300]}")
    return times


async def bulk_api(url: str, user_id: int, n: int) -> float:
    settings = load_settings(database_url=url)
    engine = create_engine(url, pool_size=1)
    try:
        jobs = [NewJob(type="noop", input_data={"i": i}, user_id=user_id) for i in range(n)]
        t = time.perf_counter()
        async with engine.begin() as conn:
            inserted = await queue.enqueue_many(conn, jobs, settings)
        secs = time.perf_counter() - t
        assert len(inserted) == n
        return secs
    finally:
        await engine.dispose()


async def bulk_copy(url: str, user_id: int, n: int) -> float:
    conn = await asyncpg.connect(c.dsn(url))
    try:
        records = [(uuid.uuid4(), "noop", user_id, f'{{"i":{i}}}', 11) for i in range(n)]
        await conn.set_type_codec(
            "jsonb",
            encoder=lambda v: b"\x01" + v.encode(),
            decoder=bytes,
            format="binary",
            schema="pg_catalog",
        )
        t = time.perf_counter()
        async with conn.transaction():
            await conn.copy_records_to_table("jobs", records=records, columns=COPY_COLUMNS)
        return time.perf_counter() - t
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single", type=int, default=1000, help="single enqueues per round (default 1000)")
    parser.add_argument("--http", type=int, default=500, help="POST /api/jobs per round (default 500)")
    parser.add_argument(
        "--bulk", type=int, default=100_000, help="jobs in the bulk enqueue (default 100,000)"
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {c.machine()}")
    data_dir = tempfile.mkdtemp(prefix="jobdesk-bench-")
    rounds = []
    async with c.scratch_database(c.scratch_name("enqueue")) as url:
        print(f"database: {await c.server_version(url)}")
        conn = await asyncpg.connect(c.dsn(url))
        (user_id,) = await c.make_users(conn, 1)
        engine = create_engine(url, pool_size=1)
        async with engine.begin() as db:
            token, _, _ = await create_token(db, user_id, "bench")
        await engine.dispose()
        for i in range(args.runs):
            r: dict[str, float] = {}
            await reset(conn)
            raw = await single_raw(url, user_id, args.single)
            await reset(conn)
            api = await single_api(url, user_id, args.single)
            await reset(conn)
            in_tx = await single_api(url, user_id, args.single, in_transaction=True)
            r["single_tx_per_s"] = len(in_tx) / sum(in_tx)
            r["engine_over_tx"] = (len(api) / sum(api)) / r["single_tx_per_s"]
            r["single_raw_per_s"] = len(raw) / sum(raw)
            r["single_per_s"] = len(api) / sum(api)
            r["single_p50_ms"] = c.percentile(api, 50) * 1000
            r["single_raw_p50_ms"] = c.percentile(raw, 50) * 1000
            if args.http:
                await reset(conn)
                with serving(url, data_dir) as base:
                    http = await single_http(base, token, args.http)
                r["http_per_s"] = len(http) / sum(http)
                r["http_p50_ms"] = c.percentile(http, 50) * 1000
                r["http_p99_ms"] = c.percentile(http, 99) * 1000
            await reset(conn)
            await conn.execute("VACUUM ANALYZE jobs")
            r["copy_per_s"] = args.bulk / await bulk_copy(url, user_id, args.bulk)
            await reset(conn)
            await conn.execute("VACUUM ANALYZE jobs")
            r["bulk_per_s"] = args.bulk / await bulk_api(url, user_id, args.bulk)
            r["bulk_ratio"] = r["bulk_per_s"] / r["copy_per_s"]
            rounds.append(r)
            print(f"  round {i + 1}: " + ", ".join(f"{k}={v:,.2f}" for k, v in r.items()), flush=True)
        await conn.close()

    med = {k: c.median(r[k] for r in rounds) for k in rounds[0]}
    rows = [
        [
            "single: queue.enqueue(conn) in engine.begin()",
            med["single_tx_per_s"],
            float("nan"),
            "raw INSERT",
            med["single_raw_per_s"],
            med["single_raw_p50_ms"],
            med["single_tx_per_s"] / med["single_raw_per_s"],
        ],
        [
            "single: queue.enqueue(engine), one statement",
            med["single_per_s"],
            med["single_p50_ms"],
            "raw INSERT",
            med["single_raw_per_s"],
            med["single_raw_p50_ms"],
            med["single_per_s"] / med["single_raw_per_s"],
        ],
    ]
    if "http_per_s" in med:
        rows.append(
            [
                "single: POST /api/jobs (jobdesk serve)",
                med["http_per_s"],
                med["http_p50_ms"],
                "raw INSERT",
                med["single_raw_per_s"],
                med["single_raw_p50_ms"],
                med["http_per_s"] / med["single_raw_per_s"],
            ]
        )
    rows.append(
        [
            f"bulk: enqueue_many({args.bulk:,})",
            med["bulk_per_s"],
            float("nan"),
            "COPY",
            med["copy_per_s"],
            float("nan"),
            med["bulk_ratio"],
        ]
    )
    c.print_table(
        f"enqueue (medians of {args.runs} rounds)",
        ["what", "jobs/s", "p50 ms", "baseline", "baseline/s", "baseline p50 ms", "ratio"],
        rows,
    )
    print(
        c.kv_line(
            single_per_s=round(med["single_per_s"]),
            single_raw_per_s=round(med["single_raw_per_s"]),
            single_tx_per_s=round(med["single_tx_per_s"]),
            engine_over_tx=round(med["engine_over_tx"], 2),
            http_per_s=round(med["http_per_s"]) if "http_per_s" in med else "n/a",
            http_p50_ms=round(med["http_p50_ms"], 2) if "http_p50_ms" in med else "n/a",
            bulk_per_s=round(med["bulk_per_s"]),
            copy_per_s=round(med["copy_per_s"]),
            bulk_ratio=round(med["bulk_ratio"], 3),
        )
    )


if __name__ == "__main__":
    c.run(main)
