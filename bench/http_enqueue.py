"""``POST /api/jobs`` against a raw autocommit ``INSERT``, in one run.

    python bench/http_enqueue.py [--requests 500] [--secs 5] [--clients 20] [--runs 3]

Per round, on an emptied ``jobs`` table each time:

* **raw** — one asyncpg connection, ``--requests`` single-row autocommit ``INSERT``s into ``jobs``, one
  after the other (``enqueue.py``'s baseline);
* **HTTP, 1 client** — ``--requests`` ``POST /api/jobs`` (``{"type": "bench.plain", "input_data": {"i": n}}``,
  Bearer token) one after the other over one keep-alive connection, to a real ``jobdesk serve``
  (uvicorn, no in-app worker, ``LOG_LEVEL=WARNING``) on a free loopback port;
* **HTTP, peak** — ``--clients`` connections sending the same requests back to back for ``--secs``
  seconds (closed loop).

The requests come from a plain user, not an admin (``--admin``: from an admin, exempt from them), with the per-person limits on (set high enough not
to refuse: ``USER_MAX_JOBS_PER_MINUTE`` 1,000,000, ``USER_MAX_WAITING_JOBS`` 10,000,000), so every
request pays for the token lookup, the limits, the enqueue, tags and the response as in production.
The client is a minimal HTTP/1.1 client on asyncio streams (httpx's own CPU cost would hide the
server's on two cores). Figures are medians of ``--runs`` rounds; the ratios are medians of each
round's ratio. On a shared machine the raw baseline (one connection's round trips) swings with the
load far more than the server's work does, so the one-client phase also reports the CPU time spent per
request by the server process (``server_cpu_ms``) and by its PostgreSQL backends (``pg_cpu_ms``), read
from ``/proc``. Last line: ``raw_per_s=… http_per_s=… http_ratio=… peak_per_s=… peak_ratio=…
server_cpu_ms=… pg_cpu_ms=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import _common as c
import asyncpg
from enqueue import reset, serving, single_raw

from app.db import create_engine
from app.tokens import create_token

BENCH = Path(__file__).resolve().parent
PYTHONPATH = os.pathsep.join([os.environ.get("PYTHONPATH") or str(BENCH.parent), str(BENCH)])
TYPE = "bench.plain"
LIMITS = {"USER_MAX_JOBS_PER_MINUTE": "1000000", "USER_MAX_WAITING_JOBS": "10000000"}


class Poster:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the whole answer."""

    def __init__(self, base: str, token: str) -> None:
        parts = urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.token = token
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: dict[str, object]) -> int:
        if self.conn is None:
            self.conn = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.conn
        data = json.dumps(body).encode()
        writer.write(
            (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            ).encode()
            + data
        )
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        await reader.readexactly(int(fields.get("content-length", "0")))
        if fields.get("connection", "").lower() == "close":
            writer.close()
            self.conn = None
        return status

    def close(self) -> None:
        if self.conn is not None:
            self.conn[1].close()
            self.conn = None


def _check(status: int) -> None:
    if status != 201:
        raise RuntimeError(f"POST /api/jobs answered {status}")


def server_pid(base: str) -> int:
    """The process listening for ``base`` (``jobdesk serve --port N``, found by its command line)."""
    wanted = ["--port", str(urlsplit(base).port)]
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue
        if "serve" in args and any(args[i : i + 2] == wanted for i in range(len(args) - 1)):
            return int(proc.name)
    raise RuntimeError(f"no process serves {base}")


async def backends_cpu(conn: asyncpg.Connection) -> float:
    """CPU seconds used so far by the other backends of ``conn``'s database (the server's pool)."""
    pids = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    total = 0.0
    for (pid,) in pids:
        with contextlib.suppress(OSError):
            total += c.cpu_secs(pid)
    return total


async def one_client(base: str, token: str, n: int, conn: asyncpg.Connection) -> tuple[float, float, float]:
    """Requests/s of ``n`` sequential POSTs on one connection (after 20 unmeasured warm-up requests), and
    the CPU milliseconds per request of the server process and of its PostgreSQL backends."""
    client = Poster(base, token)
    pid = server_pid(base)
    try:
        for i in range(20):
            _check(await client.post("/api/jobs", {"type": TYPE, "input_data": {"i": -i}}))
        cpu, pg = c.cpu_secs(pid), await backends_cpu(conn)
        t = time.perf_counter()
        for i in range(n):
            _check(await client.post("/api/jobs", {"type": TYPE, "input_data": {"i": i}}))
        rate = n / (time.perf_counter() - t)
        cpu, pg = c.cpu_secs(pid) - cpu, await backends_cpu(conn) - pg
        return rate, 1000 * cpu / n, 1000 * pg / n
    finally:
        client.close()


async def peak(base: str, token: str, clients: int, secs: float) -> float:
    """Requests/s of ``clients`` connections posting back to back for ``secs`` seconds."""
    done = 0
    stop = time.perf_counter() + secs

    async def loop(k: int) -> None:
        nonlocal done
        client = Poster(base, token)
        try:
            i = 0
            while time.perf_counter() < stop:
                _check(await client.post("/api/jobs", {"type": TYPE, "input_data": {"c": k, "i": i}}))
                done += 1
                i += 1
        finally:
            client.close()

    t = time.perf_counter()
    await asyncio.gather(*(loop(k) for k in range(clients)))
    return done / (time.perf_counter() - t)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="sequential requests per round")
    parser.add_argument("--secs", type=float, default=5.0, help="seconds of the peak phase")
    parser.add_argument("--clients", type=int, default=20, help="connections in the peak phase")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--admin", action="store_true", help="post as an admin (exempt from the limits)")
    args = parser.parse_args()
    print(f"machine: {c.machine()}")
    data_dir = tempfile.mkdtemp(prefix="jobdesk-bench-http-")
    os.environ.update(LIMITS)
    rounds = []
    async with c.scratch_database(c.scratch_name("http_enqueue")) as url:
        conn = await asyncpg.connect(c.dsn(url))
        admin_id, plain_id = await c.make_users(conn, 2)  # the first is an admin
        user_id = admin_id if args.admin else plain_id
        engine = create_engine(url, pool_size=1)
        async with engine.begin() as db:
            token, _, _ = await create_token(db, user_id, "bench")
        await engine.dispose()
        modules = {"JOBDESK_PROCESSOR_MODULES": "bench_processors", "PYTHONPATH": PYTHONPATH}
        with serving(url, data_dir, **modules) as base:
            for i in range(args.runs):
                r: dict[str, float] = {}
                await reset(conn)
                raw = await single_raw(url, user_id, args.requests)
                r["raw_per_s"] = len(raw) / sum(raw)
                await reset(conn)
                r["http_per_s"], r["server_cpu_ms"], r["pg_cpu_ms"] = await one_client(
                    base, token, args.requests, conn
                )
                await reset(conn)
                r["peak_per_s"] = await peak(base, token, args.clients, args.secs)
                r["http_ratio"] = r["http_per_s"] / r["raw_per_s"]
                r["peak_ratio"] = r["peak_per_s"] / r["raw_per_s"]
                r["load"] = os.getloadavg()[0]
                rounds.append(r)
                print(f"  round {i + 1}: " + ", ".join(f"{k}={v:,.3f}" for k, v in r.items()), flush=True)
        await conn.close()
    med = {k: c.median(r[k] for r in rounds) for k in rounds[0]}
    print(
        c.kv_line(
            raw_per_s=round(med["raw_per_s"]),
            http_per_s=round(med["http_per_s"]),
            http_ratio=round(med["http_ratio"], 3),
            peak_per_s=round(med["peak_per_s"]),
            peak_ratio=round(med["peak_ratio"], 3),
            server_cpu_ms=round(med["server_cpu_ms"], 2),
            pg_cpu_ms=round(med["pg_cpu_ms"], 2),
            load=round(os.getloadavg()[0], 2),
        )
    )


if __name__ == "__main__":
    c.run(main)
