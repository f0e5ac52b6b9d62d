"""A job moved through the queue by hand, as the web tests need it: enqueued, claimed by a pretend
worker, finished (no worker runs)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.jobs import queue
from app.jobs.payload import json_text
from app.jobs.queue import Outcome
from app.settings import Settings
from tests.support.factories import make_job


async def enqueue(
    engine: AsyncEngine, settings: Settings, user_id: int, type_: str = "test.form", **kw: Any
) -> uuid.UUID:
    """A queued job; ``test.form`` with a valid input unless told otherwise."""
    data = kw.pop("input_data", {"name": "Ann"} if type_ == "test.form" else {})
    return (await make_job(engine, settings, user_id, type_, data, **kw))["id"]


async def claim(engine: AsyncEngine, expected: uuid.UUID | None = None) -> uuid.UUID:
    """Claim due jobs as a worker would; return ``expected`` (which must be among them) or the first."""
    async with engine.begin() as conn:
        rows = await queue.claim(conn, "test-worker", 1 if expected is None else 100, 60)
    assert rows, "nothing to claim"
    ids = [r["id"] for r in rows]
    if expected is not None:
        assert expected in ids, "the expected job was not claimable"
        return expected
    return ids[0]


async def finish(engine: AsyncEngine, settings: Settings, job_id: uuid.UUID, kind: str, **kw: Any) -> None:
    if "result" in kw and not isinstance(kw["result"], str):
        kw["result"] = json_text(kw["result"])
    async with engine.begin() as conn:
        await queue.finish(conn, "test-worker", [Outcome(job_id=job_id, kind=kind, **kw)], settings)


async def failed_job(
    engine: AsyncEngine, settings: Settings, user_id: int, error: str, **kw: Any
) -> uuid.UUID:
    jid = await enqueue(engine, settings, user_id, max_attempts=1, priority=100, **kw)
    assert await claim(engine) == jid  # the highest priority is claimed first
    await finish(engine, settings, jid, "failed", error=error)
    return jid
