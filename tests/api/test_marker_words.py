"""A pipeline marker (``{"$ref": …}``, ``{"$literal": …}``) where markers are not read — a plain job's
input, a batch's row — or an object with another key beside one, is refused saying so, on every path
that checks an input against its type: not with the field's bare type ("rows[0].subject: Enter text")."""

from __future__ import annotations

from typing import Any

import tests.support.forms
import tests.support.processors  # noqa: F401  (test.echo)
from tests.support.webkit import AdminApi

EMAIL = {"to": ["a@example.com"], "subject": "s", "body": "b"}


async def refusal(api: AdminApi, path: str, body: dict[str, Any]) -> dict[str, str]:
    r = await api.client.post(path, json=body, headers=api.root)
    assert r.status_code == 422, r.text
    return dict(r.json()["errors"])


async def test_a_marker_where_markers_are_not_read_says_where_they_work(admin_api: AdminApi) -> None:
    ref = {**EMAIL, "subject": {"$ref": "a.subject"}}
    literal = {**EMAIL, "subject": {"$literal": "x"}}
    job = await refusal(admin_api, "/api/jobs", {"type": "email.send", "input_data": ref})
    assert "works only in a pipeline step's input" in job["input_data.subject"], job
    row = await refusal(admin_api, "/api/batches", {"type": "email.send", "rows": [EMAIL, literal]})
    assert '"$literal" works only in a pipeline step\'s input' in row["rows[1].subject"], row
    assert "here, give the value itself" in row["rows[1].subject"]


async def test_a_marker_with_another_key_beside_it_says_so(admin_api: AdminApi) -> None:
    step = {"key": "a", "type": "email.send", "input_data": {**EMAIL, "subject": {"$ref": "a.b", "x": 1}}}
    errors = await refusal(admin_api, "/api/pipelines", {"name": "p", "steps": [step]})
    words = errors["steps[0].input_data.subject"]
    assert 'An object with "$ref" must have that one key only' in words, errors
    assert "'x'" in words


async def test_a_marker_inside_a_literal_is_data_refused_only_as_data(admin_api: AdminApi) -> None:
    """In a pipeline step's input, ``{"$literal": v}`` is ``v`` as it is: a marker-shaped ``v`` is an object
    like any other, so where the field takes text it is refused as any object is ("Enter text"), not as a
    marker "that works only in a pipeline step's input" — this is one — and where the field takes an
    object it is taken as it is."""
    plain = {"key": "a", "type": "email.send", "input_data": {**EMAIL, "body": {"a": 1}}}
    want = await refusal(admin_api, "/api/pipelines", {"name": "p", "steps": [plain]})
    assert want == {"steps[0].input_data.body": "Enter text"}, want
    for inner in ({"$ref": "x.y"}, {"$literal": "x"}, {"$item": ""}, {"$ref": "x.y", "z": 1}):
        step = {"key": "a", "type": "email.send", "input_data": {**EMAIL, "body": {"$literal": inner}}}
        errors = await refusal(admin_api, "/api/pipelines", {"name": "p", "steps": [step]})
        assert errors == want, (inner, errors)
    deep = {
        "key": "a",
        "type": "test.form",
        "input_data": {"name": "Ann", "extra": {"$literal": {"n": {"$ref": 1}}}},
    }
    errors = await refusal(admin_api, "/api/pipelines", {"name": "p", "steps": [deep]})
    assert errors == {"steps[0].input_data.extra.n": "Enter a whole number, like 42"}, errors
    taken = {
        "key": "a",
        "type": "test.echo",
        "input_data": {"v": {"$literal": {"$literal": {"$ref": "x.y"}}}},
    }
    r = await admin_api.client.post(
        "/api/pipelines", json={"name": "p", "steps": [taken]}, headers=admin_api.root
    )
    assert r.status_code == 201, r.text
    assert await admin_api.pg.fetchval("SELECT count(*) FROM jobs") == 1
