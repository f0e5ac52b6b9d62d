"""A schedule whose owner's account is disabled cannot be enabled, nor created enabled: the next firing
would disable it again. The console's Enable button, its create and edit forms and the API each answer
409 saying why, and nothing changes; disabling it, or creating it disabled, stays possible."""

from __future__ import annotations

import html

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.actions import schedules as schedule_actions
from app.auth import CurrentUser
from app.errors import Conflict
from app.settings import Settings
from tests.admin.test_admin import post
from tests.support.webkit import add_token, add_user

WHY = "owner's account (ann@example.com) is disabled"


async def _disabled_owners_schedule(
    engine: AsyncEngine, admin: CurrentUser, settings: Settings, pg: asyncpg.Connection
) -> str:
    async with engine.begin() as conn:
        row = await schedule_actions.create_schedule(
            conn,
            admin,
            cron="0 9 * * *",
            timezone="UTC",
            job_type="test.form",
            input_data={"name": "Ann"},
            name="Ann's hello",
            owner_email="ann@example.com",
            enabled=False,
            settings=settings,
        )
    await pg.execute("UPDATE users SET is_active = false WHERE email = 'ann@example.com'")
    return str(row["id"])


async def test_enabling_a_schedule_of_a_disabled_owner_is_refused_on_the_page_and_the_api(
    client: AsyncTestClient,
    admin: CurrentUser,
    db_url: str,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    await add_user(db_url, "ann@example.com")
    sid = await _disabled_owners_schedule(engine, admin, ui_settings, pg)
    api = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}

    r = await client.post(f"/api/schedules/{sid}/enable", headers=api)
    assert r.status_code == 409 and WHY in r.json()["detail"], r.text
    r = await client.patch(f"/api/schedules/{sid}", json={"enabled": True}, headers=api)
    assert r.status_code == 409 and WHY in r.json()["detail"], r.text

    r = await post(client, f"/admin/schedules/{sid}/enable")
    assert r.status_code == 409 and WHY in html.unescape(r.text), r.text[-800:]
    # a refusal is not a no-op: it says what it says
    assert "Nothing changed" not in r.text
    # the list says why Enable will be refused
    assert "owner disabled" in (await client.get("/admin/schedules")).text
    form = {"_cron": "0 9 * * *", "_timezone": "UTC", "name": "Ann", "_enabled": "on"}
    r = await post(client, f"/admin/schedules/{sid}/edit", form)
    assert r.status_code == 409 and 'id="e-_enabled"' in r.text and WHY in html.unescape(r.text), r.text[
        -800:
    ]

    r = await client.put(f"/api/schedules/{sid}", json={"enabled": True}, headers=api)
    assert r.status_code == 409 and WHY in r.json()["detail"], r.text

    row = await pg.fetchrow("SELECT enabled, next_fire_at FROM schedules WHERE id = $1::uuid", sid)
    assert (row["enabled"], row["next_fire_at"]) == (False, None)
    # each refusal is on record, as a refused pause or limit is; no admin notice is sent for one
    refusals = await pg.fetch(
        "SELECT action, outcome, count, target_ids FROM audit_log"
        " WHERE action LIKE 'schedule.%' AND action <> 'schedule.create' ORDER BY id"
    )
    # each of these only switches enabled on, so each is recorded as the Enable button records it
    assert [r["action"] for r in refusals] == ["schedule.enable"] * 5
    for entry in refusals:
        assert entry["outcome"].startswith('refused: The schedule "Ann\'s hello" cannot be enabled'), entry
        assert WHY in entry["outcome"] and entry["count"] == 0 and sid in entry["target_ids"], entry

    # a form to correct and an unknown schedule are refusals too, each on record once
    r = await post(client, f"/admin/schedules/{sid}/edit", {**form, "_cron": "every day"})
    assert r.status_code == 422 and 'id="e-_cron"' in r.text, r.text[-800:]
    r = await client.patch(f"/api/schedules/{sid}", json={"cron": "every day"}, headers=api)
    assert r.status_code == 422, r.text
    r = await client.post("/api/schedules/01a24c9b-324c-715c-ba6b-7b9daff43c30/enable", headers=api)
    assert r.status_code == 404, r.text
    audited = "SELECT count(*) FROM audit_log WHERE action LIKE 'schedule.%' AND action <> 'schedule.create'"
    assert await pg.fetchval(audited) == len(refusals) + 3

    # once the account is enabled again, so is the schedule
    await pg.execute("UPDATE users SET is_active = true WHERE email = 'ann@example.com'")
    assert "owner disabled" not in (await client.get("/admin/schedules")).text
    r = await client.post(f"/api/schedules/{sid}/enable", headers=api)
    assert r.status_code == 200 and r.json()["enabled"] is True, r.text


async def test_a_new_schedule_of_a_disabled_owner_is_refused_enabled_and_kept_disabled(
    client: AsyncTestClient,
    admin: CurrentUser,
    db_url: str,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    await add_user(db_url, "ann@example.com")
    await pg.execute("UPDATE users SET is_active = false WHERE email = 'ann@example.com'")
    form = {
        "_target": "type:test.form",
        "_cron": "0 9 * * *",
        "_timezone": "UTC",
        "_name": "Ann's hello",
        "_owner": "ann@example.com",
        "_enabled": "on",
        "name": "Ann",
    }
    r = await post(client, "/admin/schedules/new", form)
    assert r.status_code == 409 and 'id="e-_enabled"' in r.text and WHY in html.unescape(r.text), r.text[
        -800:
    ]
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    outcome = await pg.fetchval("SELECT outcome FROM audit_log WHERE action = 'schedule.create'")
    assert outcome.startswith('refused: The schedule "Ann\'s hello" cannot be enabled'), outcome

    # the action the API goes through applies the same rule
    with pytest.raises(Conflict, match="is disabled"):
        async with engine.begin() as conn:
            await schedule_actions.create_schedule(
                conn,
                admin,
                cron="0 9 * * *",
                job_type="test.form",
                input_data={"name": "Ann"},
                owner_email="ann@example.com",
                settings=ui_settings,
                source="api",
            )
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0

    # made disabled, it is kept: it waits for the account
    r = await post(client, "/admin/schedules/new", {k: v for k, v in form.items() if k != "_enabled"})
    assert r.status_code == 303, r.text[-800:]
    row = await pg.fetchrow("SELECT enabled, next_fire_at FROM schedules")
    assert (row["enabled"], row["next_fire_at"]) == (False, None)
