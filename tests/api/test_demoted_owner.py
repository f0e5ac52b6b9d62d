"""Work of an admins-only type is put in a person's queue again only while they may submit it.

Carol was an admin and submitted ``noop`` (a diagnostic type, for admins only); she has since been
demoted. Every path that retries or repeats her job — her own retry and run again (page button and JSON
API), an admin's (the same, and a step's rerun), a bulk retry by a filter (API and console) and of a
failed group, a batch's "Retry failed rows" (page and API), and her schedule's firing — asks the queue's
one rule (:mod:`app.jobs.queue.owner_rule`, :func:`app.jobs.types.owner_refusal`) for Carol as she is
now, and is refused in its words: nothing is queued for her, and an admin's refusal is audited.
"""

from __future__ import annotations

import html
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app import schedule_firing as firing
from app.actions import schedules as schedule_actions
from app.jobs.types import is_internal, owner_refusal, registry
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.webkit import HX, bearer, csrf, switch_to

RULE = "only admins may start 'noop': it is for testing and diagnostics"


@dataclass
class Scene:
    client: AsyncTestClient
    engine: AsyncEngine
    settings: Settings
    pg: asyncpg.Connection
    carol: Any
    root: Any
    carol_api: dict[str, str]
    root_api: dict[str, str]
    job: uuid.UUID
    """Carol's failed ``noop`` job, made while she was an admin."""


@pytest.fixture
async def scene(
    client: AsyncTestClient, engine: AsyncEngine, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> Scene:
    carol, carol_api = await bearer(db_url, "carol@example.com", admin=True)
    root, root_api = await bearer(db_url, "root@example.com", admin=True)
    made = await client.post("/api/jobs", json={"type": "noop", "max_attempts": 1}, headers=carol_api)
    assert made.status_code == 201, made.text
    job = uuid.UUID(made.json()["id"])
    await claim(engine, job)
    await finish(engine, ui_settings, job, "failed", error="boom")
    return Scene(client, engine, ui_settings, pg, carol, root, carol_api, root_api, job)


async def demote(s: Scene) -> None:
    await s.pg.execute("UPDATE users SET is_admin = false WHERE id = $1", s.carol.id)


async def page_post(s: Scene, email: str, path: str, data: dict[str, Any] | None = None) -> Any:
    await switch_to(s.client, email)
    form = {"_csrf_token": await csrf(s.client), **(data or {})}
    return await s.client.post(path, data=form, headers=HX, follow_redirects=False)


async def failed_batch(s: Scene) -> uuid.UUID:
    """A batch of one ``noop`` row of Carol's (made while she was an admin), its row failed."""
    made = await s.client.post("/api/batches", json={"type": "noop", "rows": [{}]}, headers=s.carol_api)
    assert made.status_code == 201, made.text
    bid = uuid.UUID(made.json()["id"])
    row = await s.pg.fetchval("SELECT id FROM jobs WHERE batch_id = $1", bid)
    await s.pg.execute("UPDATE jobs SET max_attempts = 1 WHERE id = $1", row)
    await claim(s.engine, row)
    await finish(s.engine, s.settings, row, "failed", error="boom")
    return bid


async def waiting_step(s: Scene) -> uuid.UUID:
    """A ``noop`` step of Carol's ad-hoc pipeline (made while she was an admin) waiting for approval."""
    steps = [{"key": "a", "type": "noop", "requires_approval": True}]
    made = await s.client.post("/api/pipelines", json={"name": "p", "steps": steps}, headers=s.carol_api)
    assert made.status_code == 201, made.text
    step = await s.pg.fetchval("SELECT id FROM jobs WHERE step_key = 'a'")
    await claim(s.engine, step)
    await finish(s.engine, s.settings, step, "completed", result={})
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", step) == "waiting_approval"
    return step


# Each path: given the scene (Carol demoted), do it and check its answer; returns whether an admin acted
# (then a refusal entry is on the audit trail).
Path = Callable[[Scene], Awaitable[bool]]


async def own_retry_page(s: Scene) -> bool:
    r = await page_post(s, "carol@example.com", f"/jobs/{s.job}/retry")
    assert r.status_code == 403 and RULE in html.unescape(r.text), r.text[-1500:]
    return False


async def own_retry_api(s: Scene) -> bool:
    r = await s.client.post(f"/api/jobs/{s.job}/retry", headers=s.carol_api)
    assert r.status_code == 403 and RULE in r.json()["detail"], r.text
    assert r.json()["detail"].startswith("You are not an admin"), r.text
    return False


async def own_run_again_page(s: Scene) -> bool:
    r = await page_post(s, "carol@example.com", f"/jobs/{s.job}/run-again")
    assert r.status_code == 403 and RULE in html.unescape(r.text), r.text[-1500:]
    return False


async def own_run_again_api(s: Scene) -> bool:
    r = await s.client.post(f"/api/jobs/{s.job}/run-again", headers=s.carol_api)
    assert r.status_code == 403 and RULE in r.json()["detail"], r.text
    return False


async def admin_retry_api(s: Scene) -> bool:
    r = await s.client.post(f"/api/jobs/{s.job}/retry", headers=s.root_api)
    assert r.status_code == 403 and RULE in r.json()["detail"], r.text
    assert "owner, who is not an admin" in r.json()["detail"], r.text
    return True


async def admin_retry_page(s: Scene) -> bool:
    r = await page_post(s, "root@example.com", f"/jobs/{s.job}/retry")
    assert r.status_code == 403 and RULE in html.unescape(r.text), r.text[-1500:]
    return True


async def admin_run_again_api(s: Scene) -> bool:
    r = await s.client.post(f"/api/jobs/{s.job}/run-again", headers=s.root_api)
    assert r.status_code == 403 and RULE in r.json()["detail"], r.text
    return True


async def bulk_filter_api(s: Scene) -> bool:
    body = {"action": "retry", "filter": {"status": "failed"}}
    r = await s.client.post("/api/jobs/bulk", json=body, headers=s.root_api)
    assert r.status_code == 200, r.text
    assert r.json()["done"] == [] and r.json()["skipped"] == [str(s.job)], r.text
    assert f"because their owner may not have their type now ({RULE})" in r.json()["message"], r.text
    return False  # done by count: its one entry says "0 done, 1 skipped" (checked below)


async def bulk_filter_console(s: Scene) -> bool:
    form = {"action": "retry", "scope": "filter", "status": "failed", "expected": "1"}
    r = await page_post(s, "root@example.com", "/admin/jobs/bulk", form)
    assert r.status_code == 200 and "Retried 0 jobs" in r.text and RULE in html.unescape(r.text), r.text[
        -1500:
    ]
    return False


async def failed_group_console(s: Scene) -> bool:
    form = {"type": "noop", "signature": "boom", "expected": "1"}
    r = await page_post(s, "root@example.com", "/admin/failed/retry", form)
    assert r.status_code == 200 and "Retried 0 jobs" in r.text and RULE in html.unescape(r.text), r.text[
        -1500:
    ]
    return False


async def batch_retry_api(s: Scene) -> bool:
    bid = await failed_batch(s)
    await demote(s)
    r = await s.client.post(f"/api/batches/{bid}/retry-failed", headers=s.carol_api)
    assert r.status_code == 403 and RULE in r.json()["detail"], r.text
    r = await s.client.post(f"/api/batches/{bid}/retry-failed", headers=s.root_api)
    assert r.status_code == 403 and RULE in r.json()["detail"], r.text
    return True


async def batch_retry_page(s: Scene) -> bool:
    bid = await failed_batch(s)
    await demote(s)
    r = await page_post(s, "carol@example.com", f"/batches/{bid}/retry-failed")
    assert r.status_code == 403 and RULE in html.unescape(r.text), r.text[-1500:]
    return False


async def rerun_api(s: Scene) -> bool:
    step = await waiting_step(s)
    await demote(s)
    r = await s.client.post(f"/api/jobs/{step}/rerun", headers=s.root_api)
    assert r.status_code == 403 and RULE in r.json()["detail"], r.text
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", step) == "waiting_approval"
    return True


async def rerun_page(s: Scene) -> bool:
    step = await waiting_step(s)
    await demote(s)
    r = await page_post(s, "root@example.com", f"/jobs/{step}/rerun")
    assert r.status_code == 403 and RULE in html.unescape(r.text), r.text[-1500:]
    return True


async def schedule_firing(s: Scene) -> bool:
    async with s.engine.begin() as conn:
        await schedule_actions.create_schedule(
            conn,
            s.root,
            cron="* * * * *",
            job_type="noop",
            owner_email="carol@example.com",
            settings=s.settings,
        )
    await demote(s)
    await s.pg.execute("UPDATE schedules SET next_fire_at = now() - interval '1 minute'")
    async with s.engine.begin() as conn:
        assert await firing.fire_due(conn, s.settings) == []
    assert await s.pg.fetchval("SELECT enabled FROM schedules") is False
    raw = await s.pg.fetchval("SELECT payload FROM alert_outbox WHERE kind = 'admin_action' ORDER BY id DESC")
    notice = json.loads(raw)
    assert notice["action"] == "schedule.disable", notice
    assert notice["outcome"].startswith(f"its owner may no longer start it: {RULE}"), notice
    return False


BEFORE = {batch_retry_api, batch_retry_page, rerun_api, rerun_page, schedule_firing}
"""Paths that set up more of Carol's work first, and demote her themselves."""
PATHS: list[Path] = [
    own_retry_page,
    own_retry_api,
    own_run_again_page,
    own_run_again_api,
    admin_retry_api,
    admin_retry_page,
    admin_run_again_api,
    bulk_filter_api,
    bulk_filter_console,
    failed_group_console,
    batch_retry_api,
    batch_retry_page,
    rerun_api,
    rerun_page,
    schedule_firing,
]


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
async def test_a_demoted_admin_gets_no_admins_only_work_again_on_any_path(scene: Scene, path: Path) -> None:
    s = scene
    if path not in BEFORE:
        await demote(s)
    jobs_before = await s.pg.fetchval("SELECT count(*) FROM jobs")
    audited = await path(s)
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 0
    if path not in BEFORE:
        assert await s.pg.fetchval("SELECT count(*) FROM jobs") == jobs_before
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1", s.job) == "failed"
    outcomes = [r["outcome"] for r in await s.pg.fetch("SELECT outcome FROM audit_log ORDER BY id")]
    if audited:
        assert any(o.startswith("refused: ") and RULE in o for o in outcomes), outcomes
    assert not any(o.endswith(" done, 0 skipped") or o == "done" for o in outcomes), outcomes


async def test_an_admin_keeps_her_admins_only_work(scene: Scene) -> None:
    """The rule is for the owner as she is now: while Carol is an admin, her retry goes through."""
    r = await scene.client.post(f"/api/jobs/{scene.job}/retry", headers=scene.carol_api)
    assert r.status_code == 200, r.text
    assert await scene.pg.fetchval("SELECT status FROM jobs WHERE id = $1", scene.job) == "queued"


def test_the_one_rule_keeps_a_templates_internal_step_and_never_a_diagnostic_type() -> None:
    """A template's internal step (its type chosen by code) may go back in a person's queue in place; a
    diagnostic type only for an admin; a new job on its own (run again) is never a template's step."""
    internal = next(s for s in registry.all() if is_internal(s))
    noop = registry.get("noop")
    assert noop is not None
    assert owner_refusal(False, internal, coded=True) is None
    assert owner_refusal(False, internal) is not None
    assert owner_refusal(False, noop, coded=True) == RULE
    assert owner_refusal(True, noop) is None and owner_refusal(True, internal) is None


async def test_an_admin_is_offered_no_retry_or_run_again_the_rule_would_refuse(scene: Scene) -> None:
    """The job page asks the queue's rule too: Carol's failed ``noop`` offers Retry and Run again while
    she is an admin, and neither once she is demoted (to her or to an admin)."""
    await switch_to(scene.client, "root@example.com")
    page = (await scene.client.get(f"/jobs/{scene.job}")).text
    assert 'id="act-retry"' in page and 'id="act-run-again"' in page
    await demote(scene)
    for email in ("root@example.com", "carol@example.com"):
        await switch_to(scene.client, email)
        page = (await scene.client.get(f"/jobs/{scene.job}")).text
        assert 'id="act-retry"' not in page and 'id="act-run-again"' not in page, email
