"""Diagnostic job types, always registered: used by tests, benchmarks and smoke checks, and shown in the
catalogue only to admins.

``noop`` returns its input as its result, so a later step may find anything in it, file references
included; that is harmless because every step that reads a file checks it against the job's owner when
it reads (:mod:`app.files`), never trusting a parent's result."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from app.processors import CpuContext, Input, JobContext, PermanentError, processor


class AnyInput(Input):
    """Any JSON object."""

    model_config = ConfigDict(extra="allow")


@processor(
    "noop",
    title="Do nothing",
    description="Finishes at once and returns its input unchanged. For testing and benchmarks.",
    input=AnyInput,
    diagnostic=True,
    group="Diagnostics",
)
async def noop(ctx: JobContext[AnyInput]) -> dict[str, Any]:
    return ctx.job["input_data"]


class SleepInput(Input):
    seconds: float = Field(1.0, ge=0, le=3600, title="Seconds", description="How long to wait (0 to 3600).")


@processor(
    "sleep",
    title="Wait a while",
    description="Waits the given number of seconds, then finishes. Stops at once when cancelled.",
    input=SleepInput,
    diagnostic=True,
    group="Diagnostics",
)
async def sleep(ctx: JobContext[SleepInput]) -> dict[str, Any]:
    total = ctx.input.seconds
    step = max(0.5, total / 20)
    waited = 0.0
    while waited < total:
        chunk = min(step, total - waited)
        await ctx.sleep(chunk)
        waited += chunk
        await ctx.report_progress(
            waited / total if total else 1.0, f"Waited {waited:.1f} of {total:g} seconds"
        )
    return {"slept_seconds": total}


class FailInput(Input):
    times: int = Field(
        1_000_000,
        ge=0,
        title="Fail how many times",
        description="Fail this many attempts, then succeed. The default fails every attempt.",
    )
    permanent: bool = Field(False, title="Fail permanently", description="Fail without retrying.")
    message: str = Field("Deliberate failure", max_length=10_000, title="Error message")


@processor(
    "fail",
    title="Fail on purpose",
    description="Fails with the given message: every attempt, or only the first few and then succeeds. "
    "For testing retries and alerts.",
    input=FailInput,
    diagnostic=True,
    group="Diagnostics",
)
async def fail(ctx: JobContext[FailInput]) -> dict[str, Any]:
    if ctx.attempt <= ctx.input.times:
        if ctx.input.permanent:
            raise PermanentError(ctx.input.message)
        raise RuntimeError(ctx.input.message)
    return {"ok": True}


class CpuInput(Input):
    seconds: float = Field(1.0, ge=0, le=600, title="Seconds", description="How long to keep one CPU busy.")


def _burn(ctx: CpuContext) -> dict[str, Any]:
    import hashlib
    import time

    deadline = time.monotonic() + ctx.input.seconds
    rounds = 0
    digest = b"jobdesk"
    started = time.monotonic()
    while time.monotonic() < deadline:
        for _ in range(1000):
            digest = hashlib.sha256(digest).digest()
        rounds += 1000
        elapsed = time.monotonic() - started
        ctx.report_progress(
            min(1.0, elapsed / ctx.input.seconds) if ctx.input.seconds else 1.0, f"{rounds:,} rounds"
        )
    return {"rounds": rounds, "digest": digest.hex()[:16]}


processor(
    "cpu",
    title="Keep a CPU busy",
    description="Hashes in a loop for the given seconds, in its own process. For testing CPU-bound work.",
    input=CpuInput,
    cpu_bound=True,
    diagnostic=True,
    group="Diagnostics",
)(_burn)
