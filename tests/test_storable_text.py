"""Text PostgreSQL cannot store — lone UTF-16 surrogates, NUL characters, NaN — never stops a job from
being recorded, and is refused with a 422 naming the field when someone sends it as input.

Through real processes: ``jobdesk serve`` (without its in-app worker) and a ``worker.py`` subprocess
running the job types of ``support_text_processors``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from support_text_processors import BAD, STORED
from webkit import add_token, add_user, running_server
from workers import WorkerProcess, wait_status

from app.jobs.payload import cap_text, json_text, storable, storable_json, storable_text
from app.settings import Settings

TESTS = Path(__file__).resolve().parent
REPLACED = "\ufffd"


# --- the one function, directly -------------------------------------------------------------------


def test_storable_replaces_nul_and_lone_surrogates_everywhere_and_keeps_pairs() -> None:
    assert storable_text(BAD) == STORED
    assert storable_text("\ud83d\ude00") == "\U0001f600"  # a pair held as two code points is one character
    assert storable_text("plain ascii") == "plain ascii" and storable_text("ünï") == "ünï"
    value = {f"k{BAD}": [BAD, ("t", float("nan")), {"n": float("-inf"), "big": 10**5000}], 3: object}
    assert storable(value) == {
        f"k{STORED}": [STORED, ["t", None], {"n": None, "big": None}],
        "3": "<class 'object'>",
    }
    nested: list[Any] = []
    nested.append(nested)  # a structure that contains itself is stored, cut at a fixed depth
    assert json.loads(json_text(nested))
    for text in (json_text(value), storable_json(json.dumps({"k": BAD, "n": float("nan")})), cap_text(BAD)):
        assert text is not None
        text.encode("utf-8")  # encodable: no lone surrogate left
        assert "\x00" not in text and "\\u0000" not in text and "NaN" not in text
    assert storable_json('{"a": "\\ud800", "b": NaN}') == '{"a":"\ufffd","b":null}'


# --- through a real worker and server ------------------------------------------------------------


@pytest.fixture
async def live(
    db_url: str, make_settings: Any, tmp_path: Path, pg: asyncpg.Connection
) -> AsyncIterator[tuple[str, dict[str, str], WorkerProcess]]:
    """A server and a worker on this test's database; yields the base URL, an admin's headers and the
    worker."""
    admin = await add_user(db_url, "root@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    settings: Settings = make_settings(job_retry_intervals=[0.2], job_retry_jitter=0.0)
    worker = WorkerProcess(
        settings, tmp_path / "worker.log", JOBDESK_PROCESSOR_MODULES="support_text_processors"
    )
    env = {"JOBDESK_PROCESSOR_MODULES": "support_text_processors", "PYTHONPATH": f"{TESTS}:{TESTS.parent}"}
    try:
        with running_server(db_url, tmp_path / "serve", **env) as base:
            yield base, headers, worker
    finally:
        log = worker.output()
        worker.close()
    assert "could not record" not in log and "could not be recorded" not in log, log[-3000:]


async def _submit(client: httpx.AsyncClient, type_: str, input_data: dict[str, Any], **kw: Any) -> uuid.UUID:
    r = await client.post("/api/jobs", json={"type": type_, "input_data": input_data, **kw})
    assert r.status_code == 201, r.text
    return uuid.UUID(r.json()["id"])


async def test_unstorable_text_from_processors_is_recorded_and_in_input_is_a_422_naming_the_field(
    live: tuple[str, dict[str, str], WorkerProcess], pg: asyncpg.Connection
) -> None:
    base, headers, worker = live
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=20) as client:
        result_job = await _submit(client, "text.bad_result", {})
        error_job = await _submit(client, "text.bad_error", {}, max_attempts=2)
        permanent_job = await _submit(client, "text.bad_error", {"permanent": True})
        progress_job = await _submit(client, "text.bad_progress", {})
        next_job = await _submit(client, "text.bad_next", {})

        # a result with unstorable values and keys (and NaN) completes, made storable
        row = await wait_status(pg, result_job, {"completed", "failed"})
        assert row["status"] == "completed", row["error_message"]
        assert json.loads(row["result_data"]) == {
            "value": STORED,
            f"key{STORED}": 1,
            "nested": [{f"k{STORED}": [STORED, "\U0001f600", None, None]}],
            "pair": "\U0001f600",
        }
        api = (await client.get(f"/api/jobs/{result_job}")).json()
        assert api["result_data"]["value"] == STORED

        # an error message: the failed attempt is retried (its event keeps the message), then fails
        row = await wait_status(pg, error_job, {"failed"})
        assert row["attempts"] == 2
        assert row["error_message"].startswith(f"RuntimeError: attempt 2 broke on {STORED}\n")
        retry = await pg.fetchval(
            "SELECT message FROM job_events WHERE job_id = $1 AND kind = 'retry_scheduled'", error_job
        )
        assert retry.startswith(f"RuntimeError: attempt 1 broke on {STORED}\n"), retry
        row = await wait_status(pg, permanent_job, {"failed"})
        assert row["attempts"] == 1 and row["error_message"] == f"refused {STORED}"

        # a person's retry of the failed job runs it again (the previous error goes into its event)
        r = await client.post(f"/api/jobs/{permanent_job}/retry")
        assert r.status_code == 200, r.text
        row = await wait_status(pg, permanent_job, {"failed"}, timeout=20)
        assert row["attempts"] == 1
        data = await pg.fetchval(
            "SELECT data FROM job_events WHERE job_id = $1 AND kind = 'retried'", permanent_job
        )
        assert data is not None and json.loads(data)["previous_error"] == f"refused {STORED}"

        # a progress message and a log line
        row = await wait_status(pg, progress_job, {"completed", "failed"})
        assert row["status"] == "completed", row["error_message"]
        assert row["progress_message"] == f"half {STORED}"
        assert '"event": "logged a\\ud800b\\u0000c\\udfffd"' in worker.output()

        # a next job whose input cannot be stored is the processor's mistake: refused naming the field
        row = await wait_status(pg, next_job, {"completed", "failed"})
        assert row["status"] == "failed" and "input_data.name" in row["error_message"], row
        assert "lone surrogate" in row["error_message"]

        await _refused_input(client)


async def _refused_input(client: httpx.AsyncClient) -> None:
    """Input with such text, sent as raw JSON with escapes: 422 naming the field, nothing stored."""
    cases = [
        ('{"type": "text.bad_result", "input_data": {"name": "x\\ud800"}}', "input_data.name"),
        ('{"type": "text.bad_result", "input_data": {"name": "\\udc00"}}', "input_data.name"),
        ('{"type": "noop", "input_data": {"items": [1, {"\\ud800k": 1}]}}', "input_data.items[1].\\ud800k"),
        ('{"type": "text.bad_result", "input_data": {"name": "a\\u0000"}}', "input_data.name"),
        ('{"type": "noop", "input_data": {}, "title": "t\\udfff"}', "title"),
    ]
    for body, field in cases:
        r = await client.post(
            "/api/jobs", content=body.encode(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 422, (body, r.status_code, r.text)
        assert field in r.json().get("errors", {}), (body, r.json())
    # the same input in a pipeline's step
    pipeline = b'{"name": "p", "steps": [{"key": "a", "type": "text.bad_result", "input_data": {"name": "\\ud800"}}]}'
    r = await client.post("/api/pipelines", content=pipeline, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "steps[0].input_data.name" in r.json().get("errors", {}), r.text
    # a valid surrogate pair is an ordinary character
    r = await client.post(
        "/api/jobs",
        content=b'{"type": "noop", "input_data": {"name": "\\ud83d\\ude00"}}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 201 and r.json()["input_data"] == {"name": "\U0001f600"}, r.text
