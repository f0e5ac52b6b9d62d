"""Every route that reads a body answers at once whatever kind of body it is sent — a form to a route
that reads JSON, JSON to a form, an empty multipart body — never a hang or a 500. A multipart form sent
to a JSON route was read as a form by the input guard, which used up the body; the JSON reader then
waited for bytes that never came, until the client gave up (and the server logged a 500). Driven on a
real server, each request with a timeout, so that a hang fails the test instead of holding up the run."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from pathlib import Path

import httpx

from app.server import create_app
from app.settings import load_settings
from tests.conftest import TEST_SETTINGS
from tests.support.webkit import PASSWORD, add_token, add_user, csrf_from, running_server

ID = "01a20000-0000-7000-8000-000000000000"
BODIES: dict[str, dict[str, object]] = {
    "multipart": {"files": {"file": ("a.txt", b"hello")}, "data": {"type": "email.send"}},
    "empty multipart": {
        "content": b"--zz--\r\n",
        "headers": {"Content-Type": "multipart/form-data; boundary=zz"},
    },
    "urlencoded": {
        "content": b"type=email.send",
        "headers": {"Content-Type": "application/x-www-form-urlencoded"},
    },
    "json": {"json": {"type": "email.send"}},
}


def body_routes(db_url: str, tmp_path: Path) -> list[tuple[str, str, bool]]:
    """``(method, path, reads JSON)`` of every route that takes a body, path parameters filled in."""
    app = create_app(load_settings(**TEST_SETTINGS, database_url=db_url, jobdesk_data_dir=tmp_path / "d"))
    found = []
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            for method in sorted(handler.http_methods & {"POST", "PUT", "PATCH"}):
                field = handler.parsed_data_field
                media = getattr(getattr(field, "kwarg_definition", None), "media_type", "application/json")
                path = re.sub(r"\{[a-z_]+:int\}", "999999", route.path)
                path = re.sub(r"\{[a-z_]+:(str|uuid)\}", ID, path)
                path = re.sub(r"\{[a-z_]+:path\}", "x", path)
                found.append((method, path, field is not None and media == "application/json"))
    return found


def test_no_body_of_any_kind_leaves_a_route_hanging(db_url: str, tmp_path: Path) -> None:
    root = asyncio.run(add_user(db_url, "root@example.com", admin=True))
    bearer = {"Authorization": f"Bearer {asyncio.run(add_token(db_url, root.id))}"}
    routes = body_routes(db_url, tmp_path)
    assert ("POST", "/api/jobs", True) in routes
    assert ("PUT", "/api/me", True) in routes
    with running_server(db_url, tmp_path / "server") as base, httpx.Client(base_url=base, timeout=5) as web:
        page = web.get("/login")
        signed_in = web.post(
            "/login",
            data={"email": "root@example.com", "password": PASSWORD, "_csrf_token": csrf_from(page.text)},
        )
        assert signed_in.status_code in (200, 303), signed_in.text
        token = web.cookies.get("csrftoken") or csrf_from(web.get("/jobs").text)
        answers = {}
        for method, path, reads_json in routes:
            headers = {**bearer} if path.startswith("/api/") else {"x-csrftoken": token}
            for kind, body in BODIES.items():
                kw = dict(body)
                headers_now = {**headers, **kw.pop("headers", {})}  # type: ignore[dict-item]
                try:
                    r = web.request(method, path, headers=headers_now, **kw)  # type: ignore[arg-type]
                except httpx.TimeoutException:
                    answers[(method, path, kind)] = "no answer within 5 s"
                    continue
                if r.status_code >= 500:
                    answers[(method, path, kind)] = f"{r.status_code} {r.text[:200]}"
                elif reads_json and kind != "json":
                    if r.status_code != 415 or "send JSON (Content-Type: application/json)" not in r.text:
                        answers[(method, path, kind)] = f"{r.status_code} {r.text[:200]}"
        assert answers == {}


def test_a_body_shorter_than_its_content_length_is_a_client_error_not_ours(
    db_url: str, tmp_path: Path
) -> None:
    """A body cut short of its ``Content-Length`` (or a connection closed mid-body) is the client's
    fault: logged as a 400 request, not as an unhandled error with a traceback."""
    user = asyncio.run(add_user(db_url, "ann@example.com"))
    token = asyncio.run(add_token(db_url, user.id))
    with running_server(db_url, tmp_path) as base:
        port = int(base.rsplit(":", 1)[1])
        for length, body in (("100", b'{"a":1}'), ("2", b'{"a":1}')):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(
                    f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode()
                    + body
                )
                s.shutdown(socket.SHUT_WR)
                s.recv(1000)
        time.sleep(0.5)
    log = (tmp_path / "serve.log").read_text()
    assert '"status":400' in log
    assert "unhandled error" not in log
    assert "Traceback" not in log
    assert '"status":500' not in log
