"""My jobs shows the person's newest batches (name, type, counts, a link to each and to all), and the
polls a page already makes — My jobs' cells, the pipeline page, the batch page, the job page — bring the
bell's unread count when it changed, out of band, through one helper."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, test.steps)
from app import batches
from app.processors import registry
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.webkit import add_user, sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


def main_html(html: str) -> str:
    return html[html.index("<main") : html.index("</main>")]


async def make_batch(
    engine: AsyncEngine, settings: Settings, user_id: int, name: str, rows: int
) -> uuid.UUID:
    async with engine.begin() as conn:
        row, _ = await batches.create(
            conn,
            spec=registry.get("test.form"),
            inputs=[{"name": f"Row {i}"} for i in range(rows)],
            user_id=user_id,
            settings=settings,
            name=name,
            source="test",
        )
    return row["id"]


async def test_my_jobs_lists_the_newest_batches_with_counts_and_links(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    assert 'id="my-batches"' not in (await client.get("/jobs")).text  # none yet: no section
    first = await make_batch(engine, settings, ann.id, "Batch 0", 3)
    bob = await add_user(db_url, "bob@example.com")
    await make_batch(engine, settings, bob.id, "Bob's batch", 1)
    jid = await claim(engine)  # the oldest: Ann's first row
    await finish(engine, settings, jid, "completed", result={})
    page = main_html((await client.get("/jobs")).text)
    section = page[page.index('id="my-batches"') : page.index('id="job-list"')]
    assert f'<a href="/batches/{first}">Batch 0</a>' in section
    assert '<small class="muted">Every field</small>' in section  # its job type
    assert "3 in all · Waiting 2 · Done 1" in section
    assert "Bob" not in section

    ids = [first] + [await make_batch(engine, settings, ann.id, f"Batch {i}", 1) for i in range(1, 7)]
    page = main_html((await client.get("/jobs")).text)
    section = page[page.index('id="my-batches"') : page.index('id="job-list"')]
    listed = re.findall(r'<a href="/batches/([0-9a-f-]+)">', section)
    assert listed == [str(i) for i in reversed(ids[-5:])]  # the newest five, newest first
    assert '<a href="/batches" id="all-batches">All your batches</a>' in section
    older = await client.get(f"/jobs?after={uuid.UUID(int=2**128 - 1)}")  # an "Older" page of jobs
    assert "Batch 0" in older.text and 'id="my-batches"' not in older.text  # jobs, not the batches again
