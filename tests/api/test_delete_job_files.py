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


async def test_the_inputs_that_may_name_an_output_are_read_once_for_all_outputs(
    engine: AsyncEngine, settings: Any, pg: Any
) -> None:
    """DELETE_JOB_OUTPUTS searched every input of the owner's other jobs and pipelines, and every
    schedule's, once per output file (a correlated search per row): a job with many outputs read the
    owner's inputs that many times. They are read once now, and the same outputs go: those no other input
    names, never the upload the job's own input names."""
    from app.files import DELETE_JOB_OUTPUTS
    from tests.support.factories import make_job, make_user

    ann = await make_user(pg)
    bob = await make_user(pg)
    upload, by_job, by_pipeline, by_schedule, *free = (uuid.uuid4() for _ in range(7))
    job = await make_job(engine, settings, ann)
    other = await make_job(engine, settings, ann)
    bobs = await make_job(engine, settings, bob)
    await pg.execute("UPDATE jobs SET input_data = $2 WHERE id = $1", job["id"], f'{{"source": "{upload}"}}')
    await pg.execute(
        "UPDATE jobs SET input_data = $2 WHERE id = $1",
        other["id"],
        f'{{"files": ["{str(by_job).upper()}"]}}',
    )
    await pg.execute("UPDATE jobs SET input_data = $2 WHERE id = $1", bobs["id"], f'{{"f": "{free[0]}"}}')
    await pg.execute(
        "INSERT INTO pipelines (id, name, user_id, input_data) VALUES ($1, 'p', $2, $3)",
        uuid.uuid4(),
        ann.id,
        f'{{"a": {{"b": "see {by_pipeline}x"}}}}',
    )
    async with engine.begin() as conn:
        from app.actions import schedules as schedule_actions

        admin = await make_user(pg, admin=True)
        await schedule_actions.create_schedule(
            conn, admin, cron="0 9 * * *", job_type="noop", settings=settings
        )
    await pg.execute("UPDATE schedules SET input_data = $1", f'{{"x": "{by_schedule}"}}')
    for fid in (upload, by_job, by_pipeline, by_schedule, *free):
        await pg.execute(
            "INSERT INTO files (id, user_id, job_id, name, content_type, size, sha256)"
            " VALUES ($1, $2, $3, 'f', 'application/octet-stream', 1, 'x')",
            fid,
            ann.id,
            job["id"],
        )
    async with engine.connect() as conn:
        deleted = set((await conn.execute(DELETE_JOB_OUTPUTS, {"job_id": job["id"]})).scalars())
        await conn.rollback()
        explain = text(f"EXPLAIN (ANALYZE, FORMAT JSON) {DELETE_JOB_OUTPUTS.text}")
        plan = (await conn.execute(explain, {"job_id": job["id"]})).scalar_one()
        await conn.rollback()
    assert deleted == set(free), deleted

    def scans(node: dict[str, Any]) -> list[tuple[str, int]]:
        found = [(node["Relation Name"], node["Actual Loops"])] if "Relation Name" in node else []
        for child in node.get("Plans", []):
            found += scans(child)
        return found

    read = [
        (table, loops)
        for table, loops in scans(plan[0]["Plan"])
        if table in ("jobs", "pipelines", "schedules")
    ]
    assert {t for t, _ in read} == {"jobs", "pipelines", "schedules"}, read
    assert all(loops == 1 for _, loops in read), read


async def test_deleting_a_job_deletes_its_bytes_off_the_event_loop_and_returns_once_they_are_gone(
    engine: AsyncEngine, settings: Any, pg: Any, monkeypatch: Any
) -> None:
    """The bytes of a deleted job's outputs were deleted on the event loop as the request's transaction
    committed. On a slow or stalled file system (a network mount) that stopped everything the process does
    meanwhile; under ``jobdesk serve`` the in-app worker shares that loop, so its lease renewals, claims and
    outcomes too. They are deleted in a thread now, and the commit (the answer after it) still comes once
    they are gone. The action is called as the web's delete calls it, on this test's loop (the test
    client runs the app on a loop of its own, which a ticker here would not see stop)."""
    import asyncio
    import time

    from app.actions import jobs as job_actions
    from app.actions.trail import Actor
    from tests.support.factories import make_job, make_user

    admin = await make_user(pg, admin=True)
    job = await make_job(engine, settings, admin)
    store = FileStore(settings.files_dir)
    async with engine.begin() as conn:  # as a worker leaves a job that stored an output
        output = await store.save(conn, user_id=admin.id, name="out.bin", data=b"x" * 100, job_id=job["id"])
    await pg.execute("UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1", job["id"])
    stored = store.path(output["id"])
    assert stored.is_file()
    real = FileStore.remove

    def slow_remove(self: FileStore, file_ids: list[uuid.UUID]) -> None:
        time.sleep(1.0)  # a file system that takes its time to answer
        real(self, file_ids)

    monkeypatch.setattr(FileStore, "remove", slow_remove)
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            gaps.append(time.monotonic() - last)
            last = time.monotonic()

    ticking = asyncio.create_task(ticker())
    try:
        async with AsyncSession(engine) as db:
            await job_actions.delete(db, Actor(admin, settings=settings), job["id"])
            await db.commit()  # as the web's answer starts
            gone = not stored.exists()
        await asyncio.sleep(0.05)  # the tick after the commit is counted too
    finally:
        ticking.cancel()
    assert gone, "the commit returned before the bytes were deleted"
    assert max(gaps) < 0.5, f"the event loop stopped for {max(gaps):.2f} s"


async def test_bytes_that_cannot_be_deleted_after_commit_leave_the_answer_a_success(
    scene_of: Any,  # noqa: F811
    monkeypatch: Any,
) -> None:
    """The deletion of a deleted job's output bytes ran after the commit; when it raised (a permission, a
    read-only mount) the commit call raised too, and the web answered 503 "Nothing was saved" about a
    deletion the database had kept. It is logged now, the bytes left for retention, the answer a 204."""
    from structlog.testing import capture_logs

    s = await scene_of()
    r = await s.client.post("/api/jobs", json={"type": "noop", "input_data": {}}, headers=s.admin)
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    await s.pg.execute(
        "UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1", uuid.UUID(jid)
    )
    fid = uuid.uuid4()
    await s.pg.execute(
        "INSERT INTO files (id, user_id, job_id, name, content_type, size, sha256)"
        " VALUES ($1, $2, $3, 'out.bin', 'application/octet-stream', 1, 'x')",
        fid,
        s.admin_id,
        uuid.UUID(jid),
    )
    stored = FileStore(s.settings.files_dir).path(fid)
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_bytes(b"x")

    def refused(self: FileStore, file_ids: list[uuid.UUID]) -> None:
        raise PermissionError(13, "Permission denied", str(file_ids[0]))

    monkeypatch.setattr(FileStore, "remove", refused)
    with capture_logs() as logs:
        r = await s.client.delete(f"/api/jobs/{jid}", headers=s.admin)
    assert r.status_code == 204, r.text
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE id = $1", uuid.UUID(jid)) == 0
    assert await s.pg.fetchval("SELECT count(*) FROM files WHERE id = $1", fid) == 0
    assert stored.exists()  # left for retention, which deletes bytes no row names
    said = [e for e in logs if e.get("file_id") == str(fid)]
    assert said and "PermissionError" in said[0]["error"], logs
