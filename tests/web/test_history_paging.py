"""A job's and a pipeline's History shows its newest ``HISTORY_LIMIT`` events; where there are more, the
page says the list is cut and its "Older events" link (``?before=<event id>``, the one cursor reader,
htmx or a plain visit) pages back to the first event, where the page once said "Showing the latest 200
events" and the rest could be read only through the API."""

from __future__ import annotations

import html
import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, test.steps)
from app import pipelines
from app.settings import Settings
from app.web.job_page import HISTORY_LIMIT
from tests.support.procs import enqueue
from tests.support.webkit import HX, add_token, sign_in_as

OLDER = re.compile(
    r'<a href="(/(?:jobs|pipelines)/[0-9a-f-]+/history\?before=\d+)"[^>]*rel="next">Older events</a>'
)
NOTE = re.compile(r"Note (\d+)\b")
EXTRA = HISTORY_LIMIT * 2 + 7


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def _notes(pg: asyncpg.Connection, job_id: Any, pipeline_id: Any = None) -> None:
    """``EXTRA`` events "Note 1" (oldest) … after the job's own."""
    await pg.execute(
        "INSERT INTO job_events (job_id, pipeline_id, kind, actor, message)"
        " SELECT $1, $2, 'note', 'system', 'Note ' || i FROM generate_series(1, $3) i ORDER BY i",
        job_id,
        pipeline_id,
        EXTRA,
    )


def _notes_in(page: str) -> list[int]:
    return [int(n) for n in NOTE.findall(page)]


async def _walk(client: AsyncTestClient, page: str, headers: dict[str, str]) -> list[list[int]]:
    """The notes of the page, then of each Older events page, until none is offered."""
    pages = [_notes_in(page)]
    while (older := OLDER.search(page)) is not None:
        r = await client.get(html.unescape(older.group(1)), headers=headers)
        assert r.status_code == 200, r.text[:300]
        page = r.text
        pages.append(_notes_in(page))
        assert len(pages) < 10
    return pages


async def test_a_long_job_history_says_it_is_cut_and_pages_back(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, engine: AsyncEngine, settings: Settings
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    job = await enqueue(engine, settings, ann.id, "test.form", {"name": "x"})
    await _notes(pg, job)
    page = (await client.get(f"/jobs/{job}")).text
    assert "This history is cut" in page and OLDER.search(page), "the page stops at its newest events"
    newest = list(range(EXTRA - HISTORY_LIMIT + 1, EXTRA + 1))
    assert _notes_in(page) == newest
    for headers in ({}, HX):  # a plain visit (a page with Newest back) and htmx (the lines alone)
        pages = await _walk(client, page, headers)
        # every note once, oldest first on each page, the oldest page ending with the job's enqueue
        assert sorted(n for p in pages for n in p) == list(range(1, EXTRA + 1))
        assert pages[1] == list(range(EXTRA - 2 * HISTORY_LIMIT + 1, EXTRA - HISTORY_LIMIT + 1))
        assert pages[-1][0] == 1
    last = await client.get(html.unescape(OLDER.search(page).group(1)))
    assert f'href="/jobs/{job}#job-history">Newest</a>' in last.text
    # the cursor is the event id the API's events carry
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    events = (await client.get(f"/api/jobs/{job}/events", headers=bearer)).json()
    first_shown = next(e for e in events if e["message"] == f"Note {newest[0]}")
    assert OLDER.search(page).group(1).endswith(f"?before={first_shown['id']}")
    # another person's job is not found, whatever the cursor
    await sign_in_as(client, db_url, "bob@example.com")
    assert (await client.get(f"/jobs/{job}/history", params={"before": first_shown["id"]})).status_code == 404


async def test_a_long_pipeline_history_pages_back(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, engine: AsyncEngine, settings: Settings
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        view = await pipelines.create_from_template(conn, "test.steps", {}, user_id=ann.id, settings=settings)
    step = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 LIMIT 1", view["id"])
    await _notes(pg, step, view["id"])
    page = (await client.get(f"/pipelines/{view['id']}")).text
    assert "This history is cut" in page and OLDER.search(page)
    pages = await _walk(client, page, HX)
    assert sorted(n for p in pages for n in p) == list(range(1, EXTRA + 1))


async def test_the_api_history_pages_with_the_same_cursor_and_never_answers_it_all(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, engine: AsyncEngine, settings: Settings
) -> None:
    """``GET /api/jobs/{id}/events`` and ``/api/pipelines/{id}/events``: without ``limit`` or ``before`` the
    plain list of before, at most ``EVENTS_PAGE`` of the newest, a longer one cut with a ``Link`` to the
    rest; with either, ``{items, next}`` newest first, paged by ``before`` as the History pages are."""
    from app.web.api.event_pages import EVENTS_PAGE

    ann = await sign_in_as(client, db_url, "ann@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    job = await enqueue(engine, settings, ann.id, "test.form", {"name": "x"})
    async with engine.begin() as conn:
        view = await pipelines.create_from_template(conn, "test.steps", {}, user_id=ann.id, settings=settings)
    step = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 LIMIT 1", view["id"])
    total = EVENTS_PAGE + 5
    for owner, pipeline_id in ((job, None), (step, view["id"])):
        await pg.execute(
            "INSERT INTO job_events (job_id, pipeline_id, kind, actor, message)"
            " SELECT $1, $2, 'note', 'system', 'Note ' || i FROM generate_series(1, $3) i ORDER BY i",
            owner,
            pipeline_id,
            total,
        )
    for url in (f"/api/jobs/{job}/events", f"/api/pipelines/{view['id']}/events"):
        whole = await client.get(url, headers=bearer)
        assert whole.status_code == 200, whole.text[:300]
        plain = whole.json()
        assert isinstance(plain, list) and len(plain) == EVENTS_PAGE, "the whole history in one answer"
        assert [e["message"] for e in plain[-2:]] == [f"Note {total - 1}", f"Note {total}"]  # oldest first
        link = whole.headers["link"]
        assert link == f'<{url}?before={plain[0]["id"]}>; rel="next"', link
        # paged: newest first, `next` back as `before`, every event once
        seen: list[int] = []
        page = (await client.get(url, params={"limit": 400}, headers=bearer)).json()
        assert set(page) == {"items", "next"} and page["items"][0]["message"] == f"Note {total}"
        while True:
            seen += [e["id"] for e in page["items"]]
            assert len(page["items"]) <= 400
            if page["next"] is None:
                break
            assert page["next"] == page["items"][-1]["id"]
            page = (
                await client.get(url, params={"limit": 400, "before": page["next"]}, headers=bearer)
            ).json()
        ids = await pg.fetch(
            "SELECT id FROM job_events WHERE " + ("job_id" if "jobs" in url else "pipeline_id") + " = $1"
            " ORDER BY id DESC",
            job if "jobs" in url else view["id"],
        )
        assert seen == [r["id"] for r in ids]
        # the page's own cursor reader: a value it could not have made is a 422 naming `before`
        bad = await client.get(url, params={"before": "x"}, headers=bearer)
        assert bad.status_code == 422 and "before" in bad.json()["errors"], bad.text
        over = await client.get(url, params={"limit": EVENTS_PAGE + 1}, headers=bearer)
        assert over.status_code == 422 and "limit" in over.text, over.text


async def test_the_openapi_document_names_the_history_routes_paging(client: AsyncTestClient) -> None:
    doc = (await client.get("/schema/openapi.json")).json()
    for path in ("/api/jobs/{job_id}/events", "/api/pipelines/{pipeline_id}/events"):
        operation = doc["paths"][path]["get"]
        names = {p["name"] for p in operation["parameters"]}
        assert {"limit", "before"} <= names, names
        assert "`next`" in operation["description"] and "Link" in operation["description"]
        assert "422" in operation["responses"]
