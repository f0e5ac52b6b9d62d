"""Test job type for partition tests: ``test.host_run`` keeps, per job, a file of what each run did.

Each run appends lines ``<event> <worker id> <attempt> <unix time>`` to ``$JOBDESK_TEST_RUN_DIR/<job id>``:
``start`` when it begins, then ``done`` when it returns or ``stopped`` when its worker stops it (its
lease ran out, or it was cancelled). The file is written on the worker's host, whatever the network
does, so it shows what a cut-off worker did while the database could not hear from it.

``mode``: ``sleep`` waits ``seconds`` (stoppable); ``after_cut`` waits until the test has created
``$JOBDESK_TEST_RUN_DIR/cut`` and returns at once then (a job that finishes while its worker is cut off,
so its outcome is a late write); ``hold`` — on its first attempt waits for the cut, then ``seconds``
more (a job still running when its lease runs out), on later attempts returns after 0.2 s.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from app.processors import Input, JobContext, processor

RUN_DIR_ENV = "JOBDESK_TEST_RUN_DIR"


class HostRunInput(Input):
    seconds: float = Field(1.0, ge=0)
    mode: str = "sleep"


def run_dir() -> Path:
    return Path(os.environ[RUN_DIR_ENV])


def _note(ctx: JobContext[Any], event: str) -> None:
    with (run_dir() / str(ctx.job["id"])).open("a") as f:
        f.write(f"{event} {ctx.worker_id} {ctx.attempt} {time.time():.3f}\n")


@processor(
    "test.host_run",
    title="Host run",
    description="Notes each run's start and end in a file per job on the worker's host.",
    input=HostRunInput,
    diagnostic=True,
)
async def host_run(ctx: JobContext[HostRunInput]) -> dict[str, Any]:
    _note(ctx, "start")
    try:
        if ctx.input.mode == "hold" and ctx.attempt > 1:
            await ctx.sleep(0.2)
        elif ctx.input.mode in ("after_cut", "hold"):
            while not (run_dir() / "cut").exists():
                await ctx.sleep(0.05)
            if ctx.input.mode == "hold":
                await ctx.sleep(ctx.input.seconds)
        else:
            await ctx.sleep(ctx.input.seconds)
    except BaseException:
        _note(ctx, "stopped")
        raise
    _note(ctx, "done")
    return {"worker": ctx.worker_id}


def runs(job_id: Any, folder: Path) -> list[tuple[str, str, int, float]]:
    """The lines of ``job_id``'s file in ``folder`` as ``(event, worker id, attempt, time)``."""
    path = folder / str(job_id)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        event, worker, attempt, at = line.split()
        out.append((event, worker, int(attempt), float(at)))
    return out
