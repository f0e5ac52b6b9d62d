"""Seed a database with many valid jobs, for the page and admin-list benchmarks (a big table is where a
query that scans it shows).

    python bench/seed.py [--jobs 1000000] [--users 50] [--keep] [--name jobdesk_bench_seed]

Creates (or re-creates) database ``--name`` on the benchmark server (``DATABASE_URL``, or the embedded
PostgreSQL), migrates it, then writes with ``INSERT … SELECT`` in chunks of 100,000 rows:

* ``--users`` accounts ``user01@example.com`` … (the first is an admin), password :data:`PASSWORD`;
* ``--jobs`` jobs of the diagnostic types (``noop``, ``sleep``, ``fail``, ``cpu``) with valid inputs,
  spread over the last 25 days (inside the default 30-day retention) and over the users, ids UUIDv7 in
  creation order; statuses as a busy installation has them: 88 % completed, 8 % failed, 1.5 % cancelled,
  2 % queued (half of them scheduled for later), 0.3 % running (leases an hour ahead), 0.2 % waiting for
  approval — every row satisfying the table's CHECK constraints;
* the event history every job of that status has (``enqueued``, ``claimed``, then ``completed`` /
  ``failed`` / ``cancelled`` / ``waiting_approval``): about 2.9 events per job;

then ``VACUUM ANALYZE`` (statistics and the visibility map, as autovacuum would leave them).

Without ``--keep`` the database is dropped at the end (a timing run). With it, the last line is
``database_url=… jobs=… events=… seconds=…``: point ``DATABASE_URL`` there (or pass it to the page
benchmarks) to reuse the data.
"""

from __future__ import annotations

import argparse
import time

import _common as c
import asyncpg

from app.auth import hash_password

PASSWORD = "bench password 1234"
CHUNK = 100_000

UUID7 = """
    encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        placing substring(int8send(floor(extract(epoch FROM {ts}) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
        52, 1), 53, 1), 'hex')::uuid
"""

# One chunk of jobs: g runs over [lo, hi). ``r`` (0..1, deterministic per g) picks the status.
INSERT_JOBS = f"""
WITH src AS (
    SELECT g,
           (g * 2654435761 % 1000003) / 1000003.0 AS r,
           now() - make_interval(secs => ($3 - g) * (25 * 86400.0 / $3)) AS created,
           $4::int[] AS users
    FROM generate_series($1::bigint, $2::bigint - 1) g
), typed AS (
    SELECT *, (ARRAY['noop', 'noop', 'noop', 'sleep', 'fail', 'cpu'])[1 + g % 6] AS type,
           CASE WHEN r < 0.88 THEN 'completed' WHEN r < 0.96 THEN 'failed' WHEN r < 0.975 THEN 'cancelled'
                WHEN r < 0.995 THEN 'queued' WHEN r < 0.998 THEN 'in_progress' ELSE 'waiting_approval' END AS status
    FROM src
)
, ins AS (
INSERT INTO jobs (id, type, status, user_id, input_data, result_data, error_message, priority, run_at,
                  attempts, max_attempts, locked_by, lease_expires_at, requires_approval, progress, title,
                  created_at, updated_at, started_at, completed_at)
SELECT {UUID7.format(ts="created")},
       type, status, users[1 + g % array_length(users, 1)],
       CASE type WHEN 'noop' THEN jsonb_build_object('i', g)
                 WHEN 'sleep' THEN '{{"seconds": 1.0}}'::jsonb
                 WHEN 'fail' THEN '{{"times": 1000000, "permanent": false, "message": "Deliberate failure"}}'::jsonb
                 ELSE '{{"seconds": 1.0}}'::jsonb END,
       CASE WHEN status IN ('completed', 'waiting_approval') THEN jsonb_build_object('i', g) END,
       CASE WHEN status = 'failed' THEN 'RuntimeError: Deliberate failure'
            WHEN status = 'cancelled' THEN 'cancelled by its owner' END,
       (g % 3) - 1,
       CASE WHEN status = 'queued' AND g % 2 = 0 THEN now() + make_interval(secs => 3600 + g % 86400)
            ELSE created END,
       CASE WHEN status IN ('completed', 'in_progress', 'waiting_approval') THEN 1
            WHEN status = 'failed' THEN 3 ELSE 0 END,
       3,
       CASE WHEN status = 'in_progress' THEN 'seed-worker' END,
       CASE WHEN status = 'in_progress' THEN now() + interval '1 hour' END,
       status = 'waiting_approval',
       CASE WHEN status IN ('completed', 'waiting_approval') THEN 1 END,
       CASE WHEN g % 10 = 0 THEN 'Seeded job ' || g END,
       created,
       created + interval '2 seconds',
       CASE WHEN status IN ('completed', 'failed', 'in_progress', 'waiting_approval') THEN created + interval '1 second' END,
       CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN created + interval '2 seconds' END
FROM typed
RETURNING id, status, user_id, created_at, error_message
)
INSERT INTO job_events (job_id, kind, from_status, to_status, actor, at, message)
SELECT j.id, e.kind, e.from_status, e.to_status, e.actor, j.created_at + e.after, e.message
FROM ins j
CROSS JOIN LATERAL (VALUES
    ('enqueued', NULL, 'queued', 'user:' || j.user_id, interval '0', NULL, true),
    ('claimed', 'queued', 'in_progress', 'worker:seed-worker', interval '1 second', NULL,
        j.status IN ('completed', 'failed', 'in_progress', 'waiting_approval')),
    (j.status, CASE WHEN j.status = 'cancelled' THEN 'queued' ELSE 'in_progress' END, j.status,
        CASE WHEN j.status = 'cancelled' THEN 'user:' || j.user_id ELSE 'worker:seed-worker' END,
        interval '2 seconds', j.error_message,
        j.status IN ('completed', 'failed', 'cancelled', 'waiting_approval'))
) AS e(kind, from_status, to_status, actor, after, message, wanted)
WHERE e.wanted
"""


async def seed(url: str, jobs: int, users: int) -> dict[str, float]:
    """Write users, jobs and events into the (migrated) database at ``url``; return timings."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    conn = await asyncpg.connect(c.dsn(url))
    try:  # one argon2 hash for every account: they share the password anyway
        user_ids = [
            r["id"]
            for r in await conn.fetch(
                "INSERT INTO users (email, password_hash, is_admin) "
                "SELECT 'user' || lpad(g::text, 2, '0') || '@example.com', $1, g = 1 FROM generate_series(1, $2) g "
                "RETURNING id",
                hash_password(PASSWORD),
                users,
            )
        ]
    finally:
        await conn.close()
    timings["users"] = time.perf_counter() - t
    conn = await asyncpg.connect(c.dsn(url))
    try:
        await conn.execute("SET synchronous_commit = off")
        t = time.perf_counter()
        for lo in range(0, jobs, CHUNK):
            await conn.execute(INSERT_JOBS, lo, min(jobs, lo + CHUNK), jobs, user_ids)
            print(f"  jobs: {min(jobs, lo + CHUNK):,} of {jobs:,}", flush=True)
        timings["jobs and events"] = time.perf_counter() - t
        t = time.perf_counter()
        await conn.execute("VACUUM ANALYZE jobs")
        await conn.execute("VACUUM ANALYZE job_events")
        await conn.execute("VACUUM ANALYZE users")
        timings["vacuum analyze"] = time.perf_counter() - t
    finally:
        await conn.close()
    return timings


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the database and print its URL")
    parser.add_argument(
        "--name", default="jobdesk_bench_seed", help="database name (default jobdesk_bench_seed)"
    )
    args = parser.parse_args()
    print(f"machine: {c.machine()}")
    started = time.perf_counter()
    async with c.scratch_database(args.name, keep=args.keep) as url:
        print(f"database: {await c.server_version(url)}")
        timings = await seed(url, args.jobs, args.users)
        conn = await asyncpg.connect(c.dsn(url))
        try:
            counts = await conn.fetch(
                "SELECT status, count(*) AS n FROM jobs GROUP BY status ORDER BY n DESC"
            )
            events = await conn.fetchval("SELECT count(*) FROM job_events")
            size = await conn.fetchval("SELECT pg_size_pretty(pg_total_relation_size('jobs'))")
        finally:
            await conn.close()
    total = time.perf_counter() - started
    c.print_table("seeding", ["step", "seconds"], [[k, v] for k, v in timings.items()] + [["total", total]])
    c.print_table("jobs by status", ["status", "jobs"], [[r["status"], r["n"]] for r in counts])
    print(
        f"events: {events:,}; jobs table with indexes: {size}; users: user01..user{args.users:02d}"
        f"@example.com (user01 is an admin), password {PASSWORD!r}"
    )
    if not args.keep:
        print("(database dropped; run with --keep to keep it)")
    print(
        c.kv_line(
            database_url=url if args.keep else "dropped",
            jobs=args.jobs,
            events=events,
            seconds=round(total, 1),
        )
    )


if __name__ == "__main__":
    c.run(main)
