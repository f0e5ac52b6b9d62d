"""A schedule whose target is refused when it fires — by any refusal of a submission, not only a bad
field — is disabled with a notice from ``system``, and the sweep goes on with the other schedules. A trial
found that an input over ``JOB_MAX_INPUT_BYTES`` (the setting lowered after the schedule was made) raised
the enqueue's ``TooLarge``, which the sweep did not catch: its transaction rolled back on every sweep, so
that schedule stayed due and no schedule due after it ever fired again."""

from __future__ import annotations

from typing import Any

import asyncpg

from app import controls
from tests.queue.test_controls import Admin


async def test_an_input_over_a_lowered_size_limit_disables_its_schedule_and_the_others_fire(
    engine: Any, make_settings: Any, admin: Admin, pg: asyncpg.Connection
) -> None:
    settings = make_settings()
    big = {"to": ["ann@example.com"], "subject": "Report", "body": "x" * 8_000}
    async with engine.begin() as conn:
        heavy = await controls.create_schedule(
            conn, cron="* * * * *", job_type="email.send", input_data=big, owner=admin, settings=settings
        )
        light = await controls.create_schedule(
            conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings, name="light"
        )
    await pg.execute(
        "UPDATE schedules SET next_fire_at = now() - interval '2 minutes' WHERE id = $1", heavy["id"]
    )
    await pg.execute(
        "UPDATE schedules SET next_fire_at = now() - interval '1 minute' WHERE id = $1", light["id"]
    )

    lowered = make_settings(job_max_input_bytes=2_048)
    async with engine.begin() as conn:
        fired = await controls.fire_due(conn, lowered)

    assert [f["schedule"] for f in fired] == ["light"]
    assert await pg.fetchval("SELECT enabled FROM schedules WHERE id = $1", heavy["id"]) is False
    notice = await pg.fetchval("SELECT payload::text FROM alert_outbox WHERE kind = 'admin_action'")
    assert "schedule.disable" in notice and "JOB_MAX_INPUT_BYTES" in notice, notice


async def test_a_stored_zone_or_cron_this_host_cannot_read_disables_its_schedule_not_the_worker(
    engine: Any, settings: Any, admin: Admin, pg: asyncpg.Connection
) -> None:
    """A trial set a stored schedule's zone to one this host's time-zone database lacks (as a host with
    older tzdata lacks America/Ciudad_Juarez): ``next_fire`` raised out of the sweep, and the worker
    stopped ("a side task died"), on every start. Such a schedule is now disabled with a notice."""
    async with engine.begin() as conn:
        for name in ("zone", "cron", "fine"):
            await controls.create_schedule(
                conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings, name=name
            )
    await pg.execute("UPDATE schedules SET next_fire_at = now() - interval '1 minute'")
    await pg.execute("UPDATE schedules SET timezone = 'Mars/Olympus' WHERE name = 'zone'")
    await pg.execute("UPDATE schedules SET cron = '61 * * * *' WHERE name = 'cron'")

    async with engine.begin() as conn:
        fired = await controls.fire_due(conn, settings)

    assert [f["schedule"] for f in fired] == ["fine"]
    rows = await pg.fetch("SELECT name, enabled, next_fire_at FROM schedules ORDER BY name")
    assert [(r["name"], r["enabled"], r["next_fire_at"] is None) for r in rows] == [
        ("cron", False, True),
        ("fine", True, False),
        ("zone", False, True),
    ]
    notices = await pg.fetch("SELECT payload::text AS p FROM alert_outbox WHERE kind = 'admin_action'")
    assert len(notices) == 2 and any("Mars/Olympus" in n["p"] for n in notices), notices
