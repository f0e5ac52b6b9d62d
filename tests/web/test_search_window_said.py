"""My jobs' search looks through the newest ``SEARCH_WINDOW`` jobs (and pipelines): where it ends with
older ones unsearched, the page says so, where it said "Nothing matches these filters" as if every job
had been looked at; and it offers to search on below where it stopped ("Search older jobs"), where it
had no way to reach older jobs but narrowing the filters."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import urlencode

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form)
from app.settings import Settings
from app.web.my_jobs import SEARCH_WINDOW
from tests.support.webkit import sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def _jobs(pg: asyncpg.Connection, user_id: int, n: int, base: int) -> None:
    """``n`` finished jobs, the oldest (by id) named "needle", the others "hay"."""
    await pg.execute(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title, completed_at)"
        " SELECT ('00000000-0000-7000-8000-' || lpad(to_hex($3 + i), 12, '0'))::uuid, 'test.form', 'completed',"
        " $1, '{}', 1, 1, CASE WHEN i = 1 THEN 'needle' ELSE 'hay' END, now() FROM generate_series(1, $2) i",
        user_id,
        n,
        base,
    )


async def test_a_search_past_its_window_says_so(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    few = await sign_in_as(client, db_url, "few@example.com")
    await _jobs(pg, few.id, 3, 0)
    r = await client.get("/jobs", params={"q": "needle"})
    assert "needle" in r.text and 'id="search-cut"' not in r.text  # every job looked at
    r = await client.get("/jobs", params={"q": "nothing"})
    assert "Nothing matches these filters" in r.text and 'id="search-cut"' not in r.text

    many = await sign_in_as(client, db_url, "many@example.com")
    await _jobs(pg, many.id, SEARCH_WINDOW + 5, 1000)
    r = await client.get("/jobs", params={"q": "needle"})
    assert r.status_code == 200
    assert "Nothing matches these filters" in r.text  # the needle is past the window …
    assert 'id="search-cut"' in r.text, "the page looks as if every job had been searched"  # … and it says so
    r = await client.get("/jobs", params={"q": "needle", "status": "completed"})
    assert 'id="search-cut"' in r.text  # the same filters decide the window
    # searched on below where it stopped: the needle, and Newest back to the search's first page; a page
    # further back with nothing found has that way back too
    pages = await _walk(client, "needle")
    assert pages == [[], ["needle"]]
    older = ON.search((await client.get("/jobs", params={"q": "nothing"})).text)
    assert older, "no way to search on"
    r = await client.get(html.unescape(older.group(1)))
    assert '<a href="/jobs?q=nothing">Newest</a>' in r.text, "no way back to the search's first page"
    assert "Nothing matches these filters further back" in r.text


FOUND = re.compile(r'<a href="/(?:jobs|pipelines)/[0-9a-f-]+">(needle[^<]*)</a>')
ON = re.compile(r'<a href="(/jobs\?[^"]*after=[^"]+)"[^>]*(?:id="search-older"|rel="next">Older)')


def _uid(base: int, i: int) -> str:
    return f"00000000-0000-7000-8000-{base + i:012x}"


async def _walk(client: AsyncTestClient, q: str) -> list[list[str]]:
    """The matches of each page of a search, following "Search older jobs" (and Older) to the end."""
    pages: list[list[str]] = []
    url: str | None = "/jobs?" + urlencode({"q": q})
    while url is not None:
        r = await client.get(url)
        assert r.status_code == 200, r.text[:300]
        pages.append(FOUND.findall(r.text))
        found = ON.search(r.text)
        url = html.unescape(found.group(1)) if found else None
        assert len(pages) < 10
    return pages


async def test_a_search_past_its_window_goes_on_below_where_it_stopped(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """Jobs newer than every pipeline, each kind one window and five rows more: the jobs' window ends
    far above the pipelines', so a page lists the matches both windows covered, and "Search older jobs"
    reaches every older match once, in order, never one twice nor one skipped between the two."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    n = SEARCH_WINDOW + 5
    names = {1: "needle job old", n - 10: "needle job new"}
    await pg.executemany(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, title, completed_at)"
        " VALUES ($1, 'test.form', 'completed', $2, '{}', 1, 1, $3, now())",
        [(_uid(100_000, i), ann.id, names.get(i, "hay")) for i in range(1, n + 1)],
    )
    names = {2: "needle pipeline old", 3000: "needle pipeline"}
    await pg.executemany(
        "INSERT INTO pipelines (id, name, user_id, status, finished_at) VALUES ($1, $2, $3, 'completed', now())",
        [(_uid(0, i), names.get(i, "hay"), ann.id) for i in range(1, n + 1)],
    )
    pages = await _walk(client, "needle")
    assert pages[0] == ["needle job new"], pages
    assert 'id="search-older"' in (await client.get("/jobs?q=needle")).text, "no way to search on"
    found = [m for p in pages for m in p]
    assert found == ["needle job new", "needle job old", "needle pipeline", "needle pipeline old"], pages
    # the link carries the search and its filters on; the last page searched everything left
    r = await client.get("/jobs", params={"q": "needle", "type": "test.form"})
    assert 'id="search-older"' in r.text and "type=test.form" in ON.search(r.text).group(1)
