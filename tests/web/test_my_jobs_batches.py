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
from tests.support.jobsteps import claim, enqueue, failed_job, finish
from tests.support.webkit import HX, add_user, sign_in_as


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


OOB_BELL = re.compile(
    r'<a href="/notifications" id="notif-bell" class="notif-bell" data-count="(\d+)" hx-swap-oob="true"'
)


def poll_url(html: str, path: str) -> str:
    """The URL the element polling ``path`` asks (``&amp;`` undone)."""
    return re.search(rf'hx-get="({re.escape(path)}[^"]*)"', html).group(1).replace("&amp;", "&")


async def test_every_poll_a_page_makes_brings_a_changed_bell_out_of_band(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    from app import pipelines

    ann = await sign_in_as(client, db_url, "ann@example.com")
    job = await enqueue(engine, settings, ann.id, title="Still waiting")
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name="Live",
            steps=[{"key": "a", "type": "test.form", "input_data": {"name": "A"}}],
            user_id=ann.id,
            settings=settings,
        )
    batch = await make_batch(engine, settings, ann.id, "Rows", 2)
    my_jobs = (await client.get("/jobs")).text
    pages = {
        "job cell": poll_url(my_jobs, f"/jobs/{job}/cell"),
        "pipeline cell": poll_url(my_jobs, f"/pipelines/{p['id']}/cell"),
        "pipeline page": poll_url(
            (await client.get(f"/pipelines/{p['id']}")).text, f"/pipelines/{p['id']}/status"
        ),
        "batch page": poll_url((await client.get(f"/batches/{batch}")).text, f"/batches/{batch}/status"),
        "job page": poll_url((await client.get(f"/jobs/{job}")).text, f"/jobs/{job}/status"),
    }
    for what, url in pages.items():
        assert "bell=0" in url, what
        assert (await client.get(url, headers=HX)).status_code == 204, what  # nothing new yet

    await failed_job(engine, settings, ann.id, "boom", title="Broken")  # a notice, with the pages open
    for what, url in pages.items():
        r = await client.get(url, headers=HX)
        assert r.status_code == 200, what
        assert OOB_BELL.findall(r.text) == ["1"], what
        assert 'id="notif-count">1</span>' in r.text, what
        again = r.text.replace("&amp;", "&")
        assert "bell=1" in again, what  # the next poll carries the new count...
        pages[what] = re.search(r'hx-get="([^"]*bell=1[^"]*)"', again).group(1)
    for what, url in pages.items():
        assert (await client.get(url, headers=HX)).status_code == 204, what  # ...and is quiet again


async def test_an_unchanged_pipelines_first_cell_poll_is_quiet(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    """My jobs and the cell's poll build a pipeline's cell from the same inputs (its step counts among
    them): the version the page puts in the poll's address is the one the poll compares, so the first
    poll of a pipeline nothing happened to is a 204, waiting or with a step done."""
    from app import pipelines

    ann = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name="Two steps",
            steps=[
                {"key": "a", "type": "test.form", "input_data": {"name": "A"}},
                {"key": "b", "type": "test.form", "input_data": {"name": "B"}, "depends_on": ["a"]},
            ],
            user_id=ann.id,
            settings=settings,
        )
    cell = f"/pipelines/{p['id']}/cell"
    url = poll_url((await client.get("/jobs")).text, cell)
    assert "v=" in url
    assert (await client.get(url, headers=HX)).status_code == 204  # waiting: nothing new

    await finish(engine, settings, await claim(engine), "completed", result={})  # step a done, b waits
    page = (await client.get("/jobs")).text
    assert "50%" in main_html(page)  # the page shows the percentage the poll would
    url = poll_url(page, cell)
    assert (await client.get(url, headers=HX)).status_code == 204
