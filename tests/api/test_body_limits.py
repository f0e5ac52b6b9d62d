"""A body without files is bounded far below ``UPLOAD_MAX_BYTES`` (:func:`app.web.input_guard.body_limit`):
over it is a 413 in words, from the ``Content-Length`` before the body is read, or as soon as a body sent
in chunks passes it. Four 20 MB JSON bodies at once had held the event loop for seconds each; a 10,000-row
batch still fits, and routes that take files keep the upload limit."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings, load_settings
from app.spreadsheets import MAX_ROWS
from app.web.input_guard import body_limit
from tests.api.test_body_fields import Scene
from tests.api.test_body_fields import scene as scene  # the same signed-in people
from tests.support.webkit import bearer, running_server

JSON = {"Content-Type": "application/json"}
PING = {"url": "http://example.com/"}


def _limit(scene: Scene) -> int:
    return body_limit(scene.client.app.state.settings, {"path": "/api/jobs"})


async def test_a_large_json_body_is_refused_before_it_is_read(scene: Scene) -> None:
    limit = _limit(scene)
    settings: Settings = scene.client.app.state.settings
    assert limit < settings.upload_max_bytes / 4
    ids = ", ".join('"00000000-0000-0000-0000-000000000000"' for _ in range(500_000))
    body = f'{{"type": "http.request", "input_data": {json.dumps(PING)}, "dependent_on_jobs": [{ids}]}}'
    started = time.monotonic()
    r = await scene.client.post("/api/jobs", content=body.encode(), headers={**scene.ann, **JSON})
    assert r.status_code == 413, r.text[:300]
    assert time.monotonic() - started < 2
    detail = r.json()["detail"]
    assert "the limit for a JSON request is" in detail and "this body is 19" in detail, detail


def test_a_chunked_body_is_cut_off_at_the_limit(db_url: str, tmp_path: Path) -> None:
    """On a real server, sent in chunks without a ``Content-Length``: refused once past the limit,
    quickly, however much more the client meant to send."""
    _, auth = asyncio.run(bearer(db_url, "ann@example.com"))
    limit = body_limit(load_settings(database_url=db_url), {"path": "/api/jobs"})
    chunk = b'"x",' * 16_384

    def chunks() -> Iterator[bytes]:
        yield b'{"type": "http.request", "tags": ['
        for _ in range(20 * limit // len(chunk)):
            yield chunk
        yield b'"x"]}'

    with running_server(db_url, tmp_path / "data") as base:
        started = time.monotonic()
        try:
            r = httpx.post(f"{base}/api/jobs", content=chunks(), headers={**auth, **JSON}, timeout=30)
        except httpx.TransportError:  # the server may close the connection while the client still sends
            pytest.fail("no answer to a body over the limit")
        assert r.status_code == 413, r.text[:300]
        assert "this body is larger than that" in r.json()["detail"]
        assert time.monotonic() - started < 10


async def test_a_form_without_files_has_the_same_bound(scene: Scene) -> None:
    page = await scene.client.get("/login")
    assert page.status_code == 200
    r = await scene.client.post(
        "/login", data={"email": "ann@example.com", "password": "x" * (_limit(scene) + 1)}
    )
    assert r.status_code == 413 and "a form without files" in r.text, r.text[:300]


async def test_a_batch_of_the_most_rows_fits(scene: Scene) -> None:
    rows = [
        {"url": f"https://example.com/orders/{i:06d}/status?customer=ann&part=full"} for i in range(MAX_ROWS)
    ]
    body = json.dumps({"type": "http.request", "rows": rows, "name": "many"}).encode()
    assert len(body) < _limit(scene)
    r = await scene.client.post("/api/batches", content=body, headers={**scene.ann, **JSON})
    assert r.status_code == 201, r.text[:300]


async def test_an_upload_keeps_the_upload_limit(scene: Scene) -> None:
    data = b"a,b\n" + b"1,2\n" * (_limit(scene) // 4 + 10)
    r = await scene.client.post(
        "/api/files", files={"file": ("big.csv", data, "text/csv")}, headers=scene.ann
    )
    assert r.status_code == 201, r.text[:300]
