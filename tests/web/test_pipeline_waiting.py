"""A pipeline none of whose steps has started reads "Waiting" — on its page, in My jobs and in its
polled cell — as each of its steps and a job in its place do, and "Running" from the moment a worker
claims its first step; the polls change at that moment ("Running 0%" read as running and stuck while
it waited for a worker)."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.steps)
from app import pipelines
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.webkit import HX, add_token, sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


def badge(html: str) -> str:
    """The pipeline page's header badge: ``css label``."""
    head = html[html.index('class="status-head"') :]
    found = re.search(
        r'class="status status-(\w+)"><span class="status-icon" aria-hidden="true"></span>([^<]+)<', head
    )
    assert found, head[:400]
    return f"{found.group(1)} {found.group(2)}"


def cell(html: str, pid: Any) -> tuple[str, str | None]:
    """A My jobs cell: ``(css label-and-percent, its poll address)``."""
    found = re.search(
        rf'<span id="cell-{pid}" class="cell status status-(\w+)"(?: hx-get="([^"]+)"[^>]*)?(?: data-news="[^"]*")?>'
        r'<span class="status-icon" aria-hidden="true"></span>([^<]+)<',
        html,
    )
    assert found, html[:400]
    url = found.group(2).replace("&amp;", "&") if found.group(2) else None
    return f"{found.group(1)} {found.group(3).strip()}", url


def listed(html: str, pid: Any) -> bool:
    return f'id="cell-{pid}"' in html


async def test_an_unstarted_pipeline_reads_waiting_on_its_page_until_a_step_is_claimed(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        pid = (
            await pipelines.create_from_template(conn, "test.steps", {}, user_id=user.id, settings=settings)
        )["id"]
    page = (await client.get(f"/pipelines/{pid}")).text
    assert badge(page) == "waiting Waiting"
    assert "Running" not in page
    assert "<dt>Submitted</dt>" in page  # its creation is not when it started
    poll = (
        re.search(r'hx-get="(/pipelines/[^"]+/status\?v=[0-9a-f]+[^"]*)"', page)
        .group(1)
        .replace("&amp;", "&")
    )
    assert (await client.get(poll, headers=HX)).status_code == 204  # nothing changed

    first = await claim(engine)  # a worker claims the first step
    r = await client.get(poll, headers=HX)
    assert r.status_code == 200
    assert badge(r.text) == "running Running"

    # an attempt that did not work leaves the step waiting to try again: it has started, and so has the
    # pipeline
    await finish(engine, settings, first, "failed", error="boom", delay=3600)
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", first) == "queued"
    assert badge((await client.get(f"/pipelines/{pid}")).text) == "running Running"


async def test_my_jobs_lists_an_unstarted_pipeline_as_waiting_and_its_cell_turns_running_when_claimed(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        pid = (
            await pipelines.create_from_template(conn, "test.steps", {}, user_id=user.id, settings=settings)
        )["id"]
    page = (await client.get("/jobs")).text
    shown, url = cell(page, pid)
    assert shown == "waiting Waiting"
    assert url is not None
    r = await client.get(url, headers=HX)
    assert r.status_code == 204  # the list's cell is the poll's: nothing new, not "Waiting · 0%" either
    # the status filter agrees with the label
    assert listed((await client.get("/jobs?status=queued")).text, pid)
    assert not listed((await client.get("/jobs?status=in_progress")).text, pid)

    await claim(engine)
    r = await client.get(url, headers=HX)
    assert r.status_code == 200
    shown, _ = cell(r.text, pid)
    assert shown == "running Running · 0%"
    assert cell((await client.get("/jobs")).text, pid)[0] == "running Running · 0%"  # the list says the same
    assert not listed((await client.get("/jobs?status=queued")).text, pid)
    assert listed((await client.get("/jobs?status=in_progress")).text, pid)
    assert listed((await client.get("/jobs?q=Four")).text, pid)  # a search lists it with its state too


async def test_the_api_says_whether_a_pipeline_has_started(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    """The JSON API keeps ``status`` as it was (``running`` from the start) and says apart, in the one
    pipeline and in the list, what the pages read as "Waiting": no worker has taken a step yet."""
    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        pid = (
            await pipelines.create_from_template(conn, "test.steps", {}, user_id=user.id, settings=settings)
        )["id"]

    bearer = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}

    async def said() -> list[tuple[str, bool]]:
        one = (await client.get(f"/api/pipelines/{pid}", headers=bearer)).json()
        items = (await client.get("/api/pipelines", headers=bearer)).json()["items"]
        (listed_one,) = [p for p in items if p["id"] == str(pid)]
        return [(one["status"], one["started"]), (listed_one["status"], listed_one["started"])]

    assert await said() == [("running", False), ("running", False)]
    await claim(engine)
    assert await said() == [("running", True), ("running", True)]
