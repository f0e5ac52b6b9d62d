"""A job or pipeline form refuses what it has no field for, and a field sent twice, as the JSON API
refuses a field its route does not declare: ``priority=50`` was dropped (the job started at priority
0) and of ``url`` sent twice the first was taken, without a word."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form)
from tests.support.jobsteps import enqueue
from tests.support.webkit import HX, add_user, csrf, csrf_from, sign_in_as


def _key(html: str) -> str:
    return re.search(r'name="_form_key" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]


async def test_a_field_the_form_has_not_or_sent_twice_is_a_form_error(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    base = {"_csrf_token": csrf_from(page.text), "_form_key": _key(page.text), "name": "Ann"}
    for extra, words in (
        ({"priority": "50"}, "This form has no field &#39;priority&#39;"),
        ({"max_attempts": "1000000"}, "This form has no field &#39;max_attempts&#39;"),
    ):
        r = await client.post("/jobs/new/test.form", data={**base, **extra})
        assert r.status_code == 422, (extra, r.status_code)
        assert words in r.text, (extra, r.text[-3000:])
    r = await client.post(
        "/jobs/new/test.form",
        content="&".join(f"{k}={v}" for k, v in base.items()) + "&name=Bob",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 422 and "sent &#39;name&#39; more than once" in r.text, r.text[-3000:]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    # the form as the browser sends it starts the job
    r = await client.post("/jobs/new/test.form", data=base, follow_redirects=False)
    assert r.status_code == 303, r.text[-3000:]


async def test_the_consoles_bulk_form_refuses_a_field_it_has_not(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, engine: Any, settings: Any
) -> None:
    """``stauts=failed`` beside an owner was dropped, so "cancel ann's failed jobs" cancelled all of hers."""
    ann = await add_user(db_url, "ann@example.com")
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    await enqueue(engine, settings, ann.id)
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    body = {"action": "cancel", "scope": "filter", "owner": "ann@example.com", "stauts": "failed"}
    for path in ("/admin/jobs/bulk/confirm", "/admin/jobs/bulk"):
        r = await client.post(path, data=body, headers=page_h)
        assert r.status_code == 422 and "has no field &#39;stauts&#39;" in r.text, (path, r.text)
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'cancelled'") == 0
