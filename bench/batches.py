"""A batch of 10,000 rows: how long from the rows to committed queued jobs, and how long reading the
spreadsheet takes.

    python bench/batches.py [--rows 10000] [--runs 3]

* **read CSV / read XLSX** — :func:`app.spreadsheets.read` of a file of ``--rows`` rows (three columns,
  ``http.request`` input), then every row converted (:func:`app.spreadsheets.row_input`).
* **check** — :func:`app.batches.check_rows`: every row validated against the type's schema.
* **submit** — :func:`app.actions.batches.submit` as a non-admin with the per-person limits on (the
  same path as ``POST /api/batches`` and the spreadsheet form: access, per-minute and waiting checks,
  the batch row, ``queue.enqueue_many`` in one statement, the jobs' batch id), then the commit: one
  transaction. ``submit_cpu`` is this process's CPU time of it (the rest of ``submit`` is the database
  and waiting for a CPU on a busy machine).

Each round starts from an empty ``jobs`` table; figures are medians of ``--runs`` rounds.
Last line: ``rows=… read_csv_s=… read_xlsx_s=… check_s=… submit_s=… submit_cpu_s=… rows_per_s=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import time
from types import SimpleNamespace

import _common as c
import asyncpg

from app import batches, spreadsheets
from app.actions import batches as batch_actions
from app.actions.trail import Actor
from app.db import create_engine
from app.processors import registry
from app.settings import load_settings


def make_csv(n: int) -> bytes:
    lines = ["Address (URL),Method,Timeout"]
    lines += [f"http://jobs.test:9/item/{i},GET,5" for i in range(n)]
    return ("\n".join(lines) + "\n").encode()


def make_xlsx(n: int) -> bytes:
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    ws = book.create_sheet()
    ws.append(["Address (URL)", "Method", "Timeout"])
    for i in range(n):
        ws.append([f"http://jobs.test:9/item/{i}", "GET", 5])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def read_rows(data: bytes, name: str) -> tuple[float, list[dict[str, object]]]:
    spec = registry.get("http.request")
    assert spec is not None
    fields = spreadsheets.fields_of(spec.input_model)
    t = time.perf_counter()
    sheet = spreadsheets.read(data, name)
    mapping = spreadsheets.match_columns(fields, sheet.columns)
    rows = [spreadsheets.row_input(fields, cells, mapping) for _, cells in sheet.rows]
    return time.perf_counter() - t, rows


async def one_round(url: str, user_id: int, rows: list[dict[str, object]]) -> tuple[float, float, float]:
    settings = load_settings(
        database_url=url, user_max_waiting_jobs=len(rows) + 10, user_max_jobs_per_minute=30
    )
    spec = registry.get("http.request")
    assert spec is not None
    t = time.perf_counter()
    batches.check_rows(spec, rows, settings)
    check = time.perf_counter() - t
    engine = create_engine(url, pool_size=1)
    person = SimpleNamespace(id=user_id, is_admin=False, email="bench@example.com")
    try:
        from sqlalchemy.ext.asyncio import AsyncSession

        t, cpu = time.perf_counter(), time.process_time()
        async with AsyncSession(engine) as session, session.begin():
            await batch_actions.submit(session, Actor(person, settings), "http.request", rows, name="bench")
        submit, submit_cpu = time.perf_counter() - t, time.process_time() - cpu
    finally:
        await engine.dispose()
    return check, submit, submit_cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    csv_data, xlsx_data = make_csv(args.rows), make_xlsx(args.rows)
    read_csv = [read_rows(csv_data, "bench.csv")[0] for _ in range(args.runs)]
    read_xlsx = [read_rows(xlsx_data, "bench.xlsx")[0] for _ in range(args.runs)]
    _, rows = read_rows(csv_data, "bench.csv")
    checks, submits, cpus = [], [], []
    async with c.scratch_database(c.scratch_name("batches")) as url:
        conn = await asyncpg.connect(c.dsn(url))
        try:
            (user_id,) = await c.make_users(conn, 1)
            for _ in range(args.runs):
                await conn.execute("TRUNCATE jobs, job_events, batches CASCADE")
                check, submit, cpu = await one_round(url, user_id, rows)
                checks.append(check)
                submits.append(submit)
                cpus.append(cpu)
                made = await conn.fetchval("SELECT count(*) FROM jobs WHERE batch_id IS NOT NULL")
                assert made == args.rows, made
        finally:
            await conn.close()
    figures = {
        "rows": args.rows,
        "read_csv_s": c.median(read_csv),
        "read_xlsx_s": c.median(read_xlsx),
        "check_s": c.median(checks),
        "submit_s": c.median(submits),
        "submit_cpu_s": c.median(cpus),
        "rows_per_s": args.rows / c.median(submits),
    }
    print(f"{'step':<12} {'seconds':>8}")
    for key in ("read_csv_s", "read_xlsx_s", "check_s", "submit_s", "submit_cpu_s"):
        print(f"{key[:-2]:<12} {figures[key]:>8.3f}")
    print(" ".join(f"{k}={c.fmt(v, 3) if isinstance(v, float) else v}" for k, v in figures.items()))


if __name__ == "__main__":
    asyncio.run(main())
