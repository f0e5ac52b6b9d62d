"""A request with more than one ``Authorization`` header is refused (400, in words saying so) on every
API route and on ``/metrics`` before any token is read: the first header used to win silently, so a
request that also named someone else (a proxy's header beside the client's own) acted for whoever came
first. Headers a proxy joined into one with a comma are the same request. Every API route of the running
app is driven, so a route added later is covered as it is added."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient

from app.web.auth_middleware import MANY_AUTHORIZATIONS
from tests.support.webkit import add_token, add_user, app_client

ID = "01a20000-0000-7000-8000-000000000000"
METRICS = "metrics-token-0123456789"


@dataclass
class Scene:
    client: AsyncTestClient
    pg: asyncpg.Connection
    ann: str
    root: str

    def raw(self, method: str, path: str, headers: list[tuple[str, str]], **kw: Any) -> httpx.Response:
        """A request with its headers as they are: the test client joins repeated ones with a comma. Sent
        on the app's own event loop (its database connections belong to it)."""

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver.local") as raw:
                return await raw.request(method, path, headers=headers, **kw)

        return self.client.blocking_portal.call(send)


@pytest.fixture
async def scene(make_settings: Any, pg: asyncpg.Connection) -> AsyncIterator[Scene]:
    settings = make_settings(worker_enabled=False, metrics_token=METRICS)
    db = settings.database_url or ""
    ann = await add_user(db, "ann@example.com")
    root = await add_user(db, "root@example.com", admin=True)
    async with app_client(settings) as client:
        yield Scene(
            client, pg, f"Bearer {await add_token(db, ann.id)}", f"Bearer {await add_token(db, root.id)}"
        )


def api_routes(app: Any) -> list[tuple[str, str]]:
    """Every route that reads the ``Authorization`` header: the API's, and ``/metrics`` (its scraper's
    token)."""
    found = [("GET", "/metrics")]
    for route in app.routes:
        if not route.path.startswith("/api/"):
            continue
        for handler in getattr(route, "route_handlers", []):
            for method in sorted(handler.http_methods - {"OPTIONS", "HEAD"}):
                path = re.sub(r"\{[a-z_]+:int\}", "999999", route.path)
                found.append((method, re.sub(r"\{[a-z_]+:str\}", ID, path)))
    return found


async def test_every_api_route_refuses_two_authorization_headers(scene: Scene) -> None:
    routes = api_routes(scene.client.app)
    assert ("POST", "/api/jobs") in routes and ("GET", "/api/me") in routes
    jobs = await scene.pg.fetchval("SELECT count(*) FROM jobs")
    pairs = (
        (scene.ann, scene.root),  # two people
        (scene.root, "Bearer jd_not-a-token"),  # a good one first, as the first-wins rule took
        ("Bearer jd_not-a-token", scene.root),
        (scene.root, scene.root),  # the same twice: still not one header
        (f"Bearer {METRICS}", scene.ann),
    )
    for method, path in routes:
        for first, second in pairs:
            headers = [("authorization", first), ("authorization", second)]
            r = scene.raw(method, path, headers, json={"type": "noop", "input_data": {}})
            assert r.status_code == 400, (method, path, r.status_code, r.text[:300])
            assert MANY_AUTHORIZATIONS in html.unescape(r.text), (method, path)  # JSON, or the /metrics page
        joined = {"Authorization": f"{scene.root}, {scene.ann}"}  # as a proxy may join them
        r = await scene.client.request(method, path, headers=joined)
        assert r.status_code == 400, (method, path, r.status_code, r.text[:300])
        assert "more than one Authorization header" in r.text
    assert await scene.pg.fetchval("SELECT count(*) FROM jobs") == jobs
    # one header still works
    r = scene.raw("GET", "/api/me", [("authorization", scene.ann)])
    assert r.status_code == 200 and r.json()["email"] == "ann@example.com"
    assert scene.raw("GET", "/metrics", [("authorization", f"Bearer {METRICS}")]).status_code == 200
