"""Deleting a job deletes the files it produced, in its transaction, and their bytes after commit.

``DELETE /api/jobs/{id}`` of a job with outputs answered 204 but left its outputs in ``files``, attached to
no job, still counted in the owner's stored bytes, until retention took them 30 days later. The upload its
input named is the person's and stays.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.files import FileStore, remove_after_commit
from app.processors import FileId, Input, JobContext, processor
from tests.api.test_quotas import Scene, scene_of  # noqa: F401  (fixture)
from tests.support.workers import running_worker, wait_status


class FromUploadInput(Input):
    source: FileId


@processor(
    "test.from_upload", title="From upload", description="Two outputs (tests only).", input=FromUploadInput
)
async def from_upload(ctx: JobContext[FromUploadInput]) -> dict[str, Any]:
    return {"files": [await ctx.files.save(f"out{i}.bin", os.urandom(5_000)) for i in range(2)]}


async def _usage(s: Scene) -> int:
    r = await s.client.get(f"/api/users/{s.user_id}/usage", headers=s.admin)
    assert r.status_code == 200, r.text
    return int(r.json()["stored_bytes"])


def _on_disk(s: Scene) -> set[str]:
    files_dir = s.settings.jobdesk_data_dir / "files"
    return {p.name for p in files_dir.iterdir() if not p.name.startswith(".")}


async def test_deleting_a_job_deletes_its_outputs_and_their_bytes_and_keeps_its_upload(
    scene_of: Any,  # noqa: F811
) -> None:
    s = await scene_of()
    r = await s.client.post("/api/files", files={"file": ("in.bin", os.urandom(3_000))}, headers=s.user)
    assert r.status_code == 201, r.text
    upload = str(r.json()["id"])
    r = await s.client.post(
        "/api/jobs", json={"type": "test.from_upload", "input_data": {"source": upload}}, headers=s.user
    )
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    async with running_worker(s.settings):
        row = await wait_status(s.pg, jid, {"completed", "failed"})
    assert row["status"] == "completed", row
    attached = await s.pg.fetch("SELECT CAST(id AS text) AS id FROM files WHERE job_id = $1", row["id"])
    outputs = {r["id"] for r in attached} - {upload}
    assert len(outputs) == 2 and upload in {r["id"] for r in attached}, attached
    assert await _usage(s) == 13_000
    assert outputs | {upload} <= _on_disk(s)

    assert (await s.client.delete(f"/api/jobs/{jid}", headers=s.admin)).status_code == 204
    assert await _usage(s) == 3_000
    left = await s.pg.fetch("SELECT CAST(id AS text) AS id, job_id FROM files WHERE user_id = $1", s.user_id)
    assert [(r["id"], r["job_id"]) for r in left] == [(upload, None)]
    assert _on_disk(s) == {upload}


async def test_bytes_go_when_the_outermost_transaction_commits_and_stay_when_it_rolls_back(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = FileStore(tmp_path)
    ids = [uuid.uuid4() for _ in range(3)]
    for fid in ids:
        (tmp_path / str(fid)).write_bytes(b"x")
    async with AsyncSession(engine) as db:
        await db.execute(text("SELECT 1"))
        remove_after_commit(db, store, [ids[0]])
        async with db.begin_nested():
            await db.execute(text("SELECT 1"))
        assert (tmp_path / str(ids[0])).exists()  # a savepoint's release is no commit
        with contextlib.suppress(RuntimeError):
            async with db.begin_nested():
                raise RuntimeError  # nor is a savepoint's rollback the transaction's
        await db.commit()
        assert not (tmp_path / str(ids[0])).exists()
        await db.execute(text("SELECT 1"))
        remove_after_commit(db, store, [ids[1]])
        await db.rollback()
        await db.execute(text("SELECT 1"))
        await db.commit()
        assert (tmp_path / str(ids[1])).exists()  # rolled back: the rows are back, so are the bytes
        assert (tmp_path / str(ids[2])).exists()
