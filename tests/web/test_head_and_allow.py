"""HEAD on every GET route answers as the GET does, without the body; a 405's ``Allow`` and an
``OPTIONS`` answer's list exactly the methods the path takes. The walks enumerate the app's own routes,
so a route added later is covered without editing this file."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
from litestar import Litestar

from tests.support.webkit import Site, add_token, add_user, running_server

# headers that differ between any two answers, whatever the method
VOLATILE = {"x-request-id", "date", "set-cookie"}
ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _paths(app: Litestar) -> dict[str, set[str]]:
    """Every route's path → the methods its handlers take."""
    found: dict[str, set[str]] = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            found.setdefault(route.path, set()).update(handler.http_methods)
    return found


def _fill(path: str, job_id: str) -> str:
    path = re.sub(r"\{job_id:str\}", job_id, path)
    path = re.sub(r"\{file_path:path\}", "app.css", path)
    path = re.sub(r"\{\w+:int\}", "999999", path)
    return re.sub(r"\{\w+:\w+\}", "01a20000-0000-7000-8000-000000000000", path)


def _headers(r: Any) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k not in VOLATILE}


async def test_head_on_every_get_route_answers_as_get_without_a_body(site: Site) -> None:
    checked = 0
    for path, methods in sorted(_paths(site.app).items()):
        if "GET" not in methods:
            continue
        url = _fill(path, site.job_id)
        headers = site.bearer if url.startswith("/api/") else {}
        got = await site.client.get(url, headers=headers, follow_redirects=False)
        head = await site.client.head(url, headers=headers, follow_redirects=False)
        again = await site.client.get(url, headers=headers, follow_redirects=False)
        assert head.status_code == got.status_code, (url, head.status_code, got.status_code, head.text[:200])
        assert head.content == b"", url
        expected = _headers(got)
        if got.content != again.content:  # a page that changes by itself (/metrics counts requests)
            expected["content-length"] = head.headers.get("content-length", "")
        assert _headers(head) == expected, url
        checked += 1
    assert checked > 40


async def test_a_405_and_options_list_exactly_the_methods_of_the_path(site: Site) -> None:
    checked = 0
    for path, methods in sorted(_paths(site.app).items()):
        url = _fill(path, site.job_id)
        headers = site.bearer if url.startswith("/api/") else {}
        takes = set(methods) | ({"HEAD"} if "GET" in methods else set())
        expected = ", ".join(sorted(takes))
        refused = next(m for m in ALL_METHODS if m not in takes)
        r = await site.client.request(refused, url, headers=headers, follow_redirects=False)
        assert r.status_code == 405, (refused, url, r.status_code)
        assert r.headers["allow"] == expected, (refused, url)
        r = await site.client.options(url, headers=headers, follow_redirects=False)
        if r.status_code == 204:
            assert r.headers["allow"] == expected, url
        checked += 1
    assert checked > 80


async def test_the_jobs_api_takes_head_and_names_get_in_its_allow(site: Site) -> None:
    r = await site.client.head("/api/jobs", headers=site.bearer)
    assert r.status_code == 200
    assert r.content == b""
    assert int(r.headers["content-length"]) > 0
    r = await site.client.delete("/api/jobs", headers=site.bearer)
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD, OPTIONS, POST"
    assert (await site.client.options("/api/jobs", headers=site.bearer)).headers["allow"] == (
        "GET, HEAD, OPTIONS, POST"
    )
    # a path without GET still refuses HEAD
    r = await site.client.head("/api/jobs/bulk", headers=site.bearer)
    assert r.status_code == 405
    assert r.headers["allow"] == "OPTIONS, POST"


def test_head_through_the_real_server_keeps_the_connection_usable(db_url: str, tmp_path: Path) -> None:
    """The server reads the method from the request's scope to decide whether a body follows: a HEAD
    served as a GET must still go out as a HEAD (the GET's Content-Length, no body), or the server
    refuses an answer shorter than its Content-Length and the connection breaks."""
    user = asyncio.run(add_user(db_url, "ann@example.com"))
    bearer = {"Authorization": f"Bearer {asyncio.run(add_token(db_url, user.id))}"}
    with running_server(db_url, tmp_path) as base, httpx.Client(base_url=base, timeout=10) as web:
        for url, headers in (("/login", {}), ("/static/app.css", {}), ("/api/jobs", bearer)):
            got = web.get(url, headers=headers)
            head = web.head(url, headers=headers)
            assert head.status_code == got.status_code == 200, url
            assert head.content == b""
            assert head.headers["content-length"] == str(len(got.content)), url
            assert head.headers["content-type"] == got.headers["content-type"], url
        assert web.get("/healthz").status_code == 200  # the same connection, still in step
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log
    assert '"method":"HEAD"' in log
