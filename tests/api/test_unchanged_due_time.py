"""An admin's "Run now" of a job that is already due, and a reschedule to the moment a job already waits
for, change nothing: a trial found both answered 200 and were audited "ok", and Run now even moved the
job's due time later, behind the jobs that became due meanwhile (claims take the earlier due time
first). The queue now refuses them as every admin no-op is refused — 409 "Nothing changed" in words,
audited as refused, the due time kept — on the API and the job page alike."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.settings import Settings
from tests.support.jobsteps import enqueue
from tests.support.webkit import HX, add_token, add_user, csrf, sign_in_as

DUE = "this job is already due, so it cannot be run sooner"
SAME = "this job already waits until that moment"
LATER = datetime(2031, 1, 1, 9, 0, tzinfo=UTC)


async def _outcomes(pg: asyncpg.Connection) -> list[str]:
    rows = await pg.fetch(
        "SELECT outcome FROM audit_log WHERE action IN ('job.run_now', 'job.reschedule') ORDER BY id"
    )
    return [r["outcome"] for r in rows]


async def test_run_now_of_a_due_job_and_a_reschedule_to_its_own_time_change_nothing(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    api = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}

    due = await enqueue(engine, settings, owner.id)
    before = await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", due)
    r = await client.post(f"/api/jobs/{due}/run-now", headers=api)
    assert r.status_code == 409 and r.json()["detail"].startswith(f"Nothing changed: {DUE}"), r.text
    r = await client.post(f"/jobs/{due}/run-now", headers={**HX, "x-csrftoken": await csrf(client)})
    assert r.status_code == 409 and f"Nothing changed: {DUE}" in r.text, r.text[-600:]
    assert "Nothing changed: Nothing changed" not in r.text and "paused" in r.text
    assert await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", due) == before

    later = await enqueue(engine, settings, owner.id, run_at=LATER)
    r = await client.post(
        f"/api/jobs/{later}/reschedule", json={"run_at": "2031-01-01T10:00:00+01:00"}, headers=api
    )
    assert (
        r.status_code == 409 and r.json()["detail"] == f"Nothing changed: {SAME}, so it was not rescheduled."
    ), r.text
    assert await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", later) == LATER

    outcomes = await _outcomes(pg)
    assert len(outcomes) == 3 and all(o.startswith("refused: Nothing changed: this job") for o in outcomes), (
        outcomes
    )
    events = await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'rescheduled'")
    assert events == 0

    # a job that waits for a later time still runs now, and moves to another time
    r = await client.post(
        f"/api/jobs/{later}/reschedule", json={"run_at": "2031-01-02T09:00:00+00:00"}, headers=api
    )
    assert r.status_code == 200, r.text
    r = await client.post(f"/api/jobs/{later}/run-now", headers=api)
    assert r.status_code == 200, r.text
    assert (await _outcomes(pg))[-2:] == ["ok", "ok"]
