"""PgQueuer's side of ``bench/peers.py``: a consumer as PgQueuer's quick start writes it, at its
defaults: batches of 10, which is how many jobs it takes at a time, and no limit per entrypoint.
``BENCH_PGQUEUER_LIMIT=10`` adds ``concurrency_limit=10`` to the entrypoint, a hard cap of 10 running
jobs (``peers.py --pgqueuer-limit 10``); PgQueuer then dequeues more often, often finding nothing
while its 10 slots wait for the batched completions to be written.

``python peer_pgqueuer.py`` does what ``pgq run peer_pgqueuer:main`` does (``pgqueuer.run`` on uvloop,
its logging at INFO). It does not call the ``pgq`` command because in 1.6.0 ``pgq run`` fails at start-up
with the current typer (its ``--log-level`` arrives as a string where an enum is expected).

The database comes from ``BENCH_PEER_DSN``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import asyncpg
import pgqueuer
import uvloop
from peer_stamp import stamp
from pgqueuer import PgQueuer
from pgqueuer.core import logconfig
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job

ENTRYPOINT = "bench_noop"
LIMIT = int(os.environ.get("BENCH_PGQUEUER_LIMIT") or 0)  # 0: none, PgQueuer's default


@contextlib.asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["BENCH_PEER_DSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint(ENTRYPOINT, concurrency_limit=LIMIT)
    async def noop(job: Job) -> None:
        stamp(job.payload.decode() if job.payload else "")

    try:
        yield pgq
    finally:
        await connection.close()


if __name__ == "__main__":
    logconfig.setup_fancy_logger(logconfig.LogLevel.INFO)
    uvloop.run(pgqueuer.run(main))
