"""The live parts of a pipeline's page carry the line static/app.js says when their status changes
(``data-news`` beside an ``id``: the card and each step), and no live region wraps the card, which
re-read all of it on each poll. The browser side: tests/browser/test_browser_status_news.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.steps)
from app import pipelines
from app.settings import Settings
from tests.support.jobsteps import claim
from tests.support.webkit import HX, sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def test_a_pipelines_card_and_steps_carry_their_status_line(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        made = await pipelines.create_from_template(
            conn, "test.steps", {}, user_id=user.id, settings=settings
        )
    page = (await client.get(f"/pipelines/{made.id}")).text
    assert "aria-live" not in page.split("<main", 1)[1], "a live region wraps the card"
    assert re.search(r'<article id="pipeline-status"[^>]* data-news="[^"]+: Waiting">', page)
    steps = re.findall(r'<li class="step [^"]*" id="step-([^"]+)" data-news="Step “[^”]+”: ([^"]+)">', page)
    assert steps and all(label.startswith("Waiting") for _, label in steps), steps
    started = await claim(engine)
    poll = re.search(r'hx-get="(/pipelines/[^"]+/status\?v=[^"]+)"', page)
    assert poll
    answer = (await client.get(poll.group(1).replace("&amp;", "&"), headers=HX)).text
    assert re.search(rf'id="step-{started}" data-news="Step “[^”]+”: Running"', answer), answer[:800]
