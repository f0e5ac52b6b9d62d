"""Bytes in the files folder that no ``files`` row names: a file's bytes are written before its row is
inserted, so a transaction that stored a file and then rolled back (a refused request, a commit that
failed) or never ended (a killed process) leaves them there, and retention, which deletes files by their
rows, never found them. The retention sweep now lists the folder and deletes them once they are older
than the retention, as it does an upload nothing names."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from uuid_utils.compat import uuid7

from app.files import FileStore
from app.worker.maintenance import Retention

DAY = 86400.0


def uuid7_at(seconds: float) -> uuid.UUID:
    """A UUIDv7 made at ``seconds`` since the epoch (as a file id made then would be)."""
    value = (int(seconds * 1000) << 80) | (0x7 << 76) | (uuid.uuid4().int & ((1 << 76) - 1))
    return uuid.UUID(int=(value & ~(0x3 << 62)) | (0x2 << 62))


class _Quiet:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append({"event": event, **kw})


async def test_retention_deletes_old_bytes_no_row_names_and_nothing_else(
    engine: Any, settings: Any, owner: Any, pg: asyncpg.Connection, tmp_path: Path
) -> None:
    store = FileStore(tmp_path / "files")
    store.dir.mkdir()
    now = time.time()

    def put(name: object, written: float = now - 40 * DAY) -> str:
        path = store.dir / str(name)
        path.write_bytes(b"x")
        os.utime(path, (written, written))
        return path.name

    recorded = put(uuid7_at(now - 40 * DAY))
    await pg.execute(
        "INSERT INTO files (id, user_id, name, content_type, size, sha256) VALUES ($1, $2, 'a.txt', "
        "'text/plain', 1, '')",
        uuid.UUID(recorded),
        owner.id,
    )
    doomed = {
        put(uuid7_at(now - 40 * DAY)),  # a rolled-back upload of 40 days ago
        put(uuid.uuid4()),  # an id that says nothing of its age: its bytes' time decides
        put(".upload-k1l2m3"),  # a copy a stopped process left half-written
    }
    kept = {
        recorded,
        put(uuid7_at(now - 10 * DAY), now - 10 * DAY),  # younger than JOB_RETENTION_DAYS (30)
        put(uuid7(), now),  # just written: its row may be in a transaction not committed yet
        put(uuid7_at(now - 40 * DAY), now),  # an old id, its bytes written now
        put(".upload-n4o5p6", now),  # an upload being copied
        put("notes.txt"),  # not a name Jobdesk writes
        put(str(uuid7_at(now - 40 * DAY)).upper()),  # nor this
    }
    log = _Quiet()
    retention = Retention(engine, settings, files=store, log=log)
    await retention.run_once()
    assert {p.name for p in store.dir.iterdir()} == kept, doomed
    assert [(x["files"], x["partial"]) for x in log.lines] == [(2, 1)]
    assert await pg.fetchval("SELECT count(*) FROM files") == 1
    # the folder is listed once an hour, not on every pass
    late = put(uuid7_at(now - 40 * DAY))
    await retention.run_once()
    assert (store.dir / late).exists()
