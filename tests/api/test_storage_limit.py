"""The storage limit (``USER_MAX_UPLOAD_BYTES``) holds for every file stored for a person, not only
uploads: a job's outputs (saved by an async processor through ``ctx.files``, or returned as files by a
CPU-bound one) that would take the owner above it fail the job, with the attempt's earlier outputs
deleted. Submissions are not refused for it (a job that stores nothing needs no room): a person whose
files fill the limit can still start jobs, and one that stores a result fails.

A picture of 27 KB under a 60,000-byte limit used to give a thumbnail job eight 192 KB outputs (1.5 MB
stored) and a "run again" of it was still accepted.
"""

from __future__ import annotations

import io
import os
import uuid
from typing import Any

import pytest
from pydantic import Field

from app.processors import Input, JobContext, PermanentError, processor
from tests.api.test_quotas import Scene, assert_limited, job, scene_of  # noqa: F401  (fixture)
from tests.support.workers import running_worker, wait_status

LIMIT = 60_000


class OutputsInput(Input):
    count: int = Field(1, ge=1, le=20)
    size: int = Field(1000, ge=1, le=1_000_000)
    swallow: bool = False


@processor("test.outputs", title="Outputs", description="Saves files (tests only).", input=OutputsInput)
async def outputs(ctx: JobContext[OutputsInput]) -> dict[str, Any]:
    saved = []
    for i in range(ctx.input.count):
        try:
            saved.append(await ctx.files.save(f"out{i}.bin", os.urandom(ctx.input.size)))
        except PermanentError:
            if not ctx.input.swallow:
                raise
    return {"files": saved}


def noise_png(width: int, height: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(buf, "PNG")
    return buf.getvalue()


async def _stored(s: Scene) -> int:
    return int(await s.pg.fetchval("SELECT COALESCE(sum(size), 0) FROM files WHERE user_id = $1", s.user_id))


async def _upload(s: Scene, data: bytes, name: str = "a.bin") -> str:
    r = await s.client.post("/api/files", files={"file": (name, data)}, headers=s.user)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


@pytest.mark.parametrize("swallow", [False, True])
async def test_an_async_processors_output_over_the_limit_fails_the_job_and_removes_its_files(
    scene_of: Any,  # noqa: F811
    swallow: bool,
) -> None:
    s = await scene_of(user_max_upload_bytes=LIMIT)
    await _upload(s, os.urandom(27_000))
    body = {"type": "test.outputs", "input_data": {"count": 4, "size": 20_000, "swallow": swallow}}
    r = await s.client.post("/api/jobs", json=body, headers=s.user)
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    async with running_worker(s.settings):
        row = await wait_status(s.pg, r.json()["id"], {"completed", "failed"})
    assert row["status"] == "failed", row
    error = row["error_message"]
    assert "Not enough room for this job's results" in error, error
    assert "above the limit of 58.6 KiB per person" in error, error
    assert "The 1 file this job had stored were deleted" in error, error
    assert row["attempts"] == 1  # a retry would meet the same limit
    assert await s.pg.fetchval("SELECT count(*) FROM files WHERE job_id = $1", row["id"]) == 0
    assert await _stored(s) == 27_000
    files_dir = s.settings.jobdesk_data_dir / "files"
    assert len([p for p in files_dir.iterdir() if not p.name.startswith(".")]) == 1
    # The person sees the reason in words.
    shown = (await s.client.get(f"/api/jobs/{jid}", headers=s.user)).json()
    assert "Not enough room" in str(shown), shown


async def test_a_cpu_bound_processors_outputs_over_the_limit_fail_the_job(scene_of: Any) -> None:  # noqa: F811
    s = await scene_of(user_max_upload_bytes=LIMIT)
    picture = noise_png(100, 60)
    assert 15_000 < len(picture) < 20_000
    image = await _upload(s, picture, "noise.png")
    body = {
        "type": "images.thumbnail",
        "input_data": {"image": image, "sizes": [100, 99, 98, 97], "format": "PNG"},
    }
    r = await s.client.post("/api/jobs", json=body, headers=s.user)
    assert r.status_code == 201, r.text
    async with running_worker(s.settings):
        row = await wait_status(s.pg, r.json()["id"], {"completed", "failed"}, timeout=60)
    assert row["status"] == "failed", row
    assert "Not enough room for this job's results" in row["error_message"], row["error_message"]
    outputs = "SELECT count(*) FROM files WHERE job_id = $1 AND id <> $2"
    assert await s.pg.fetchval(outputs, row["id"], uuid.UUID(image)) == 0
    assert await _stored(s) == len(picture)


async def test_while_the_files_fill_the_limit_jobs_are_still_taken(
    scene_of: Any,  # noqa: F811
) -> None:
    s = await scene_of(user_max_upload_bytes=LIMIT)
    done = (await s.client.post("/api/jobs", json=job(0), headers=s.user)).json()["id"]
    failed = (await s.client.post("/api/jobs", json=job(1), headers=s.user)).json()["id"]
    r = await s.client.post("/api/batches", json={"type": "test.step", "rows": [{}, {}]}, headers=s.user)
    assert r.status_code == 201, r.text
    batch = r.json()["id"]
    await s.pg.execute("UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1", done)
    await s.pg.execute(
        "UPDATE jobs SET status = 'failed', attempts = max_attempts, completed_at = now()"
        " WHERE id = $1 OR batch_id = $2",
        failed,
        batch,
    )
    # Results stored before this rule (or a limit lowered since) fill the person's room.
    await s.pg.execute(
        "INSERT INTO files (id, user_id, job_id, name, content_type, size, sha256)"
        " VALUES (gen_random_uuid(), $1, $2, 'big.png', 'image/png', $3, 'x')",
        s.user_id,
        done,
        1_500_000,
    )
    # Every path still takes the job: the limit is held where a result would be stored.
    assert (await s.client.post("/api/jobs", json=job(2), headers=s.user)).status_code == 201
    keyed = job(3, idempotency_key="k1")
    assert (await s.client.post("/api/jobs", json=keyed, headers=s.user)).status_code == 201
    two = {"name": "two", "steps": [job(0, key="a"), job(1, key="b", depends_on=["a"])]}
    assert (await s.client.post("/api/pipelines", json=two, headers=s.user)).status_code == 201
    assert (await s.client.post(f"/api/jobs/{done}/run-again", headers=s.user)).status_code in (200, 201)
    assert (await s.client.post(f"/api/jobs/{failed}/retry", headers=s.user)).status_code == 200
