"""A schedule's name is checked with its other fields: one 422 names every bad field at once, the name
among them, through ``POST /api/schedules`` and ``/admin/schedules/new`` alike (a name over 200
characters was named only once everything else was right); and the cron field's help says what the
field takes (five fields, no seconds)."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from tests.admin.test_admin import post
from tests.support.webkit import add_token

LONG = "n" * 201


async def test_a_long_name_is_named_with_the_other_bad_fields(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    body = {"cron": "* * * * * *", "type": "http.request", "input_data": {"url": 1}, "name": LONG}
    r = await client.post("/api/schedules", json=body, headers=headers)
    assert r.status_code == 422, r.text
    assert {"cron", "input_data.url", "name"} <= set(r.json()["errors"]), r.text
    assert "201" in r.json()["errors"]["name"] and "200" in r.json()["errors"]["name"]
    # alone, and with a NUL, it is still the name that is named
    r = await client.post(
        "/api/schedules", json={"cron": "0 9 * * *", "type": "noop", "name": LONG}, headers=headers
    )
    assert r.status_code == 422 and list(r.json()["errors"]) == ["name"], r.text

    form = {"_target": "type:noop", "_name": LONG, "_cron": "* * * * * *", "_timezone": "UTC"}
    r = await post(client, "/admin/schedules/new", form)
    assert r.status_code == 422, r.text[:2000]
    for fid in ("e-_cron", "e-_name"):
        assert f'id="{fid}"' in r.text, fid
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0


async def test_the_cron_help_says_what_the_field_takes(client: AsyncTestClient, admin: CurrentUser) -> None:
    page = (await client.get("/admin/schedules/new?target=type:noop")).text
    assert "sixth field is seconds" not in page
    assert "no seconds field" in page
