"""``/admin/jobs`` says beside the filter why a value cannot be read, with a 422, as the API does for
the same value: an unknown status was dropped and every job listed, as if the filter had matched."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.form)
from app.settings import Settings
from tests.support.jobsteps import enqueue
from tests.support.webkit import HX, add_user, csrf, sign_in_as


async def test_a_filter_value_the_page_cannot_read_is_an_error_beside_it(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    job = await enqueue(engine, settings, owner.id)
    ok = await client.get("/admin/jobs")
    assert ok.status_code == 200 and str(job) in ok.text
    for query, words in (
        ("status=bogus", "&#39;bogus&#39; is not a status"),
        ("owner=nobody@example.com", "No user has this e-mail address."),
        ("pipeline=zzz", "Not a pipeline id"),
        ("created_from=yesterday", "Not a date and time"),
        ("after=zzz", "is not a position this list gave"),
        ("status=failed&status=queued", "given more than once; it takes one value"),
        ("owner=ann@example.com&owner=root@example.com", "given more than once; it takes one value"),
    ):
        r = await client.get(f"/admin/jobs?{query}")
        assert r.status_code == 422, (query, r.status_code)
        assert words in r.text, (query, r.text[:2000])
        assert str(job) not in r.text, query
        r = await client.get(f"/admin/jobs?{query}", headers=HX)
        assert r.status_code == 422 and str(job) not in r.text, query
    # a bulk action on a filter the page cannot read does nothing
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    body = {"action": "cancel", "scope": "filter", "status": "bogus"}
    r = await client.post("/admin/jobs/bulk/confirm", data=body, headers=page_h)
    assert r.status_code == 422 and "is not a status" in r.text, r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'cancelled'") == 0
