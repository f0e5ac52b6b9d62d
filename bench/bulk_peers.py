"""Bulk enqueue only, Jobdesk against PgQueuer (and ``COPY``), alternating in one run.

    python bench/bulk_peers.py [--jobs 10000] [--rounds 3] [--repeat 3]

The bulk phase of ``peers.py`` without the drains, so that a change to ``queue.enqueue_many`` can be
judged in a minute: each library in a fresh database of its own, through the same ``Peer`` classes as
``peers.py`` (Jobdesk: ``queue.enqueue_many`` of ``bench.noop_stamp`` jobs in chunks of 10,000, each in
its own ``engine.begin()``; PgQueuer: ``Queries.enqueue`` with lists of 10,000), and ``COPY`` of the same
number of rows into a minimal table. Per round, each library runs ``--repeat`` times (tables emptied
before each) and keeps its best time, to take out one-off stalls of a shared machine; the ratio is the
median over the rounds of each round's ratio, the libraries' order rotating.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as c
import asyncpg
import peers
import raw_claim


async def best_bulk(peer: peers.Peer, n: int, repeat: int) -> float:
    """The best jobs/s of ``repeat`` bulk enqueues of ``n`` jobs into emptied tables."""
    best = 0.0
    async with peer.client() as client:
        for _ in range(repeat):
            conn = await asyncpg.connect(peer.dsn)
            try:
                await peer.reset(conn)
            finally:
                await conn.close()
            t = time.perf_counter()
            await peer.bulk(client, 0, n)
            best = max(best, n / (time.perf_counter() - t))
    return best


async def best_copy(url: str, n: int, repeat: int) -> float:
    conn = await asyncpg.connect(c.dsn(url))
    try:
        return max([await raw_claim.copy_in(conn, n) for _ in range(repeat)])
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {c.machine()}")
    work = Path(tempfile.mkdtemp(prefix="jobdesk-bench-bulk-"))
    libs = ["jobdesk", "pgqueuer"]
    rounds: list[dict[str, float]] = []

    async with contextlib.AsyncExitStack() as stack:
        raw_url = await stack.enter_async_context(
            c.scratch_database(c.scratch_name("bulk_raw"), migrate=False)
        )
        objs: dict[str, Any] = {}
        for lib in libs:
            url = await stack.enter_async_context(
                c.scratch_database(c.scratch_name(f"bulk_{lib}"), migrate=lib == "jobdesk")
            )
            peer = peers.PEERS[lib](url, work)
            conn = await asyncpg.connect(peer.dsn)
            try:
                await peer.install(conn)
            finally:
                await conn.close()
            objs[lib] = peer
        for i in range(args.rounds):
            order = libs[i % 2 :] + libs[: i % 2]
            r = {"copy": await best_copy(raw_url, args.jobs, args.repeat)}
            for lib in order:
                r[lib] = await best_bulk(objs[lib], args.jobs, args.repeat)
            rounds.append(r)
            print(
                f"  round {i + 1} (load {os.getloadavg()[0]:.2f}): "
                + ", ".join(f"{k}={v:,.0f}/s" for k, v in r.items()),
                flush=True,
            )
    ratio = c.median(r["jobdesk"] / r["pgqueuer"] for r in rounds)
    copy_ratio = c.median(r["jobdesk"] / r["copy"] for r in rounds)
    print(
        c.kv_line(
            jobs=args.jobs,
            jobdesk_per_s=round(c.median(r["jobdesk"] for r in rounds)),
            pgqueuer_per_s=round(c.median(r["pgqueuer"] for r in rounds)),
            copy_per_s=round(c.median(r["copy"] for r in rounds)),
            bulk_ratio=round(ratio, 3),
            copy_ratio=round(copy_ratio, 3),
            load=round(os.getloadavg()[0], 2),
        )
    )


if __name__ == "__main__":
    c.run(main)
