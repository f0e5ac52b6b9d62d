"""A JSON body's field whose value the decoder refuses is answered in words saying what the field takes
(``tags: must be a list of text values``), made from the route's declared body, on every API route with a
body — not the decoder's ``Expected `array | null`, got `str``` or ``Invalid UUID``."""

from __future__ import annotations

import dataclasses
import types
from datetime import datetime
from typing import Any, Union, get_args, get_origin, get_type_hints
from uuid import UUID

from tests.api import test_body_fields
from tests.api.test_body_fields import Scene, api_routes

scene = test_body_fields.scene  # the same signed-in people

ID = "01a20000-0000-7000-8000-000000000000"


def _members(tp: Any) -> list[Any]:
    if get_origin(tp) in (Union, types.UnionType):
        return [a for a in get_args(tp) if a is not type(None)]
    return [tp]


def fitting(tp: Any) -> Any:
    """A value of the kind ``tp`` takes."""
    tp = _members(tp)[0]
    origin = get_origin(tp) or tp
    if origin in (list, tuple):
        return []
    if origin is dict or tp is Any:
        return {}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return whole(tp, None)
    return {str: "x", int: 1, float: 1.5, bool: True, UUID: ID, datetime: "2030-01-01T00:00:00+00:00"}.get(
        tp, "x"
    )


def wrong(tp: Any) -> Any:
    """A value of a kind ``tp`` does not take (whatever the field, a nested list fits nothing but a list)."""
    kinds = {get_origin(m) or m for m in _members(tp)}
    return "x" if kinds & {list, tuple, dict} or any(dataclasses.is_dataclass(k) for k in kinds) else [[1]]


def whole(cls: type, skip: str | None) -> dict[str, Any]:
    """Every required field of the body dataclass ``cls`` with a fitting value, but ``skip``."""
    return {
        f.name: fitting(get_type_hints(cls)[f.name])
        for f in dataclasses.fields(cls)
        if f.name != skip and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


JARGON = ("Expected `", "Invalid ", "`")


async def test_every_body_field_of_every_route_is_refused_in_words(scene: Scene) -> None:
    seen = 0
    jargon = {}
    for method, path in api_routes(scene.client, with_body=True):
        cls = next(
            (
                _members(h.parsed_data_field.annotation)[0]
                for route in scene.client.app.routes
                for h in getattr(route, "route_handlers", [])
                if method in h.http_methods
                and h.parsed_data_field is not None
                and _same_route(route.path, path)
            ),
            None,
        )
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        for name, tp in get_type_hints(cls).items():
            body = {**whole(cls, name), name: wrong(tp)}
            r = await scene.client.request(method, path, json=body, headers=scene.root)
            if r.status_code != 422:
                continue
            seen += 1
            if any(j in r.text for j in JARGON):
                jargon[(method, path, name)] = r.json()["detail"]
    assert seen > 20
    assert jargon == {}


def _same_route(pattern: str, path: str) -> bool:
    parts, sent = pattern.split("/"), path.split("/")
    return len(parts) == len(sent) and all(
        p == s or p.startswith("{") for p, s in zip(parts, sent, strict=True)
    )


async def test_nested_fields_and_ids_are_described(scene: Scene) -> None:
    cases = [
        (
            "/api/jobs",
            {"type": "email.send", "input_data": {}, "tags": "a"},
            "tags",
            "must be a list of text values",
        ),
        (
            "/api/jobs",
            {"type": "email.send", "input_data": {}, "dependent_on_jobs": [1]},
            "dependent_on_jobs[0]",
            "must be an id",
        ),
        (
            "/api/jobs",
            {"type": "email.send", "input_data": {}, "dependent_on_jobs": ["abc"]},
            "dependent_on_jobs[0]",
            "must be an id",
        ),
        (
            "/api/pipelines",
            {"steps": [{"key": "a", "type": "email.send", "input_data": {}, "for_each": "x"}]},
            "steps[0].for_each",
            "must be a list or an object",
        ),
    ]
    for path, body, field, words in cases:
        r = await scene.client.post(path, json=body, headers=scene.ann)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][field].startswith(words), r.text
