"""A file that cannot be written to the files folder (the disk full, the folder read-only) is the server's
fault and a passing one: answered 503 in words that say so and that nothing was saved, on the API and a
job form alike, and logged for the administrators. It was a 500 "Something went wrong", and before that a
503 that blamed the database."""

from __future__ import annotations

import errno
from typing import Any

import asyncpg
import pytest
import structlog.testing

from app.files import FileStore
from tests.support.webkit import app_client, bearer


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "the server has no room left for files"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "the server has no room left for files"),
        (
            PermissionError(errno.EACCES, "Permission denied", "/data/files/.upload-x"),
            "cannot write its files",
        ),
        (OSError(errno.EROFS, "Read-only file system", "/data/files/.upload-x"), "cannot write its files"),
    ],
)
async def test_a_file_the_folder_cannot_take_is_a_503_that_says_so(
    make_settings: Any, db_url: str, pg: asyncpg.Connection, monkeypatch: Any, error: OSError, words: str
) -> None:
    def refuse(*args: Any, **kw: Any) -> Any:
        raise error

    monkeypatch.setattr(FileStore, "_store_bytes", refuse)
    async with app_client(make_settings(worker_enabled=False)) as client:
        _, h = await bearer(db_url, "disk@example.com")
        with structlog.testing.capture_logs() as logs:
            answer = await client.post("/api/files", files={"file": ("a.csv", b"a,b\n1,2\n")}, headers=h)
    assert answer.status_code == 503, answer.text
    detail = answer.json()["detail"]
    assert words in detail and "Nothing was saved" in detail and "database" not in detail, detail
    assert [e for e in logs if e["event"] == "a file could not be stored"], logs
    assert await pg.fetchval("SELECT count(*) FROM files") == 0
