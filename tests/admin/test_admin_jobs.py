"""The admin job console ``/admin/jobs`` and ``/admin/failed`` (cases C17, C19, C20):
filters and search, keyset pages, capped counts, row actions for every kind of visitor, CSRF and
methods, bulk actions on ticked rows and on a filter, failed groups, the audit trail, and the query
plans on a seeded table. The browser test is ``test_browser_admin_jobs.py``."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.actions import bulk, selection
from app.db import asyncpg_dsn
from app.settings import Settings
from app.web.admin import jobs as admin_jobs
from tests.support.jobsteps import claim, enqueue, failed_job, finish
from tests.support.plans import explain
from tests.support.webkit import HX, app_client, csrf, sign_in_as, switch_to

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # bench/seed.py


def ids_in(html: str) -> list[str]:
    """Job ids of the table rows, in page order."""
    return re.findall(r'<tr id="row-([0-9a-f-]{36})"', html)


async def token_of(client: AsyncTestClient) -> str:
    return await csrf(client)


async def waiting_approval(engine: AsyncEngine, settings: Settings, user_id: int) -> uuid.UUID:
    jid = await enqueue(engine, settings, user_id, requires_approval=True, priority=100)
    assert await claim(engine) == jid  # the highest priority is claimed first
    await finish(engine, settings, jid, "completed", result={"ok": 1})
    return jid


# --- the list ---------------------------------------------------------------------------------------------


async def test_list_filters_search_and_keyset_pages(
    client: AsyncTestClient,
    db_url: str,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    ann = (
        await pg.fetchrow("INSERT INTO users (email, password_hash) VALUES ('ann@x.org', 'x') RETURNING id")
    )["id"]
    bob = (
        await pg.fetchrow("INSERT INTO users (email, password_hash) VALUES ('bob@x.org', 'x') RETURNING id")
    )["id"]
    a1 = await enqueue(engine, ui_settings, ann, idempotency_key="invoice-42")
    a2 = await enqueue(engine, ui_settings, ann, "noop")
    b1 = await failed_job(engine, ui_settings, bob, "ValueError: bad row 17")
    b2 = await enqueue(engine, ui_settings, bob, "noop")

    page = (await client.get("/admin/jobs")).text
    assert ids_in(page) == [str(b2), str(b1), str(a2), str(a1)]  # everyone's, newest first
    words = re.sub(r"<[^>]+>", "", page)  # an owner's e-mail is shown in parts that break after @ and dots
    assert "ann@x.org" in words
    assert "bob@x.org" in words
    assert "ValueError: bad row 17" in page
    assert "1/1" in page  # error excerpt, attempts
    assert f'href="/jobs/{b1}"' in page

    async def shown(query: str) -> list[str]:
        r = await client.get("/admin/jobs?" + query)
        assert r.status_code == 200, r.text
        return ids_in(r.text)

    assert await shown("status=failed") == [str(b1)]
    assert await shown("status=queued") == [str(b2), str(a2), str(a1)]
    assert await shown("type=noop") == [str(b2), str(a2)]
    assert await shown("owner=ANN@x.org") == [str(a2), str(a1)]
    assert await shown("owner=ann@x.org&type=noop") == [str(a2)]
    assert await shown(f"q={b1}") == [str(b1)]
    assert await shown("q=invoice-42") == [str(a1)]
    assert await shown("q=nothing-like-this") == []
    now = datetime.now(UTC)
    later = (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    earlier = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert len(await shown(f"created_from={earlier}&created_to={later}")) == 4
    assert await shown(f"created_from={later}") == []
    assert await shown(f"created_to={earlier}") == []
    # bad input: a message next to the field, never a 500
    r = await client.get("/admin/jobs?owner=nobody@x.org&pipeline=nope&created_from=yesterday")
    assert r.status_code == 422
    assert "No user has this e-mail address." in r.text
    assert "Not a pipeline id" in r.text
    assert "Not a date and time" in r.text
    assert ids_in(r.text) == []
    # years ids cannot encode are a field error too, never a 500 (found by a trial: year 0001)
    for moment in ("0001-01-01T00:00", "9999-12-31T23:59"):
        r = await client.get(f"/admin/jobs?created_from={moment}&created_to={moment}")
        assert r.status_code == 422
        assert "Not a date and time between 1970 and 9000" in r.text
    # an unknown status or keyset is said beside the filter too, never dropped to list every job
    r = await client.get("/admin/jobs?status=bogus&after=not-an-id")
    assert r.status_code == 422
    assert "is not a status" in r.text and "is not a position this list gave" in r.text
    assert ids_in(r.text) == []

    # keyset pages: "Older" carries the filter and the last id
    monkeypatch.setattr(admin_jobs, "PAGE_SIZE", 2)
    r = await client.get("/admin/jobs?status=queued")
    assert ids_in(r.text) == [str(b2), str(a2)]
    older = re.search(r'href="(/admin/jobs\?[^"]+)" rel="next"', r.text).group(1).replace("&amp;", "&")
    assert f"after={a2}" in older
    assert "status=queued" in older
    r = await client.get(older)
    assert ids_in(r.text) == [str(a1)]
    assert 'rel="next"' not in r.text
    assert ">Newest</a>" in r.text


async def test_counts_are_capped_for_live_statuses_and_estimated_for_big_finished_ones(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    await pg.execute(
        """
        INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts)
        SELECT gen_random_uuid(), 'noop', 'queued', $1, '{}', 3 FROM generate_series(1, 10050)
        """,
        admin.id,
    )
    await pg.execute(
        """
        INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, completed_at, error_message)
        SELECT gen_random_uuid(), 'noop', CASE WHEN g <= 12000 THEN 'completed' ELSE 'failed' END, $1, '{}', 3,
               now(), CASE WHEN g > 12000 THEN 'boom' END
        FROM generate_series(1, 12007) g
        """,
        admin.id,
    )
    await pg.execute("ANALYZE jobs")
    r = await client.get("/admin/jobs/counts", headers=HX)
    assert r.status_code == 200

    def count(status: str) -> str:
        return re.search(rf'id="count-{status}".*?class="count-n">([^<]+)<', r.text, re.S).group(1)

    assert count("queued") == "10,000+"
    assert count("in_progress") == "0"
    assert count("failed") == "7"
    assert count("cancelled") == "0"
    assert re.fullmatch(r"about 1[12],\d{3}", count("completed")), count("completed")
    # the page shows the same strip, counted with its rows, and polls it
    page = (await client.get("/admin/jobs")).text
    assert re.search(r'id="count-failed".*?class="count-n">7<', page, re.S)
    assert 'hx-get="/admin/jobs/counts"' in page


# --- row actions ----------------------------------------------------------------------------------------


async def test_every_row_action_as_admin_owner_other_user_and_signed_out(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await sign_in_as(client, db_url, "ann@example.com")
    await sign_in_as(client, db_url, "eve@example.com")
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    queued = await enqueue(engine, ui_settings, owner.id)
    failed = await failed_job(engine, ui_settings, owner.id, "boom")
    approve = await waiting_approval(engine, ui_settings, owner.id)
    reject = await waiting_approval(engine, ui_settings, owner.id)
    rerun = await waiting_approval(engine, ui_settings, owner.id)
    other = await waiting_approval(engine, ui_settings, owner.id)
    cases = [
        ("cancel", queued, "cancelled", "Cancelled."),
        ("retry", failed, "queued", "Retrying"),
        ("run-again", failed, "queued", "Started again as a new job."),
        ("approve", approve, "completed", "Approved."),
        ("reject", reject, "failed", "Rejected."),
        ("rerun", rerun, "queued", "This step will run again"),
    ]
    # owner and another user: 403, nothing changes; signed out: to the sign-in page
    for who in ("ann@example.com", "eve@example.com", None):
        client.cookies.clear()
        if who:
            await switch_to(client, who)
            token = await token_of(client)
        for action, jid, _, _ in cases:
            before = await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid)
            data = {"_csrf_token": token, "reason": "no"} if who else {}
            r = await client.post(
                f"/admin/jobs/{jid}/{action}", data=data, headers=HX, follow_redirects=False
            )
            if who:
                assert r.status_code == 403, (who, action, r.status_code)
            else:
                assert r.status_code in (401, 403), r.status_code  # htmx: HX-Redirect (or CSRF 403 first)
            assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == before
        r = await client.get("/admin/jobs", follow_redirects=False)
        if who:
            assert r.status_code == 403
        else:
            assert r.status_code == 303
            assert r.headers["location"].startswith("/login")
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == 0

    await switch_to(client, "root@example.com")
    token = await token_of(client)
    for action, jid, status, words in cases:
        # only the reject form has a reason: another action's form sent one is refused as a field it has not
        data = {"_csrf_token": token, **({"reason": "Looks wrong"} if action == "reject" else {})}
        r = await client.post(f"/admin/jobs/{jid}/{action}", data=data, headers=HX)
        assert r.status_code == 200, (action, r.text)
        assert r.text.lstrip().startswith(f'<tr id="row-{jid}"'), (action, r.text)
        assert words in r.text, (action, r.text)
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == status
    actions = [r["action"] for r in await pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    assert actions == ["job.cancel", "job.retry", "job.run_again", "job.approve", "job.reject", "job.rerun"]
    assert await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'") == 6
    # "already finished": 409 in place, audited as refused
    r = await client.post(f"/admin/jobs/{queued}/cancel", data={"_csrf_token": token}, headers=HX)
    assert r.status_code == 409
    assert "Nothing changed: it has already finished (Cancelled)." in r.text
    assert r.text.lstrip().startswith(f'<tr id="row-{queued}"')
    assert (await pg.fetchval("SELECT outcome FROM audit_log ORDER BY id DESC LIMIT 1")).startswith("refused")
    # reject needs a reason; unknown ids are 404
    r = await client.post(f"/admin/jobs/{other}/reject", data={"_csrf_token": token}, headers=HX)
    assert r.status_code == 422
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", other) == "waiting_approval"
    r = await client.post(f"/admin/jobs/{uuid.uuid4()}/cancel", data={"_csrf_token": token}, headers=HX)
    assert r.status_code == 404
    # without htmx: a page with the row and the outcome
    r = await client.post(f"/admin/jobs/{other}/approve", data={"_csrf_token": token})
    assert r.status_code == 200
    assert "<html" in r.text
    assert "Approved." in r.text


async def test_csrf_missing_or_wrong_is_403_and_get_on_actions_is_405(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    jid = await enqueue(engine, ui_settings, admin.id)
    fid = await failed_job(engine, ui_settings, admin.id, "boom")
    posts = [
        (f"/admin/jobs/{jid}/cancel", {}),
        (f"/admin/jobs/{fid}/retry", {}),
        ("/admin/jobs/bulk/confirm", {"action": "cancel", "scope": "filter"}),
        ("/admin/jobs/bulk", {"action": "cancel", "scope": "filter", "expected": "1"}),
        ("/admin/jobs/bulk", {"action": "retry", "scope": "selected", "ids": str(fid)}),
        ("/admin/failed/retry", {"type": "test.form", "signature": "boom", "expected": "1"}),
    ]
    for url, data in posts:
        for token in (None, "forged-token"):
            body = dict(data) if token is None else {**data, "_csrf_token": token}
            r = await client.post(url, data=body, headers=HX)
            assert r.status_code == 403, (url, token, r.status_code)
        assert (await client.get(url)).status_code == 405, url
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "queued"
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", fid) == "failed"
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == 0
    # negative control: the same request with the token does change it
    r = await client.post(
        f"/admin/jobs/{jid}/cancel", data={"_csrf_token": await token_of(client)}, headers=HX
    )
    assert r.status_code == 200
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "cancelled"


# --- bulk actions ---------------------------------------------------------------------------------------


async def test_bulk_retry_of_ticked_rows_shows_the_count_then_retries_and_audits_once(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    failed = [await failed_job(engine, ui_settings, admin.id, f"boom {i}") for i in range(3)]
    waiting = await enqueue(engine, ui_settings, admin.id)
    token = await token_of(client)
    ticked = [*failed, waiting]
    body = {"_csrf_token": token, "action": "retry", "scope": "selected", "ids": [str(i) for i in ticked]}
    r = await client.post("/admin/jobs/bulk/confirm", data=body, headers=HX)
    assert r.status_code == 200
    assert re.search(r'id="bulk-count">3<', r.text)
    assert "1 ticked job is not failed" in r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 3  # nothing yet
    hidden = dict(re.findall(r'name="(action|scope|expected)" value="([^"]+)"', r.text))
    assert hidden == {"action": "retry", "scope": "selected", "expected": "3"}
    r = await client.post("/admin/jobs/bulk", data={**body, "expected": "3"}, headers=HX)
    assert r.status_code == 200
    assert "Retried 3 jobs; 1 skipped" in r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 0
    entries = await pg.fetch("SELECT action, count, outcome, target_ids, detail FROM audit_log")
    assert len(entries) == 1
    e = entries[0]
    assert (e["action"], e["count"], e["outcome"]) == ("jobs.bulk_retry", 3, "3 done, 1 skipped")
    assert sorted(json.loads(e["target_ids"])) == sorted(str(i) for i in failed)
    assert json.loads(e["detail"])["skipped_ids"] == [str(waiting)]
    alerts = await pg.fetch("SELECT payload FROM alert_outbox WHERE kind = 'admin_action'")
    assert len(alerts) == 1
    assert json.loads(alerts[0]["payload"])["count"] == 3
    # each job's own history names the admin's retry
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'retried'") == 3


async def test_a_bulk_cancel_that_finds_only_held_jobs_says_where_they_are_cancelled(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    """A disabled person's waiting jobs are held, and a bulk cancel leaves them alone (they have their own
    button): the confirm step said only that it applies to jobs "waiting, running or needing approval",
    beside a list of waiting jobs, as if it were broken. It says they are held, and where they go."""
    from app.jobs import queue

    await sign_in_as(client, db_url, "root@example.com", admin=True)
    ann = (
        await pg.fetchrow("INSERT INTO users (email, password_hash) VALUES ('ann@x.org', 'x') RETURNING id")
    )["id"]
    held = await enqueue(engine, ui_settings, ann, "noop")
    async with engine.begin() as conn:
        await pg.execute("UPDATE users SET is_active = false WHERE id = $1", ann)
        assert await queue.hold_user_jobs(conn, ann, "admin:root") == 1
    body = {"_csrf_token": await token_of(client), "action": "cancel", "scope": "selected", "ids": str(held)}
    r = await client.post("/admin/jobs/bulk/confirm", data=body, headers=HX)
    assert r.status_code == 200, r.text
    assert "No job here can be cancelled" in r.text
    assert "(not held, and not already being stopped)" in r.text
    assert (
        'held jobs are cancelled with <strong>Cancel held jobs</strong> on <a href="/admin/users">' in r.text
    )
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", held) == "queued"


async def test_bulk_cancel_of_every_row_matching_a_filter_affects_exactly_the_count_shown(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    ann = (
        await pg.fetchrow("INSERT INTO users (email, password_hash) VALUES ('ann@x.org', 'x') RETURNING id")
    )["id"]
    running = await enqueue(engine, ui_settings, ann, "noop", priority=100)
    assert await claim(engine) == running
    done = await enqueue(engine, ui_settings, ann, "noop", priority=100)
    assert await claim(engine) == done
    await finish(engine, ui_settings, done, "completed", result={})
    anns = [running] + [await enqueue(engine, ui_settings, ann, "noop") for _ in range(3)]
    await enqueue(engine, ui_settings, ann)  # another type: not in the filter
    await enqueue(engine, ui_settings, admin.id, "noop")  # another owner: not in the filter
    token = await token_of(client)
    body = {"_csrf_token": token, "action": "cancel", "scope": "filter", "owner": "ann@x.org", "type": "noop"}
    r = await client.post("/admin/jobs/bulk/confirm", data=body, headers=HX)
    assert r.status_code == 200, r.text
    assert re.search(r'id="bulk-count">4<', r.text), r.text
    upto = re.search(r'name="upto" value="([^"]+)"', r.text).group(1)
    # a job created after the confirm step is not touched
    late = await enqueue(engine, ui_settings, ann, "noop")
    r = await client.post("/admin/jobs/bulk", data={**body, "expected": "4", "upto": upto}, headers=HX)
    assert r.status_code == 200
    assert "Cancelled 4 jobs" in r.text
    assert "0 skipped" in r.text
    statuses = dict(await pg.fetch("SELECT id, status FROM jobs"))
    assert all(statuses[j] == "cancelled" for j in anns[1:])
    assert statuses[running] == "in_progress"  # asked to stop: the worker records the cancel
    assert await pg.fetchval("SELECT is_active FROM jobs WHERE id = $1", running) is False
    assert statuses[late] == "queued"
    assert statuses[done] == "completed"
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 3
    e = await pg.fetchrow("SELECT action, count, outcome, detail FROM audit_log")
    assert (e["action"], e["count"], e["outcome"]) == ("jobs.bulk_cancel", 4, "4 done, 0 skipped")
    assert json.loads(e["detail"])["filter"] == {"owner": "ann@x.org", "type": "noop"}
    assert await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'") == 1
    # nothing left to cancel: the confirm step says so and offers no button
    r = await client.post("/admin/jobs/bulk/confirm", data={**body, "status": "completed"}, headers=HX)
    assert "No job here can be cancelled" in r.text
    assert "bulk-confirm-button" not in r.text
    # bad requests are readable 4xx
    r = await client.post(
        "/admin/jobs/bulk/confirm",
        data={"_csrf_token": token, "action": "delete", "scope": "filter"},
        headers=HX,
    )
    assert r.status_code == 422
    r = await client.post(
        "/admin/jobs/bulk/confirm",
        data={"_csrf_token": token, "action": "retry", "scope": "selected"},
        headers=HX,
    )
    assert r.status_code == 422
    assert "Nothing changed: tick at least one row" in r.text


# --- failed groups --------------------------------------------------------------------------------------


def test_error_signatures_mask_ids_and_numbers_and_keep_the_first_line() -> None:
    sig = bulk.error_signature
    assert sig("ValueError: row 17 of 0190ab12-3456-7890-abcd-ef0123456789\nTraceback…") == (
        "ValueError: row N of <id>"
    )
    assert sig("HTTP 503 from https://x.org/a/123") == sig("HTTP 502 from https://x.org/a/9")
    assert sig("token deadbeefcafe0042 expired") == "token <hex> expired"
    assert sig(None) == sig("") == "(no error message)"
    assert len(sig("x" * 1000)) == bulk.ERROR_SIGNATURE_MAX + 1


async def test_failed_jobs_are_grouped_by_type_and_error_and_a_group_is_retried(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    timeouts = [
        await failed_job(engine, ui_settings, admin.id, f"TimeoutError: after {i} s") for i in (3, 5, 8)
    ]
    other = await failed_job(engine, ui_settings, admin.id, "KeyError: 'name'")
    page = (await client.get("/admin/failed")).text
    rows = re.findall(r'<tr id="group-(\w+)">(.*?)</tr>', page, re.S)
    assert len(rows) == 2
    assert "KeyError: &#39;name&#39;" in rows[0][1]  # newest group first
    assert ">1<" in rows[0][1]
    assert "TimeoutError: after N s" in rows[1][1]
    assert ">3<" in rows[1][1]
    assert "The newest 2,000 failed jobs (4 in all)" in page
    token = await token_of(client)
    form = {
        "_csrf_token": token,
        "type": "test.form",
        "signature": "TimeoutError: after N s",
        "upto": re.search(r'name="upto" value="([^"]+)"', page).group(1),
    }
    r = await client.post("/admin/failed/retry/confirm", data=form, headers=HX)
    assert r.status_code == 200
    assert re.search(r'id="bulk-count">3<', r.text)
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 4
    r = await client.post("/admin/failed/retry", data={**form, "expected": "3"}, headers=HX)
    assert r.status_code == 200
    assert "Retried 3 jobs; 0 skipped" in r.text
    assert {r["id"] for r in await pg.fetch("SELECT id FROM jobs WHERE status = 'queued'")} == set(timeouts)
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", other) == "failed"
    e = await pg.fetchrow("SELECT action, count, outcome, detail FROM audit_log")
    assert (e["action"], e["count"], e["outcome"]) == ("jobs.bulk_retry", 3, "3 done, 0 skipped")
    assert json.loads(e["detail"])["scope"] == "group"


# --- plans on a seeded table (case C17) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded_url(pg_server_url: str, template_db: str) -> Iterator[str]:
    """100,000 jobs by bench/seed.py over 50 users, plus a few idempotency keys and pipeline jobs;
    vacuumed and analysed."""
    import seed

    from tests import conftest

    name = f"{conftest._PREFIX}_adminseed"
    asyncio.run(conftest._create_db(pg_server_url, name, template=template_db))
    url = conftest._db_url(pg_server_url, name)
    asyncio.run(seed.seed(url, 100_000, 50))

    async def extra() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await conn.execute(
                "UPDATE jobs SET idempotency_key = 'key-' || id WHERE id IN (SELECT id FROM jobs LIMIT 500)"
            )
            await conn.execute("ANALYZE jobs")
        finally:
            await conn.close()

    asyncio.run(extra())
    yield url
    asyncio.run(conftest._drop_db(pg_server_url, name))


def _seq_scans(nodes: list[dict[str, Any]]) -> list[str]:
    return [
        n["Node Type"] for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"
    ]


READ_LIMIT = 25_000
"""Rows of ``jobs`` one admin statement may read on the 100,000-row table (a page reads 51; a capped
count 10,001; the failed window 2,000; a bulk plan 2,001 — with slack for filtered index scans)."""


def _rows_read(nodes: list[dict[str, Any]]) -> int:
    return sum(
        n.get("Actual Rows", 0) * n.get("Actual Loops", 1) + n.get("Rows Removed by Filter", 0)
        for n in nodes
        if n.get("Relation Name") == "jobs"
    )


async def _admin_statements(conn: asyncpg.Connection) -> list[tuple[str, Any, dict[str, Any]]]:
    owner = await conn.fetchval("SELECT id FROM users ORDER BY id LIMIT 1")
    some = await conn.fetchrow("SELECT id, created_at FROM jobs ORDER BY id LIMIT 1 OFFSET 50000")
    key = await conn.fetchval("SELECT idempotency_key FROM jobs WHERE idempotency_key IS NOT NULL LIMIT 1")
    now = datetime.now(UTC)
    filters = {
        "none": selection.JobFilter(),
        "status-completed": selection.JobFilter(status="completed"),
        "status-failed": selection.JobFilter(status="failed"),
        "status-queued": selection.JobFilter(status="queued"),
        "status-approval": selection.JobFilter(status="waiting_approval"),
        "scheduled": selection.JobFilter(status="scheduled"),
        "type": selection.JobFilter(type="sleep"),
        "owner": selection.JobFilter(owner_id=owner),
        "owner-status": selection.JobFilter(owner_id=owner, status="failed"),
        "pipeline": selection.JobFilter(pipeline_id=uuid.uuid4()),
        "created-range": selection.JobFilter(
            created_from=now - timedelta(days=3), created_to=now - timedelta(days=2)
        ),
        "search-id": selection.JobFilter(search_id=some["id"]),
        "search-key": selection.JobFilter(search_key=key),
        "type-status-range": selection.JobFilter(
            type="fail", status="failed", created_from=now - timedelta(days=1)
        ),
    }
    out: list[tuple[str, Any, dict[str, Any]]] = []
    for name, f in filters.items():
        where, params = selection.filter_where(f, after=some["id"] if name == "none" else None)
        out.append((f"list-{name}", selection.list_sql(where), {**params, "limit": admin_jobs.PAGE_SIZE + 1}))
        for action, spec in bulk.BULK_ACTIONS.items():
            where, params = selection.filter_where(f, eligible=spec["eligible"], upto=some["id"])
            out.append(
                (
                    f"bulk-{action}-{name}",
                    selection.ids_sql(where),
                    {**params, "limit": bulk.BULK_MAX + 1},
                )
            )
    for status, statement in admin_jobs.LIVE_COUNT_SQL.items():
        out.append((f"count-{status}", statement, {}))
    out.append(("count-scheduled", admin_jobs.SCHEDULED_COUNT, {}))
    for status in ("completed", "failed", "cancelled"):
        out.append((f"count-{status}", admin_jobs.CAPPED_COUNT, {"status": status}))
    out.append(("failed-window", bulk.FAILED_LATEST, {}))
    out.append(("failed-window-upto", bulk.FAILED_UPTO, {"upto": some["id"]}))
    out.append(("selected", bulk.ROWS_BY_ID, {"ids": [some["id"]]}))
    return out


@pytest.mark.slow
async def test_list_count_bulk_and_failed_queries_use_indexes_on_a_seeded_table(seeded_url: str) -> None:
    """Case C17: on 100,000 ANALYZEd jobs every statement of ``/admin/jobs`` (each filter, its bulk
    variants, the counts) and of ``/admin/failed`` is an index scan — no Seq Scan on ``jobs``; the counts
    read at most the cap. Negative control: with the secondary indexes dropped (rolled back), the same
    statements do scan the table, so the check can fail."""
    conn = await asyncpg.connect(asyncpg_dsn(seeded_url))
    try:
        problems: dict[str, Any] = {}
        for name, statement, params in await _admin_statements(conn):
            nodes = await explain(conn, statement, params, analyze=True)
            if _seq_scans(nodes) or _rows_read(nodes) > READ_LIMIT:
                problems[name] = ([n.get("Index Name") or n["Node Type"] for n in nodes], _rows_read(nodes))
            if name.startswith("count-"):
                read = max(n.get("Actual Rows", 0) for n in nodes if n.get("Relation Name") == "jobs")
                assert read <= admin_jobs.COUNT_CAP + 1, (name, read)
        assert problems == {}
        tx = conn.transaction()
        await tx.start()
        try:
            for r in await conn.fetch(
                "SELECT indexrelid::regclass::text AS name FROM pg_index "
                "WHERE indrelid = 'jobs'::regclass AND NOT indisprimary AND NOT indisunique"
            ):
                await conn.execute(f'DROP INDEX "{r["name"]}"')
            scanned = set()
            for name, statement, params in await _admin_statements(conn):
                nodes = await explain(conn, statement, params, analyze=True)
                if _seq_scans(nodes) or _rows_read(nodes) > READ_LIMIT:
                    scanned.add(name)
            assert {"list-owner-status", "list-pipeline", "list-scheduled", "count-queued"} <= scanned
        finally:
            await tx.rollback()
    finally:
        await conn.close()


async def test_counts_page_and_list_through_the_app_on_the_seeded_table(
    seeded_url: str, make_settings: Any
) -> None:
    """The strip on 100,000 jobs: live counts exact (under the cap), finished ones estimated."""
    settings = make_settings(worker_enabled=False, database_url=seeded_url)
    async with app_client(settings) as client:
        from tests.support.webkit import login

        conn = await asyncpg.connect(asyncpg_dsn(seeded_url))
        try:
            from app.auth import hash_password
            from tests.support.webkit import PASSWORD

            await conn.execute(
                "UPDATE users SET password_hash = $1 WHERE email = 'user01@example.com'",
                hash_password(PASSWORD),
            )
            queued = await conn.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'")
        finally:
            await conn.close()
        assert (await login(client, "user01@example.com")).status_code == 303
        r = await client.get("/admin/jobs/counts", headers=HX)
        assert 'id="count-queued"' in r.text
        assert f">{queued:,}<" in r.text
        assert re.search(r'id="count-completed".*?>about [\d,]+<', r.text, re.S)
        r = await client.get("/admin/jobs?status=failed")
        assert r.status_code == 200
        assert len(ids_in(r.text)) == admin_jobs.PAGE_SIZE


async def test_the_list_shows_who_paused_the_filtered_type(
    client: AsyncTestClient, db_url: str, engine
) -> None:
    """The "Paused by <admin> at …" banner is on every page listing jobs of a paused type, the admin list
    too (a trial found it missing here)."""
    from app import controls

    boss = await sign_in_as(client, db_url, "root@example.com", admin=True)
    async with engine.begin() as conn:
        await controls.set_paused(conn, "sleep", True, boss)
    page = (await client.get("/admin/jobs?type=sleep")).text
    assert "are paused" in page
    assert "root@example.com" in page
    assert "are paused" not in (await client.get("/admin/jobs?type=noop")).text


async def test_a_failed_groups_retry_holds_the_action_and_scope_it_is_sent(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    """The confirm step of "Retry all in this group" sends ``action`` and ``scope``; the retry read neither,
    so ``action=cancel`` (or a scope of ticked rows, or of a filter) retried the whole group."""
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    failed = [await failed_job(engine, ui_settings, admin.id, "boom") for _ in range(2)]
    token = await token_of(client)
    r = await client.post(
        "/admin/failed/retry/confirm", data={"_csrf_token": token, "type": "test.form", "signature": "boom"}
    )
    assert r.status_code == 200, r.text
    sent = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', r.text))
    assert (sent["action"], sent["scope"], sent["expected"]) == ("retry", "group", "2"), sent
    for changes, words in (
        ({"action": "cancel"}, "a failed group can only be retried"),
        ({"action": "delete"}, "choose retry or cancel"),
        ({"scope": "filter"}, "not &#39;filter&#39;"),
        ({"scope": "selected"}, "not &#39;selected&#39;"),
        ({"scope": "everything"}, "is not a scope"),
    ):
        r = await client.post("/admin/failed/retry", data={**sent, **changes}, headers=HX)
        assert r.status_code == 422, (changes, r.status_code, r.text)
        assert words in r.text.lower(), (changes, r.text)
        assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 2, changes
    r = await client.post("/admin/failed/retry", data=sent, headers=HX)
    assert r.status_code == 200 and "Retried 2 jobs" in r.text, r.text
    assert {r["id"] for r in await pg.fetch("SELECT id FROM jobs WHERE status = 'queued'")} == set(failed)


async def test_a_group_retry_naming_an_unknown_type_is_refused_naming_the_field(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    """A failed group's retry naming a type no job has (a typo) answered "Retried 0 jobs", as if done;
    it is refused like ``GET /api/jobs?type=`` refuses one, on the API and on the page's form."""
    from tests.support.webkit import add_token

    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    await failed_job(engine, ui_settings, admin.id, "boom")
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    body = {"action": "retry", "group": {"type": "test.frm", "signature": "boom"}}
    r = await client.post("/api/jobs/bulk", json=body, headers=api_h)
    assert r.status_code == 422, r.text
    assert "unknown job type" in r.json()["errors"]["group.type"], r.text
    form = {"_csrf_token": await token_of(client), "type": "test.frm", "signature": "boom"}
    for url, extra in (("/admin/failed/retry/confirm", {}), ("/admin/failed/retry", {"expected": "1"})):
        r = await client.post(url, data={**form, **extra}, headers=HX)
        assert r.status_code == 422, (url, r.text)
        assert "unknown job type" in r.text and "group.type" in r.text, r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 1
