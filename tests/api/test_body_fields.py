"""The API's JSON bodies are held against the fields their route declares: an unknown field, text where a
whole number or a flag belongs, or a body sent to a route that takes none is a 422 naming the field and
changes nothing — never dropped, converted or ignored. Every route of the running app is driven, so a
new route is covered as it is added. A batch's ``name`` that is not text is refused the same way."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.web.input_guard import READS_BODY
from tests.support.webkit import add_token, add_user, app_client

EMAIL = {"to": ["a@example.com"], "subject": "s", "body": "b"}
COUNTED = ("jobs", "pipelines", "batches", "schedules", "api_tokens", "job_type_controls", "audit_log")


@dataclass
class Scene:
    client: AsyncTestClient
    pg: asyncpg.Connection
    ann: dict[str, str]
    root: dict[str, str]
    root_id: int


@pytest.fixture
async def scene(make_settings: Any, pg: asyncpg.Connection) -> AsyncIterator[Scene]:
    settings = make_settings(worker_enabled=False)
    db = settings.database_url or ""
    ann = await add_user(db, "ann@example.com")
    root = await add_user(db, "root@example.com", admin=True)
    async with app_client(settings) as client:
        yield Scene(
            client,
            pg,
            {"Authorization": f"Bearer {await add_token(db, ann.id)}"},
            {"Authorization": f"Bearer {await add_token(db, root.id)}"},
            root.id,
        )


def api_routes(client: AsyncTestClient, *, with_body: bool) -> list[tuple[str, str]]:
    """``(method, path)`` of every API route that changes something, with or without a declared body;
    path parameters filled with an id that exists nowhere."""
    found = []
    for route in client.app.routes:
        if not route.path.startswith("/api/"):
            continue
        for handler in getattr(route, "route_handlers", []):
            if handler.opt.get(READS_BODY):
                continue
            for method in sorted(handler.http_methods & {"POST", "PUT", "PATCH", "DELETE"}):
                if (handler.parsed_data_field is not None) == with_body:
                    path = re.sub(r"\{[a-z_]+:int\}", "999999", route.path)
                    path = re.sub(r"\{[a-z_]+:str\}", "01a20000-0000-7000-8000-000000000000", path)
                    found.append((method, path))
    return found


async def counts(pg: asyncpg.Connection) -> dict[str, int]:
    """Rows of the tables a request could change. A refused admin action's audit entry is not a change
    (a password reset asked for with a token is refused, and audited, whatever its body)."""
    found = {t: await pg.fetchval(f"SELECT count(*) FROM {t}") for t in COUNTED}
    found["audit_log"] = await pg.fetchval(
        "SELECT count(*) FROM audit_log WHERE outcome NOT LIKE 'refused:%'"
    )
    return found


async def test_every_route_with_a_body_refuses_an_unknown_field_and_changes_nothing(scene: Scene) -> None:
    routes = api_routes(scene.client, with_body=True)
    assert ("POST", "/api/jobs") in routes
    assert ("PUT", "/api/job-types/01a20000-0000-7000-8000-000000000000/limits") in routes
    before = await counts(scene.pg)
    for method, path in routes:
        r = await scene.client.request(method, path, json={"no_such_field": 1}, headers=scene.root)
        assert r.status_code == 422, (method, path, r.text)
        assert "no_such_field" in r.json()["errors"], (method, path, r.text)
        assert "unknown field" in r.json()["detail"]
    assert await counts(scene.pg) == before


async def test_every_route_without_a_body_refuses_one_and_takes_an_empty_one(scene: Scene) -> None:
    routes = api_routes(scene.client, with_body=False)
    assert ("POST", "/api/job-types/01a20000-0000-7000-8000-000000000000/pause") in routes
    before = await counts(scene.pg)
    for method, path in routes:
        r = await scene.client.request(method, path, json={"paused": False}, headers=scene.root)
        assert r.status_code == 422, (method, path, r.text)
        assert r.json()["errors"] == {"body": "this request takes no body (send nothing, or {})"}
        for empty in ({}, None):
            r = await scene.client.request(method, path, json=empty, headers=scene.root)
            assert r.status_code != 422 or "body" not in r.json().get("errors", {}), (method, path, r.text)
    assert await counts(scene.pg) == before


async def test_a_pause_with_a_body_does_not_pause(scene: Scene) -> None:
    r = await scene.client.post("/api/job-types/noop/pause", json={"paused": False}, headers=scene.root)
    assert r.status_code == 422
    assert await scene.pg.fetchval("SELECT count(*) FROM job_type_controls WHERE paused") == 0
    r = await scene.client.post("/api/job-types/noop/pause", headers=scene.root)
    assert r.status_code == 200 and r.json()["paused"] is True


async def test_a_misspelt_limit_keeps_the_type_s_limits(scene: Scene) -> None:
    limits = {"max_running": 2, "max_per_minute": 5, "max_running_per_user": 1}
    r = await scene.client.put("/api/job-types/noop/limits", json=limits, headers=scene.root)
    assert r.status_code == 200
    r = await scene.client.put("/api/job-types/noop/limits", json={"max_runing": 3}, headers=scene.root)
    assert r.status_code == 422
    assert r.json()["errors"]["max_runing"].startswith("unknown field; the fields are max_running")
    row = await scene.pg.fetchrow(
        "SELECT max_running, max_per_minute FROM job_type_controls WHERE type = 'noop'"
    )
    assert (row["max_running"], row["max_per_minute"]) == (2, 5)


async def test_a_misspelt_dependency_does_not_start_a_step_early(scene: Scene) -> None:
    steps = [
        {"key": "a", "type": "email.send", "input_data": EMAIL},
        {"key": "b", "type": "email.send", "input_data": EMAIL, "dependson": ["a"]},
    ]
    r = await scene.client.post("/api/pipelines", json={"name": "p", "steps": steps}, headers=scene.ann)
    assert r.status_code == 422
    assert "steps[1].dependson" in r.json()["errors"]
    assert await scene.pg.fetchval("SELECT count(*) FROM pipelines") == 0


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        (
            "/api/jobs",
            {"type": "email.send", "input_data": EMAIL, "priority": "5"},
            "priority",
            "must be a whole number",
        ),
        (
            "/api/jobs",
            {"type": "email.send", "input_data": EMAIL, "max_attempts": 3.0},
            "max_attempts",
            "must be a whole number",
        ),
        (
            "/api/jobs",
            {"type": "email.send", "input_data": EMAIL, "prioirty": 5},
            "prioirty",
            "unknown field",
        ),
        (
            "/api/pipelines",
            {
                "name": "p",
                "steps": [
                    {"key": "a", "type": "email.send", "input_data": EMAIL, "requires_approval": "true"}
                ],
            },
            "steps[0].requires_approval",
            "must be true or false",
        ),
        (
            "/api/pipelines",
            {
                "name": "p",
                "steps": [{"key": "a", "type": "email.send", "input_data": EMAIL, "requires_approval": 1}],
            },
            "steps[0].requires_approval",
            "must be true or false",
        ),
        (
            "/api/me/tokens",
            {"name": "t", "expires_in_days": "30"},
            "expires_in_days",
            "must be a whole number",
        ),
    ],
)
async def test_text_for_a_number_or_a_flag_is_refused(
    scene: Scene, path: str, body: dict[str, Any], field: str, message: str
) -> None:
    before = await counts(scene.pg)
    r = await scene.client.post(path, json=body, headers=scene.ann)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][field].startswith(message)
    assert await counts(scene.pg) == before


def list_routes(client: AsyncTestClient) -> list[str]:
    """Every API route that answers GET without a path parameter (the lists and the catalogues)."""
    return sorted(
        route.path
        for route in client.app.routes
        if route.path.startswith("/api/")
        and "{" not in route.path
        and any("GET" in h.http_methods for h in getattr(route, "route_handlers", []))
    )


async def test_an_unknown_query_parameter_is_refused_naming_it_on_every_api_route(scene: Scene) -> None:
    """``GET /api/jobs?q=zzz`` and ``?pipeline_id=…`` answered with every job, as if the filter had
    matched, while a body's unknown field is a 422. Every API route now refuses a query parameter it does
    not take, naming it; the ones it takes (filters, pagination, ``wait``) still work."""
    routes = list_routes(scene.client)
    assert {"/api/jobs", "/api/pipelines", "/api/batches", "/api/approvals", "/api/schedules"} <= set(routes)
    for path in routes:
        r = await scene.client.get(path, params={"q": "zzz"}, headers=scene.root)
        assert r.status_code == 422, (path, r.text)
        assert list(r.json()["errors"]) == ["q"], (path, r.text)
        assert r.json()["errors"]["q"].startswith("unknown query parameter"), (path, r.text)
    r = await scene.client.get("/api/jobs?=queued", headers=scene.ann)  # a value without a name
    assert (r.status_code, list(r.json()["errors"])) == (422, ["(unnamed)"]), r.text
    assert (await scene.client.get("/api/jobs?limit=2&&", headers=scene.ann)).status_code == 200
    r = await scene.client.get(
        "/api/jobs", params={"pipeline_id": "01a20000-0000-7000-8000-000000000000"}, headers=scene.ann
    )
    assert r.status_code == 422
    assert r.json()["errors"] == {
        "pipeline_id": "unknown query parameter; the parameters are after, limit, status, tag, type, user_id"
    }
    for path, params in (
        ("/api/jobs", {"limit": "2", "status": "queued", "tag": "x", "type": "noop"}),
        ("/api/pipelines", {"limit": "2"}),
        ("/api/batches", {"limit": "2"}),
        ("/api/approvals", {}),
    ):
        ok = await scene.client.get(path, params=params, headers=scene.ann)
        assert ok.status_code == 200, (path, ok.text)
    missing = await scene.client.get(
        "/api/jobs/01a20000-0000-7000-8000-000000000000", params={"wait": "0"}, headers=scene.ann
    )
    assert missing.status_code == 404  # the parameter is taken; the job does not exist
    detail = await scene.client.get(
        "/api/jobs/01a20000-0000-7000-8000-000000000000", params={"wiat": "5"}, headers=scene.ann
    )
    assert detail.status_code == 422 and "wiat" in detail.json()["errors"]


async def test_a_query_parameter_that_takes_one_value_is_refused_when_given_twice(scene: Scene) -> None:
    """``GET /api/jobs?limit=5&limit=6`` (or ``?tag=a&tag=b``: one tag filters) answered 200 with one of
    the two values, silently."""
    for query, name in (("limit=5&limit=6", "limit"), ("tag=a&tag=b&limit=5", "tag")):
        r = await scene.client.get(f"/api/jobs?{query}", headers=scene.ann)
        assert r.status_code == 422, r.text
        assert r.json()["errors"] == {name: "given more than once; it takes one value"}
    ok = await scene.client.get("/api/jobs?tag=a&limit=5&status=queued", headers=scene.ann)
    assert ok.status_code == 200, ok.text


async def test_an_empty_list_filter_is_refused_naming_it_on_every_api_list(scene: Scene) -> None:
    """``?type=`` listed nothing without a word while ``?status=`` was a 422: every empty value is now
    the same 422 naming its parameter (the shared reader of API query parameters)."""
    for path, name in (
        ("/api/jobs", "type"),
        ("/api/jobs", "status"),
        ("/api/jobs", "tag"),
        ("/api/jobs", "user_id"),
        ("/api/pipelines", "limit"),
        ("/api/batches", "limit"),
    ):
        for query in (f"{name}=", name, f"{name}=&&"):
            r = await scene.client.get(f"{path}?{query}", headers=scene.ann)
            assert r.status_code == 422, (path, query, r.text)
            assert r.json()["errors"][name].startswith("is empty; give "), r.text
            assert r.json()["errors"][name].endswith(f", or leave {name} out"), r.text
    r = await scene.client.get("/api/jobs?type=", headers=scene.ann)
    assert r.json()["errors"] == {"type": "is empty; give a value, or leave type out"}, r.text
    r = await scene.client.get("/api/jobs?limit=", headers=scene.ann)
    assert r.json()["errors"] == {"limit": "is empty; give a whole number from 1 to 200, or leave limit out"}
    assert (await scene.client.get("/api/jobs?after=", headers=scene.ann)).status_code == 200
