"""A retry re-opens the steps its failure cancelled, and each of them must be work its owner may have.

Carol was an admin and made an ad-hoc pipeline: a public step ``a`` (``test.step``) followed by a
diagnostic step ``b`` (``noop``, for admins only). ``a`` failed, which cancelled ``b``; Carol has since
been demoted. Retrying ``a`` would put ``b`` back in her queue, so every path that retries a step — the
job page's button (hers and an admin's), the JSON API (hers and an admin's), a bulk retry by a filter
(API and console) and of a failed group — is refused in words naming ``b`` and its type, and nothing
changes. While she is an admin, the retry re-opens ``b`` as before.
"""

from __future__ import annotations

import html
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.webkit import HX, bearer, csrf, switch_to

RULE = "only admins may start 'noop': it is for testing and diagnostics"
STEP = "step 'b' (type 'noop')"
PIPELINE = {
    "name": "checked",
    "steps": [
        {"key": "a", "type": "test.step", "input_data": {}},
        {"key": "b", "type": "noop", "input_data": {}, "depends_on": ["a"]},
    ],
}


@dataclass
class Scene:
    client: AsyncTestClient
    pg: asyncpg.Connection
    carol_api: dict[str, str]
    root_api: dict[str, str]
    a: uuid.UUID
    b: uuid.UUID


@pytest.fixture
async def scene(
    client: AsyncTestClient, engine: AsyncEngine, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> Scene:
    _, carol_api = await bearer(db_url, "carol@example.com", admin=True)
    _, root_api = await bearer(db_url, "root@example.com", admin=True)
    made = await client.post("/api/pipelines", json=PIPELINE, headers=carol_api)
    assert made.status_code == 201, made.text
    ids = {s["key"]: uuid.UUID(s["job_id"]) for s in made.json()["steps"]}
    await pg.execute("UPDATE jobs SET max_attempts = 1 WHERE id = $1", ids["a"])
    await claim(engine, ids["a"])
    await finish(engine, ui_settings, ids["a"], "failed", error="boom")
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", ids["b"]) == "cancelled"
    return Scene(client, pg, carol_api, root_api, ids["a"], ids["b"])


async def demote(s: Scene) -> None:
    await s.pg.execute("UPDATE users SET is_admin = false WHERE email = 'carol@example.com'")


async def page_post(s: Scene, email: str, path: str, data: dict[str, Any] | None = None) -> Any:
    await switch_to(s.client, email)
    form = {"_csrf_token": await csrf(s.client), **(data or {})}
    return await s.client.post(path, data=form, headers=HX, follow_redirects=False)


Path = Callable[[Scene], Awaitable[None]]


async def own_retry_api(s: Scene) -> None:
    r = await s.client.post(f"/api/jobs/{s.a}/retry", headers=s.carol_api)
    assert r.status_code == 403, r.text
    detail = r.json()["detail"]
    assert detail.startswith("You are not an admin") and STEP in detail and RULE in detail, detail


async def admin_retry_api(s: Scene) -> None:
    r = await s.client.post(f"/api/jobs/{s.a}/retry", headers=s.root_api)
    assert r.status_code == 403, r.text
    detail = r.json()["detail"]
    assert "owner, who is not an admin" in detail and STEP in detail and RULE in detail, detail


async def own_retry_page(s: Scene) -> None:
    r = await page_post(s, "carol@example.com", f"/jobs/{s.a}/retry")
    assert r.status_code == 403, r.text[-1500:]
    assert STEP in html.unescape(r.text) and RULE in html.unescape(r.text), r.text[-1500:]


async def admin_retry_page(s: Scene) -> None:
    r = await page_post(s, "root@example.com", f"/jobs/{s.a}/retry")
    assert r.status_code == 403, r.text[-1500:]
    assert STEP in html.unescape(r.text) and RULE in html.unescape(r.text), r.text[-1500:]


async def bulk_filter_api(s: Scene) -> None:
    body = {"action": "retry", "filter": {"status": "failed"}}
    r = await s.client.post("/api/jobs/bulk", json=body, headers=s.root_api)
    assert r.status_code == 200, r.text
    assert r.json()["done"] == [] and r.json()["skipped"] == [str(s.a)], r.text
    assert (
        f"because a retry would re-open {STEP}, which their owner may not have now ({RULE})"
        in r.json()["message"]
    ), r.text


async def bulk_filter_console(s: Scene) -> None:
    form = {"action": "retry", "scope": "filter", "status": "failed", "expected": "1"}
    r = await page_post(s, "root@example.com", "/admin/jobs/bulk", form)
    text = html.unescape(r.text)
    assert r.status_code == 200 and "Retried 0 jobs" in text and STEP in text and RULE in text, r.text[-1500:]


async def failed_group_console(s: Scene) -> None:
    form = {"type": "test.step", "signature": "boom", "expected": "1"}
    r = await page_post(s, "root@example.com", "/admin/failed/retry", form)
    text = html.unescape(r.text)
    assert r.status_code == 200 and "Retried 0 jobs" in text and STEP in text and RULE in text, r.text[-1500:]


PATHS: list[Path] = [
    own_retry_api,
    admin_retry_api,
    own_retry_page,
    admin_retry_page,
    bulk_filter_api,
    bulk_filter_console,
    failed_group_console,
]


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
async def test_a_retry_never_reopens_a_step_its_owner_may_not_have(scene: Scene, path: Path) -> None:
    await demote(scene)
    events = await scene.pg.fetchval("SELECT count(*) FROM job_events")
    await path(scene)
    assert await scene.pg.fetchval("SELECT status FROM jobs WHERE id = $1", scene.a) == "failed"
    assert await scene.pg.fetchval("SELECT status FROM jobs WHERE id = $1", scene.b) == "cancelled"
    assert await scene.pg.fetchval("SELECT count(*) FROM job_events") == events


async def test_an_admins_retry_reopens_her_diagnostic_step(scene: Scene) -> None:
    r = await scene.client.post(f"/api/jobs/{scene.a}/retry", headers=scene.carol_api)
    assert r.status_code == 200, r.text
    assert await scene.pg.fetchval("SELECT status FROM jobs WHERE id = $1", scene.b) == "queued"


async def test_no_retry_button_for_a_step_whose_retry_the_rule_would_refuse(scene: Scene) -> None:
    """The job page and the pipeline page ask the rule the retry asks: ``a``'s Retry is offered while
    Carol is an admin, and not once she is demoted."""
    pid = await scene.pg.fetchval("SELECT pipeline_id FROM jobs WHERE id = $1", scene.a)
    await switch_to(scene.client, "root@example.com")
    assert 'id="act-retry"' in (await scene.client.get(f"/jobs/{scene.a}")).text
    assert f'id="retry-{scene.a}"' in (await scene.client.get(f"/pipelines/{pid}")).text
    await demote(scene)
    for email in ("root@example.com", "carol@example.com"):
        await switch_to(scene.client, email)
        assert 'id="act-retry"' not in (await scene.client.get(f"/jobs/{scene.a}")).text, email
        assert f'id="retry-{scene.a}"' not in (await scene.client.get(f"/pipelines/{pid}")).text, email
