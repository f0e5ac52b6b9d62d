"""Job types used only by the benchmarks; loaded into worker processes with
``JOBDESK_PROCESSOR_MODULES=bench_processors`` (``bench/`` on ``PYTHONPATH``)."""

from __future__ import annotations

import time
from typing import Any

import peer_stamp

from app.processors import JobContext, processor
from app.processors.builtin import AnyInput


@processor(
    "bench.stamp",
    title="Benchmark stamp",
    description="Returns the worker's wall clock at the moment the processor started.",
    input=AnyInput,
    diagnostic=True,
)
async def stamp(ctx: JobContext[AnyInput]) -> dict[str, Any]:
    return {"started": time.time()}


@processor(
    "bench.noop_stamp",
    title="Benchmark no-op",
    description="Records its tag and start time in the file BENCH_STAMP_FILE names; for bench/peers.py.",
    input=AnyInput,
    diagnostic=True,
)
async def noop_stamp(ctx: JobContext[AnyInput]) -> None:
    peer_stamp.stamp(ctx.job["input_data"]["i"])


@processor(
    "bench.plain",
    title="Benchmark plain job",
    description="Does nothing; a type any signed-in person may start, for bench/http_enqueue.py.",
    input=AnyInput,
)
async def plain(ctx: JobContext[AnyInput]) -> None:
    return None
