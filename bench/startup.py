"""Start-up: from launching ``python worker.py`` to its first claimed job, the import time of the
worker and of the command line, and the wall time of ``jobdesk --help`` and of a real ``jobdesk
create-user``, medians of ``--runs``.

One ``noop`` job is queued before each launch; the time runs from just before ``Popen`` to the job's
``started_at`` (the claim, on the database's clock; same machine). ``--other ROOT`` measures another
checkout (e.g. the previous commit, exported with ``git archive``) alternately in the same run, so that
the two are compared under the same load.

Each checkout's ``app/`` and ``migrations/`` are byte-compiled first, as the Dockerfile does: with
``PYTHONDONTWRITEBYTECODE`` set (as on this machine and in the image) and no ``__pycache__``, every
process compiles each module of ``app/`` from source again, 0.1-0.25 s of each start that a deployed
worker does not pay. ``--from-source`` leaves the checkouts as they are.

    .venv/bin/python bench/startup.py [--runs 3] [--other /tmp/old-checkout] [--from-source]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as c
import asyncpg

TUNED = {"MAX_CONCURRENT_JOBS": "500", "LOG_LEVEL": "WARNING"}
"""The settings README recommends for many short jobs."""


def _env(root: Path, url: str, data_dir: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JOB", "WORKER", "MAX_CONCURRENT", "DB_"))
    }
    env.update(TUNED, DATABASE_URL=url, JOBDESK_DATA_DIR=data_dir, PYTHONPATH=str(root))
    return env


def import_secs(root: Path, module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter (``-X importtime``), run in ``root``:
    ``python -c`` puts its working directory first on the path, ahead of ``PYTHONPATH``."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    last = [line for line in out.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", line)][-1]
    return int(last.split("|")[1]) / 1e6


def web_modules(root: Path, module: str) -> list[str]:
    """Web-stack and migration modules that importing ``module`` loads."""
    code = (
        f"import sys, {module}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & "
        "{'litestar', 'jinja2', 'alembic', 'uvicorn'})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


def command_secs(root: Path, url: str, *args: str, stdin: str = "") -> float:
    """Wall time of ``python -m app.cli ARGS`` (``jobdesk ARGS``) in ``root``; it must succeed."""
    env = _env(root, url, tempfile.mkdtemp(prefix="jobdesk-bench-startup-"))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=root,
        input=stdin,
        text=True,
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - started


def byte_compile(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", "app", "migrations"], cwd=root, check=True)


async def first_claim(root: Path, url: str) -> float:
    conn = await asyncpg.connect(c.dsn(url))
    try:
        await conn.execute("TRUNCATE jobs, job_events, workers CASCADE")
        uid = (await c.make_users(conn, 1, prefix="startup")) or [
            await conn.fetchval("SELECT min(id) FROM users")
        ]
        uid = uid[0]
        job = await conn.fetchval(
            "INSERT INTO jobs (id, type, user_id, input_data, max_attempts) "
            "VALUES (gen_random_uuid(), 'noop', $1, '{}', 3) RETURNING id",
            uid,
        )
        data_dir = tempfile.mkdtemp(prefix="jobdesk-bench-startup-")
        launched = time.time()
        proc = subprocess.Popen(
            [sys.executable, str(root / "worker.py")],
            env=_env(root, url, data_dir),
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                started = await conn.fetchval(
                    "SELECT extract(epoch FROM started_at)::float8 FROM jobs WHERE id = $1", job
                )
                if started:
                    return float(started - launched)
                await __import__("asyncio").sleep(0.01)
            raise RuntimeError("the worker claimed nothing within 60 s")
        finally:
            c.stop([proc])
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--other", type=Path, default=None, help="another checkout to compare with")
    parser.add_argument("--from-source", action="store_true", help="do not byte-compile the checkouts first")
    args = parser.parse_args()
    roots = {"this": c.ROOT} | ({"other": args.other} if args.other else {})
    print(f"machine: {c.machine()}")
    if not args.from_source:
        for root in roots.values():
            byte_compile(root)
    print("app/ byte-compiled: " + ("no (--from-source)" if args.from_source else "yes"))
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in roots}
    async with c.scratch_database(c.scratch_name("startup")) as url:
        for i in range(args.runs):
            for name, root in roots.items():
                f = figures[name]
                f.setdefault("first_claim_s", []).append(await first_claim(root, url))
                f.setdefault("import_worker_s", []).append(import_secs(root, "app.worker.main"))
                f.setdefault("import_cli_s", []).append(import_secs(root, "app.cli"))
                f.setdefault("help_s", []).append(command_secs(root, url, "--help"))
                email = f"startup-{name}-{i}-{time.time_ns()}@example.com"
                f.setdefault("create_user_s", []).append(
                    command_secs(
                        root, url, "create-user", email, "--password-stdin", stdin="a-long-password-1\n"
                    )
                )
            print(f"  round {i + 1}: " + "; ".join(f"{n}: {figures[n]}" for n in roots), flush=True)
    rows = []
    for name, root in roots.items():
        med = {k: c.median(v) for k, v in figures[name].items()}
        rows.append(
            [
                f"{name} ({root})",
                med["first_claim_s"],
                med["import_worker_s"],
                med["import_cli_s"],
                med["help_s"],
                med["create_user_s"],
                " ".join(web_modules(root, "app.worker.main")) or "none",
            ]
        )
    c.print_table(
        f"start-up, tuned settings {TUNED} (medians of {args.runs})",
        [
            "checkout",
            "launch → first claim, s",
            "import app.worker.main, s",
            "import app.cli, s",
            "jobdesk --help, s",
            "create-user, s",
            "web modules",
        ],
        rows,
    )
    this = {k: c.median(v) for k, v in figures["this"].items()}
    pairs = {f"{k}": round(v, 3) for k, v in this.items()}
    if "other" in figures:
        other = {k: c.median(v) for k, v in figures["other"].items()}
        pairs |= {f"other_{k}": round(v, 3) for k, v in other.items()}
    print(c.kv_line(**pairs))


if __name__ == "__main__":
    c.run(main)
