"""A bulk action names its jobs one way: ticked ids, a filter or a failed group. A request that sends two
of them is a 422 naming the one sent beside the other, decided by the bulk layer for every path — the
API's body (``ids`` with ``filter`` acted on the ids and dropped the filter without a word) and the
console's form (``scope=filter`` with stray ``ids`` acted on the filter and dropped the ids)."""

from __future__ import annotations

from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.form)
from app.settings import Settings
from tests.api.test_actions import failed
from tests.support.webkit import HX, add_token, add_user, csrf, sign_in_as

WORDS = "send one of ids, filter or group"


async def test_two_ways_of_naming_jobs_are_refused_on_every_path(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    ids = [str(await failed(engine, settings, owner.id)) for _ in range(2)]
    bodies: list[tuple[dict[str, Any], str]] = [
        ({"ids": ids[:1], "filter": {"status": "failed"}}, "filter"),
        ({"ids": ids[:1], "group": {"type": "test.form", "signature": "Boom"}}, "group"),
        ({"filter": {"status": "failed"}, "group": {"type": "test.form", "signature": "Boom"}}, "group"),
    ]
    for body, extra in bodies:
        r = await client.post("/api/jobs/bulk", json={"action": "retry", **body}, headers=api_h)
        assert r.status_code == 422, (body, r.status_code, r.text)
        assert r.json()["errors"] == {extra: f"{WORDS}, not {' and '.join(body)} together"}, r.text
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    form = {"action": "retry", "scope": "filter", "status": "failed", "ids": ids[:1]}
    for url in ("/admin/jobs/bulk/confirm", "/admin/jobs/bulk"):
        r = await client.post(url, data={**form, "expected": "2"}, headers=page_h)
        assert r.status_code == 422, (url, r.status_code, r.text[:500])
        assert f"Nothing changed: {WORDS}, not ids and filter together (field &#39;ids&#39;)." in r.text, (
            r.text
        )
    # the ticked-rows form carries the list's filter as its way back: the rows are what it acts on
    r = await client.post(
        "/admin/jobs/bulk",
        data={"action": "retry", "scope": "selected", "status": "failed", "ids": ids[:1]},
        headers=page_h,
    )
    assert r.status_code == 200 and "Retried 1 job;" in r.text, r.text[:500]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 1
