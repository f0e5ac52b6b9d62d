"""My jobs' search looks through the newest ``SEARCH_WINDOW`` jobs (and pipelines): where it ends with
older ones unsearched, the page says so, where it said "Nothing matches these filters" as if every job
had been looked at."""

from __future__ import annotations

from typing import Any

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
