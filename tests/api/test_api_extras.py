"""For engineers calling the API: ``tags`` and ``?tag=``; ``callback_url`` POSTed the job when it ends,
signed, retried, under the address rules of ``http.request``; ``GET /api/jobs/{id}?wait=N`` answering
when the job ends without holding a database connection while it waits."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from app.callbacks import CallbackSender
from app.processors.addresses import AddressPolicy
from app.processors.http_transport import PinnedTransport
from tests.processors.test_processors_http import FakeResolver
from tests.support.webkit import app_client, bearer, running_server
from tests.support.workers import running_worker, wait_until

SECRET = "test-callback-secret"


async def test_tags_are_kept_shown_and_filter_the_list(make_settings, db_url) -> None:
    settings = make_settings(worker_enabled=False)
    _, headers = await bearer(db_url, "tags@example.com")
    async with app_client(settings) as client:
        a = await client.post(
            "/api/jobs",
            json={
                "type": "http.request",
                "input_data": {"url": "https://example.com/"},
                "tags": ["nightly", "b 2", "nightly"],
            },
            headers=headers,
        )
        assert a.status_code == 201, a.text
        assert a.json()["tags"] == ["b 2", "nightly"]
        b = await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": {"url": "https://example.com/"}},
            headers=headers,
        )
        assert b.json()["tags"] == []
        listed = (await client.get("/api/jobs", params={"tag": "nightly"}, headers=headers)).json()["items"]
        assert [j["id"] for j in listed] == [a.json()["id"]]
        assert listed[0]["tags"] == ["b 2", "nightly"]
        assert len((await client.get("/api/jobs", headers=headers)).json()["items"]) == 2
        for tags, field in (
            (["ok", "x" * 51], "tags[1]"),
            (["bad\x00"], "tags[0]"),
            ("nightly", "tags"),
            ([""], "tags[0]"),
            (["ok", "\u200b\u202e\ufeff"], "tags[1]"),  # invisible characters only: as empty
        ):
            bad = await client.post(
                "/api/jobs",
                json={"type": "http.request", "input_data": {"url": "https://example.com/"}, "tags": tags},
                headers=headers,
            )
            assert bad.status_code == 422, bad.text
            assert field in bad.json()["errors"], bad.json()
            if tags == ["ok", "\u200b\u202e\ufeff"]:
                assert bad.json()["errors"][field] == "a tag is 1 to 50 characters", bad.json()
        # ?tag= reads a tag as a submission keeps it: spaces around it dropped, an empty or over-long
        # one refused in the same words (an empty one listed nothing, as if no job could match).
        spaced = (await client.get("/api/jobs", params={"tag": " nightly "}, headers=headers)).json()
        assert [j["id"] for j in spaced["items"]] == [a.json()["id"]]
        for tag, said in (
            ("", "is empty; give a value, or leave tag out"),  # as every empty parameter of the API
            ("  ", "a tag is 1 to 50 characters"),
            ("\u200b\ufeff", "a tag is 1 to 50 characters"),
            ("x" * 51, "a tag is 1 to 50 characters"),
        ):
            bad = await client.get("/api/jobs", params={"tag": tag}, headers=headers)
            assert bad.status_code == 422, (tag, bad.text)
            assert bad.json()["errors"] == {"tag": said}, bad.json()


class Receiver:
    """A local HTTP server that records each POST and answers with the next of ``codes`` (then 200)."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = list(codes)
        self.got: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.got.append((dict(self.headers.items()), body))
                self.send_response(outer.codes.pop(0) if outer.codes else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([500])
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()


async def test_a_callback_is_posted_signed_when_the_job_ends_and_retried_after_a_5xx(
    make_settings, db_url, pg, receiver
) -> None:
    settings = make_settings(
        worker_enabled=False,
        callback_signing_secret=SECRET,
        callback_retry_intervals=[0.2],
        http_request_allowed_hosts=["127.0.0.1"],
    )
    _, headers = await bearer(db_url, "hook@example.com", admin=True)
    async with app_client(settings) as client:
        resp = await client.post(
            "/api/jobs",
            json={"type": "noop", "input_data": {"x": 1}, "tags": ["t"], "callback_url": receiver.url},
            headers=headers,
        )
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["id"]
        async with running_worker(settings):
            await wait_until(lambda: asyncio.sleep(0, len(receiver.got) >= 2), timeout=30, what="two POSTs")
            await wait_until(
                lambda: pg.fetchval(
                    "SELECT delivered_at IS NOT NULL FROM job_callbacks WHERE job_id = $1::uuid", job_id
                ),
                what="the delivery to be recorded",
            )
    (h1, b1), (h2, b2) = receiver.got[:2]
    assert b1 == b2  # the same body again: receivers tell repeats by the job's id
    body = json.loads(b2)
    assert body["id"] == job_id and body["status"] == "completed" and body["result_data"] == {"x": 1}
    assert body["tags"] == ["t"]
    expected = "sha256=" + hmac.new(SECRET.encode(), b2, hashlib.sha256).hexdigest()
    assert h2["X-Jobdesk-Signature"] == expected
    assert h1["X-Jobdesk-Delivery"] != h2["X-Jobdesk-Delivery"]
    row = await pg.fetchrow("SELECT attempts, last_error FROM job_callbacks WHERE job_id = $1::uuid", job_id)
    assert row["attempts"] == 2 and row["last_error"] is None


async def test_callback_urls_are_refused_when_not_set_up_or_private(make_settings, db_url) -> None:
    _, headers = await bearer(db_url, "nohook@example.com")
    job = {"type": "http.request", "input_data": {"url": "https://example.com/"}}
    async with app_client(make_settings(worker_enabled=False)) as client:
        resp = await client.post(
            "/api/jobs", json={**job, "callback_url": "https://example.com/h"}, headers=headers
        )
        assert resp.status_code == 422
        assert "CALLBACK_SIGNING_SECRET" in resp.json()["errors"]["callback_url"]
    async with app_client(make_settings(worker_enabled=False, callback_signing_secret=SECRET)) as client:
        for url, words in (
            ("http://10.1.2.3/h", "local or private address"),
            ("http://[::1]:8080/h", "local or private address"),
            ("ftp://example.com/h", "http or https"),
            ("https://user:pw@example.com/h", "user name or password"),
            ("https://exa mple.com/h", "must not contain spaces (encode them as %20)"),
        ):
            resp = await client.post("/api/jobs", json={**job, "callback_url": url}, headers=headers)
            assert resp.status_code == 422, url
            assert words in resp.json()["errors"]["callback_url"], resp.json()
        assert (await client.get("/api/jobs", headers=headers)).json()["items"] == []


async def test_an_empty_callback_url_is_called_empty_not_too_long(make_settings, db_url) -> None:
    _, headers = await bearer(db_url, "emptyhook@example.com")
    job = {"type": "http.request", "input_data": {"url": "https://example.com/"}}
    async with app_client(make_settings(worker_enabled=False, callback_signing_secret=SECRET)) as client:
        for url in ("", "   "):
            resp = await client.post("/api/jobs", json={**job, "callback_url": url}, headers=headers)
            assert resp.status_code == 422, resp.text
            words = resp.json()["errors"]["callback_url"]
            assert "is empty" in words and "at most" not in words, words
        resp = await client.post("/api/jobs", json={**job, "callback_url": "h" * 3000}, headers=headers)
        assert "at most 2,000 characters" in resp.json()["errors"]["callback_url"], resp.text


async def test_a_name_that_resolves_to_a_private_address_is_given_up_at_delivery(
    make_settings, db_url, engine, pg
) -> None:
    settings = make_settings(worker_enabled=False, callback_signing_secret=SECRET)
    _, headers = await bearer(db_url, "dns@example.com", admin=True)
    async with app_client(settings) as client:
        # localhost is known to be loopback without asking a resolver: refused at once.
        local = await client.post(
            "/api/jobs", json={"type": "noop", "callback_url": "http://localhost:9/h"}, headers=headers
        )
        assert local.status_code == 422, local.text
        assert "localhost is 127.0.0.1, a local or private address" in local.json()["errors"]["callback_url"]
        resp = await client.post(
            "/api/jobs", json={"type": "noop", "callback_url": "http://intranet.test:9/h"}, headers=headers
        )
        job_id = resp.json()["id"]
    await pg.execute("UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1::uuid", job_id)
    transport = PinnedTransport(AddressPolicy(settings), FakeResolver({"intranet.test": ["10.1.2.3"]}))
    sender = CallbackSender(engine, settings, log=_Log(), transport=transport)
    assert await sender.run_once() == 1
    row = await pg.fetchrow(
        "SELECT given_up_at, last_error FROM job_callbacks WHERE job_id = $1::uuid", job_id
    )
    assert row["given_up_at"] is not None
    assert "local or private address" in row["last_error"]


class _Log:
    def info(self, *a: Any, **k: Any) -> None:
        pass

    warning = info


async def test_wait_answers_when_the_job_ends_and_holds_no_connection_while_waiting(
    db_url, pg, tmp_path
) -> None:
    _, headers = await bearer(db_url, "wait@example.com", admin=True)
    # A real server (requests run concurrently) with a pool of two connections.
    with running_server(db_url, tmp_path / "srv", DB_POOL_SIZE="2", DB_POOL_TIMEOUT_SECS="2") as base:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
            job_id = (await client.post("/api/jobs", json={"type": "noop"})).json()["id"]
            started = time.monotonic()
            waiting = [
                asyncio.create_task(client.get(f"/api/jobs/{job_id}", params={"wait": 8})) for _ in range(6)
            ]
            await asyncio.sleep(1.0)
            # Six clients wait on a pool of two: an ordinary request is still answered at once.
            quick = await client.get(f"/api/jobs/{job_id}")
            assert quick.status_code == 200 and quick.json()["status"] == "queued"
            assert not any(t.done() for t in waiting)
            await pg.execute(
                "UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1::uuid", job_id
            )
            answers = await asyncio.gather(*waiting)
            assert all(a.json()["status"] == "completed" for a in answers)
            assert time.monotonic() - started < 6.0  # not the full eight seconds
            other = (await client.post("/api/jobs", json={"type": "noop"})).json()["id"]
            timed = time.monotonic()
            still = await client.get(f"/api/jobs/{other}", params={"wait": 1})
            assert still.json()["status"] == "queued" and 0.9 < time.monotonic() - timed < 4
            assert (await client.get(f"/api/jobs/{other}", params={"wait": 61})).status_code == 422
            missing = await client.get("/api/jobs/01a23312-3c1d-76f9-b573-32395ae170d8", params={"wait": 5})
            assert missing.status_code == 404
