"""Shared plumbing for the benchmark scripts in ``bench/``.

Every script takes its server from ``DATABASE_URL`` (any ``postgresql://`` URL; an embedded PostgreSQL
under ``JOBDESK_DATA_DIR`` — default ``.jobdesk-bench`` — when it is unset) and works in a scratch
database it creates on that server (``jobdesk_bench_<script>_<pid>``), migrated to head and dropped at
the end, so a benchmark never touches the rows of the database the URL names. ``--keep`` (where offered)
keeps the scratch database and prints its URL.

Scripts print a table and, as their last line, ``key=value`` pairs (figures are medians of the runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from app.db import asyncpg_dsn, run_migrations  # noqa: E402
from app.embedded import start_embedded_postgres  # noqa: E402
from app.settings import normalize_database_url  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"


def server_url() -> str:
    """asyncpg URL of the server to benchmark on: ``DATABASE_URL``, else an embedded PostgreSQL."""
    given = os.environ.get("DATABASE_URL", "").strip()
    if given:
        return normalize_database_url(given)
    data = Path(os.environ.get("JOBDESK_DATA_DIR", ROOT / ".jobdesk-bench"))
    return start_embedded_postgres(data.resolve())


def with_database(url: str, database: str) -> str:
    """``url`` pointing at another database on the same server (password kept)."""
    return make_url(url).set(database=database).render_as_string(hide_password=False)


def dsn(url: str) -> str:
    """A plain ``postgresql://`` DSN for asyncpg."""
    return asyncpg_dsn(url)


@contextlib.asynccontextmanager
async def scratch_database(name: str, *, keep: bool = False, migrate: bool = True) -> AsyncIterator[str]:
    """Create database ``name`` on the benchmark server (dropped first if it exists), migrate it to head
    and yield its asyncpg URL; drop it afterwards unless ``keep``.

    Raises:
        SystemExit: the server refuses ``CREATE DATABASE`` (the message says what the role lacks).
    """
    base = server_url()
    admin_url = with_database(base, make_url(base).database or "postgres")
    admin = await asyncpg.connect(dsn(admin_url))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    except asyncpg.InsufficientPrivilegeError as exc:
        raise SystemExit(
            f"The benchmark needs to create a scratch database on the server of DATABASE_URL: {exc}. "
            "Use a role with CREATEDB."
        ) from None
    finally:
        await admin.close()
    url = with_database(base, name)
    try:
        if migrate:
            await run_migrations(url)
        yield url
    finally:
        if not keep:
            admin = await asyncpg.connect(dsn(admin_url))
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()


def scratch_name(script: str) -> str:
    return f"jobdesk_bench_{script}_{os.getpid()}"


async def make_users(conn: asyncpg.Connection, n: int, prefix: str = "bench") -> list[int]:
    """``n`` plain users (no usable password: benchmarks never sign in through the form)."""
    rows = await conn.fetch(
        """
        INSERT INTO users (email, password_hash, is_admin)
        SELECT $1 || '-' || g || '@example.com', 'x', g = 1 FROM generate_series(1, $2) g
        ON CONFLICT DO NOTHING RETURNING id
        """,
        prefix,
        n,
    )
    return [r["id"] for r in rows]


# --- worker processes ------------------------------------------------------------------------------


def start_worker(
    url: str, log_path: Path, concurrency: int, data_dir: Path, **extra: str
) -> subprocess.Popen[bytes]:
    """``python worker.py`` on database ``url``: ``LOG_LEVEL`` from ``BENCH_WORKER_LOG_LEVEL`` (default
    INFO), output appended to ``log_path``, ``bench/`` on its path for ``bench_processors``."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JOB", "WORKER", "MAX_CONCURRENT", "DB_"))
    }
    env.update(
        DATABASE_URL=url,
        MAX_CONCURRENT_JOBS=str(concurrency),
        LOG_LEVEL=os.environ.get("BENCH_WORKER_LOG_LEVEL", "INFO"),
        JOBDESK_DATA_DIR=str(data_dir),
        PYTHONPATH=os.pathsep.join([str(ROOT / "bench"), str(ROOT)]),
        JOBDESK_PROCESSOR_MODULES="bench_processors",
    )
    env.update(extra)
    log = open(log_path, "ab")
    return subprocess.Popen(
        [sys.executable, str(ROOT / "worker.py")], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )


async def wait_ready(
    conn: asyncpg.Connection,
    procs: list[subprocess.Popen[bytes]],
    timeout: float = 60,
    listeners: bool = True,
) -> None:
    """Until every worker has registered and (``listeners``) has its LISTEN connection up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"a worker exited with {p.returncode} before it was ready")
        workers = await conn.fetchval("SELECT count(*) FROM workers")
        listening = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'jobdesk-listener'"
        )
        if workers >= len(procs) and (listening >= len(procs) or not listeners):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("workers did not become ready")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


# --- figures --------------------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else float("nan")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def fmt(value: Any, digits: int | None = None) -> str:
    """Numbers for tables: thousands separators; 1 decimal from 10 up, 3 below (ratios, milliseconds)."""
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        if digits is None:
            digits = 1 if abs(value) >= 10 else 3
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )


def kv_line(**pairs: Any) -> str:
    """The ``key=value`` last line; floats with up to 3 decimals."""

    def one(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}".rstrip("0").rstrip(".") if v == v else "nan"
        return str(v)

    return " ".join(f"{k}={one(v)}" for k, v in pairs.items())


def machine() -> str:
    """One line about this machine: CPU model and count, memory, PostgreSQL is reported separately."""
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    load = ""
    with contextlib.suppress(OSError):
        load = ", load " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return f"{os.cpu_count()} × {cpu}{mem}{load}, Python {sys.version.split()[0]}"


async def server_version(url: str) -> str:
    conn = await asyncpg.connect(dsn(url))
    try:
        version = await conn.fetchval("SHOW server_version")
        fsync = await conn.fetchval("SHOW fsync")
        sync_commit = await conn.fetchval("SHOW synchronous_commit")
        return f"PostgreSQL {version} (fsync={fsync}, synchronous_commit={sync_commit})"
    finally:
        await conn.close()


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (``VmRSS`` from ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_secs(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def run(main: Any) -> None:
    """``main()`` on uvloop's event loop when installed, as the worker and uvicorn use it."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
