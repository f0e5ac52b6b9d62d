"""Per-person limits and a disabled person's held jobs, through the real app (and a real worker where a
job would run).

Limits: jobs waiting, submissions per minute (a pipeline counts once), files stored, pipeline size —
each refused on every path a person submits by (the JSON API, the forms, uploads) with a 429 that says
the limit and when to try again (``Retry-After``), or a 422 naming ``steps`` for a pipeline too large;
concurrent requests never pass a limit together; admins are exempt from the waiting and per-minute
limits; 0 turns a limit off; a schedule firing into a full queue is skipped with a notice.

Disabled users: disabling holds their waiting jobs at once (a worker never runs them, as it did six
seconds after a disable before), their token cannot submit, enabling does not release them, and an
admin releases or cancels them, audited.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, test.step, test.steps)
from app import schedule_firing, schedules
from app.db import create_engine
from app.jobs.queue import SystemPrincipal
from app.settings import Settings
from tests.support.factories import make_job
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import add_token, add_user, app_client, csrf_from, login, running_server
from tests.support.workers import running_worker, wait_until

NO_LIMITS = {
    "user_max_waiting_jobs": 0,
    "user_max_jobs_per_minute": 0,
    "user_max_upload_bytes": 0,
    "pipeline_max_steps": 0,
    "pipeline_max_edges": 0,
}


@dataclass
class Scene:
    client: AsyncTestClient
    settings: Settings
    pg: asyncpg.Connection
    user_id: int
    user: dict[str, str]
    admin_id: int
    admin: dict[str, str]


@pytest.fixture
async def scene_of(make_settings: Any, pg: asyncpg.Connection) -> AsyncIterator[Any]:
    """``await scene_of(**limits)`` → a started app with a person and an admin, each with a token."""
    clients: list[Any] = []

    async def make(**limits: Any) -> Scene:
        settings = make_settings(worker_enabled=False, **{**NO_LIMITS, **limits})
        db = settings.database_url or ""
        user = await add_user(db, "ann@example.com")
        admin = await add_user(db, "root@example.com", admin=True)
        cm = app_client(settings)
        client = await cm.__aenter__()
        clients.append(cm)
        bearer = {"Authorization": f"Bearer {await add_token(db, user.id)}"}
        root = {"Authorization": f"Bearer {await add_token(db, admin.id)}"}
        return Scene(client, settings, pg, user.id, bearer, admin.id, root)

    yield make
    for cm in clients:
        await cm.__aexit__(None, None, None)


def job(i: int = 0, **extra: Any) -> dict[str, Any]:
    return {"type": "test.step", "input_data": {"label": f"j{i}"}, **extra}


def steps(n: int, *, connected: bool = False) -> dict[str, Any]:
    return {
        "name": "big",
        "steps": [
            {
                "key": f"s{i}",
                "type": "test.step",
                "input_data": {},
                "depends_on": [f"s{k}" for k in range(i)] if connected else ([f"s{i - 1}"] if i else []),
            }
            for i in range(n)
        ],
    }


def assert_limited(r: Any, *words: str) -> int:
    """A 429 naming the limit in words and what to do (when to try again; for the waiting limit, whose
    room comes when jobs run, to wait for them or cancel some), with a ``Retry-After`` in whole seconds;
    returns it."""
    assert r.status_code == 429, r.text
    detail = r.json()["detail"]
    waiting = "Too many jobs waiting" in detail
    assert ("Wait until some have run, or cancel some." if waiting else "Try again in") in detail, detail
    for w in words:
        assert w in detail, detail
    return int(r.headers["retry-after"])


async def test_waiting_limit_answers_429_on_the_api_and_the_form_and_spares_admins(scene_of: Any) -> None:
    s = await scene_of(user_max_waiting_jobs=3)
    for i in range(3):
        assert (await s.client.post("/api/jobs", json=job(i), headers=s.user)).status_code == 201
    r = await s.client.post("/api/jobs", json=job(9), headers=s.user)
    assert assert_limited(r, "limit is 3", "you have 3 waiting") == 60
    # When room comes is not known (the waiting jobs may be due next year): the words promise no time,
    # the Retry-After header only says when a client may ask again.
    assert "Try again in" not in r.json()["detail"], r.text
    # A pipeline (ad hoc or template) adds all its steps at once: refused whole, nothing left behind.
    r = await s.client.post(
        "/api/pipelines", json={"template": "test.steps", "input_data": {}}, headers=s.user
    )
    assert_limited(r, "limit is 3")
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1", s.user_id) == 3
    # The job form says it in words above the fields.
    await login(s.client, "ann@example.com")
    page = await s.client.get("/jobs/new/test.step")
    form = {"label": "x", "seconds": "0", "_csrf_token": csrf_from(page.text)}
    r = await s.client.post("/jobs/new/test.step", data=form, follow_redirects=False)
    assert r.status_code == 429 and "Too many jobs waiting" in r.text and "limit is 3" in r.text
    assert r.headers["retry-after"] == "60"
    assert "Too many attempts" not in r.text  # the limit is on waiting jobs, not on attempts
    # Admins are exempt; cancelling one job makes room again.
    for i in range(5):
        assert (await s.client.post("/api/jobs", json=job(i), headers=s.admin)).status_code == 201
    first = await s.pg.fetchval("SELECT id FROM jobs WHERE user_id = $1 ORDER BY id LIMIT 1", s.user_id)
    assert (await s.client.post(f"/api/jobs/{first}/cancel", headers=s.user)).status_code == 200
    assert (await s.client.post("/api/jobs", json=job(7), headers=s.user)).status_code == 201


async def sixteen_at_once_five_pass(http: httpx.AsyncClient) -> list[httpx.Response]:
    """16 submissions sent at once against a limit of 5: exactly 5 created, 11 refused with a 429."""
    call = {"type": "http.request", "input_data": {"url": "https://example.com/"}}
    answers = await asyncio.gather(*[http.post("/api/jobs", json=call) for _ in range(16)])
    codes = sorted(r.status_code for r in answers)
    assert codes.count(201) == 5 and codes.count(429) == 11, codes
    return list(answers)


async def test_concurrent_requests_never_pass_a_limit_together(scene_of: Any, tmp_path: Path) -> None:
    """Through ``jobdesk serve`` over HTTP, so that the requests really overlap."""
    s = await scene_of()
    env = {"USER_MAX_WAITING_JOBS": "5", "USER_MAX_UPLOAD_BYTES": "2000", "DB_POOL_SIZE": "20"}
    with running_server(s.settings.database_url or "", tmp_path / "serve", **env) as base:
        async with httpx.AsyncClient(base_url=base, headers=s.user, timeout=30) as http:
            await sixteen_at_once_five_pass(http)
            uploads = await asyncio.gather(
                *[http.post("/api/files", files={"file": (f"{i}.txt", b"c" * 400)}) for i in range(12)]
            )
            assert sorted(u.status_code for u in uploads).count(201) == 5
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1", s.user_id) == 5
    assert await s.pg.fetchval("SELECT sum(size) FROM files WHERE user_id = $1", s.user_id) == 2000


async def test_concurrent_requests_never_pass_the_per_minute_limit_together(
    scene_of: Any, tmp_path: Path
) -> None:
    """The per-minute limit too, checked in the job's insert statement: 16 requests at once, 5 pass."""
    s = await scene_of()
    env = {"USER_MAX_JOBS_PER_MINUTE": "5", "DB_POOL_SIZE": "20"}
    with running_server(s.settings.database_url or "", tmp_path / "serve", **env) as base:
        async with httpx.AsyncClient(base_url=base, headers=s.user, timeout=30) as http:
            answers = await sixteen_at_once_five_pass(http)
            assert all("limit is 5 a minute" in r.json()["detail"] for r in answers if r.status_code == 429)
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1", s.user_id) == 5


async def test_per_minute_limit_counts_a_pipeline_once_and_says_when(scene_of: Any) -> None:
    s = await scene_of(user_max_jobs_per_minute=3)
    assert (await s.client.post("/api/pipelines", json=steps(6), headers=s.user)).status_code == 201
    for i in range(2):
        assert (await s.client.post("/api/jobs", json=job(i), headers=s.user)).status_code == 201
    r = await s.client.post("/api/jobs", json=job(5), headers=s.user)
    assert 50 <= assert_limited(r, "3 a minute") <= 60
    # Run again is a submission too; an admin is exempt.
    mine = await s.pg.fetchval(
        "SELECT id FROM jobs WHERE user_id = $1 AND pipeline_id IS NULL LIMIT 1", s.user_id
    )
    assert (await s.client.post(f"/api/jobs/{mine}/run-again", headers=s.user)).status_code == 429
    for i in range(5):
        assert (await s.client.post("/api/jobs", json=job(i), headers=s.admin)).status_code == 201
    # Once the minute has passed, the person may submit again.
    await s.pg.execute("UPDATE jobs SET created_at = created_at - interval '61 seconds'")
    assert (await s.client.post("/api/jobs", json=job(6), headers=s.user)).status_code == 201


async def test_a_retry_waits_within_the_limit_on_the_api_and_the_page(scene_of: Any) -> None:
    """A retried job waits again, with the steps it re-opens: failed jobs retried one by one went past
    the waiting limit (a batch's "Retry failed rows" was already refused whole)."""
    s = await scene_of(user_max_waiting_jobs=3)
    two = {"name": "two", "steps": [job(0, key="a"), job(1, key="b", depends_on=["a"])]}
    assert (await s.client.post("/api/pipelines", json=two, headers=s.user)).status_code == 201
    a = await s.pg.fetchval("SELECT id FROM jobs WHERE step_key = 'a'")
    await s.pg.execute(
        "UPDATE jobs SET status = 'failed', attempts = max_attempts, completed_at = now() WHERE id = $1", a
    )
    await s.pg.execute(
        "UPDATE jobs SET status = 'cancelled', completed_at = now(), blocked_by = $1 WHERE step_key = 'b'", a
    )
    for i in range(2):
        assert (await s.client.post("/api/jobs", json=job(i), headers=s.user)).status_code == 201
    r = await s.client.post(f"/api/jobs/{a}/retry", headers=s.user)
    assert_limited(r, "you have 2 waiting", "limit is 3", "this would add 2")
    await login(s.client, "ann@example.com")
    page = await s.client.get(f"/jobs/{a}")
    r = await s.client.post(f"/jobs/{a}/retry", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 429 and "Too many jobs waiting" in r.text, r.text
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", a) == "failed"
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 2
    assert await s.pg.fetchval("SELECT count(*) FROM audit_log") == 0
    # With room for both, the retry goes through; an admin's retry is held to the owner's limit too.
    last = await s.pg.fetchval("SELECT id FROM jobs WHERE pipeline_id IS NULL ORDER BY id DESC LIMIT 1")
    assert (await s.client.post(f"/api/jobs/{last}/cancel", headers=s.user)).status_code == 200
    assert (await s.client.post(f"/api/jobs/{a}/retry", headers=s.user)).status_code == 200
    await s.pg.execute("UPDATE jobs SET status = 'failed', completed_at = now() WHERE id = $1", last)
    assert_limited(await s.client.post(f"/api/jobs/{last}/retry", headers=s.admin), "limit is 3")
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 3


async def test_pipelines_over_the_default_size_are_refused_naming_steps(
    scene_of: Any, make_settings: Any
) -> None:
    defaults = make_settings()
    s = await scene_of(
        pipeline_max_steps=defaults.pipeline_max_steps, pipeline_max_edges=defaults.pipeline_max_edges
    )
    for body, words in ((steps(500), "at most 200 steps"), (steps(150, connected=True), "11,175")):
        for who in (s.user, s.admin):
            r = await s.client.post("/api/pipelines", json=body, headers=who)
            assert r.status_code == 422 and words in r.json()["errors"]["steps"], r.text
    assert (await s.client.post("/api/pipelines", json=steps(200), headers=s.user)).status_code == 201
    assert await s.pg.fetchval("SELECT count(*) FROM pipelines") == 1


async def test_a_template_larger_than_the_limit_is_refused_once_built(scene_of: Any) -> None:
    s = await scene_of(pipeline_max_steps=3)
    r = await s.client.post(
        "/api/pipelines", json={"template": "test.steps", "input_data": {}}, headers=s.user
    )
    assert r.status_code == 422 and "at most 3 steps (this one has 4)" in r.text
    assert await s.pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_stored_bytes_limit_refuses_uploads_on_the_api_and_the_form(scene_of: Any) -> None:
    s = await scene_of(user_max_upload_bytes=3000)
    up = await s.client.post("/api/files", files={"file": ("a.txt", b"a" * 2000)}, headers=s.user)
    assert up.status_code == 201
    r = await s.client.post("/api/files", files={"file": ("b.txt", b"b" * 2000)}, headers=s.user)
    retry = assert_limited(r, "limit is 2.9 KiB", "you keep 2 KiB")
    assert 29 * 86_400 < retry <= 30 * 86_400  # the first file is deleted 30 days after its upload
    # A form's file field shows the refusal next to the field.
    await login(s.client, "ann@example.com")
    page = await s.client.get("/jobs/new/test.form")
    r = await s.client.post(
        "/jobs/new/test.form",
        data={"name": "Ann", "_csrf_token": csrf_from(page.text)},
        files={"document": ("d.txt", b"d" * 1500)},
        follow_redirects=False,
    )
    assert r.status_code == 422 and "Not enough room for this file" in r.text
    assert await s.pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_the_storage_refusal_never_reads_the_kept_size_as_the_limit(scene_of: Any) -> None:
    """Stored files a byte under the limit round to it ("you keep 2 KiB … the limit is 2 KiB"): the
    refusal then gives both in exact bytes, as every other size-against-its-limit message does, and so
    does the admins' usage line."""
    s = await scene_of(user_max_upload_bytes=2048)
    up = await s.client.post("/api/files", files={"file": ("a.txt", b"a" * 2047)}, headers=s.user)
    assert up.status_code == 201
    r = await s.client.post("/api/files", files={"file": ("b.txt", b"b" * 10)}, headers=s.user)
    assert_limited(r, "you keep 2,047 bytes of files and the limit is 2,048 bytes per person")
    await login(s.client, "root@example.com")  # the admins' usage line reads them the same way
    assert "2,047 bytes of 2,048 bytes of files" in (await s.client.get("/admin/users")).text


async def test_admins_see_usage_against_the_limits(scene_of: Any) -> None:
    s = await scene_of(user_max_waiting_jobs=10, user_max_upload_bytes=5000)
    await s.client.post("/api/jobs", json=job(), headers=s.user)
    await s.client.post("/api/files", files={"file": ("a.txt", b"a" * 1024)}, headers=s.user)
    r = await s.client.get(f"/api/users/{s.user_id}/usage", headers=s.admin)
    assert r.status_code == 200
    body = r.json()
    assert (body["waiting"], body["held"], body["stored_bytes"]) == (1, 0, 1024)
    assert body["limits"]["USER_MAX_WAITING_JOBS"] == 10 and body["limits"]["PIPELINE_MAX_STEPS"] == 0
    assert (await s.client.get(f"/api/users/{s.user_id}/usage", headers=s.user)).status_code == 403
    await login(s.client, "root@example.com")
    page = (await s.client.get("/admin/users")).text
    assert f'id="usage-{s.user_id}"' in page and "1 of 10 jobs waiting" in page and "1 KiB of 4.9 KiB" in page


async def test_a_count_without_a_limit_reads_in_the_singular_for_one(scene_of: Any) -> None:
    """An admin has no waiting limit, so their line is the count alone: it read "1 jobs waiting"."""
    s = await scene_of(user_max_waiting_jobs=10)
    await s.client.post("/api/jobs", json=job(), headers=s.admin)
    await s.client.post("/api/jobs", json=job(), headers=s.user)
    await login(s.client, "root@example.com")
    page = (await s.client.get("/admin/users")).text
    admin_usage = page.split(f'id="usage-{s.admin_id}">', 1)[1].split("</small>", 1)[0]
    assert admin_usage.startswith("1 job waiting ·"), admin_usage
    assert "1 of 10 jobs waiting" in page


async def test_a_schedule_firing_into_a_full_queue_is_skipped_and_said(scene_of: Any) -> None:
    s = await scene_of(user_max_waiting_jobs=1)
    assert (await s.client.post("/api/jobs", json=job(), headers=s.user)).status_code == 201
    engine = create_engine(s.settings.database_url or "", pool_size=1)
    try:
        async with engine.begin() as conn:
            owner = SystemPrincipal(id=s.user_id, is_admin=False, email="ann@example.com")
            row = await schedules.create_schedule(
                conn,
                name="every minute",
                cron="* * * * *",
                timezone="UTC",
                job_type="test.step",
                input_data={},
                owner=owner,
                settings=s.settings,
            )
        await s.pg.execute("UPDATE schedules SET next_fire_at = now() - interval '1 second'")
        async with engine.begin() as conn:
            assert await schedule_firing.fire_due(conn, s.settings) == []
    finally:
        await engine.dispose()
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1", s.user_id) == 1
    sched = await s.pg.fetchrow("SELECT enabled, next_fire_at FROM schedules WHERE id = $1", row["id"])
    assert sched["enabled"] and sched["next_fire_at"] > datetime.now(UTC)
    notice = await s.pg.fetchval("SELECT payload::text FROM alert_outbox WHERE kind = 'admin_action'")
    assert "schedule.skip" in notice and "limit is 1" in notice


async def _disable(s: Scene) -> None:
    await login(s.client, "root@example.com")
    token = csrf_from((await s.client.get("/admin/users")).text)
    r = await s.client.post(
        f"/admin/users/{s.user_id}/disable", data={"_csrf_token": token}, follow_redirects=False
    )
    assert r.status_code == 303


async def test_disabling_holds_waiting_jobs_until_an_admin_releases_or_cancels_them(scene_of: Any) -> None:
    s = await scene_of()
    later = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    ids = [
        (
            await s.client.post(
                "/api/jobs", json=job(i, **({"run_at": later} if i == 2 else {})), headers=s.user
            )
        ).json()["id"]
        for i in range(3)
    ]
    pipeline = (await s.client.post("/api/pipelines", json=steps(2), headers=s.user)).json()["id"]
    await _disable(s)
    held = await s.pg.fetch("SELECT id, status, is_active FROM jobs WHERE user_id = $1", s.user_id)
    assert len(held) == 5 and all(r["status"] == "queued" and not r["is_active"] for r in held)
    assert await s.pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'held'") == 5
    detail = await s.pg.fetchval("SELECT detail::text FROM audit_log WHERE action = 'user.disable'")
    assert json.loads(detail)["jobs_held"] == 5
    # The disabled person's token cannot submit.
    assert (await s.client.post("/api/jobs", json=job(), headers=s.user)).status_code == 401
    async with running_worker(s.settings):
        await asyncio.sleep(2.5)  # the scheduled one is due by now: none of them runs
        assert (
            await s.pg.fetchval(
                "SELECT count(*) FROM job_events WHERE kind = 'claimed' AND job_id = ANY($1::uuid[])",
                [r["id"] for r in held],
            )
            == 0
        )
        page = await s.client.get(f"/jobs/{ids[0]}")
        assert "Held" in page.text
        # Enabling the account does not release them.
        token = csrf_from((await s.client.get("/admin/users")).text)
        await s.client.post(f"/admin/users/{s.user_id}/enable", data={"_csrf_token": token})
        assert (
            await s.pg.fetchval("SELECT count(*) FROM jobs WHERE is_active AND user_id = $1", s.user_id) == 0
        )
        users_page = (await s.client.get("/admin/users")).text
        assert f'id="release-jobs-{s.user_id}"' in users_page and "5 held" in users_page
        # An admin cancels them: the pipeline ends cancelled; nothing is left to release.
        r = await s.client.post(f"/api/users/{s.user_id}/cancel-jobs", headers=s.admin)
        assert r.status_code == 200 and r.json()["count"] == 5
        assert await s.pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pipeline) == "cancelled"
        assert (
            await s.client.post(f"/api/users/{s.user_id}/release-jobs", headers=s.admin)
        ).status_code == 409
    actions = [r["action"] for r in await s.pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    assert actions[-3:] == ["user.enable", "user.cancel_jobs", "user.release_jobs"]


async def test_an_admins_retry_or_run_again_of_a_disabled_persons_job_is_held(scene_of: Any) -> None:
    """Only a release lets a disabled person's work run: a job an admin retries (with the step the retry
    re-opens) or runs again for them waits held, as their next jobs do, and runs once released."""
    s = await scene_of()
    engine = create_engine(s.settings.database_url or "", pool_size=1)
    try:
        first = await enqueue(engine, s.settings, s.user_id, "test.step", input_data={}, max_attempts=1)
        after = await make_job(engine, s.settings, s.user_id, "test.step", {}, depends_on=[first])
        await claim(engine, first)
        await finish(engine, s.settings, first, "failed", error="boom")
    finally:
        await engine.dispose()
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", after["id"]) == "cancelled"
    await _disable(s)
    retried = await s.client.post(f"/api/jobs/{first}/retry", headers=s.admin)
    again = await s.client.post(f"/api/jobs/{first}/run-again", headers=s.admin)
    assert retried.status_code == 200 and again.status_code == 201, (retried.text, again.text)
    rows = await s.pg.fetch(
        "SELECT id, status, is_active FROM jobs WHERE user_id = $1 ORDER BY id", s.user_id
    )
    assert len(rows) == 3 and all(r["status"] == "queued" and not r["is_active"] for r in rows), rows
    assert await s.pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'held'") == 3
    assert (await s.client.post(f"/api/users/{s.user_id}/release-jobs", headers=s.admin)).json()["count"] == 3


async def test_an_admins_rerun_of_a_disabled_persons_step_is_held(scene_of: Any) -> None:
    """A step waiting for approval is not waiting to run, so a disable does not hold it; an admin's rerun
    of it, like a retry or a run again, puts it back in the queue for its disabled owner. It waits held
    until a release, instead of running for the disabled account at once."""
    s = await scene_of()
    review = {
        "name": "review",
        "steps": [{"key": "draft", "type": "test.step", "input_data": {}, "requires_approval": True}],
    }
    r = await s.client.post("/api/pipelines", json=review, headers=s.user)
    assert r.status_code == 201, r.text
    step = uuid.UUID(r.json()["steps"][0]["job_id"])
    engine = create_engine(s.settings.database_url or "", pool_size=1)
    try:
        await claim(engine, step)
        await finish(engine, s.settings, step, "completed", result={"ok": True})
    finally:
        await engine.dispose()
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", step) == "waiting_approval"
    await _disable(s)
    rerun = await s.client.post(f"/api/jobs/{step}/rerun", headers=s.admin)
    assert rerun.status_code == 200, rerun.text
    row = await s.pg.fetchrow("SELECT status, is_active FROM jobs WHERE id = $1", step)
    assert (row["status"], row["is_active"]) == ("queued", False)
    assert await s.pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'held'") == 1
    assert (await s.client.post(f"/api/users/{s.user_id}/release-jobs", headers=s.admin)).json()["count"] == 1


async def test_released_jobs_run(scene_of: Any) -> None:
    s = await scene_of()
    ids = [(await s.client.post("/api/jobs", json=job(i), headers=s.user)).json()["id"] for i in range(2)]
    await _disable(s)
    async with running_worker(s.settings):
        await asyncio.sleep(1)
        assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 2
        r = await s.client.post(f"/api/users/{s.user_id}/release-jobs", headers=s.admin)
        assert r.status_code == 200 and r.json()["count"] == 2, r.text

        async def done() -> bool:
            return await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'completed'") == 2

        await wait_until(done, timeout=20, what="the released jobs to run")
    kinds = [
        r["kind"]
        for r in await s.pg.fetch("SELECT kind FROM job_events WHERE job_id = $1 ORDER BY id", ids[0])
    ]
    assert kinds[:3] == ["enqueued", "held", "released"] and "completed" in kinds


async def test_limits_beyond_a_32_bit_integer_work_like_any_other(scene_of: Any) -> None:
    """The limits are whole numbers of any size the settings allow: counting them in the database must not
    overflow (a per-minute limit of 2**31 once made every submission a 500)."""
    s = await scene_of(user_max_jobs_per_minute=2**31, user_max_waiting_jobs=2**40)
    assert (await s.client.post("/api/jobs", json=job(1), headers=s.user)).status_code == 201
    keyed = job(2, idempotency_key="k-1")
    assert (await s.client.post("/api/jobs", json=keyed, headers=s.user)).status_code == 201
    assert (await s.client.post("/api/pipelines", json=steps(3), headers=s.user)).status_code == 201
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1", s.user_id) == 5


async def test_a_repeated_key_answers_with_its_job_at_the_per_minute_limit(scene_of: Any) -> None:
    """A client that lost the answer retries with the same key, and a double click repeats the form's key:
    the limit counts the first submission only, so the repeat gets the job it made, not a 429."""
    s = await scene_of(user_max_jobs_per_minute=2)
    first = await s.client.post("/api/jobs", json=job(1, idempotency_key="k-1"), headers=s.user)
    assert first.status_code == 201, first.text
    await login(s.client, "ann@example.com")
    page = await s.client.get("/jobs/new/test.step")
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text)
    assert key is not None, "the job form carries a one-time key"
    form = {"label": "x", "seconds": "0", "_csrf_token": csrf_from(page.text), "_form_key": key[1]}
    made = await s.client.post("/jobs/new/test.step", data=form, follow_redirects=False)
    assert made.status_code == 303, made.text
    # the limit is reached: a new submission is refused, a repeat of either key is not
    assert_limited(await s.client.post("/api/jobs", json=job(2, idempotency_key="k-2"), headers=s.user))
    again = await s.client.post("/api/jobs", json=job(1, idempotency_key="k-1"), headers=s.user)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"], again.text
    twice = await s.client.post("/jobs/new/test.step", data=form, follow_redirects=False)
    assert twice.status_code == 303 and twice.headers["location"] == made.headers["location"]
    # the same key with other input is refused as another request than the key's, limit or not
    changed = await s.client.post("/jobs/new/test.step", data={**form, "label": "y"}, follow_redirects=False)
    assert changed.status_code == 422 and "This form was sent already" in changed.text, changed.text
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1", s.user_id) == 2


async def test_a_repeated_batch_form_answers_with_its_batch_at_the_limits(scene_of: Any) -> None:
    """The batch form's key, as a job's: a double click at the per-minute or waiting limit goes to the
    batch the first click made instead of a 429."""
    s = await scene_of(user_max_jobs_per_minute=1, user_max_waiting_jobs=4)
    await login(s.client, "ann@example.com")
    page = await s.client.get("/batches/new/test.step")
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text)
    assert key is not None, "the batch form carries a one-time key"
    form = {"_csrf_token": csrf_from(page.text), "_form_key": key[1]}
    sheet = {"sheet": ("rows.csv", b"label\na\nb\nc\n", "text/csv")}
    mapped = await s.client.post("/batches/new/test.step", data=form, files=sheet)
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text)
    assert sheet_id is not None, mapped.text
    start = {**form, "sheet_id": sheet_id[1], "map.label": "0"}
    made = await s.client.post("/batches/new/test.step", data=start, follow_redirects=False)
    assert made.status_code == 303, made.text
    twice = await s.client.post("/batches/new/test.step", data=start, follow_redirects=False)
    assert twice.status_code == 303, twice.text
    assert twice.headers["location"] == made.headers["location"]
    # a new key is a new submission, over both limits
    other = await s.client.post(
        "/batches/new/test.step", data={**start, "_form_key": "another"}, follow_redirects=False
    )
    assert other.status_code == 429 and "Too many" in other.text, other.text
    assert await s.pg.fetchval("SELECT count(*) FROM batches") == 1
    assert await s.pg.fetchval("SELECT count(*) FROM jobs") == 3
