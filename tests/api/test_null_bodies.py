"""A body of ``null`` is refused on every JSON route of the API like any other body that is not an
object (``[]``, ``"x"``, ``1``): with the readable 422 on ``body`` — naming the route's fields, or saying
that the route takes no body — and nothing changed. ``null`` sent to cancel or approve was read as "no
body" (the job cancelled, the step approved), and on ``POST /api/jobs`` and the like it was the
decoder's ``data: Expected `object`, got `null```. Every route is driven, with real ids, so a new route
is covered as it is added; ``{}`` is the control that still passes the body check."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from typing import Any, get_args

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.step)
from app.settings import Settings
from app.web.body_fields import NO_BODY, _fields
from app.web.input_guard import READS_BODY
from tests.api.test_body_fields import counts
from tests.support.jobsteps import claim, finish
from tests.support.webkit import add_token, add_user

NOT_OBJECTS = ("null", "[]", '"x"', "1")
NOWHERE = "01a20000-0000-7000-8000-000000000000"


def _routes(client: AsyncTestClient, ids: dict[str, str]) -> list[tuple[str, str, type | None]]:
    """``(method, path, body dataclass or None)`` of every API route that changes something and reads
    JSON, path parameters filled from ``ids`` by name (an id that exists nowhere otherwise)."""
    found = []
    for route in client.app.routes:
        if not route.path.startswith("/api/"):
            continue
        for handler in getattr(route, "route_handlers", []):
            if handler.opt.get(READS_BODY):
                continue
            field = handler.parsed_data_field
            cls = None
            if field is not None:
                tp = field.annotation
                cls = next(a for a in (tp, *get_args(tp)) if dataclasses.is_dataclass(a))
            path = re.sub(r"\{([a-z_]+):int\}", "999999", route.path)
            path = re.sub(r"\{([a-z_]+):str\}", lambda m: ids.get(m[1], NOWHERE), path)
            for method in sorted(handler.http_methods & {"POST", "PUT", "PATCH", "DELETE"}):
                found.append((method, path, cls))
    return found


async def _state(pg: asyncpg.Connection) -> dict[str, Any]:
    """What any of the routes could change: row counts, every job's and pipeline's status, the type
    controls, the people's settings and the notifications read."""
    return {
        "counts": await counts(pg),
        "jobs": [tuple(r) for r in await pg.fetch("SELECT id, status FROM jobs ORDER BY id")],
        "pipelines": [tuple(r) for r in await pg.fetch("SELECT id, status FROM pipelines ORDER BY id")],
        "controls": [tuple(r) for r in await pg.fetch("SELECT * FROM job_type_controls ORDER BY 1")],
        "users": [tuple(r) for r in await pg.fetch("SELECT * FROM users ORDER BY id")],
    }


async def test_null_is_refused_on_every_json_route_like_any_body_that_is_not_an_object(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    steps = [
        {"key": "draft", "type": "test.step", "input_data": {}, "requires_approval": True},
        {"key": "publish", "type": "test.step", "input_data": {}, "depends_on": ["draft"]},
    ]
    r = await client.post("/api/pipelines", json={"name": "p", "steps": steps}, headers=headers)
    assert r.status_code == 201, r.text
    pipeline_id = r.json()["id"]
    draft = uuid.UUID(str(next(s["job_id"] for s in r.json()["steps"] if s["key"] == "draft")))
    await claim(engine, draft)
    await finish(engine, ui_settings, draft, "completed", result={})
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", draft) == "waiting_approval"
    ids = {"job_id": str(draft), "pipeline_id": str(pipeline_id), "job_type": "test.step"}

    routes = _routes(client, ids)
    assert ("POST", f"/api/jobs/{draft}/cancel", None) in routes
    assert any(path == f"/api/approvals/{draft}/approve" for _, path, _ in routes)
    assert any(path == "/api/jobs" for _, path, _ in routes)
    before = await _state(pg)
    wrong = {}
    for method, path, cls in routes:
        want = NO_BODY if cls is None else "must be a JSON object with the fields " + ", ".join(_fields(cls))
        for body in NOT_OBJECTS:
            r = await client.request(
                method, path, content=body, headers={**headers, "Content-Type": "application/json"}
            )
            got = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
            if (
                r.status_code != 422
                or got.get("errors") != {"body": want}
                # a batch's refusals also say that none of its rows was started
                or got["detail"]
                != f"body: {want}" + (". Nothing was started." if path == "/api/batches" else "")
            ):
                wrong[(method, path, body)] = (r.status_code, got)
    assert wrong == {}
    assert await _state(pg) == before
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", draft) == "waiting_approval"

    # The control: {} is not refused for being the wrong kind of body (it may be refused for a field).
    for method, path, _ in routes:
        r = await client.request(method, path, json={}, headers=headers)
        assert r.status_code < 500, (method, path, r.text)
        assert r.status_code != 422 or "body" not in r.json().get("errors", {}), (method, path, r.text)


async def test_approve_with_null_does_not_approve_and_with_no_body_does(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    steps = [{"key": "draft", "type": "test.step", "input_data": {}, "requires_approval": True}]
    r = await client.post("/api/pipelines", json={"name": "p", "steps": steps}, headers=headers)
    draft = uuid.UUID(str(r.json()["steps"][0]["job_id"]))
    await claim(engine, draft)
    await finish(engine, ui_settings, draft, "completed", result={})
    as_json = {**headers, "Content-Type": "application/json"}
    for path in (
        f"/api/approvals/{draft}/approve",
        f"/api/jobs/{draft}/approve",
        f"/api/jobs/{draft}/cancel",
    ):
        r = await client.post(path, content=json.dumps(None), headers=as_json)
        assert r.status_code == 422, (path, r.text)
        assert "Expected" not in r.text and "data" not in r.json()["errors"]
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", draft) == "waiting_approval"
    r = await client.post(f"/api/approvals/{draft}/approve", headers=headers)
    assert r.status_code == 200, r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", draft) != "waiting_approval"
