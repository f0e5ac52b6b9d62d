"""One rule for ``null`` in the API's JSON bodies: for a field that may be left out, ``null`` is the same as
leaving it out; a field that must be given, left out or sent as ``null``, is a 422 naming the field in
words. ``{"priority": null}`` on ``POST /api/jobs`` was a 422 in the decoder's words ("Expected `int`, got
`null`"), and ``{}`` on reschedule a 422 naming ``data`` rather than ``run_at``. Every route with a body is
driven, so a new one is covered as it is added."""

from __future__ import annotations

import dataclasses
from typing import Any, get_args

from app.web.body_fields import _fields
from tests.api.test_body_fields import EMAIL, Scene, api_routes, counts, scene  # noqa: F401  (fixture)

NO_JOB = "01a20000-0000-7000-8000-000000000000"


def _body_class(client: Any, method: str, path: str) -> type:
    for route in client.app.routes:
        for handler in getattr(route, "route_handlers", []):
            field = handler.parsed_data_field
            if field is None or method not in handler.http_methods:
                continue
            filled = route.path.replace("{job_id:str}", NO_JOB).replace("{schedule_id:str}", NO_JOB)
            filled = filled.replace("{job_type:str}", NO_JOB)
            if filled == path:
                tp = field.annotation
                return next(a for a in (tp, *get_args(tp)) if dataclasses.is_dataclass(a))
    raise AssertionError((method, path))


def _words_only(errors: dict[str, str]) -> None:
    assert "data" not in errors, errors
    for message in errors.values():
        assert "Expected" not in message and "`" not in message, errors


async def test_every_route_reads_null_as_left_out_or_names_the_field_it_needs(scene: Scene) -> None:  # noqa: F811
    routes = api_routes(scene.client, with_body=True)
    assert ("POST", f"/api/jobs/{NO_JOB}/reschedule") in routes
    before = await counts(scene.pg)
    for method, path in routes:
        cls = _body_class(scene.client, method, path)
        empty = await scene.client.request(method, path, json={}, headers=scene.root)
        nulls = await scene.client.request(method, path, json=dict.fromkeys(_fields(cls)), headers=scene.root)
        if "/schedules/" in path:
            # A partial edit: left out keeps the value, so null is refused naming each field.
            assert empty.status_code == 404 and nulls.status_code == 422, (path, nulls.text)
            assert set(nulls.json()["errors"]) == set(_fields(cls))
            continue
        assert nulls.status_code == empty.status_code, (method, path, empty.text, nulls.text)
        if empty.status_code == 422:
            assert nulls.json()["errors"] == empty.json()["errors"], (method, path)
            _words_only(empty.json()["errors"])
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        for name in required:
            assert empty.json()["errors"][name].startswith("is required"), (path, empty.text)
    assert await counts(scene.pg) == before


async def test_reschedule_names_run_at_when_it_is_null_or_left_out(scene: Scene) -> None:  # noqa: F811
    r = await scene.client.post(
        "/api/jobs", json={"type": "email.send", "input_data": EMAIL}, headers=scene.ann
    )
    job = r.json()["id"]
    for body in ({"run_at": None}, {}):
        r = await scene.client.post(f"/api/jobs/{job}/reschedule", json=body, headers=scene.ann)
        assert r.status_code == 422, r.text
        assert r.json()["errors"] == {
            "run_at": "is required; it must be a date and time with a UTC offset, e.g. 2026-12-01T09:00:00+01:00"
        }
    r = await scene.client.post(f"/api/jobs/{job}/reschedule", json=[], headers=scene.ann)
    assert r.status_code == 422 and list(r.json()["errors"]) == ["body"], r.text


async def test_null_for_a_field_with_a_default_is_the_default(scene: Scene) -> None:  # noqa: F811
    r = await scene.client.post(
        "/api/jobs",
        json={
            "type": "email.send",
            "input_data": EMAIL,
            "priority": None,
            "max_attempts": None,
            "tags": None,
        },
        headers=scene.ann,
    )
    assert r.status_code == 201, r.text
    assert r.json()["priority"] == 0
    step = {
        "key": "a",
        "type": "email.send",
        "input_data": EMAIL,
        "priority": None,
        "depends_on": None,
        "requires_approval": None,
    }
    r = await scene.client.post("/api/pipelines", json={"name": "p", "steps": [step]}, headers=scene.ann)
    assert r.status_code == 201, r.text
    r = await scene.client.post(
        "/api/schedules",
        json={
            "cron": "0 9 * * *",
            "type": "email.send",
            "input_data": EMAIL,
            "timezone": None,
            "enabled": None,
            "catch_up": None,
        },
        headers=scene.root,
    )
    assert r.status_code == 201, r.text
    assert (r.json()["timezone"], r.json()["enabled"], r.json()["catch_up"]) == ("UTC", True, False)


async def test_a_required_field_of_a_nested_object_is_named(scene: Scene) -> None:  # noqa: F811
    for step in ({"type": "email.send", "input_data": EMAIL}, {"key": None, "type": "email.send"}):
        r = await scene.client.post("/api/pipelines", json={"name": "p", "steps": [step]}, headers=scene.ann)
        assert r.status_code == 422, r.text
        assert r.json()["errors"] == {"steps[0].key": "is required; it must be text"}
