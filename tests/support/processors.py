"""Job types used only by tests. Imported directly by in-process tests, and loaded into worker
subprocesses with ``JOBDESK_PROCESSOR_MODULES=tests.support.processors`` (the repository root on their path).

``test.effect`` appends one row per run to ``side_effects`` — the "exactly once" probe of the cases:
a processor that appends one row per run leaves exactly one row when it ran exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from typing import Any

from pydantic import Field
from sqlalchemy import text

from app.processors import Input, JobContext, NextJob, Result, processor
from app.processors.builtin import AnyInput
from tests.support.factories import SIDE_EFFECTS_DDL  # noqa: F401  (the table test.effect writes to)


class EffectInput(Input):
    seconds: float = Field(0.0, ge=0)
    cooperative: bool = True


async def _record(ctx: JobContext[Any]) -> None:
    assert ctx.db is not None
    async with ctx.db.begin() as conn:
        await conn.execute(
            text("INSERT INTO side_effects (job_id, attempt, worker, pid) VALUES (:j, :a, :w, :p)"),
            {"j": ctx.job["id"], "a": ctx.attempt, "w": ctx.worker_id, "p": os.getpid()},
        )


@processor(
    "test.effect",
    title="Side effect",
    description="Waits, then appends one row to side_effects.",
    input=EffectInput,
    diagnostic=True,
)
async def effect(ctx: JobContext[EffectInput]) -> dict[str, Any]:
    if ctx.input.cooperative:
        await ctx.sleep(ctx.input.seconds)
    else:
        await asyncio.sleep(ctx.input.seconds)
    await _record(ctx)
    return {"ok": True}


class SecondsInput(Input):
    seconds: float = Field(1.0, ge=0)


@processor(
    "test.stubborn",
    title="Stubborn",
    description="Ignores cancellation, then succeeds.",
    input=SecondsInput,
    diagnostic=True,
)
async def stubborn(ctx: JobContext[SecondsInput]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.input.seconds
    while loop.time() < deadline:
        try:
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
        except asyncio.CancelledError:
            continue  # swallows the cancellation: the worst kind of processor
    return {"ignored_cancel": True}


@processor(
    "test.hang",
    title="Hang",
    description="Sleeps past its 0.5 s timeout.",
    input=SecondsInput,
    timeout=0.5,
    diagnostic=True,
)
async def hang(ctx: JobContext[SecondsInput]) -> dict[str, Any]:
    await asyncio.sleep(ctx.input.seconds)
    return {}


@processor(
    "test.pgsleep",
    title="Hold a connection",
    description="pg_sleep on the app pool, then a side effect.",
    input=SecondsInput,
    diagnostic=True,
)
async def pgsleep(ctx: JobContext[SecondsInput]) -> dict[str, Any]:
    assert ctx.db is not None
    async with ctx.db.connect() as conn:
        await conn.execute(text("SELECT pg_sleep(:s)"), {"s": ctx.input.seconds})
    await _record(ctx)
    return {}


class FanoutInput(Input):
    n: int = Field(3, ge=0, le=100)
    bad: str = ""


@processor(
    "test.fanout",
    title="Fan out",
    description="Creates n noop children and one fan-in job.",
    input=FanoutInput,
    diagnostic=True,
)
async def fanout(ctx: JobContext[FanoutInput]) -> Result:
    children = [NextJob(type="noop", input_data={"i": i}, key=f"child-{i}") for i in range(ctx.input.n)]
    if ctx.input.bad == "cycle":
        children.append(NextJob(type="noop", key="x", depends_on=["y"]))
        children.append(NextJob(type="noop", key="y", depends_on=["x"]))
    if ctx.input.bad == "unknown":
        children.append(NextJob(type="noop", key="z", depends_on=["00000000-0000-0000-0000-000000000000"]))
    fan_in = NextJob(
        type="test.collect",
        key="collect",
        depends_on=[c.key for c in children if c.key and c.key.startswith("child")],
    )
    return Result(data={"children": ctx.input.n}, next_jobs=[*children, fan_in])


class NextInput(Input):
    jobs: list[dict[str, Any]] = []
    out: Any = None


@processor(
    "test.next",
    title="Next jobs as given",
    description="Returns {'out': out} and asks for the next jobs its input lists (NextJob fields).",
    input=NextInput,
    diagnostic=True,
)
async def next_as_given(ctx: JobContext[NextInput]) -> Result:
    return Result(data={"out": ctx.input.out}, next_jobs=[NextJob(**j) for j in ctx.input.jobs])


@processor("test.collect", title="Collect", description="Returns its parents' results.", diagnostic=True)
async def collect(ctx: JobContext[Any]) -> dict[str, Any]:
    return {"parents": sorted(ctx.parents)}


@processor(
    "test.echo",
    title="Echo",
    description="Returns its input with references to parents' results resolved.",
    input=AnyInput,
    diagnostic=True,
)
async def echo(ctx: JobContext[AnyInput]) -> dict[str, Any]:
    return ctx.input.model_dump(mode="json")


class HugeErrorInput(Input):
    mode: str = "big"


@processor(
    "test.huge_error",
    title="Huge error",
    description="Raises a 5 MB message or a 10 000-frame traceback.",
    input=HugeErrorInput,
    diagnostic=True,
)
async def huge_error(ctx: JobContext[HugeErrorInput]) -> dict[str, Any]:
    if ctx.input.mode == "big":
        raise RuntimeError("E" * (5 * 1024 * 1024))
    import sys

    def down(n: int) -> int:
        return n if n == 0 else down(n - 1) + 1

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(12_000)
    try:
        down(10_000)
        raise RecursionError("went 10 000 frames deep <script>alert(4)</script>")
    finally:
        sys.setrecursionlimit(old)


FLAGS_DDL = (
    "CREATE TABLE IF NOT EXISTS test_flags (name text PRIMARY KEY, fixed boolean NOT NULL DEFAULT false)"
)


class FlagInput(Input):
    flag: str = "downstream"


@processor(
    "test.until_fixed",
    title="Until fixed",
    description="Fails until test_flags says the fault is fixed.",
    input=FlagInput,
    diagnostic=True,
)
async def until_fixed(ctx: JobContext[FlagInput]) -> dict[str, Any]:
    assert ctx.db is not None
    async with ctx.db.connect() as conn:
        fixed = (
            await conn.execute(text("SELECT fixed FROM test_flags WHERE name = :n"), {"n": ctx.input.flag})
        ).scalar()
    if not fixed:
        raise RuntimeError(f"{ctx.input.flag} is down")
    await _record(ctx)
    return {"fixed": True}


@processor(
    "test.retryable",
    title="Temporary trouble",
    description="Fails with a message for people.",
    diagnostic=True,
)
async def temporary_trouble(ctx: JobContext[Any]) -> dict[str, Any]:
    from app.processors import RetryableError

    raise RetryableError("The printer is out of paper; it will be tried again.")


# --- runtime faults: blocked loops, swallowed cancels, partitions, memory ----------------------------------


@processor(
    "test.block",
    title="Block the loop",
    description="Calls time.sleep inside async def (a common mistake), then appends a side effect.",
    input=SecondsInput,
    diagnostic=True,
)
async def block(ctx: JobContext[SecondsInput]) -> dict[str, Any]:
    time.sleep(ctx.input.seconds)  # noqa: ASYNC251 - blocks the worker's event loop on purpose
    await _record(ctx)
    return {"blocked_secs": ctx.input.seconds}


class BlockAfterInput(Input):
    seconds: float = Field(1.0, ge=0)
    after_effects: int = Field(0, ge=0)


@processor(
    "test.block_after",
    title="Block the loop after others' effects",
    description="Waits (awaiting) until side_effects has the given number of rows, then blocks the loop.",
    input=BlockAfterInput,
    diagnostic=True,
)
async def block_after(ctx: JobContext[BlockAfterInput]) -> dict[str, Any]:
    assert ctx.db is not None
    while True:
        async with ctx.db.connect() as conn:
            count = (await conn.execute(text("SELECT count(*) FROM side_effects"))).scalar_one()
        if count >= ctx.input.after_effects:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the others' outcomes reach the completer (loop steps, no I/O)
    time.sleep(ctx.input.seconds)  # noqa: ASYNC251 - blocks the worker's event loop on purpose
    return {"blocked_secs": ctx.input.seconds}


class GilInput(Input):
    length: int = Field(34, ge=1, le=60)
    say: str = ""
    """A line to log (in the loop's thread, as the worker's own lines are) just before holding the GIL."""


@processor(
    "test.gil_hold",
    title="Hold the GIL",
    description="Blocks the loop until the worker is asked to stop, then holds the GIL in one C call (a regular expression "
    "that backtracks for 2**length steps): no thread of Python runs until it ends.",
    input=GilInput,
    diagnostic=True,
)
async def gil_hold(ctx: JobContext[GilInput]) -> dict[str, Any]:
    from app.worker.signals import STOP

    while STOP.received is None:  # blocking the loop meanwhile: nothing of the stop can run first
        time.sleep(0.01)  # noqa: ASYNC251 - the stop signal's handler runs in it
    if ctx.input.say:
        logging.getLogger("jobdesk.test").warning(ctx.input.say)
    re.match(r"(a+)+$", "a" * ctx.input.length + "b")
    return {"matched": True}


SLOW_COMPLETER_ENV = "JOBDESK_TEST_SLOW_COMPLETER"
"""Set in a worker process's environment (seconds), its completer waits that long before each write: the
outcomes of finished jobs stay unrecorded meanwhile, as behind a slow database."""

if os.environ.get(SLOW_COMPLETER_ENV):
    from app.worker import completer as _completer

    _write = _completer.Completer.write

    async def _slow_write(self: _completer.Completer, batch: list[Any]) -> Any:
        await asyncio.sleep(float(os.environ[SLOW_COMPLETER_ENV]))
        return await _write(self, batch)

    setattr(_completer.Completer, "write", _slow_write)  # noqa: B010  (a test patch of a method)


QUICK_LAST_RESORT_ENV = "JOBDESK_TEST_QUICK_LAST_RESORT"
"""Set in a worker process's environment, its last resort fires a fraction of a second after the stop's
budget (a stall's length, the hand-back's time and the margin shortened), not 12 s: for tests of what
comes out when it fires."""

if os.environ.get(QUICK_LAST_RESORT_ENV):
    from app.worker import stuck as _stuck

    _stuck.STALL_SECS = _stuck.HAND_BACK_SECS = _stuck.LAST_RESORT_MARGIN_SECS = 0.2


@processor(
    "test.swallow",
    title="Swallow cancellation",
    description="Catches every cancellation and goes on for the given seconds, then returns.",
    input=SecondsInput,
    timeout=1,
    diagnostic=True,
)
async def swallow(ctx: JobContext[SecondsInput]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.input.seconds
    while loop.time() < deadline:
        try:
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
        except asyncio.CancelledError:
            continue
    await _record(ctx)
    return {"late": True}


SPANS_DDL = """
CREATE TABLE IF NOT EXISTS spans (
    id bigserial PRIMARY KEY, job_id uuid NOT NULL, attempt int NOT NULL, worker text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz, how text
)
"""
DIRECT_DB_ENV = "JOBDESK_TEST_DIRECT_DSN"
"""A DSN that bypasses any proxy in front of the worker's database, so a worker cut off from the database
still records when its processors run (the spans are the test's probe, not the worker's traffic). Set in
the environment of every process that runs ``test.span``."""


async def _span_write(sql: str, *args: Any) -> Any:
    import asyncpg

    conn = await asyncpg.connect(os.environ[DIRECT_DB_ENV])
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


@processor(
    "test.span",
    title="Span",
    description="Records when it starts and when it stops (finished or stopped) in the spans table.",
    input=EffectInput,
    diagnostic=True,
)
async def span(ctx: JobContext[EffectInput]) -> dict[str, Any]:
    span_id = await _span_write(
        "INSERT INTO spans (job_id, attempt, worker) VALUES ($1, $2, $3) RETURNING id",
        ctx.job["id"],
        ctx.attempt,
        ctx.worker_id,
    )
    how = "stopped"
    try:
        if ctx.input.cooperative:
            await ctx.sleep(ctx.input.seconds)
        else:
            await asyncio.sleep(ctx.input.seconds)
        how = "finished"
    finally:
        await asyncio.shield(
            _span_write("UPDATE spans SET ended_at = clock_timestamp(), how = $2 WHERE id = $1", span_id, how)
        )
    return {"span": span_id}


class MemoryInput(Input):
    mb: int = Field(64, ge=0)
    mode: str = "allocate"


def _hog(ctx: Any) -> dict[str, Any]:
    if ctx.input.mode == "exit0":
        os._exit(0)
    if ctx.input.mode == "sys_exit":
        raise SystemExit(0)
    if ctx.input.mode == "unpicklable":
        return {"lock": threading.Lock()}
    block = bytearray(ctx.input.mb * 1024 * 1024)
    return {"allocated_mb": len(block) // (1024 * 1024)}


processor(
    "test.memory",
    title="Use memory",
    description="In its own process: allocates mb MiB, or exits without a result.",
    input=MemoryInput,
    cpu_bound=True,
    diagnostic=True,
)(_hog)


class LogsInput(Input):
    lines: int = Field(3, ge=0, le=100_000)
    interval: float = Field(0.0, ge=0)
    size: int = Field(0, ge=0, le=100_000)
    """Characters of padding per line (for the byte bound)."""
    nul: bool = False
    fail: bool = False


@processor(
    "test.logs",
    title="Logs lines",
    description="Logs lines through ctx.log and Python logging, slowly if asked.",
    input=LogsInput,
    diagnostic=True,
)
async def logs(ctx: JobContext[LogsInput]) -> dict[str, Any]:
    import logging

    std = logging.getLogger("tests.support.processors.logs")
    pad = "x" * ctx.input.size
    for i in range(ctx.input.lines):
        ctx.log.info(f"line {i}{pad}")
        if ctx.input.interval:
            await ctx.sleep(ctx.input.interval)
    if ctx.input.nul:
        ctx.log.warning("nul \x00 byte", where="here\x00")
    std.warning("from std logging %s", "ok")
    await asyncio.to_thread(std.error, "from a thread")
    if ctx.input.fail:
        raise RuntimeError("failed on purpose")
    return {"logged": ctx.input.lines}


@processor(
    "test.cpu_logs",
    title="Logs lines in a process",
    description="A CPU-bound processor that logs.",
    input=LogsInput,
    cpu_bound=True,
    diagnostic=True,
)
def cpu_logs(ctx: Any) -> dict[str, Any]:
    import logging

    for i in range(ctx.input.lines):
        ctx.log.info("cpu line %d", i)
    logging.getLogger("somewhere.else").warning("cpu std \x00 warning")
    return {"logged": ctx.input.lines}


@processor(
    "test.cpu_sleep",
    title="Sleep in a process",
    description="A CPU-bound processor that logs a line, then sleeps for the given seconds.",
    input=SecondsInput,
    cpu_bound=True,
    diagnostic=True,
)
def cpu_sleep(ctx: Any) -> dict[str, Any]:
    ctx.log.info("sleeping")
    time.sleep(ctx.input.seconds)
    return {"slept": ctx.input.seconds}


class CpuFilesInput(Input):
    files: int = Field(2, ge=0, le=100)
    seconds: float = Field(0.0, ge=0)
    fail: bool = False


@processor(
    "test.cpu_files",
    title="Write files in a process",
    description="A CPU-bound processor that writes files to its output folder, waits, then fails if asked.",
    input=CpuFilesInput,
    cpu_bound=True,
    diagnostic=True,
)
def cpu_files(ctx: Any) -> Result:
    from pathlib import Path

    from app.processors import OutputFile, PermanentError

    outputs = []
    for i in range(ctx.input.files):
        path = Path(ctx.output_dir) / f"out-{i}.txt"
        path.write_text(f"output {i}\n")
        outputs.append(OutputFile(path=path, name=path.name, content_type="text/plain"))
    time.sleep(ctx.input.seconds)
    if ctx.input.fail:
        raise PermanentError("failed on purpose, after writing its outputs")
    return Result(data={"written": ctx.input.files}, files=outputs)


# The same work under a 3 s limit of its own: a test of the limit keeps it short while the test's other
# cpu jobs keep the default limit, which a loaded machine's process start-up can take seconds of.
processor(
    "test.cpu_files_limited",
    title="Write files in a process, 3 s limit",
    description="As test.cpu_files, with a 3 s time limit.",
    input=CpuFilesInput,
    cpu_bound=True,
    diagnostic=True,
    timeout=3,
)(cpu_files)


@processor(
    "test.thread_stuck",
    title="Stuck in a thread",
    description="Waits in a thread (asyncio.to_thread) for the given seconds, then appends a side effect.",
    input=SecondsInput,
    diagnostic=True,
)
async def thread_stuck(ctx: JobContext[SecondsInput]) -> dict[str, Any]:
    await asyncio.to_thread(time.sleep, ctx.input.seconds)
    await _record(ctx)
    return {"slept": ctx.input.seconds}


DEAF_MAILER_ENV = "JOBDESK_TEST_DEAF_MAILER"
"""Set in a worker process's environment, its notice mailer (a side task) ignores its cancellation for a
minute: a side task with a bug."""

if os.environ.get(DEAF_MAILER_ENV):
    from app import notifications

    async def _deaf_run(_self: notifications.Mailer) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                continue

    setattr(notifications.Mailer, "run", _deaf_run)  # noqa: B010  (a test patch of a method)
