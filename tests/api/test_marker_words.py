"""A pipeline marker (``{"$ref": …}``, ``{"$literal": …}``) where markers are not read — a plain job's
input, a batch's row — or an object with another key beside one, is refused saying so, on every path
that checks an input against its type: not with the field's bare type ("rows[0].subject: Enter text")."""

from __future__ import annotations

from typing import Any

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
