"""A schedule whose owner may no longer start its target — an admin since demoted, whose schedule starts a
diagnostic type — cannot be enabled: its next firing would disable it again (the sweep's
:func:`app.schedules.owner_refusal`). A trial enabled such a schedule through the API and edited it
enabled: both answered 200 "ok", and the schedule was switched off again by ``system`` a minute later.
The Enable button, the edit form and the API refuse it alike, 409 saying why, and nothing changes."""

from __future__ import annotations

import html

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app.actions import schedules as schedule_actions
from app.auth import CurrentUser
from app.settings import Settings
from tests.admin.test_admin import post
from tests.support.webkit import add_token, add_user

WHY = "its owner may no longer start it: only admins may start 'noop'"


async def test_enabling_a_demoted_owners_diagnostic_schedule_is_refused_on_the_page_and_the_api(
    client: AsyncTestClient,
    admin: CurrentUser,
    db_url: str,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    carol = await add_user(db_url, "carol@example.com", admin=True)
    async with engine.begin() as conn:
        row = await schedule_actions.create_schedule(
            conn,
            admin,
            cron="0 9 * * *",
            timezone="UTC",
            job_type="noop",
            name="Carol's check",
            owner_email="carol@example.com",
            enabled=False,
            settings=ui_settings,
        )
    sid = str(row["id"])
    await pg.execute("UPDATE users SET is_admin = false WHERE id = $1", carol.id)
    api = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}

    r = await client.post(f"/api/schedules/{sid}/enable", headers=api)
    assert r.status_code == 409 and WHY in r.json()["detail"], r.text
    r = await client.patch(f"/api/schedules/{sid}", json={"enabled": True, "cron": "0 10 * * *"}, headers=api)
    assert r.status_code == 409 and WHY in r.json()["detail"], r.text
    r = await post(client, f"/admin/schedules/{sid}/enable")
    assert r.status_code == 409 and WHY in html.unescape(r.text), r.text[-800:]

    row = await pg.fetchrow("SELECT enabled, next_fire_at, cron FROM schedules WHERE id = $1::uuid", sid)
    assert (row["enabled"], row["next_fire_at"], row["cron"]) == (False, None, "0 9 * * *")
    outcomes = await pg.fetch(
        "SELECT outcome FROM audit_log WHERE action IN ('schedule.enable', 'schedule.update') ORDER BY id"
    )
    assert len(outcomes) == 3 and all(o["outcome"].startswith("refused: ") for o in outcomes), outcomes
    # disabled, it can still be edited; once its owner may start it again, it can be enabled
    r = await client.patch(f"/api/schedules/{sid}", json={"cron": "0 10 * * *"}, headers=api)
    assert r.status_code == 200 and r.json()["enabled"] is False, r.text
    await pg.execute("UPDATE users SET is_admin = true WHERE id = $1", carol.id)
    r = await client.post(f"/api/schedules/{sid}/enable", headers=api)
    assert r.status_code == 200 and r.json()["enabled"] is True, r.text
