"""Procrastinate's side of ``bench/peers.py``: an ``App`` on a ``PsycopgConnector`` with one task, run by
``procrastinate --app=peer_procrastinate.app worker --concurrency=10`` with its other defaults.

The worker's database comes from ``BENCH_PEER_DSN``; the harness swaps in its own connector with
``App.replace_connector``.
"""

from __future__ import annotations

import os

from peer_stamp import stamp
from procrastinate import App, PsycopgConnector

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PEER_DSN", "")))


@app.task(name="bench_noop")
async def noop(i: int) -> None:
    stamp(i)
