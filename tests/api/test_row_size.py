"""A batch's row over the input size limit is refused as a job's input over it is — a 413 — with the row
named once and the sentence ended once; every other problem of the batch is still named beside it."""

from __future__ import annotations

from typing import Any

import asyncpg

from app.jobs.payload import json_text
from tests.support.webkit import add_token, add_user, app_client

EMAIL = {"to": ["a@example.com"], "subject": "s", "body": "b"}


async def test_a_row_over_the_size_limit_is_a_413_in_clean_words(
    make_settings: Any, pg: asyncpg.Connection
) -> None:
    settings = make_settings(worker_enabled=False, job_max_input_bytes=1024)
    db = settings.database_url or ""
    ann = await add_user(db, "ann@example.com", admin=True)
    big = {**EMAIL, "body": "x" * 2000}
    async with app_client(settings) as client:
        headers = {"Authorization": f"Bearer {await add_token(db, ann.id)}"}
        job = await client.post("/api/jobs", json={"type": "email.send", "input_data": big}, headers=headers)
        assert job.status_code == 413, job.text
        r = await client.post(
            "/api/batches",
            json={"type": "email.send", "rows": [big, {**EMAIL, "to": "nobody"}]},
            headers=headers,
        )
        assert r.status_code == 413, r.text
        detail, errors = r.json()["detail"], r.json()["errors"]
        assert detail.startswith("rows[0]: is "), detail
        assert detail.count("rows[0]") == 1 and ".." not in detail, detail
        assert detail.endswith("instead (and problems in 1 more row). Nothing was started."), detail
        assert errors["rows[0]"].startswith("is ") and "JOB_MAX_INPUT_BYTES" in errors["rows[0]"], errors
        assert any(k.startswith("rows[1]") for k in errors), errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_size_one_byte_over_its_limit_reads_apart_from_the_limit(
    make_settings: Any, pg: asyncpg.Connection
) -> None:
    """Sizes are rounded for reading (1,536 bytes: "1.5 KiB"), but never so far that a refusal says a size
    is its own limit: one byte over is said in exact bytes."""
    settings = make_settings(worker_enabled=False, job_max_input_bytes=1024)
    db = settings.database_url or ""
    ann = await add_user(db, "ann@example.com", admin=True)
    body = "x" * (1025 - len(json_text({"b": ""})))
    assert len(json_text({"b": body}).encode()) == 1025
    async with app_client(settings) as client:
        headers = {"Authorization": f"Bearer {await add_token(db, ann.id)}"}
        job = await client.post(
            "/api/jobs", json={"type": "noop", "input_data": {"b": body}}, headers=headers
        )
        assert job.status_code == 413, job.text
        assert "is 1,025 bytes; the limit is 1,024 bytes (JOB_MAX_INPUT_BYTES)" in job.json()["detail"], (
            job.text
        )
        # apart when rounded, rounded they stay
        job = await client.post(
            "/api/jobs", json={"type": "noop", "input_data": {"b": "x" * 1600}}, headers=headers
        )
        assert "is 1.6 KiB; the limit is 1 KiB" in job.json()["detail"], job.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
