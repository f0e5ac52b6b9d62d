"""Bulk actions say what they did with every id they were given: more ids than the limit is a 422 naming
it (the ids past it were dropped unreported), ids no job has are listed apart from jobs that had moved
on, and a filter with no condition — every job of every user — is taken only with ``"all": true`` (the
API) or the console's confirm step."""

from __future__ import annotations

import uuid

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.form)
from app.settings import Settings
from tests.support.jobsteps import enqueue
from tests.support.webkit import HX, add_token, add_user, csrf, sign_in_as, switch_to


async def test_more_ids_than_the_limit_is_a_422_naming_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    admin = await add_user(db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    ids = [str(uuid.uuid4()) for _ in range(2001)]
    r = await client.post("/api/jobs/bulk", json={"action": "cancel", "ids": ids}, headers=api_h)
    assert r.status_code == 422, r.text[:300]
    assert "2,000" in r.json()["errors"]["ids"], r.text[:300]
    # nothing was done; the refusal is on the audit trail, as every refused admin action is
    outcomes = await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'jobs.bulk_cancel'")
    assert [o["outcome"][:9] for o in outcomes] == ["refused: "]
    # counted as sent: 2,001 copies of one id are over the limit too, as the README says
    r = await client.post("/api/jobs/bulk", json={"action": "cancel", "ids": [ids[0]] * 2001}, headers=api_h)
    assert r.status_code == 422, r.text[:300]
    assert "2,001 were sent (repeats count)" in r.json()["errors"]["ids"], r.text[:300]


async def test_unknown_ids_are_reported_apart_from_jobs_that_moved_on(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await add_user(db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    waiting = await enqueue(engine, settings, owner.id)
    queued = await enqueue(engine, settings, owner.id)  # not failed: a retry skips it (moved on)
    nobody = uuid.uuid4()
    body = {"action": "retry", "ids": [str(waiting), str(queued), str(nobody)]}
    r = await client.post("/api/jobs/bulk", json=body, headers=api_h)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["unknown"] == [str(nobody)], out
    assert sorted(out["skipped"]) == sorted([str(waiting), str(queued)]), out
    assert "2 skipped because they had moved on" in out["message"], out
    assert "1 id named no job" in out["message"] and str(nobody) in out["message"], out


async def test_an_empty_filter_needs_all_true(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    for _ in range(2):
        await enqueue(engine, settings, owner.id)
    r = await client.post("/api/jobs/bulk", json={"action": "cancel", "filter": {}}, headers=api_h)
    assert r.status_code == 422, r.text
    assert "choose at least one filter" in r.json()["errors"]["filter"], r.text
    # the console: the action posted without its confirm step's confirmation is refused too
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    r = await client.post("/admin/jobs/bulk", data={"action": "cancel", "scope": "filter"}, headers=page_h)
    assert r.status_code == 422 and "choose at least one filter" in r.text.lower(), r.text[:500]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'cancelled'") == 0
    # the confirm step says it is everyone's jobs and carries the confirmation
    r = await client.post(
        "/admin/jobs/bulk/confirm", data={"action": "cancel", "scope": "filter"}, headers=page_h
    )
    assert r.status_code == 200 and "every user" in r.text and 'name="all" value="yes"' in r.text, r.text
    # "all" with a filter that has conditions is ambiguous
    body = {"action": "cancel", "filter": {"owner": "ann@example.com"}, "all": True}
    r = await client.post("/api/jobs/bulk", json=body, headers=api_h)
    assert r.status_code == 422 and "all" in r.json()["errors"], r.text
    r = await client.post("/api/jobs/bulk", json={"action": "cancel", "all": True}, headers=api_h)
    assert r.status_code == 200 and len(r.json()["done"]) == 2, r.text


async def test_an_unknown_type_in_a_bulk_filter_is_refused_and_a_removed_type_with_jobs_is_not(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    """``{"type": "nope"}`` acted on 0 jobs without a word; an unknown type is refused as the README
    says of every refusal of an admin action (422 naming ``filter.type``, one ``refused: …`` entry),
    on the console too. A type no longer registered whose jobs are still here stays a filter."""
    admin = await add_user(db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    job = await enqueue(engine, settings, admin.id)
    body = {"action": "cancel", "filter": {"type": "nope"}}
    r = await client.post("/api/jobs/bulk", json=body, headers=api_h)
    assert r.status_code == 422, r.text
    assert r.json()["errors"]["filter.type"] == "unknown job type 'nope': no job type has this name", r.text
    outcomes = await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'jobs.bulk_cancel'")
    assert [o["outcome"][:9] for o in outcomes] == ["refused: "]
    await switch_to(client, "root@example.com")
    page = await client.get("/admin/jobs?type=nope")
    assert page.status_code == 422 and "unknown job type &#39;nope&#39;" in page.text, page.text[-1500:]
    # a type since removed, its job still here: listed and cancelled by it
    await pg.execute("UPDATE jobs SET type = 'gone.type' WHERE id = $1", job)
    r = await client.post(
        "/api/jobs/bulk", json={"action": "cancel", "filter": {"type": "gone.type"}}, headers=api_h
    )
    assert r.status_code == 200 and r.json()["done"] == [str(job)], r.text
