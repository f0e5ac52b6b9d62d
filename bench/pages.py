"""Page benchmarks on a big jobs table: the pages and status polls must stay fast however many finished
jobs the table holds, so none of them may scan it.

    python bench/pages.py [--jobs 1000000] [--keep] [--name jobdesk_bench_pages] [--runs 3] [--quick]

Seeds ``--jobs`` jobs over 50 users with ``bench/seed.py`` into database ``--name`` (with ``--keep`` the
database stays, and a later run that finds it seeded with the same number of jobs reuses it), starts
the app with uvicorn in a subprocess (``bench/pages_app.py``: Jobdesk as ``jobdesk serve`` builds it, in-app
worker off, plus ``GET /bench/fixed``, a Litestar handler returning a fixed string) and measures, for

* the job status poll as the page sends it (``GET /jobs/{id}/status?v=<fingerprint>`` with ``HX-Request``:
  204 while the running job has not changed — what a thousand people polling every 2 s mostly cost),
* the job status fragment (``GET /jobs/{id}/status`` with ``HX-Request``, a running job's full fragment),
* the job page (``GET /jobs/{id}``, a finished job with its result and history),
* My jobs (``GET /jobs``; the signed-in user owns 1/50 of the jobs),
* the admin list (``GET /admin/jobs``) and its counts (``GET /admin/jobs/counts``),
* the approvals inbox (``GET /admin/approvals``: the oldest 50 of the seed's ~0.2 % steps waiting for
  approval, each with its result),
* the fixed-string handler (baseline),

the peak requests/s of 20 concurrent clients (closed loop, ``--peak-secs`` each) and its ratio to the
baseline's peak in the same round, and the latency under an open-loop load of ``--rate`` requests/s for
``--open-secs`` (requests are started on schedule whatever the answers do; latency counts from the
scheduled moment, so a stall shows up in full), and the p95 under a light open-loop load of
``--light-rate`` (default 10/s: the time one request takes when nothing queues). Figures are medians of ``--runs`` rounds.
``--quick``: 100,000 jobs, 2 s peaks and 4 s open-loop phases, one round.

Clients are a minimal asyncio HTTP/1.1 keep-alive client (:class:`RawClient`) in this process, on the same two cores as the server and
PostgreSQL, so the baseline's peak is partly the client's own limit; the ratio is what compares.
Last line: ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import _common as c
import asyncpg
import httpx
import seed

BENCH = Path(__file__).resolve().parent
ENDPOINTS = (
    "fixed",
    "status_poll",
    "status",
    "job_page",
    "my_jobs",
    "admin_list",
    "admin_counts",
    "admin_approvals",
)
LABELS = {
    "fixed": "fixed string (baseline)",
    "status_poll": "status poll, unchanged (204)",
    "status": "job status fragment",
    "job_page": "job page",
    "my_jobs": "My jobs",
    "admin_list": "admin list /admin/jobs",
    "admin_counts": "admin counts",
    "admin_approvals": "approvals inbox /admin/approvals",
}


async def ensure_seeded(name: str, jobs: int, keep: bool) -> str:
    """The URL of database ``name`` holding ``jobs`` seeded jobs: reused when ``keep`` and already there."""
    base = c.server_url()
    url = c.with_database(base, name)
    if keep:
        with contextlib.suppress(asyncpg.InvalidCatalogNameError, OSError):
            conn = await asyncpg.connect(c.dsn(url))
            try:
                has_index = await conn.fetchval("SELECT to_regclass('ix_jobs_idempotency_key') IS NOT NULL")
                n = await conn.fetchval("SELECT reltuples::bigint FROM pg_class WHERE relname = 'jobs'")
                users = await conn.fetchval("SELECT count(*) FROM users")
            finally:
                await conn.close()
            if has_index and users == 50 and abs(n - jobs) <= jobs * 0.02:
                print(f"reusing database {name} ({n:,} jobs)")
                return url
    async with c.scratch_database(name, keep=True) as url:
        t = time.perf_counter()
        await seed.seed(url, jobs, 50)
        print(f"seeded {jobs:,} jobs in {time.perf_counter() - t:.0f} s")
    return url


async def pick_targets(url: str) -> dict[str, str]:
    """Paths to measure: a running and a finished job of user01 (the admin), who signs in."""
    conn = await asyncpg.connect(c.dsn(url))
    try:
        uid = await conn.fetchval("SELECT id FROM users WHERE email = 'user01@example.com'")
        running = await conn.fetchval(
            "SELECT id FROM jobs WHERE user_id = $1 AND status = 'in_progress' ORDER BY id DESC LIMIT 1", uid
        )
        done = await conn.fetchval(
            "SELECT id FROM jobs WHERE user_id = $1 AND status = 'completed' ORDER BY id DESC LIMIT 1", uid
        )
    finally:
        await conn.close()
    return {
        "fixed": "/bench/fixed",
        "status_poll": f"/jobs/{running}/status",  # ?v=… added once signed in (see poll_path)
        "status": f"/jobs/{running}/status",
        "job_page": f"/jobs/{done}",
        "my_jobs": "/jobs",
        "admin_list": "/admin/jobs",
        "admin_counts": "/admin/jobs/counts",
        "admin_approvals": "/admin/approvals",
    }


def start_server(url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB", "WORKER", "DB_"))}
    env.update(
        DATABASE_URL=url,
        WORKER_ENABLED="false",
        LOG_LEVEL="WARNING",
        SECRET_KEY="bench-pages-secret-key-0123456789abcdef",
        JOBDESK_DATA_DIR=str(BENCH.parent / ".jobdesk-bench" / "pages"),
        PYTHONPATH=f"{BENCH}:{BENCH.parent}",
    )
    uvicorn = Path(sys.executable).parent / "uvicorn"
    cmd = [
        str(uvicorn),
        "--factory",
        "pages_app:make_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=BENCH)


async def wait_up(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient() as client:
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(base + "/healthz")).status_code == 200:
                    return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the app did not start:\n{log.read_text()[-3000:]}")
            await asyncio.sleep(0.2)


async def session_cookie(base: str) -> str:
    """Sign in as user01 (an admin) through the form; the ``Cookie`` header value to send."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        page = await client.get("/login")
        token = re.search(r'name="_csrf_token" value="([^"]+)"', page.text).group(1)
        r = await client.post(
            "/login",
            data={
                "email": "user01@example.com",
                "password": seed.PASSWORD,
                "next": "/",
                "_csrf_token": token,
            },
        )
        assert r.status_code == 303, r.text
        return "; ".join(f"{k}={v}" for k, v in client.cookies.items())


class RawClient:
    """A minimal HTTP/1.1 keep-alive GET client on asyncio streams: httpx's own CPU cost on these two
    cores capped the fixed-string baseline at ~400 requests/s, hiding the server. Idle connections are
    reused; a request that finds none opens a new one (so an open-loop load is never held back by the
    client). ``cookie``: the session cookie header value, sent with every request."""

    def __init__(self, host: str, port: int, cookie: str = "") -> None:
        self.host, self.port, self.cookie = host, port, cookie
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened = 0

    async def get(self, path: str, headers: dict[str, str]) -> int:
        """GET ``path``; returns the status code after reading the whole body. A kept-alive connection
        the server has closed meanwhile (uvicorn closes idle ones after 5 s) is replaced once."""
        if self.idle:
            conn = self.idle.pop()
            try:
                return await self._get(conn, path, headers)
            except (OSError, asyncio.IncompleteReadError):
                conn[1].close()
        conn = await asyncio.open_connection(self.host, self.port)
        self.opened += 1
        return await self._get(conn, path, headers)

    async def _get(
        self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], path: str, headers: dict[str, str]
    ) -> int:
        reader, writer = conn
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if self.cookie:
            extra += f"Cookie: {self.cookie}\r\n"
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n{extra}\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        if "content-length" in fields:
            await reader.readexactly(int(fields["content-length"]))
        elif fields.get("transfer-encoding") == "chunked":
            while True:
                size = int((await reader.readline()).strip(), 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        if fields.get("connection", "").lower() == "close":
            writer.close()
        else:
            self.idle.append(conn)
        return status

    async def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


def headers_for(name: str) -> dict[str, str]:
    return {"HX-Request": "true"} if name in ("status_poll", "status", "admin_counts") else {}


async def poll_path(base: str, cookie: str, fragment: str) -> str:
    """The URL the job page polls, as the page itself writes it into ``hx-get``: the fragment path with
    the fingerprint ``?v=…`` of what is shown, answered 204 while the job has not changed."""
    async with httpx.AsyncClient(base_url=base, headers={"Cookie": cookie, "HX-Request": "true"}) as client:
        r = await client.get(fragment)
    found = re.search(r'hx-get="(/jobs/[^"]+/status\?v=[^"]+)"', r.text)
    if found is None:
        raise SystemExit(f"no polling URL in {fragment} (status {r.status_code})")
    return found.group(1).replace("&amp;", "&")


async def peak(client: RawClient, path: str, hdrs: dict[str, str], secs: float, conc: int) -> float:
    """Requests/s of ``conc`` clients each sending the next request when the last answered."""
    done = 0
    end = time.perf_counter() + secs

    async def one() -> None:
        nonlocal done
        while time.perf_counter() < end:
            status = await client.get(path, hdrs)
            if status >= 400:
                raise RuntimeError(f"{path}: {status}")
            done += 1

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conc)))
    return done / (time.perf_counter() - t)


async def open_loop(
    client: RawClient, path: str, hdrs: dict[str, str], rate: float, secs: float
) -> dict[str, float]:
    """Start one request every ``1/rate`` s for ``secs`` s; latencies (ms) from each scheduled start."""
    latencies: list[float] = []
    errors = 0
    tasks = []
    start = time.perf_counter() + 0.05

    async def one(at: float) -> None:
        nonlocal errors
        try:
            if await client.get(path, hdrs) >= 400:
                errors += 1
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors += 1
        latencies.append((time.perf_counter() - at) * 1000)

    n = int(rate * secs)
    for i in range(n):
        at = start + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(at)))
    await asyncio.gather(*tasks)
    achieved = n / (time.perf_counter() - start)
    return {
        "p50": c.percentile(latencies, 50),
        "p95": c.percentile(latencies, 95),
        "p99": c.percentile(latencies, 99),
        "achieved": achieved,
        "errors": errors,
    }


async def one_round(
    base: str, targets: dict[str, str], args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    host, port = base.removeprefix("http://").split(":")
    cookie = await session_cookie(base)
    signed = RawClient(host, int(port), cookie)
    targets = {**targets, "status_poll": await poll_path(base, cookie, targets["status"])}
    anonymous = RawClient(host, int(port))  # no cookie: the baseline does no session lookup
    try:
        for name in args.only:
            client = anonymous if name == "fixed" else signed
            path, hdrs = targets[name], headers_for(name)
            await peak(client, path, hdrs, 0.5, args.concurrency)  # warm up
            rps = await peak(client, path, hdrs, args.peak_secs, args.concurrency)
            light = await open_loop(client, path, hdrs, args.light_rate, args.open_secs)
            lat = (
                await open_loop(client, path, hdrs, args.rate, args.open_secs)
                if args.rate
                else dict.fromkeys(("p50", "p95", "p99", "achieved", "errors"), 0.0)
            )
            out[name] = {"rps": rps, **lat, "light_p95": light["p95"]}
            print(
                f"  {LABELS[name]:<26} peak {rps:8.0f}/s   at {args.rate:.0f}/s: p50 {lat['p50']:7.1f} ms "
                f"p95 {lat['p95']:7.1f} ms p99 {lat['p99']:7.1f} ms (achieved {lat['achieved']:.0f}/s, "
                f"{int(lat['errors'])} errors); at {args.light_rate:.0f}/s: p95 {light['p95']:.1f} ms",
                flush=True,
            )
            await asyncio.sleep(1)
    finally:
        await signed.close()
        await anonymous.close()
    for name in args.only:
        out[name]["ratio"] = out[name]["rps"] / out["fixed"]["rps"]
    return out


def _round(v: float) -> float | int:
    return round(v) if v == v else v  # nan: not measured (--only)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs to seed (default 1,000,000)")
    parser.add_argument("--keep", action="store_true", help="keep the seeded database and reuse it next time")
    parser.add_argument(
        "--name", default="jobdesk_bench_pages", help="database name (default jobdesk_bench_pages)"
    )
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--rate", type=float, default=500.0, help="the open-loop load (0: skip that phase)")
    parser.add_argument(
        "--only", default="", help="comma-separated endpoints to measure (the baseline always); default all"
    )
    parser.add_argument(
        "--light-rate", type=float, default=10.0, help="a light open-loop load (default 10/s)"
    )
    parser.add_argument("--peak-secs", type=float, default=None)
    parser.add_argument("--open-secs", type=float, default=None)
    parser.add_argument("--quick", action="store_true", help="100,000 jobs, short phases, one round")
    args = parser.parse_args()
    args.jobs = args.jobs or (100_000 if args.quick else 1_000_000)
    args.runs = args.runs or (1 if args.quick else 3)
    args.peak_secs = args.peak_secs or (2.0 if args.quick else 5.0)
    args.open_secs = args.open_secs or (4.0 if args.quick else 10.0)
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    if only - set(ENDPOINTS):
        parser.error(
            f"--only: unknown {', '.join(sorted(only - set(ENDPOINTS)))}; known: {', '.join(ENDPOINTS)}"
        )
    args.only = [n for n in ENDPOINTS if n == "fixed" or not only or n in only]
    name = args.name if not args.quick or args.name != "jobdesk_bench_pages" else "jobdesk_bench_pages_quick"

    print(f"machine: {c.machine()}")
    url = await ensure_seeded(name, args.jobs, args.keep)
    print(f"database: {await c.server_version(url)}, {name}")
    targets = await pick_targets(url)
    log = BENCH / "results" / "pages-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = start_server(url, port, log)
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        await wait_up(base, proc, log)
        for i in range(args.runs):
            print(f"round {i + 1} of {args.runs}", flush=True)
            rounds.append(await one_round(base, targets, args))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if not args.keep:
            admin = await asyncpg.connect(c.dsn(c.server_url()))
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()

    med = {n: {k: c.median(r[n][k] for r in rounds) for k in rounds[0][n]} for n in args.only}
    if len(args.only) < len(ENDPOINTS):
        med.update({n: dict.fromkeys(med["fixed"], float("nan")) for n in ENDPOINTS if n not in med})
    c.print_table(
        f"pages on {args.jobs:,} jobs: medians of {args.runs} round(s); peak with {args.concurrency} clients, "
        f"latency under an open-loop {args.rate:.0f} requests/s for {args.open_secs:.0f} s",
        [
            "endpoint",
            "peak req/s",
            "ratio to fixed",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "achieved/s",
            "p95 ms light",
        ],
        [
            [
                LABELS[n],
                med[n]["rps"],
                med[n]["ratio"],
                med[n]["p50"],
                med[n]["p95"],
                med[n]["p99"],
                med[n]["achieved"],
                med[n]["light_p95"],
            ]
            for n in args.only
        ],
    )
    if not args.keep:
        print("(database dropped; run with --keep to keep it for the next run)")
    print(
        c.kv_line(
            jobs=args.jobs,
            fixed_rps=round(med["fixed"]["rps"]),
            poll_rps=_round(med["status_poll"]["rps"]),
            poll_ratio=med["status_poll"]["ratio"],
            poll_p95_ms=med["status_poll"]["p95"],
            status_rps=_round(med["status"]["rps"]),
            status_ratio=med["status"]["ratio"],
            status_p95_ms=med["status"]["p95"],
            job_page_ratio=med["job_page"]["ratio"],
            my_jobs_ratio=med["my_jobs"]["ratio"],
            admin_list_ratio=med["admin_list"]["ratio"],
            job_page_light_p95_ms=med["job_page"]["light_p95"],
            my_jobs_light_p95_ms=med["my_jobs"]["light_p95"],
            job_page_p95_ms=med["job_page"]["p95"],
            my_jobs_p95_ms=med["my_jobs"]["p95"],
            admin_list_rps=_round(med["admin_list"]["rps"]),
            admin_list_p95_ms=med["admin_list"]["p95"],
            admin_counts_p95_ms=med["admin_counts"]["p95"],
            admin_list_light_p95_ms=med["admin_list"]["light_p95"],
            admin_counts_light_p95_ms=med["admin_counts"]["light_p95"],
            admin_approvals_light_p95_ms=med["admin_approvals"]["light_p95"],
            status_light_p95_ms=med["status"]["light_p95"],
        )
    )


if __name__ == "__main__":
    c.run(main)
