"""``POST /api/files`` stores one file: a request with several ``file`` parts is refused naming the
count, never answered with the first stored and the others dropped without a word."""

from __future__ import annotations

from tests.api.test_body_fields import Scene
from tests.api.test_body_fields import scene as scene  # the same signed-in people


async def test_two_file_parts_are_refused(scene: Scene) -> None:
    files = [("file", ("a.txt", b"one", "text/plain")), ("file", ("b.txt", b"two", "text/plain"))]
    r = await scene.client.post("/api/files", files=files, headers=scene.ann)
    assert r.status_code == 422, r.text
    assert r.json()["errors"]["file"] == "send one file per request (this one has 2 'file' parts)"
    assert await scene.pg.fetchval("SELECT count(*) FROM files") == 0
    r = await scene.client.post("/api/files", files=files[:1], headers=scene.ann)
    assert r.status_code == 201, r.text
