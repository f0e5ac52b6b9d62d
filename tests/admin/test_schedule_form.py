"""Editing a schedule: the job type's own generated form, every error at once next to its field with what
was typed kept, the next five fire times across a daylight-saving change, and the same audited action
behind the page and ``PATCH /api/schedules/{id}``."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, …)
from app import schedules
from app.actions import schedules as schedule_actions
from app.auth import CurrentUser
from app.settings import Settings
from tests.admin.test_admin import post
from tests.support.webkit import add_token


def test_the_next_five_fire_times_follow_a_daylight_saving_change() -> None:
    # Berlin springs forward on 28 March 2027 at 02:00 → 03:00: 02:30 does not happen that day, and the
    # daily run comes at the moment the clocks jump to (03:00 CEST = 01:00 UTC), once
    times = schedules.upcoming("30 2 * * *", "Europe/Berlin", datetime(2027, 3, 26, 12, 0, tzinfo=UTC), 5)
    assert [t.isoformat() for t in times] == [
        "2027-03-27T01:30:00+00:00",
        "2027-03-28T01:00:00+00:00",
        "2027-03-29T00:30:00+00:00",
        "2027-03-30T00:30:00+00:00",
        "2027-03-31T00:30:00+00:00",
    ]


async def _schedule(engine: AsyncEngine, admin: CurrentUser, settings: Settings) -> str:
    async with engine.begin() as conn:
        row = await schedule_actions.create_schedule(
            conn,
            admin,
            cron="0 9 * * *",
            timezone="Europe/Berlin",
            job_type="test.form",
            input_data={"name": "Ann"},
            name="Morning hello",
            settings=settings,
        )
    return str(row["id"])


async def test_edit_form_is_the_types_form_and_keeps_typed_values_with_every_error(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    sid = await _schedule(engine, admin, ui_settings)
    page = (await client.get(f"/admin/schedules/{sid}/edit")).text
    assert 'id="f-name"' in page and 'value="Ann"' in page  # the generated form, filled in
    assert 'id="s-input_json"' not in page  # not raw JSON
    assert page.count("<li>", page.index('id="fire-times"')) >= 5

    bad = {"cron": "61 * * * *", "timezone": "Mars/Olympus", "name": "x" * 60, "enabled": "on"}
    r = await post(client, f"/admin/schedules/{sid}/edit", bad)
    assert r.status_code == 422
    for fid in ("e-cron", "e-timezone", "e-name"):  # all three at once, next to their fields
        assert f'id="{fid}"' in r.text, fid
    assert 'value="61 * * * *"' in r.text and 'value="Mars/Olympus"' in r.text and "x" * 60 in r.text
    assert await pg.fetchval("SELECT cron FROM schedules WHERE id = $1::uuid", sid) == "0 9 * * *"

    good = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "name": "Bea"}  # enabled unticked
    r = await post(client, f"/admin/schedules/{sid}/edit", good)
    assert r.status_code == 303, r.text
    row = await pg.fetchrow(
        "SELECT cron, enabled, input_data, next_fire_at FROM schedules WHERE id = $1::uuid", sid
    )
    assert (row["cron"], row["enabled"], row["next_fire_at"]) == ("30 2 * * *", False, None)
    assert '"name": "Bea"' in row["input_data"]
    entry = await pg.fetchrow("SELECT action, detail FROM audit_log WHERE action = 'schedule.update'")
    assert entry is not None and "cron" in entry["detail"] and "enabled" in entry["detail"]


async def test_patch_api_goes_through_the_same_action(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    sid = await _schedule(engine, admin, ui_settings)
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    r = await client.patch(
        f"/api/schedules/{sid}", json={"cron": "bad", "timezone": "Nowhere/Zone"}, headers=headers
    )
    assert r.status_code == 422 and {"cron", "timezone"} <= set(r.json()["errors"]), r.text
    r = await client.patch(f"/api/schedules/{sid}", json={"cron": "*/5 * * * *"}, headers=headers)
    assert (
        r.status_code == 200 and r.json()["cron"] == "*/5 * * * *" and r.json()["timezone"] == "Europe/Berlin"
    )
    assert await pg.fetchval("SELECT count(*) FROM audit_log WHERE action = 'schedule.update'") == 1
