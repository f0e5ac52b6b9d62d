"""The worker under runtime faults, through real ``jobdesk worker`` / ``jobdesk serve`` processes: a
processor that blocks the event loop, one that swallows its cancellation, a CPU-bound child that runs out
of memory or ends without a result. (Partitions and long stalls under load are in ``test_chaos.py``.)

Leases are a few seconds (renewal every third), so each scenario takes seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from app.jobs import queue
from app.jobs.queue import NewJob
from app.processors import CpuContext
from app.settings import Settings
from app.worker import cpu
from app.worker.cpu import run_in_process
from tests.support import processors as support_processors
from tests.support.cli import free_port
from tests.support.factories import TestUser
from tests.support.workers import (
    WorkerProcess,
    serve_process,
    wait_status,
    wait_until,
)

pytestmark = pytest.mark.slow


async def enqueue(
    engine: Any, settings: Settings, user: TestUser, type_: str, input_data: dict[str, Any], **kw: Any
) -> Any:
    async with engine.begin() as conn:
        new = NewJob(type=type_, input_data=input_data, user_id=user.id, **kw)
        return (await queue.enqueue(conn, new, settings)).job["id"]


@contextlib.contextmanager
def processes(*procs: WorkerProcess) -> Iterator[tuple[WorkerProcess, ...]]:
    try:
        yield procs
    finally:
        for p in procs:
            p.close()


async def effects(pg: asyncpg.Connection, job: Any) -> int:
    return await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", job)


async def events(pg: asyncpg.Connection, job: Any, kind: str) -> int:
    return await pg.fetchval("SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = $2", job, kind)


async def worker_of(pg: asyncpg.Connection, proc: WorkerProcess) -> str:
    return await wait_until(
        lambda: pg.fetchval("SELECT id FROM workers WHERE pid = $1", proc.pid), what="the worker's row"
    )


# --- a processor that blocks the event loop ----------------------------------------------------------


async def test_a_processor_blocking_the_loop_costs_no_other_job_its_lease(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """A ``time.sleep(8)`` inside ``async def`` blocks worker A's loop for more than two leases (3 s).
    Its lease keeper renews from its own thread, so neither that job nor the well-behaved ``ctx.sleep``
    job beside it is rescued by worker B: each runs exactly once. The stall is logged naming the job and
    its line, and shows in A's ``workers.health`` (what ``/admin`` reads) while it lasts."""
    settings = make_settings(
        worker_visibility_timeout_secs=3, worker_sweep_interval_secs=0.5, max_concurrent_jobs=2
    )
    with processes(WorkerProcess(settings, tmp_path / "a.log")) as (a,):
        a_id = await worker_of(pg, a)
        calm = await enqueue(engine, settings, owner, "test.effect", {"seconds": 5}, max_attempts=5)
        await wait_status(pg, calm, {"in_progress"})
        blocker = await enqueue(engine, settings, owner, "test.block", {"seconds": 8}, max_attempts=5)
        await wait_status(pg, blocker, {"in_progress"})
        with processes(WorkerProcess(settings, tmp_path / "b.log")) as (b,):
            stalled = await wait_until(
                lambda: pg.fetchval("SELECT health->'loop_stalled' FROM workers WHERE id = $1", a_id),
                timeout=10,
                what="the stall in A's heartbeat row",
            )
            assert str(blocker) in stalled
            for job in (calm, blocker):
                row = await wait_status(pg, job, {"completed", "failed"}, timeout=30)
                assert row["status"] == "completed", row
                assert row["attempts"] == 1, row
            b_claims = await pg.fetchval(
                "SELECT count(*) FROM job_events WHERE actor = $1", await worker_of(pg, b)
            )

        async def resumed() -> bool:
            # The keeper thread notices the loop running again on its next check, which can come a
            # moment after the jobs' outcomes are written.
            return "event loop running again after a stall" in a.output()

        await wait_until(resumed, timeout=10, what="the stall's end in A's log")
        log = a.output()
    for job in (calm, blocker):
        assert await effects(pg, job) == 1
        assert await events(pg, job, "claimed") == 1
        assert await events(pg, job, "rescued") == 0
    assert b_claims == 0
    assert "event loop blocked" in log
    assert str(blocker) in log
    assert "support/processors.py" in log
    assert "event loop running again after a stall" in log


async def test_healthz_answers_fast_while_an_in_app_processor_blocks(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """``jobdesk serve`` with its in-app worker: while a processor blocks the worker's loop for 6 s, the
    web's own loop answers ``/healthz`` at once, and ``/readyz`` says the worker's loop is blocked."""
    settings = make_settings(worker_visibility_timeout_secs=3)
    port = free_port()
    with serve_process(settings, port, tmp_path / "serve.log", LOG_LEVEL="WARNING") as proc:
        try:
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                await wait_until(lambda: _answers(http, "/readyz"), timeout=30, what="serve ready")
                job = await enqueue(engine, settings, owner, "test.block", {"seconds": 6}, max_attempts=1)
                await wait_status(pg, job, {"in_progress"})
                await asyncio.sleep(1.0)
                took = []
                for _ in range(5):
                    started = time.monotonic()
                    r = await http.get("/healthz")
                    took.append(time.monotonic() - started)
                    assert r.status_code == 200
                    await asyncio.sleep(0.3)
                ready = await http.get("/readyz")
                await wait_status(pg, job, {"completed"}, timeout=20)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert max(took) < 0.5, f"/healthz took {max(took):.2f} s while a processor blocked the worker"
    assert ready.status_code == 503
    assert "event loop has been blocked" in ready.json()["checks"]["worker"]


async def _answers(http: httpx.AsyncClient, path: str) -> bool:
    try:
        return (await http.get(path)).status_code == 200
    except httpx.TransportError:
        return False


# --- a processor that swallows its cancellation --------------------------------------------------------


# Case N03 (docs/cases.md).
async def test_a_time_limit_holds_when_the_processor_swallows_cancellation(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """``test.swallow`` (limit 1 s) catches every cancellation and returns after 5 s. The job fails at
    the limit plus the cancel grace, saying so; its late result is discarded and logged; its slot (the
    worker's only one) is not reused until the task really ends, and the worker reports the lingering
    task in its heartbeat row and its metrics meanwhile."""
    settings = make_settings(max_concurrent_jobs=1, job_cancel_grace_secs=0.5, worker_heartbeat_secs=0.5)
    metrics_port = free_port()
    worker = WorkerProcess(settings, tmp_path / "w.log", WORKER_METRICS_ADDR=f"127.0.0.1:{metrics_port}")
    with processes(worker):
        w_id = await worker_of(pg, worker)
        job = await enqueue(engine, settings, owner, "test.swallow", {"seconds": 5}, max_attempts=1)
        row = await wait_status(pg, job, {"failed", "completed"}, timeout=10)
        assert row["status"] == "failed"
        assert row["error_message"] == "took longer than its 1 s limit"
        follower = await enqueue(engine, settings, owner, "noop", {})
        lingering = await wait_until(
            lambda: pg.fetchval("SELECT (health->>'lingering_tasks')::int FROM workers WHERE id = $1", w_id),
            timeout=5,
            what="the lingering task in the heartbeat row",
        )
        async with httpx.AsyncClient(timeout=5) as http:
            scraped = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", follower) == "queued"
        after = await wait_status(pg, follower, {"completed"}, timeout=15)
        await wait_until(lambda: _logged(worker, "late result discarded"), timeout=5, what="the log line")
    took = (row["completed_at"] - row["started_at"]).total_seconds()
    assert 1.0 <= took < 1.0 + 0.5 + 1.0, f"the job ended {took:.2f} s after it started"
    assert await events(pg, job, "completed") == 0
    assert (after["started_at"] - row["started_at"]).total_seconds() >= 4.5  # the slot waited for the task
    assert lingering == 1
    assert "jobdesk_worker_lingering_tasks 1.0" in scraped


async def _logged(worker: WorkerProcess, text: str) -> bool:
    return text in worker.output()


# --- CPU-bound children: memory cap, no result ----------------------------------------------------------


CPU_CASES: list[tuple[dict[str, Any], str, str | None]] = [
    ({"mb": 600}, "failed", "The file is too large to process"),
    ({"mb": 20}, "completed", None),
    ({"mode": "exit0"}, "failed", "exited without returning a result (exit code 0)"),
    ({"mode": "sys_exit"}, "failed", "called sys.exit(0) instead of returning"),
]


async def test_a_cpu_bound_child_over_its_memory_cap_or_without_a_result_fails_clearly(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """``CPU_JOB_MAX_MEMORY_MB=256``: a child allocating 600 MiB fails for good (one attempt) saying the
    file is too large; one allocating 20 MiB completes; a child that exits by itself says so."""
    settings = make_settings()
    with processes(WorkerProcess(settings, tmp_path / "w.log", CPU_JOB_MAX_MEMORY_MB="256")):
        jobs = [
            await enqueue(engine, settings, owner, "test.memory", data, max_attempts=2)
            for data, _, _ in CPU_CASES
        ]
        rows = [await wait_status(pg, job, {"completed", "failed"}, timeout=30) for job in jobs]
    for (data, status, message), row in zip(CPU_CASES, rows, strict=True):
        assert row["status"] == status, (data, row["error_message"])
        if message is not None:
            assert message in row["error_message"], data
    assert rows[0]["attempts"] == 1  # permanent: a retry would only run out of memory again


def test_cpu_slots_belong_to_each_event_loop() -> None:
    """Two event loops in two threads (the in-app worker's and another) each run CPU-bound work: the
    slots' semaphore is per loop, so neither fails with "bound to a different event loop"."""

    def one() -> Any:
        ctx = CpuContext(
            job_id="x", attempt=1, input=support_processors.MemoryInput(mb=1), output_dir=Path(".")
        )
        return asyncio.run(run_in_process(support_processors._hog, ctx))

    with ThreadPoolExecutor(2) as pool:
        results = [f.result(60) for f in [pool.submit(one) for _ in range(2)] + [pool.submit(one)]]
    assert all(r == {"allocated_mb": 1} for r in results)


def test_a_cancel_while_the_child_starts_still_ends_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child starts in a thread; a cancel (a timeout, a cancel request, a stop) that came meanwhile
    left it running, unwatched, until the worker exited: the kill was only armed once the start was
    over. Now the start is waited for and the child killed."""
    started: list[Any] = []
    real_start = cpu._ctx.Process.start

    def slow_start(self: Any) -> None:
        time.sleep(0.5)
        real_start(self)
        started.append(self)

    monkeypatch.setattr(cpu._ctx.Process, "start", slow_start)

    async def cancelled_while_starting() -> None:
        ctx = CpuContext(
            job_id="x", attempt=1, input=support_processors.SecondsInput(seconds=30), output_dir=Path(".")
        )
        task = asyncio.create_task(run_in_process(support_processors.cpu_sleep, ctx))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_while_starting())
    (child,) = started
    child.join(5)
    assert child.exitcode == -signal.SIGKILL, (
        f"the child is {'alive' if child.is_alive() else child.exitcode}"
    )
