"""A cron expression stored before a rule existed, or written by SQL, that croniter cannot read: the
schedules pages, the API and a firing say what is wrong in a sentence of ours, never croniter's own
words ("[61 * * * *] is not acceptable, out of range", "Exactly 5, 6 or 7 columns has to be specified
for iterator expression.")."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app import controls
from app.settings import Settings
from tests.support.webkit import add_token, csrf_from, sign_in_as

CRONITER_WORDS = ("is not acceptable", "has to be specified", "iterator", "failed to find", "out of range,")
STORED = {
    "61 * * * *": "'61' in the minute field is out of range: minutes run from 0 to 59",
    "0 0 * * MON#6": "'MON#6' in the weekday field: '#' is not taken",
    "@reboot": "'@reboot' is not a time",
    "1,,2 * * * *": "'1,,2 * * * *' cannot be read as a cron expression; write five fields",
}


def _ours(text: str, said: str) -> None:
    assert said in text, text
    assert not any(w in text for w in CRONITER_WORDS), text


@pytest.mark.parametrize("cron", list(STORED))
async def test_a_stored_cron_croniter_cannot_read_is_told_in_our_words(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, engine: Any, settings: Settings, cron: str
) -> None:
    boss = await sign_in_as(client, db_url, "boss@example.com", admin=True)
    api = {"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
    r = await client.post(
        "/api/schedules",
        json={"cron": "0 9 * * *", "type": "noop", "name": "Old", "enabled": False},
        headers=api,
    )
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    await pg.execute("UPDATE schedules SET cron = $1 WHERE id = $2", cron, sid)
    said = STORED[cron]
    # the API: enabling computes its next run
    r = await client.post(f"/api/schedules/{sid}/enable", headers=api)
    assert r.status_code == 422, r.text
    _ours(r.json()["detail"], said)
    # the pages: the edit form's preview of its next runs, and the list's enable button
    page = await client.get(f"/admin/schedules/{sid}/edit")
    assert page.status_code == 200, page.text
    _ours(page.text.replace("&#39;", "'"), said)
    r = await client.post(f"/admin/schedules/{sid}/enable", headers={"x-csrftoken": csrf_from(page.text)})
    assert r.status_code == 422, r.text
    _ours(r.text.replace("&#39;", "'"), said)
    # a firing disables it, and the admins' notice says why in the same words
    await pg.execute("UPDATE schedules SET enabled = true, next_fire_at = now() - interval '1 minute'")
    async with engine.begin() as conn:
        assert await controls.fire_due(conn, settings) == []
    notice = await pg.fetchval(
        "SELECT payload::text FROM alert_outbox WHERE kind = 'admin_action' AND payload::text LIKE '%no longer%'"
    )
    _ours(notice, said)
    assert await pg.fetchval("SELECT enabled FROM schedules WHERE id = $1", sid) is False


async def test_a_stored_cron_with_a_question_mark_is_told_in_our_words(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """A ``?`` saved before it was refused (croniter reads it as ``*``): the schedule's edit form says what
    is wrong with it in the words a new one is refused in, not a preview of times it would not be saved
    with, and the list still shows it."""
    boss = await sign_in_as(client, db_url, "boss@example.com", admin=True)
    api = {"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
    r = await client.post(
        "/api/schedules",
        json={"cron": "0 9 * * *", "type": "noop", "name": "Old", "enabled": False},
        headers=api,
    )
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    await pg.execute("UPDATE schedules SET cron = '0 9 ? * mon' WHERE id = $1", sid)
    said = "'?' in the day field: '?' is not taken"
    page = await client.get(f"/admin/schedules/{sid}/edit")
    assert page.status_code == 200, page.text
    _ours(page.text.replace("&#39;", "'"), said)
    listed = await client.get("/admin/schedules")
    assert listed.status_code == 200 and "0 9 ? * mon" in listed.text, listed.text
