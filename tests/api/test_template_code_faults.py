"""A pipeline template's own code (a step's ``input`` or ``for_each`` function) is an engineer's, and may
raise on an input it did not expect. That error went out of whatever path started the template: a 500
for ``POST /api/pipelines``, and out of the worker's sweep for a schedule, which stopped the worker (on
every start, as the schedule stayed due). It is now a refusal of that start naming the template and the
step, the schedule is disabled with a notice, and the other schedules fire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app import controls, pipelines
from app.pipelines import Template, TemplateStep
from tests.api.test_approvals_api import token_of
from tests.support.factories import make_user
from tests.support.webkit import add_user

BROKEN = {"on": False}


def _input(values: dict[str, Any]) -> dict[str, Any]:
    if BROKEN["on"]:
        return {"seconds": values["no such key"]}
    return {}


def _items(values: dict[str, Any]) -> list[Any]:
    if BROKEN["on"]:
        raise ValueError("cannot list the items\nof this input")
    return [1]


@pytest.fixture
def fragile() -> Iterator[None]:
    for name, step in (
        ("test.fragile_input", TemplateStep(key="make", type="noop", input=_input)),
        ("test.fragile_items", TemplateStep(key="each", type="noop", for_each=_items)),
    ):
        pipelines.template(Template(name=name, title=name, description="", steps=(step,)))
    BROKEN["on"] = False
    try:
        yield
    finally:
        BROKEN["on"] = False
        pipelines.TEMPLATES.pop("test.fragile_input", None)
        pipelines.TEMPLATES.pop("test.fragile_items", None)


@pytest.mark.usefixtures("fragile")
async def test_a_template_whose_code_raises_is_a_422_naming_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    headers = await token_of(db_url, await add_user(db_url, "alice@example.com"))
    BROKEN["on"] = True
    for name, step, words in (
        ("test.fragile_input", "make", "KeyError: 'no such key'"),
        ("test.fragile_items", "each", "ValueError: cannot list the items of this input"),
    ):
        r = await client.post("/api/pipelines", json={"template": name, "input_data": {}}, headers=headers)
        assert r.status_code == 422, r.text
        said = r.json()["errors"]["input_data"]
        assert f"the pipeline {name!r} could not make its step {step!r}" in said, said
        assert words in said, said
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


@pytest.mark.usefixtures("fragile")
async def test_a_schedule_whose_template_code_raises_is_disabled_and_the_others_fire(
    engine: AsyncEngine, settings: Any, pg: asyncpg.Connection
) -> None:
    admin = await make_user(pg, admin=True)
    async with engine.begin() as conn:
        for name, template in (("fragile", "test.fragile_input"), ("fine", None)):
            await controls.create_schedule(
                conn,
                cron="* * * * *",
                job_type=None if template else "noop",
                template=template,
                owner=admin,
                settings=settings,
                name=name,
            )
    await pg.execute("UPDATE schedules SET next_fire_at = now() - interval '1 minute'")
    BROKEN["on"] = True

    async with engine.begin() as conn:
        fired = await controls.fire_due(conn, settings)

    assert [f["schedule"] for f in fired] == ["fine"]
    assert await pg.fetchval("SELECT enabled FROM schedules WHERE name = 'fragile'") is False
    notice = await pg.fetchval("SELECT payload::text FROM alert_outbox WHERE kind = 'admin_action'")
    assert "schedule.disable" in notice and "KeyError" in notice, notice
