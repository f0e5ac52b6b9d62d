"""Storing a file (an upload, a job's output) writes, hashes and copies its bytes: seconds for a large
file, done in the event loop, which meanwhile renewed no lease, sent no heartbeat and answered no request.
The bytes are now stored in a thread; a call cancelled meanwhile leaves no bytes behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.files import FileStore

SLOW_SECS = 0.6


@pytest.fixture
def slow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FileStore:
    store = FileStore(tmp_path / "files")
    real = store._place

    def slow_place(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_SECS)  # a large file on a slow disk
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "_place", slow_place)
    return store


async def _longest_gap(until: asyncio.Future[Any]) -> float:
    """The longest the loop went without running this ticker, until ``until`` is done."""
    gap, last = 0.0, time.monotonic()
    while not until.done():
        await asyncio.sleep(0.01)
        now = time.monotonic()
        gap, last = max(gap, now - last), now
    return gap


async def test_storing_a_file_leaves_the_event_loop_free(
    engine: Any, owner: Any, slow_store: FileStore, pg: asyncpg.Connection
) -> None:
    async def save() -> Any:
        async with engine.begin() as conn:
            return await slow_store.save(conn, user_id=owner.id, name="out.bin", data=b"x" * 1000)

    saving = asyncio.ensure_future(save())
    gap = await _longest_gap(saving)
    row = await saving
    assert gap < SLOW_SECS / 2, f"the loop stood still for {gap:.2f} s while a file was stored"
    assert slow_store.path(row["id"]).read_bytes() == b"x" * 1000
    assert await pg.fetchval("SELECT size FROM files WHERE id = $1", row["id"]) == 1000


async def test_a_store_cancelled_while_its_bytes_are_written_leaves_none(
    engine: Any, owner: Any, slow_store: FileStore, pg: asyncpg.Connection
) -> None:
    async def save() -> Any:
        async with engine.begin() as conn:
            return await slow_store.save(conn, user_id=owner.id, name="out.bin", data=b"y" * 10)

    saving = asyncio.ensure_future(save())
    await asyncio.sleep(SLOW_SECS / 3)
    saving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await saving
    await asyncio.sleep(SLOW_SECS)  # the thread finishes its work, then the bytes are removed
    assert [p.name for p in slow_store.dir.iterdir() if not p.name.startswith(".")] == []
    assert await pg.fetchval("SELECT count(*) FROM files") == 0
