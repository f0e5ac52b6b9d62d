"""A JSON body's bytes as people's tools send them: a UTF-8 byte order mark before the JSON is read past
(RFC 8259 lets a reader ignore it), an empty body where a JSON object must be sent says so, and a body
that is not JSON says to send JSON — never the decoder's "JSON is malformed: invalid character (byte 0)"
or ``data: 'data'``."""

from __future__ import annotations

from tests.api.test_body_fields import Scene
from tests.api.test_body_fields import scene as scene  # the same signed-in people

BOM = b"\xef\xbb\xbf"
JSON = {"Content-Type": "application/json"}


async def test_a_byte_order_mark_before_json_is_read_past(scene: Scene) -> None:
    body = b'{"type": "email.send", "input_data": {"to": ["a@example.com"], "subject": "s", "body": "b"}}'
    r = await scene.client.post("/api/jobs", content=BOM + body, headers={**scene.ann, **JSON})
    assert r.status_code == 201, r.text
    r = await scene.client.put("/api/me", content=BOM + b'{"zz": 1}', headers={**scene.ann, **JSON})
    assert r.status_code == 422 and "zz" in r.json()["errors"], r.text


async def test_an_empty_body_where_json_is_needed_says_so(scene: Scene) -> None:
    for path in ("/api/jobs", "/api/pipelines", "/api/batches"):
        for headers in (JSON, {}):
            r = await scene.client.post(path, content=b"", headers={**scene.ann, **headers})
            assert r.status_code == 422, (path, r.text)
            assert r.json()["errors"] == {
                "body": "the body is empty; send a JSON object (Content-Type: application/json)"
            }
    # a route whose body may be left out leaves it to its own rule
    r = await scene.client.post("/api/notifications/read", content=b"", headers={**scene.ann, **JSON})
    assert "the body is empty" not in r.text, r.text


async def test_a_body_that_is_not_json_says_to_send_json(scene: Scene) -> None:
    r = await scene.client.post("/api/jobs", content=b"type=email.send", headers={**scene.ann, **JSON})
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert detail.startswith("the body is not valid JSON (invalid character (byte 4))"), detail
    assert "send a JSON object (Content-Type: application/json)" in detail
