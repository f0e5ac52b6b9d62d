"""The raw-SQL baseline for ``bench/throughput.py``: how fast one asyncpg connection can
drain a minimal queue table when it claims with ``FOR UPDATE SKIP LOCKED`` in batches of 100 and
completes each batch in its own transaction — no events, no leases beyond a ``locked_by``, no
processor, no logging. Jobdesk's ``noop`` throughput is reported as a ratio of this figure, measured in
the same run because absolute numbers are noisy on a shared machine. ``bench/peers.py`` also takes the
single-row ``INSERT`` and ``COPY`` limits from here, on the same minimal table.

Run alone: ``python bench/raw_claim.py [--rows N] [--runs R]``; last line ``raw_per_s=…``.
"""

from __future__ import annotations

import argparse
import time

import _common as c
import asyncpg

BATCH = 100

DDL = """
DROP TABLE IF EXISTS raw_jobs;
CREATE TABLE raw_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status text NOT NULL DEFAULT 'queued',
    payload jsonb NOT NULL DEFAULT '{}',
    locked_by text,
    run_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX raw_jobs_claim ON raw_jobs (run_at, id) WHERE status = 'queued';
"""

CLAIM = """
WITH picked AS (
    SELECT id FROM raw_jobs WHERE status = 'queued' AND run_at <= now()
    ORDER BY run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE raw_jobs r SET status = 'running', locked_by = $2, updated_at = now()
FROM picked WHERE r.id = picked.id
RETURNING r.id, r.payload
"""
COMPLETE = (
    "UPDATE raw_jobs SET status = 'done', locked_by = NULL, updated_at = now() WHERE id = ANY($1::bigint[])"
)


async def prepare(conn: asyncpg.Connection, rows: int) -> None:
    """(Re)create ``raw_jobs`` with ``rows`` queued rows, vacuumed and analysed."""
    await conn.execute(DDL)
    await conn.execute(
        "INSERT INTO raw_jobs (payload) SELECT jsonb_build_object('i', g) FROM generate_series(1, $1) g", rows
    )
    await conn.execute("VACUUM ANALYZE raw_jobs")


async def drain(conn: asyncpg.Connection) -> tuple[int, float]:
    """Claim and complete batches of 100 until none is left; ``(rows done, seconds)``."""
    claim = await conn.prepare(CLAIM)
    complete = await conn.prepare(COMPLETE)
    done = 0
    started = time.perf_counter()
    while True:
        async with conn.transaction():
            rows = await claim.fetch(BATCH, "raw")
        if not rows:
            break
        ids = [r["id"] for r in rows]
        async with conn.transaction():
            await complete.fetch(ids)
        done += len(ids)
    return done, time.perf_counter() - started


async def insert_one_at_a_time(conn: asyncpg.Connection, n: int) -> float:
    """Rows/s of ``n`` single-row autocommit ``INSERT``s into a fresh ``raw_jobs``, one after the other."""
    await conn.execute(DDL)
    stmt = await conn.prepare("INSERT INTO raw_jobs (payload) VALUES ($1::jsonb)")
    started = time.perf_counter()
    for i in range(n):
        await stmt.fetch(f'{{"i":{i}}}')
    return n / (time.perf_counter() - started)


async def copy_in(conn: asyncpg.Connection, n: int) -> float:
    """Rows/s of one ``COPY`` of ``n`` rows into a fresh ``raw_jobs``, in one transaction."""
    await conn.execute(DDL)
    records = [(f'{{"i":{i}}}',) for i in range(n)]
    await conn.set_type_codec(  # jsonb's binary form: a version byte, then the text
        "jsonb", encoder=lambda v: b"\x01" + v.encode(), decoder=bytes, format="binary", schema="pg_catalog"
    )
    started = time.perf_counter()
    async with conn.transaction():
        await conn.copy_records_to_table("raw_jobs", records=records, columns=["payload"])
    return n / (time.perf_counter() - started)


async def measure(url: str, rows: int) -> float:
    """One baseline run on database ``url``: rows completed per second."""
    conn = await asyncpg.connect(c.dsn(url))
    try:
        await prepare(conn, rows)
        done, secs = await drain(conn)
        assert done == rows, f"raw loop completed {done} of {rows} rows"
        await conn.execute("DROP TABLE raw_jobs")
        return done / secs
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    async with c.scratch_database(c.scratch_name("raw"), migrate=False) as url:
        results = [await measure(url, args.rows) for _ in range(args.runs)]
    c.print_table(
        f"raw claim/complete loop, batches of {BATCH}, {args.rows:,} rows",
        ["run", "rows/s"],
        [[i + 1, r] for i, r in enumerate(results)],
    )
    print(c.kv_line(raw_per_s=round(c.median(results))))


if __name__ == "__main__":
    c.run(main)
