"""A part of the sweep that hangs — a statement waiting for a lock another transaction holds, a file system
that stopped answering — is abandoned at its bound (a heartbeat), logged and counted as that part's
failure, and retried later on its own; the other parts go on meanwhile, pass after pass."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import asyncpg
import pytest
from structlog.testing import capture_logs

from app import metrics
from app.settings import Settings
from app.worker import maintenance
from app.worker.maintenance import Retention, ScheduleFiring, Upkeep
from tests.support import processors as support_processors  # noqa: F401  (registers test.effect)
from tests.support.workers import running_worker, wait_until

FAILED_LINE = "a part of the sweep failed; the others go on and it is tried again later"


@pytest.fixture
def fast(make_settings: Any) -> Settings:
    # a heartbeat of 1 s: the bound of each part
    return make_settings(worker_sweep_interval_secs=0.1, worker_visibility_timeout_secs=3)


def failures(part: str) -> float:
    return metrics.SWEEP_FAILURES.labels(part)._value.get()


def counting(monkeypatch: Any, cls: Any) -> list[int]:
    """Count the runs of ``cls.run_once`` (the real one still runs)."""
    runs = [0]
    real = cls.run_once

    async def counted(self: Any) -> Any:
        runs[0] += 1
        return await real(self)

    monkeypatch.setattr(cls, "run_once", counted)
    return runs


async def test_upkeep_waiting_for_a_lock_held_elsewhere_is_abandoned_cancelled_and_counted(
    engine: Any, fast: Settings, pg: asyncpg.Connection, db_url: str, monkeypatch: Any
) -> None:
    """Upkeep deletes worker rows not seen for a day; another transaction keeps one of them locked (a
    stuck session), so upkeep waits for that lock. Its transaction was closed at its bound as if the
    database were out of reach: not counted nor shown as the part's failure, logged as an outage that
    ended the pass, and its statement left waiting on the server. Bounded as a part, upkeep is abandoned,
    its statement cancelled, counted as failing while the other parts go on, and it works again once
    the lock is let go."""
    await pg.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, version, listener_connected, types, last_seen_at)"
        " VALUES ('long-gone', 'h', 1, 1, 'v', false, '{}', now() - interval '2 days')"
    )
    monkeypatch.setattr(maintenance, "MAINTENANCE_INTERVAL_SECS", 0.1)
    holder = await asyncpg.connect(db_url.replace("postgresql+asyncpg://", "postgresql://"))
    fired = counting(monkeypatch, ScheduleFiring)
    retentions = counting(monkeypatch, Retention)
    before = failures("upkeep")
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM workers WHERE id = 'long-gone' FOR UPDATE")
        with capture_logs() as logs:
            async with running_worker(fast) as worker:
                await wait_until(lambda: waiting_for_a_lock(pg), timeout=10, what="upkeep waiting")
                await wait_until(
                    lambda: asyncio.sleep(0, "upkeep" in worker.maintenance.parts.failing),
                    timeout=5,
                    what="upkeep abandoned at its bound",
                )
                then, kept = fired[0], retentions[0]
                await wait_until(
                    lambda: asyncio.sleep(0, fired[0] >= then + 5 and retentions[0] >= kept + 3),
                    timeout=10,
                    what="the other parts going on",
                )
                failing = worker.maintenance.parts.failing["upkeep"]
                assert failing.error == "no answer within 1 s; given up", failing.error
                await tx.rollback()
                await wait_until(
                    lambda: pg.fetchval("SELECT NOT EXISTS (SELECT 1 FROM workers WHERE id = 'long-gone')"),
                    timeout=30,
                    what="upkeep working again",
                )
                assert worker.fatal is None
                assert worker.dead_side_tasks() == []
    finally:
        await holder.close()
    assert failures("upkeep") - before >= 1
    failed = [e for e in logs if e["event"] == FAILED_LINE]
    assert [e["part"] for e in failed] == ["upkeep"]
    assert not [e for e in logs if e["event"] == "sweep failed: database unavailable"]
    # the abandoned statement was cancelled on the server: no session of the worker's still waits
    assert not await waiting_for_a_lock(pg)


async def waiting_for_a_lock(pg: asyncpg.Connection) -> int:
    """How many sessions of a worker wait for a lock now."""
    return int(
        await pg.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'jobdesk-worker:%'"
            " AND wait_event_type = 'Lock' AND datname = current_database()"  # not another test's worker
        )
    )


async def test_retention_on_a_file_system_that_stopped_answering_is_abandoned_and_the_sweep_goes_on(
    fast: Settings, monkeypatch: Any
) -> None:
    """Retention lists the files folder in a thread; on a file system that stopped answering (a hung
    network mount) the listing never returns. The sweep waited for it for ever: no rescue, schedule or
    upkeep ran again in this worker. Abandoned at its bound, it is logged and counted as failing, and the
    other parts go on."""
    stuck, entered = threading.Event(), threading.Event()

    def hung(self: Any, before: float) -> Any:
        entered.set()
        stuck.wait(30)
        return [], []

    monkeypatch.setattr(maintenance, "MAINTENANCE_INTERVAL_SECS", 0.1)
    monkeypatch.setattr("app.files.FileStore.unrecorded_candidates", hung)
    fired = counting(monkeypatch, ScheduleFiring)
    upkeeps = counting(monkeypatch, Upkeep)
    retentions = counting(monkeypatch, Retention)
    before = failures("retention")
    try:
        with capture_logs() as logs:
            async with running_worker(fast) as worker:
                await wait_until(lambda: asyncio.sleep(0, entered.is_set()), what="the listing hung")
                then, upkept = fired[0], upkeeps[0]
                await wait_until(
                    lambda: asyncio.sleep(0, fired[0] >= then + 5 and upkeeps[0] >= upkept + 3),
                    timeout=10,
                    what="the other parts going on",
                )
                assert worker.fatal is None
    finally:
        stuck.set()
    # logged once, counted; run again since (the hourly listing then waits for its hour)
    failed = [e for e in logs if e["event"] == FAILED_LINE]
    assert [(e["part"], e["error"]) for e in failed] == [("retention", "no answer within 1 s; given up")]
    assert failures("retention") - before == 1
    assert retentions[0] >= 2


async def test_retention_deletes_bytes_off_the_event_loop(
    engine: Any, fast: Settings, monkeypatch: Any, tmp_path: Any
) -> None:
    """Retention deletes the bytes of up to thousands of files a pass. On a slow or stalled file system
    (a network mount) each deletion waits, and done on the event loop they stopped everything the worker
    does meanwhile: lease renewals, claims, outcomes. Done in a thread, the loop goes on."""
    import time
    import uuid

    from app.files import FileStore

    def slow_remove(self: Any, file_ids: list[uuid.UUID]) -> None:
        time.sleep(1.0)

    async def pruned(conn: Any, days: int) -> dict[str, Any]:
        return {"jobs": 1, "pipelines": 0, "batches": 0, "files": [uuid.uuid4()]}

    monkeypatch.setattr(FileStore, "remove", slow_remove)
    monkeypatch.setattr("app.jobs.queue.prune", pruned)
    retention = Retention(engine, fast, files=FileStore(tmp_path), log=maintenance_log())
    retention.scanned_at = time.monotonic()  # not the hourly listing
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            gaps.append(time.monotonic() - last)
            last = time.monotonic()

    ticking = asyncio.create_task(ticker())
    try:
        await retention.run_once()
        await asyncio.sleep(0.05)  # the tick after the pass is counted too
    finally:
        ticking.cancel()
    assert max(gaps) < 0.5, max(gaps)


def maintenance_log() -> Any:
    import structlog

    return structlog.get_logger("test")
