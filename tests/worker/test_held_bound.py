"""The jobs a worker holds stay bounded when its completer falls behind (app/worker/claim_loop.py,
``UNRECORDED_MAX``): finished jobs waiting for their outcome to be recorded count against what the claim
loop takes, so a slow completer slows the claims instead of letting the worker hold (and renew the leases
of) an ever-growing set of finished jobs. Seen in ``bench/scale.py`` at 500 slots: 290,000 held jobs and
1.5 GB of RSS after a slow moment of the database."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from app.jobs import queue
from app.jobs.queue import NewJob
from app.worker import claim_loop
from app.worker.completer import Completer
from tests.support.factories import TestUser
from tests.support.workers import running_worker, wait_until

JOBS = 200
SLOTS = 5
UNRECORDED = 10


async def test_a_stalled_completer_stops_the_claims_and_they_resume_when_it_records(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings()
    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn, [NewJob(type="noop", input_data={"i": i}, user_id=owner.id) for i in range(JOBS)], settings
        )
    gate = asyncio.Event()
    write = Completer.write

    async def stalled_write(self: Completer, batch: list[Any]) -> Any:
        await gate.wait()
        return await write(self, batch)

    monkeypatch.setattr(Completer, "write", stalled_write)
    monkeypatch.setattr(claim_loop, "UNRECORDED_MAX", UNRECORDED)
    bound = SLOTS + SLOTS + UNRECORDED  # slots, buffer, outcomes waiting for the completer

    async def in_progress() -> int:
        return int(await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'in_progress'"))

    async with running_worker(settings, concurrency=SLOTS, buffer=SLOTS) as worker:
        await wait_until(lambda: _at_least(in_progress, bound), what=f"{bound} jobs claimed")
        await asyncio.sleep(1.0)  # noop jobs: without the bound every job would be claimed by now
        assert await in_progress() <= bound
        assert len(worker.held) <= bound
        assert worker.completed_count == 0

        gate.set()
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = $1 FROM jobs WHERE status = 'completed'", JOBS),
            what="every job completed once the completer records again",
            timeout=30,
        )
        assert worker.completed_count == JOBS


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count() >= n)
