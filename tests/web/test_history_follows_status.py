"""A job's and a pipeline's History follows their status: each poll answer that brings a change brings
the history too (out of band), so "Started" shows when the status says Running — it came only with the
final answer, or a reload. A poll with nothing new still answers 204."""

from __future__ import annotations

import re
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, test.steps)
from app import pipelines
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue
from tests.support.webkit import HX, sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


def poll_of(html: str, path: str) -> str:
    found = re.search(rf'hx-get="(/{path}/[^"]+/status\?v=[^"]+)"', html)
    assert found, html[:500]
    return found.group(1).replace("&amp;", "&")


def history_of(html: str, section_id: str) -> str:
    found = re.search(rf'<section id="{section_id}"[^>]*hx-swap-oob="true".*?</section>', html, re.S)
    assert found, f"no history out of band in the poll's answer: {html[-600:]}"
    return found.group(0)


async def test_a_jobs_history_shows_started_with_the_running_status(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await enqueue(engine, settings, user.id, title="Weekly report")
    poll = poll_of((await client.get(f"/jobs/{jid}")).text, "jobs")
    assert (await client.get(poll, headers=HX)).status_code == 204
    assert await claim(engine) == jid
    r = await client.get(poll, headers=HX)
    assert r.status_code == 200 and "Running" in r.text
    assert "Started" in history_of(r.text, "job-history")
    # the next poll, with nothing new, is still a 204
    assert (await client.get(poll_of(r.text, "jobs"), headers=HX)).status_code == 204


async def test_a_pipelines_history_shows_its_first_step_started(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        pid = (
            await pipelines.create_from_template(conn, "test.steps", {}, user_id=user.id, settings=settings)
        ).id
    poll = poll_of((await client.get(f"/pipelines/{pid}")).text, "pipelines")
    assert (await client.get(poll, headers=HX)).status_code == 204
    await claim(engine)
    r = await client.get(poll, headers=HX)
    assert r.status_code == 200
    assert "Started" in history_of(r.text, "pipeline-history")
