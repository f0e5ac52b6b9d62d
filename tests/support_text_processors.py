"""Job types that hand the worker text PostgreSQL cannot store as it is: lone UTF-16 surrogates and NUL
characters in a result (values and keys), an error message, a progress message and a log line.

Loaded into worker subprocesses with ``JOBDESK_PROCESSOR_MODULES=support_text_processors`` (the tests
folder on their path). Each type is diagnostic (admins only).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from app.processors import Input, JobContext, NextJob, PermanentError, Result, processor

BAD = "a\ud800b\x00c\udfffd"
"""A lone high surrogate, a NUL and a lone low surrogate between ordinary letters."""
STORED = "a\ufffdb\ufffdc\ufffdd"
""":data:`BAD` as it is stored: each unstorable character replaced by U+FFFD."""


class NameInput(Input):
    name: str = ""
    permanent: bool = False


@processor(
    "text.bad_result",
    title="Bad result",
    description="A result with unstorable text.",
    input=NameInput,
    diagnostic=True,
)
async def bad_result(ctx: JobContext[NameInput]) -> dict[str, Any]:
    return {
        "value": BAD,
        f"key{BAD}": 1,
        "nested": [{f"k{BAD}": [BAD, "\ud83d\ude00", float("nan"), float("inf")]}],
        "pair": "\ud83d\ude00",
    }


@processor(
    "text.bad_error",
    title="Bad error",
    description="Fails with unstorable text.",
    input=NameInput,
    diagnostic=True,
)
async def bad_error(ctx: JobContext[NameInput]) -> dict[str, Any]:
    if ctx.input.permanent:
        raise PermanentError(f"refused {BAD}")
    raise RuntimeError(f"attempt {ctx.attempt} broke on {BAD}")


class ProgressInput(Input):
    seconds: float = Field(0.0, ge=0)


@processor(
    "text.bad_progress",
    title="Bad progress",
    description="Progress and a log line with it.",
    input=ProgressInput,
    diagnostic=True,
)
async def bad_progress(ctx: JobContext[ProgressInput]) -> Result:
    await ctx.report_progress(0.5, f"half {BAD}")
    ctx.log.info(f"logged {BAD}", detail=BAD)
    await ctx.sleep(ctx.input.seconds)
    return Result(data={"ok": True})


@processor(
    "text.bad_next",
    title="Bad next job",
    description="A next job with it in its input.",
    input=NameInput,
    diagnostic=True,
)
async def bad_next(ctx: JobContext[NameInput]) -> Result:
    return Result(data={"ok": True}, next_jobs=[NextJob(type="noop", input_data={"name": BAD})])
