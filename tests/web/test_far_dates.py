"""A moment near the end of the calendar (year 9999) has no local time east of UTC: Berlin's or
Kiritimati's clock there is already in year 10000, which Python's ``datetime`` cannot hold. A job due
then, or a message quoting such a moment (a rejection's reason, a server's reply in an error), is shown
as written or in UTC, never as a 500."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from app.formatting import format_localtime, local_moments, zone
from tests.support.webkit import add_token, add_user, app_client, login

END = "9999-12-31T23:59:59Z"
EAST = ("Europe/Berlin", "Pacific/Kiritimati")


@pytest.mark.parametrize("name", EAST)
def test_a_moment_past_the_calendar_in_the_zone_reads_in_utc(name: str) -> None:
    last = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert format_localtime(last, zone(name)) == "31 Dec 9999, 23:59 UTC"
    assert local_moments(f"run at {END}", zone(name)) == "run at 31 Dec 9999, 23:59 UTC"
    # an offset west of UTC whose moment is past the calendar even in UTC: in its own offset
    assert local_moments("at 9999-12-31T23:59:59-14:00.", zone(name)) == "at 31 Dec 9999, 23:59 UTC-14:00."
    from app.formatting import in_zone

    assert in_zone(last, zone(name)) == last
    assert format_localtime(datetime(2026, 11, 29, 20, 0, tzinfo=UTC), zone(name)).endswith(("CET", "+14"))


@pytest.mark.parametrize("name", EAST)
async def test_job_and_pipeline_pages_with_moments_at_the_end_of_time(
    name: str, make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    settings = make_settings(worker_enabled=False)
    user = await add_user(db_url, "ann@example.com", admin=True)
    await pg.execute("UPDATE users SET timezone = $1 WHERE id = $2", name, user.id)
    auth = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    async with app_client(settings) as client:
        made = await client.post(
            "/api/pipelines",
            json={"name": "far", "steps": [{"key": "a", "type": "noop"}, {"key": "b", "type": "noop"}]},
            headers=auth,
        )
        assert made.status_code == 201, made.text
        pid = made.json()["id"]
        jobs = await pg.fetch("SELECT id FROM jobs WHERE pipeline_id = $1 ORDER BY step_key", pid)
        first, second = jobs[0]["id"], jobs[1]["id"]
        await pg.execute(
            "UPDATE jobs SET run_at = $1 WHERE pipeline_id = $2",
            datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
            pid,
        )
        await pg.execute(
            "UPDATE jobs SET status = 'failed', completed_at = now(), error_message = $1 WHERE id = $2",
            f'HTTP 400: {{"error": "expires {END} is too late"}}',
            second,
        )
        await pg.execute(
            "INSERT INTO job_events (job_id, kind, actor, message) VALUES ($1, 'rejected', 'user:1', $2)",
            first,
            f"Rejected: the offer ends {END}, ask again later",
        )
        await login(client, "ann@example.com")
        for path in (f"/jobs/{first}", f"/jobs/{second}", f"/pipelines/{pid}", "/jobs", "/admin/jobs"):
            page = await client.get(path)
            assert page.status_code == 200, (path, page.text[:500])
        page = await client.get(f"/jobs/{first}")
        assert "31 Dec 9999, 23:59 UTC" in page.text
        api = await client.get(f"/api/jobs/{first}", headers=auth)
        assert api.status_code == 200 and api.json()["run_at"].startswith("9999-12-31T23:59:59")
