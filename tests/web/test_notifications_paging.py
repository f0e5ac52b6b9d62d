"""A person's notices page like the other lists: ``/notifications`` has Older and Newest links and
``GET /api/notifications`` a ``next`` (keyset on the notice's time, then its id), where both listed the
newest 100 with nothing to say there were more — and notices are never deleted, so the rest could not
be read at all."""

from __future__ import annotations

import re
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app import notifications
from app.settings import Settings
from tests.support.webkit import add_token, sign_in_as

OLDER = re.compile(r'<a href="(/notifications\?after=[^"]+)" rel="next">Older</a>')
ROW = re.compile(r'<li class="(?:read|unread)" data-id="(\d+)">')
MANY = notifications.PAGE + 15


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def _notices(engine: AsyncEngine, user_id: int) -> list[int]:
    """``MANY`` notices, newest first as listed: several at one moment (the id breaks the tie), and the
    oldest row folded since, so that it is listed first."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                """
                INSERT INTO notifications (user_id, kind, text, at)
                SELECT :u, 'job_completed', 'Notice ' || i, timestamptz '2026-01-01 00:00+00' + (i / 3) * interval '1 minute'
                FROM generate_series(1, :n) i
                """
            ),
            {"u": user_id, "n": MANY},
        )
        await conn.execute(
            text(
                "UPDATE notifications SET at = now() WHERE id = (SELECT min(id) FROM notifications WHERE user_id = :u)"
            ),
            {"u": user_id},
        )
        rows = await conn.execute(
            text("SELECT id FROM notifications WHERE user_id = :u ORDER BY at DESC, id DESC"), {"u": user_id}
        )
        return [r[0] for r in rows]


async def test_older_reaches_the_oldest_notice(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    every = await _notices(engine, ann.id)
    seen: list[int] = []
    url: str | None = "/notifications"
    pages = 0
    while url:
        r = await client.get(url)
        assert r.status_code == 200, r.text[:300]
        seen += [int(i) for i in ROW.findall(r.text)]
        older = OLDER.search(r.text)
        url = older.group(1).replace("&amp;", "&") if older else None
        pages += 1
        assert pages < 5
    assert pages == 2, "the first page says nothing of the older notices"
    assert seen == every
    assert '<a href="/notifications">Newest</a>' in r.text
    assert (await client.get("/notifications?after=zzz")).status_code == 422  # the one cursor reader


async def test_the_api_pages_by_next(client: AsyncTestClient, db_url: str, engine: AsyncEngine) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    every = await _notices(engine, ann.id)
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    first = (await client.get("/api/notifications", headers=bearer)).json()
    assert len(first["items"]) == notifications.PAGE and first["next"], "no way to the older notices"
    seen: list[int] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 40} | ({"after": after} if after else {})
        body = (await client.get("/api/notifications", params=params, headers=bearer)).json()
        seen += [i["id"] for i in body["items"]]
        after = body["next"]
        if after is None:
            break
    assert seen == every
    r = await client.get(
        "/api/notifications", params={"after": "2026-01-01T00:00:00+00:00|x"}, headers=bearer
    )
    assert r.status_code == 422 and "is not a position this list gave" in r.json()["errors"]["after"]


async def test_next_pasted_into_the_address_pages_on(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine
) -> None:
    """``next`` sent back as it was given, pasted after ``?after=`` (as a shell script or a person does):
    it held the moment's ``+00:00``, which a query string reads as a space, and was refused as "not a
    position this list gave". The same for the approvals' ``next``, made the same way."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    every = await _notices(engine, ann.id)
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    first = (await client.get("/api/notifications?limit=40", headers=bearer)).json()
    assert "+" not in first["next"], first["next"]
    r = await client.get(f"/api/notifications?limit=40&after={first['next']}", headers=bearer)
    assert r.status_code == 200, r.text[:300]
    assert [i["id"] for i in r.json()["items"]] == every[40:80]
    # a cursor written with "+00:00" (handed out before), pasted unencoded: its "+" arrives as a space
    last = first["items"][-1]
    old = f"{last['at']}|{last['id']}"
    assert "+00:00" in old
    r = await client.get(f"/api/notifications?limit=40&after={old}", headers=bearer)
    assert r.status_code == 200, r.text[:300]
    assert [i["id"] for i in r.json()["items"]] == every[40:80]


def test_moment_cursors_hold_no_plus() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from app.jobs.cursors import Cursor, moment_cursor, read_cursor

    at = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    made = moment_cursor(at, 7)
    assert made == "2026-01-01T10:00:00.123456Z|7"
    assert read_cursor(made, Cursor.NOTICE) == (at.astimezone(UTC), 7)
