"""``http.request`` against a real HTTP server on 127.0.0.1: answers, 4xx permanent,
5xx/429/timeouts/refused connections retried, truncated bodies, redirects, input validation, and which
addresses a job may reach — called directly with a real JobContext, and end to end through a worker and
the JSON API. Only loopback addresses ever receive traffic: private addresses come from a fake resolver
and are refused before anything is sent."""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.errors import BadInput
from app.processors import PermanentError, addresses, http_request, registry
from app.processors.http_request import BODY_KEEP_CHARS, TemporaryHttpError
from tests.support.procs import as_dict, enqueue, job_context
from tests.support.webkit import add_token, add_user, app_client
from tests.support.workers import running_worker, wait_status

STATIC: dict[str, tuple[int, bytes, str]] = {
    "/boom": (503, b"down for maintenance", "text/plain; charset=utf-8"),
    "/limited": (429, b"slow down", "text/plain; charset=utf-8"),
    "/html-404": (
        404,
        b"<!doctype html><html lang='en'><head><title>404 &ndash; Not Found</title>"
        b"<style>body { color: red }</style><script>var x = '<b>';</script></head>"
        b"<body><h1>Not Found</h1><p>The page <em>/html-404</em> does not exist.</p></body></html>",
        "text/html; charset=utf-8",
    ),
}
"""Answers that are always the same: path → (status, body, content type)."""


class Handler(BaseHTTPRequestHandler):
    hits: dict[str, int] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _send(
        self, status: int, body: bytes = b"", ctype: str = "text/plain; charset=utf-8", **headers: str
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        # /api/… answers as … does: the paths a job may request at Jobdesk's own address.
        path = self.path.split("?")[0].removeprefix("/api")
        Handler.hits[path] = Handler.hits.get(path, 0) + 1
        if path in STATIC:
            self._send(*STATIC[path])
            return
        n = Handler.hits[path]
        if path == "/ok":
            self._send(200, json.dumps({"hello": "wörld"}).encode(), "application/json", X_Trace="abc")
        elif path == "/missing":
            self._send(404, b"no such page here")
        elif path == "/flaky":
            self._send(503, b"warming up") if n == 1 else self._send(200, b"fine now")
        elif path == "/slow":
            time.sleep(2)
            self._send(200, b"late")
        elif path == "/big":
            self._send(200, b"x" * (2 * 1024 * 1024))
        elif path == "/binary":
            self._send(200, b"\x89PNG\r\n\x1a\n" + bytes(100), "image/png")
        elif path == "/redirect":
            self._send(302, b"", Location="/ok")
        elif path == "/loop":
            self._send(302, b"", Location="/loop")
        elif path == "/to-ftp":
            self._send(302, b"", Location="ftp://127.0.0.1/file")
        elif path == "/to-private":
            self._send(302, b"", Location=f"http://localhost:{self.server.server_address[1]}/ok")
        elif path == "/to-intranet":
            self._send(302, b"", Location="http://intranet.test/admin")
        elif path == "/redirect-to":
            self._send(302, b"", Location=self.path.split("?", 1)[1])
        elif path == "/host":
            self._send(200, (self.headers.get("Host") or "").encode())
        else:
            self._send(404, b"unknown")

    do_HEAD = do_GET

    def _echo(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        out = {"method": self.command, "headers": dict(self.headers.items()), "body": body}
        self._send(201 if self.path == "/create" else 200, json.dumps(out).encode(), "application/json")

    do_POST = do_PUT = do_PATCH = do_DELETE = _echo


@contextmanager
def serving(address: str = "127.0.0.1") -> Iterator[tuple[str, list[str]]]:
    """A test HTTP server on ``address`` (loopback); yields its URL and the paths it was asked for."""
    seen: list[str] = []

    class Recording(Handler):
        def do_GET(self) -> None:
            seen.append(self.path)
            super().do_GET()

        do_HEAD = do_GET

    httpd = ThreadingHTTPServer((address, 0), Recording)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving() as (url, _):
        yield url


@pytest.fixture
def settings(make_settings, server):
    """The test server is the one local address jobs may reach (allowed by an admin)."""
    return make_settings(http_request_allowed_hosts=server.removeprefix("http://"))


async def call(settings: Any, **input_data: Any) -> tuple[dict[str, Any], list[Any]]:
    spec = registry.get("http.request")
    ctx, progress = job_context("http.request", input_data, settings)
    result = await spec.func(ctx)
    return result, progress.reports


async def test_get_records_status_headers_body_and_progress(server, settings) -> None:
    result, reports = await call(settings, url=f"{server}/ok")
    assert result["status"] == 200
    assert result["ok"] is True
    assert result["reason"] == "OK"
    assert json.loads(result["body"]) == {"hello": "wörld"}
    assert result["headers"]["X-Trace"] == "abc"
    assert result["content_type"] == "application/json"
    assert result["body_truncated"] is False
    assert "note" not in result
    assert reports[0][1] == "Sending GET to 127.0.0.1"
    assert reports[-1] == (1.0, "127.0.0.1 answered 200 OK")


async def test_post_sends_the_json_body_and_headers(server, settings) -> None:
    result, _ = await call(
        settings,
        method="POST",
        url=f"{server}/create",
        headers="Authorization: Bearer abc123\n\nX-Custom:  spaced value ",
        body_type="json",
        body='{"event": "signup", "id": 7}',
    )
    echo = json.loads(result["body"])
    assert result["status"] == 201
    assert echo["method"] == "POST"
    assert json.loads(echo["body"]) == {"event": "signup", "id": 7}
    assert echo["headers"]["Authorization"] == "Bearer abc123"
    assert echo["headers"]["X-Custom"] == "spaced value"
    assert echo["headers"]["Content-Type"] == "application/json"
    text_result, _ = await call(
        settings, method="PUT", url=f"{server}/put", body_type="text", body="plain words"
    )
    echo = json.loads(text_result["body"])
    assert echo["body"] == "plain words"
    assert echo["headers"]["Content-Type"].startswith("text/plain")


async def test_a_4xx_answer_is_a_permanent_failure_that_says_so(server, settings) -> None:
    with pytest.raises(PermanentError) as err:
        await call(settings, url=f"{server}/missing")
    assert "refused the request with 404 Not Found" in str(err.value)
    assert "no such page here" in str(err.value)


async def test_a_web_page_answer_is_told_by_its_title_and_words_not_its_markup(server, settings) -> None:
    """A refusal's body is most often a server's or a proxy's error page: shown as markup, a person who
    is not an engineer read "Answer: <!doctype html> <html lang=…" as Jobdesk's own fault."""
    with pytest.raises(PermanentError) as err:
        await call(settings, url=f"{server}/html-404")
    assert str(err.value).endswith(
        "Answer: a web page titled '404 – Not Found': Not Found The page /html-404 does not exist."
    ), str(err.value)


@pytest.mark.parametrize(("path", "needle"), [("/boom", "503 Service Unavailable"), ("/limited", "429")])
async def test_5xx_and_429_are_retried(server, settings, path, needle) -> None:
    with pytest.raises(TemporaryHttpError) as err:
        await call(settings, url=f"{server}{path}")
    assert needle in str(err.value)
    assert "tried again" in str(err.value)
    assert not isinstance(err.value, PermanentError)


async def test_a_timeout_is_retried(server, settings) -> None:
    started = time.monotonic()
    with pytest.raises(TemporaryHttpError) as err:
        await call(settings, url=f"{server}/slow", timeout=0.5)
    assert "within 0.5 seconds" in str(err.value)
    assert time.monotonic() - started < 1.9  # gave up at the limit, not when the server answered


async def test_a_refused_connection_is_retried(make_settings) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    settings = make_settings(http_request_allowed_hosts=f"127.0.0.1:{port}")
    with pytest.raises(TemporaryHttpError) as err:
        await call(settings, url=f"http://127.0.0.1:{port}/")
    assert "Could not connect to 127.0.0.1" in str(err.value)


async def test_a_big_body_is_truncated_and_the_result_says_so(server, settings) -> None:
    result, _ = await call(settings, url=f"{server}/big")
    assert len(result["body"]) == BODY_KEEP_CHARS
    assert result["body_truncated"] is True
    assert result["note"].startswith("The answer was at least")
    assert "first 20000 characters" in result["note"]


async def test_binary_bodies_are_not_shown(server, settings) -> None:
    result, _ = await call(settings, url=f"{server}/binary")
    assert result["body"] == "(image/png content, 108 bytes, not shown)"


async def test_redirects_are_followed_but_loops_and_non_web_targets_are_permanent(server, settings) -> None:
    result, _ = await call(settings, url=f"{server}/redirect")
    assert result["status"] == 200
    assert result["url"].endswith("/ok")
    assert result["redirected_from"] == [f"{server}/redirect"]
    with pytest.raises(PermanentError, match="redirected more than 5 times"):
        await call(settings, url=f"{server}/loop")
    with pytest.raises(PermanentError, match="not http or https"):
        await call(settings, url=f"{server}/to-ftp")
    # A host name httpx cannot read (its IDNA raised out of the processor, retried as unknown).
    with pytest.raises(PermanentError, match="redirected to an address whose host name is not valid"):
        await call(settings, url=f"{server}/redirect-to?http://xn--/")


async def test_head_requests_have_no_body(server, settings) -> None:
    result, _ = await call(settings, method="HEAD", url=f"{server}/ok")
    assert result["status"] == 200
    assert result["body"] == ""
    assert result["body_bytes"] == 0


@pytest.mark.parametrize(
    ("input_data", "field", "needle"),
    [
        ({"url": "ftp://example.com/x"}, "input_data.url", "only http:// and https:// addresses"),
        ({"url": "file:///etc/passwd"}, "input_data.url", "(this one has file://)"),
        ({"url": "example.com/hook"}, "input_data.url", "(this one has no scheme)"),
        ({"url": "http:///path"}, "input_data.url", "names no host"),
        ({"url": "https://x.test", "headers": "Authorization Bearer"}, "input_data.headers", "line 1 is not"),
        (
            {"url": "https://x.test", "headers": "Bad Name: v"},
            "input_data.headers",
            "not a valid header name",
        ),
        (
            {"url": "https://x.test", "method": "POST", "body_type": "json", "body": "{nope"},
            "input_data.body",
            "is not valid JSON",
        ),
        (
            {"url": "https://x.test", "body_type": "text", "body": "hi"},
            "input_data.body",
            "a GET request cannot",
        ),
        ({"url": "https://x.test", "method": "POST", "body": "hi"}, "input_data.body", "choose JSON or text"),
        ({"url": "https://x.test", "timeout": 0}, "input_data.timeout", "at least 0.1"),
        ({"url": "https://x.test", "timeout": 1e-320}, "input_data.timeout", "at least 0.1"),
        ({"url": "https://x.test", "timeout": 0.05}, "input_data.timeout", "at least 0.1"),
        ({"url": "https://x.test", "timeout": 301}, "input_data.timeout", "at most 300"),
        ({"url": "https://x.test", "method": "TRACE"}, "input_data.method", "'GET'"),
    ],
)
def test_bad_input_is_refused_naming_the_field(input_data, field, needle) -> None:
    spec = registry.get("http.request")
    with pytest.raises(BadInput) as err:
        spec.validate_input(input_data)
    assert field in err.value.errors, err.value.errors
    assert needle.lower() in err.value.errors[field].lower(), err.value.errors[
        field
    ]  # a sentence: capitalised


async def test_the_api_refuses_a_non_web_address_with_422(make_settings, db_url) -> None:
    settings = make_settings(worker_enabled=False)
    user = await add_user(db_url, "web@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    async with app_client(settings) as client:
        resp = await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": {"url": "gopher://x.test/"}},
            headers=headers,
        )
        assert resp.status_code == 422, resp.text
        assert "Only http:// and https://" in resp.json()["errors"]["input_data.url"]
        ok = await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": {"url": "https://x.test/"}},
            headers=headers,
        )
        assert ok.status_code == 201
        assert ok.json()["input_data"]["method"] == "GET"


async def test_through_a_worker_5xx_retries_then_succeeds_and_4xx_fails_at_once(
    server, settings, engine, pg
) -> None:
    user = await add_user(settings.database_url, "worker@example.com")
    Handler.hits.pop("/flaky", None)
    flaky = await enqueue(engine, settings, user.id, "http.request", {"url": f"{server}/flaky"})
    missing = await enqueue(engine, settings, user.id, "http.request", {"url": f"{server}/missing"})
    down = await enqueue(engine, settings, user.id, "http.request", {"url": f"{server}/boom"})
    async with running_worker(settings):
        done = await wait_status(pg, flaky, {"completed"})
        failed = await wait_status(pg, missing, {"failed"})
        exhausted = await wait_status(pg, down, {"failed"})
    assert done["attempts"] == 2
    assert as_dict(done["result_data"])["body"] == "fine now"
    assert failed["attempts"] == 1
    assert "404 Not Found" in failed["error_message"]
    assert exhausted["attempts"] == exhausted["max_attempts"] == settings.default_max_attempts
    assert "503 Service Unavailable" in exhausted["error_message"]
    kinds = [
        r["kind"] for r in await pg.fetch("SELECT kind FROM job_events WHERE job_id = $1 ORDER BY id", down)
    ]
    assert kinds.count("retry_scheduled") == settings.default_max_attempts - 1


@pytest.mark.parametrize("guard", [True, False], ids=["guard-on", "negative-control-off"])
async def test_jobs_may_not_reach_local_or_private_addresses_unless_allowed(
    server, make_settings, guard
) -> None:
    """Server-side request forgery: with Jobdesk at a public address, a job may not make the worker call
    127.0.0.1 / localhost / 10.x — neither directly nor through a redirect — unless an admin allowed
    the host. With the guard switched off (HTTP_REQUEST_ALLOW_PRIVATE), the same requests go through."""
    settings = make_settings(
        jobdesk_base_url="https://jobs.example.com", http_request_allow_private=not guard
    )
    port = server.rsplit(":", 1)[1]
    for url in (f"{server}/ok", f"http://localhost:{port}/ok"):
        if guard:
            with pytest.raises(PermanentError, match="local or private address that jobs may not reach"):
                await call(settings, url=url)
        else:
            assert (await call(settings, url=url))[0]["status"] == 200
    allowed = make_settings(
        jobdesk_base_url="https://jobs.example.com", http_request_allowed_hosts="127.0.0.1"
    )
    assert (await call(allowed, url=f"{server}/ok"))[0]["status"] == 200
    if guard:
        with pytest.raises(PermanentError, match="localhost is 127.0.0.1"):  # the redirect is checked too
            await call(allowed, url=f"{server}/to-private")


class FakeResolver:
    """Maps names to addresses without asking DNS, and records every lookup. ``answers[name]`` is a list
    of answers given in turn (the last one repeats), so a name can change its address between lookups
    as a rebinding DNS server would."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[Any]:
        self.lookups.append(host)
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        turns = self.answers.get(host)
        if not turns:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        seen = self.lookups.count(host)
        return [ipaddress.ip_address(turns[min(seen, len(turns)) - 1])]


@pytest.fixture
def resolver(monkeypatch) -> FakeResolver:
    fake = FakeResolver({"intranet.test": ["10.1.2.3"], "mixed.test": ["10.1.2.3"]})
    monkeypatch.setattr(http_request, "resolver_for_jobs", fake)
    return fake


async def test_only_jobdesks_own_scheme_host_and_port_are_exempt(server, make_settings, db_url) -> None:
    """With Jobdesk itself on loopback, its own address is reachable, but no other loopback service:
    not PostgreSQL's port, not another local web service, not the same port under another scheme or
    another name. Nothing reaches the other service."""
    settings = make_settings(jobdesk_base_url=server)
    pg_port = httpx.URL(settings.database_url.replace("postgresql+asyncpg", "postgresql")).port or 5432
    port = int(server.rsplit(":", 1)[1])
    with serving() as (other, seen):
        for url in (
            f"http://127.0.0.1:{pg_port}/",
            f"{other}/ok",
            f"https://127.0.0.1:{port}/api/ok",
            f"http://localhost:{port}/api/ok",
            f"http://[::ffff:127.0.0.1]:{port}/api/ok",
        ):
            with pytest.raises(PermanentError, match="local or private address that jobs may not reach"):
                await call(settings, url=url)
        assert seen == []
    assert (await call(settings, url=f"{server}/api/ok"))[0]["status"] == 200


async def test_every_redirect_hop_is_checked(server, settings, resolver) -> None:
    with serving() as (other, seen):
        other_port = other.rsplit(":", 1)[1]
        with pytest.raises(PermanentError, match=f"port {other_port}"):
            await call(settings, url=f"{server}/redirect-to?{other}/ok")
        assert seen == []
    with pytest.raises(PermanentError, match=r"intranet\.test is 10\.1\.2\.3"):
        await call(settings, url=f"{server}/to-intranet")


async def test_the_connection_goes_to_the_address_that_was_checked(make_settings, monkeypatch) -> None:
    """The name is resolved once per hop, by the checker, and the connection goes to that address
    (127.0.0.2 here, while the system resolver says 127.0.0.1 for localhost); the request keeps the
    name in its Host header. A second lookup would have answered a private address (rebinding)."""
    with serving("127.0.0.2") as (url, seen):
        port = int(url.rsplit(":", 1)[1])
        fake = FakeResolver({"localhost": ["127.0.0.2", "10.9.9.9"]})
        monkeypatch.setattr(http_request, "resolver_for_jobs", fake)
        settings = make_settings(jobdesk_base_url=f"http://localhost:{port}")
        result, _ = await call(settings, url=f"http://localhost:{port}/api/host")
        assert result["body"] == f"localhost:{port}"
        assert result["url"] == f"http://localhost:{port}/api/host"
        assert seen == ["/api/host"]
        assert fake.lookups == ["localhost"]


async def test_a_name_with_any_private_address_is_refused_before_connecting(make_settings, resolver) -> None:
    settings = make_settings(jobdesk_base_url="https://jobs.example.com")
    for url in ("http://intranet.test/", "https://mixed.test:8443/x"):
        with pytest.raises(PermanentError, match="10.1.2.3, a local or private address"):
            await call(settings, url=url)
    with pytest.raises(TemporaryHttpError, match="cannot be resolved"):
        await call(settings, url="http://unknown.test/")
    assert resolver.lookups == ["intranet.test", "mixed.test", "unknown.test"]


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fc00::1",
        "fe80::1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "2002:a00:1::1",
    ],
)
def test_non_public_addresses_in_every_spelling(address) -> None:
    assert not addresses.is_public(ipaddress.ip_address(address))


def test_public_addresses_are_public() -> None:
    assert addresses.is_public(ipaddress.ip_address("93.184.216.34"))
    assert addresses.is_public(ipaddress.ip_address("2606:4700::1111"))


@pytest.mark.parametrize(
    ("headers", "needle"),
    [
        ("Host: admin.internal", "the Host header cannot be set"),
        ("host:admin.internal", "the host header cannot be set"),
        ("X-A: 1\nTransfer-Encoding: chunked", "line 2: the Transfer-Encoding header"),
        ("Content-Length: 5", "Content-Length header cannot be set"),
        ("X-A: a\x01b", "only printable ASCII"),
        ("X-A: a\x0bb", "line 2 is not in the form"),
        ("X-A: caf\u00e9", "only printable ASCII"),
    ],
)
def test_reserved_headers_and_unsendable_values_are_refused(headers, needle) -> None:
    with pytest.raises(BadInput) as err:
        registry.get("http.request").validate_input({"url": "https://x.test", "headers": headers})
    assert needle.lower() in err.value.errors["input_data.headers"].lower(), err.value.errors


async def test_through_the_api_and_a_worker_only_the_own_address_is_reached(
    server, make_settings, db_url, pg, resolver
) -> None:
    """Submitted through the JSON API and run by a worker: a Host header and another loopback port are
    refused at submission; a job for a private name, or redirected to one, fails at once and sends
    nothing there; a job for Jobdesk's own address completes."""
    settings = make_settings(jobdesk_base_url=server, worker_enabled=False)
    user = await add_user(db_url, "ssrf@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    with serving() as (other, seen):
        async with app_client(settings) as client:

            async def submit(input_data: dict[str, Any]) -> httpx.Response:
                return await client.post(
                    "/api/jobs", json={"type": "http.request", "input_data": input_data}, headers=headers
                )

            vhost = await submit({"url": f"{server}/ok", "headers": "Host: admin.internal"})
            assert vhost.status_code == 422
            assert "Host header" in vhost.json()["errors"]["input_data.headers"]
            loopback = await submit({"url": f"{other}/ok"})
            assert loopback.status_code == 422, loopback.text
            assert "may not reach" in loopback.json()["errors"]["input_data.url"]
            ids = {}
            for key, url in {
                "intranet": "http://intranet.test/",
                "hop": f"{server}/api/to-intranet",
                "own": f"{server}/api/ok",
            }.items():
                resp = await submit({"url": url})
                assert resp.status_code == 201, resp.text
                ids[key] = uuid.UUID(resp.json()["id"])
            async with running_worker(settings):
                rows = {k: await wait_status(pg, v, {"completed", "failed"}) for k, v in ids.items()}
        assert seen == []
    assert rows["own"]["status"] == "completed"
    for key in ("intranet", "hop"):
        assert rows[key]["status"] == "failed", rows[key]
        assert rows[key]["attempts"] == 1, rows[key]
        assert "may not reach" in rows[key]["error_message"]
    assert "10.1.2.3" in rows["hop"]["error_message"]


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``name`` (also its own authority) and its key, made with the openssl tool."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@contextmanager
def tls_server(cert: Path, key: Path) -> Iterator[tuple[int, list[str | None]]]:
    """An HTTPS test server on 127.0.0.1 with ``cert``; yields its port and the names clients sent (SNI)."""
    names: list[str | None] = []
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    tls.sni_callback = lambda sock, name, ctx: names.append(name)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], names
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl tool")
async def test_https_to_the_checked_address_verifies_the_certificate_for_the_name(
    make_settings, monkeypatch, tmp_path
) -> None:
    """Connected to 127.0.0.1, the TLS handshake still names the host (SNI) and the certificate is checked
    against the name: a certificate for hook.test is accepted, one for another name is not."""
    monkeypatch.setattr(http_request, "resolver_for_jobs", FakeResolver({"hook.test": ["127.0.0.1"]}))
    for cert_name, ok in (("hook.test", True), ("other.test", False)):
        cert, key = _self_signed(tmp_path, cert_name)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        with tls_server(cert, key) as (port, names):
            settings = make_settings(http_request_allowed_hosts=f"hook.test:{port}")
            url = f"https://hook.test:{port}/host"
            if ok:
                assert (await call(settings, url=url))[0]["body"] == f"hook.test:{port}"
            else:
                with pytest.raises(TemporaryHttpError, match="CERTIFICATE_VERIFY_FAILED"):
                    await call(settings, url=url)
        assert names
        assert set(names) == {"hook.test"}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl tool")
async def test_a_host_written_with_a_final_dot_is_sent_without_it(
    make_settings, monkeypatch, tmp_path
) -> None:
    """``hook.test.`` is the host hook.test: the TLS server name (SNI) and the Host header carried the
    final dot, which a TLS server name may not have, so the certificate for hook.test was checked
    against another name and servers routing by name did not know it. Both now name hook.test."""
    monkeypatch.setattr(http_request, "resolver_for_jobs", FakeResolver({"hook.test": ["127.0.0.1"]}))
    cert, key = _self_signed(tmp_path, "hook.test")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with tls_server(cert, key) as (port, names):
        settings = make_settings(http_request_allowed_hosts=f"hook.test:{port}")
        result, _ = await call(settings, url=f"https://hook.test.:{port}/host")
        assert result["body"] == f"hook.test:{port}"
    assert names and set(names) == {"hook.test"}, names
