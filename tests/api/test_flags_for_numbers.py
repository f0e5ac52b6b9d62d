"""A yes/no (``true``/``false``) where an input takes a number is refused on every path that takes an
input, naming the field as any other value that is not a number is: pydantic read ``true`` as 1, so
``{"quality": true}`` made a thumbnail of JPEG quality 1, and a step's ``$ref`` that read a flag ran with
it as a number."""

from __future__ import annotations

from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # (test.form, test.steps)
import tests.support.processors  # noqa: F401  (test.echo)
from app import pipelines
from app.settings import Settings
from tests.support.webkit import add_token, add_user
from tests.support.workers import running_worker, wait_status

WHOLE = "Enter a whole number, like 42"
NUMBER = "Enter a number, like 2.5"


async def test_a_flag_where_a_number_belongs_is_refused_on_every_path(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    auth = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}

    async def refused(path: str, body: dict[str, Any], errors: dict[str, str]) -> None:
        r = await client.post(path, json=body, headers=auth)
        assert r.status_code == 422, (path, r.status_code, r.text[:300])
        assert r.json()["errors"] == errors, (path, r.json())

    flags = {"name": "a", "copies": True, "scale": False, "extra": {"n": True}}
    said = {"copies": WHOLE, "scale": NUMBER, "extra.n": WHOLE}
    await refused(
        "/api/jobs",
        {"type": "test.form", "input_data": flags},
        {f"input_data.{k}": v for k, v in said.items()},
    )
    await refused(
        "/api/batches",
        {"type": "test.form", "rows": [{"name": "a"}, flags]},
        {f"rows[1].{k}": v for k, v in said.items()},
    )
    step = {"key": "a", "type": "test.form", "input_data": flags}
    await refused(
        "/api/pipelines",
        {"name": "p", "steps": [step]},
        {f"steps[0].input_data.{k}": v for k, v in said.items()},
    )
    each = {
        "key": "a",
        "type": "test.form",
        "for_each": [1, True],
        "input_data": {"name": "a", "copies": {"$item": ""}},
    }
    await refused("/api/pipelines", {"name": "p", "steps": [each]}, {"steps[0].for_each[1].copies": WHOLE})
    await refused(
        "/api/pipelines",
        {"template": "test.steps", "input_data": {"seconds": True}},
        {"input_data.seconds": NUMBER},
    )
    await refused(
        "/api/schedules",
        {"cron": "@daily", "type": "test.form", "input_data": flags},
        {f"input_data.{k}": v for k, v in said.items()},
    )
    await refused(
        "/api/schedules",
        {"cron": "@daily", "template": "test.steps", "input_data": {"seconds": True}},
        {"input_data.seconds": NUMBER},
    )
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0

    # a flag a $ref read from a parent's result, when the step runs: the step fails naming the field
    steps = [
        {"key": "a", "type": "test.echo", "input_data": {"v": True}},
        {
            "key": "b",
            "type": "test.form",
            "depends_on": ["a"],
            "input_data": {"name": "b", "copies": {"$ref": "a.v"}},
        },
    ]
    async with engine.begin() as conn:
        row = await pipelines.create(conn, name="p", steps=steps, user_id=root.id, settings=ui_settings)
    b = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'b'", row["id"])
    async with running_worker(ui_settings):
        job = await wait_status(pg, b, {"failed", "completed"})
    assert job["status"] == "failed", job
    assert job["error_message"] == (
        "the job's input is not valid for test.form: The value $ref 'a.v' gave for 'copies' is true; it must "
        "be a whole number."
    )

    # a yes/no field still takes its flag, and a number field its number
    fine = {"name": "a", "copies": 2, "scale": 0.5, "urgent": True, "extra": {"n": 3}}
    r = await client.post("/api/jobs", json={"type": "test.form", "input_data": fine}, headers=auth)
    assert r.status_code == 201, r.text
    assert {k: r.json()["input_data"][k] for k in fine} == fine
