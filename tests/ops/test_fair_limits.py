"""Fair limits per person, enforced in the claim across worker processes.

Two workers of three slots each (six in all). Ann queues twelve long jobs first; Bob queues one after
them. Without a per-person rule Ann's jobs, first in claim order, take all six slots and Bob waits for
one of them to end. With ``max_running_per_user`` on the type, or ``USER_MAX_RUNNING_JOBS`` on the
workers, at most two of Ann's run at once — on both workers together — and Bob's job starts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app import controls
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support.factories import make_user
from tests.support.webkit import app_client, bearer, sign_in_as
from tests.support.workers import WorkerProcess, wait_until

CAP = 2
ANN_JOBS = 12


async def _enqueue(engine: Any, settings: Settings, user_id: int, n: int) -> list[Any]:
    jobs = [NewJob(type="sleep", input_data={"seconds": 30}, user_id=user_id) for _ in range(n)]
    async with engine.begin() as conn:
        return list(await queue.enqueue_many(conn, jobs, settings))


async def _running_of(pg: asyncpg.Connection, user_id: int) -> int:
    return int(
        await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'in_progress' AND user_id = $1", user_id)
    )


@pytest.mark.parametrize("rule", ["per_type", "global"])
async def test_one_persons_long_jobs_leave_room_for_another_person(
    make_settings: Any, engine: Any, pg: asyncpg.Connection, tmp_path: Path, rule: str
) -> None:
    settings = make_settings(max_concurrent_jobs=3, job_processor_poll_interval=0.2)
    ann = await make_user(pg, email="ann@example.com")
    bob = await make_user(pg, email="bob@example.com")
    admin = await make_user(pg, email="root@example.com", admin=True)
    extra: dict[str, str] = {}
    if rule == "per_type":
        async with engine.begin() as conn:
            await controls.set_limits(
                conn, "sleep", max_running=None, max_per_minute=None, max_running_per_user=CAP, admin=admin
            )
    else:
        extra["USER_MAX_RUNNING_JOBS"] = str(CAP)
    await _enqueue(engine, settings, ann.id, ANN_JOBS)
    procs = [WorkerProcess(settings, tmp_path / f"w{i}.log", **extra) for i in range(2)]
    try:
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 2 FROM workers"), timeout=60, what="workers up"
        )
        await wait_until(lambda: _running_of(pg, ann.id), timeout=30, what="Ann's jobs start")
        await asyncio.sleep(1.5)  # both workers have claimed as much as they will
        (bob_job,) = await _enqueue(engine, settings, bob.id, 1)
        started = time.monotonic()
        most = 0
        while time.monotonic() - started < 15:
            most = max(most, await _running_of(pg, ann.id))
            if await pg.fetchval("SELECT status = 'in_progress' FROM jobs WHERE id = $1", bob_job):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"Bob's job did not start while Ann ran {most} jobs")
        most = max(most, await _running_of(pg, ann.id))
        assert most <= CAP, f"Ann ran {most} jobs at once, over the cap of {CAP}"
        assert most == CAP, "Ann should use her whole share"
        workers = await pg.fetchval(
            "SELECT count(DISTINCT locked_by) FROM jobs WHERE status = 'in_progress' AND user_id = $1", ann.id
        )
        print(
            f"\n{rule}: Bob's job started {time.monotonic() - started:.1f} s after it was queued; Ann ran {most} on {workers} workers"
        )
    finally:
        for p in procs:
            with contextlib.suppress(Exception):
                p.kill()
            p.close()


async def test_the_per_person_limit_through_the_api_and_on_admin(make_settings: Any, db_url: str) -> None:
    """``PUT /api/job-types/{type}/limits {"max_running_per_user": N}`` sets it (422 for 0, with the
    field), ``/admin`` shows it in the limits form, and USER_MAX_RUNNING_JOBS is named there when set."""
    settings = make_settings(user_max_running_jobs=5)
    _, headers = await bearer(db_url, "api-admin@example.com", admin=True)
    async with app_client(settings) as client:
        r = await client.put("/api/job-types/sleep/limits", json={"max_running_per_user": 0}, headers=headers)
        assert r.status_code == 422, r.text
        assert "max_running_per_user" in r.text
        r = await client.put(
            "/api/job-types/sleep/limits", json={"max_running": 4, "max_running_per_user": 2}, headers=headers
        )
        assert r.status_code == 200, r.text
        assert (r.json()["max_running"], r.json()["max_running_per_user"]) == (4, 2)
        listed = (await client.get("/api/job-types/controls", headers=headers)).json()
        assert [(c["type"], c["max_running_per_user"]) for c in listed] == [("sleep", 2)]
        await sign_in_as(client, db_url, "page-admin@example.com", admin=True)
        page = (await client.get("/admin")).text
        assert 'name="max_running_per_user" inputmode="numeric"\n                   value="2"' in page
        assert "at most 5 jobs at once" in page
