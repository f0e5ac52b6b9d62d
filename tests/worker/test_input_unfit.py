"""A job whose input does not fit its type when it runs (a ``$ref`` that read an object of the result
into a text field) fails at once, naming each bad field as a submission would, and its pages do not offer a
Retry that would fail the same way."""

from __future__ import annotations

from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms
import tests.support.processors  # noqa: F401  (registers test.echo)
from app import pipelines
from app.settings import Settings
from tests.support.webkit import add_user, login
from tests.support.workers import running_worker, wait_status

STEPS: list[dict[str, Any]] = [
    {"key": "a", "type": "test.echo", "input_data": {"v": {"w": 1}}},
    {"key": "b", "type": "test.form", "input_data": {"name": {"$ref": "a.v"}, "copies": {"$ref": "a.v"}}},
]


async def test_an_input_that_does_not_fit_fails_once_naming_its_fields_and_offers_no_retry(
    client: AsyncTestClient, engine: AsyncEngine, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    steps = [STEPS[0], {**STEPS[1], "depends_on": ["a"], "max_attempts": 3}]
    async with engine.begin() as conn:
        row = await pipelines.create(conn, name="p", steps=steps, user_id=bob.id, settings=ui_settings)
    b = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'b'", row["id"])
    async with running_worker(ui_settings):
        job = await wait_status(pg, b, {"failed", "completed"})
    assert (job["status"], job["attempts"]) == ("failed", 1)
    # what the $ref read, in words for it: not the form's "Enter text", which nobody could follow here
    assert job["error_message"] == (
        "the job's input is not valid for test.form: The value $ref 'a.v' gave for 'name' is an object; it "
        "must be text. The value $ref 'a.v' gave for 'copies' is an object; it must be a whole number."
    ), job["error_message"]
    assert (await login(client, "bob@example.com")).status_code == 303
    page = await client.get(f"/jobs/{b}")
    assert page.status_code == 200
    assert "The value $ref &#39;a.v&#39; gave for &#39;name&#39; is an object; it must be text." in page.text
    assert 'id="act-retry"' not in page.text
    steps_page = await client.get(f"/pipelines/{row['id']}")
    assert steps_page.status_code == 200
    assert f"retry-{b}" not in steps_page.text
    # another failure of the same step still offers it
    await pg.execute("UPDATE jobs SET error_message = 'the server did not answer in time' WHERE id = $1", b)
    assert 'id="act-retry"' in (await client.get(f"/jobs/{b}")).text
    assert f"retry-{b}" in (await client.get(f"/pipelines/{row['id']}")).text
