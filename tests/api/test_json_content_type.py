"""Every route that reads a JSON body refuses a body sent in another type — ``text/plain``, no
``Content-Type`` at all, a form — with a 415 naming ``application/json``, and changes nothing; the decoder
read any body as JSON whatever its type claimed, so ``text/plain`` started a job. A request without a
body (an action such as cancel, an optional body left out) is not refused for its type, and a file upload
keeps its multipart body. Every route of the running app is driven, so a new route is covered as it is
added."""

from __future__ import annotations

import re
from typing import Any

from tests.api.test_body_fields import COUNTED, counts
from tests.support.webkit import AdminApi

ID = "01a20000-0000-7000-8000-000000000000"


def json_routes(app: Any) -> list[tuple[str, str, bool]]:
    """``(method, path, body optional)`` of every route that reads a JSON body, path parameters filled
    with an id that exists nowhere."""
    found = []
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            field = handler.parsed_data_field
            media = getattr(getattr(field, "kwarg_definition", None), "media_type", "application/json")
            if field is None or media != "application/json":
                continue
            path = re.sub(r"\{[a-z_]+:int\}", "999999", route.path)
            path = re.sub(r"\{[a-z_]+:str\}", ID, path)
            for method in sorted(handler.http_methods & {"POST", "PUT", "PATCH", "DELETE"}):
                found.append((method, path, field.is_optional or field.has_default))
    return found


async def test_every_json_route_refuses_a_body_that_is_not_sent_as_json(admin_api: AdminApi) -> None:
    c = admin_api.client
    routes = json_routes(c.app)
    assert ("POST", "/api/jobs", False) in routes
    assert ("PUT", "/api/me/notifications", True) in routes
    before = await counts(admin_api.pg)
    for method, path, _ in routes:
        for headers in ({"Content-Type": "text/plain"}, {}, {"Content-Type": "application/octet-stream"}):
            r = await c.request(method, path, content=b"{}", headers={**admin_api.root, **headers})
            assert r.status_code == 415, (method, path, headers, r.status_code, r.text[:300])
            detail = r.json()["detail"]
            assert "send JSON (Content-Type: application/json)" in detail, detail
            assert (headers.get("Content-Type") or "without a Content-Type") in detail, detail
        r = await c.request(method, path, data={"a": "b"}, headers=admin_api.root)
        assert r.status_code == 415, (method, path, r.text[:300])
        assert "not a form (application/x-www-form-urlencoded)" in r.json()["detail"]
    assert await counts(admin_api.pg) == before
    assert set(COUNTED) <= set(before)


async def test_a_json_body_with_its_type_and_a_request_without_a_body_go_through(admin_api: AdminApi) -> None:
    c = admin_api.client
    for content_type in (
        "application/json",
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ):
        r = await c.post(
            "/api/jobs",
            content=b'{"type": "noop", "input_data": {}}',
            headers={**admin_api.root, "Content-Type": content_type},
        )
        assert r.status_code == 201, (content_type, r.text)
    job = r.json()["id"]
    # an action without a body, with no Content-Type (curl -X POST), and an optional body left out
    r = await c.post(f"/api/jobs/{job}/cancel", headers=admin_api.root)
    assert r.status_code == 200, r.text
    for method, path in (("POST", "/api/notifications/read"), ("PUT", "/api/me/notifications")):
        for headers in ({}, {"Content-Type": "text/plain"}):
            r = await c.request(method, path, headers={**admin_api.root, **headers})
            assert r.status_code != 415, (path, r.text)  # the route's own answer to an empty request
    # a file upload reads its multipart body itself
    r = await c.post("/api/files", files={"file": ("a.txt", b"hello")}, headers=admin_api.root)
    assert r.status_code == 201, r.text

    spec = (await c.get("/schema/openapi.json")).json()
    words = spec["paths"]["/api/jobs"]["post"]["responses"]["415"]["description"]
    assert "text/plain" in words and "application/json" in words
