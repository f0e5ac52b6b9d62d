"""Every list reads its cursor (``?after=``, the audit trail's ``?before=``) with one reader
(:func:`app.jobs.cursors.read_cursor`): a cursor the list could not have made is a 422 naming the
parameter in one wording — JSON in the API, the error page (or the message beside the filter) on the
pages — where My jobs and the audit trail used to show their first page as if it were the one asked for.
The walk finds every route that takes a cursor, so a list added later is covered as it is added."""

from __future__ import annotations

import html
import re

from litestar import Litestar

from app.jobs.cursors import Cursor, cursor_words
from tests.support.webkit import Site

CURSOR_NAMES = ("after", "before")
EMAIL_LISTS = {"/admin/users"}  # by email: any short text sorts among them


def cursor_routes(app: Litestar) -> list[tuple[str, str]]:
    """``(path, cursor parameter)`` of every GET route that takes a cursor."""
    found = []
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if "GET" not in handler.http_methods:
                continue
            for name, fd in handler.parsed_fn_signature.parameters.items():
                kwarg = fd.kwarg_definition
                alias = getattr(kwarg, "query", None) or getattr(kwarg, "name", None) or name
                if alias in CURSOR_NAMES:
                    found.append((route.path, alias))
    return sorted(set(found))


# Moments Python reads but that overflow in UTC (past year 9999, before year 1): a waiting list's cursor
# with one was the generic "cannot be stored" 422 that named nothing.
OUT_OF_RANGE = ("9999-12-31T23:59:59-14:00|{id}", "0001-01-01T00:00:00+14:00|{id}")


def _fill(path: str, job_id: str, pipeline_id: str) -> str:
    path = re.sub(r"\{pipeline_id:\w+\}", pipeline_id, path)
    return re.sub(r"\{\w+:\w+\}", job_id, path)


async def test_every_list_refuses_a_cursor_it_did_not_give_in_one_wording(site: Site) -> None:
    routes = cursor_routes(site.app)
    paths = {p for p, _ in routes}
    for expected in ("/api/jobs", "/api/pipelines", "/api/batches", "/api/approvals", "/jobs", "/admin/jobs"):
        assert expected in paths, expected
    assert ("/admin/audit", "before") in routes and "/approvals" in paths and "/admin/approvals" in paths
    assert ("/jobs/{job_id:str}/history", "before") in routes  # a history's Older events
    r = await site.client.post(
        "/api/pipelines",
        json={"name": "p", "steps": [{"key": "a", "type": "noop", "input_data": {}}]},
        headers=site.bearer,
    )
    assert r.status_code == 201, r.text
    pipeline_id = r.json()["id"]
    for path, name in routes:
        url = _fill(path, site.job_id, pipeline_id)
        api = url.startswith("/api/")
        bad = ["x" * 300] + (
            [] if path in EMAIL_LISTS else ["zzz", "2026-01-01T00:00:00|zzz", "-1", *OUT_OF_RANGE]
        )
        for value in (b.format(id=site.job_id) for b in bad):
            r = await site.client.get(
                url, params={name: value}, headers=site.bearer if api else {}, follow_redirects=False
            )
            assert r.status_code == 422, (url, name, value, r.status_code, r.text[:300])
            text = r.json()["errors"][name] if api else html.unescape(r.text)
            assert "is not a position this list gave" in text, (url, name, value, text[:3000])
            assert name in (r.json()["detail"] if api else text), (url, name)
        # nothing, or an empty value, is the first page
        for params in ({}, {name: ""}):
            r = await site.client.get(url, params=params, headers=site.bearer if api else {})
            assert r.status_code == 200, (url, params, r.status_code, r.text[:300])


async def test_a_cursor_the_list_gave_pages_on(site: Site) -> None:
    r = await site.client.get("/api/jobs", params={"limit": 2}, headers=site.bearer)
    first = r.json()
    assert len(first["items"]) == 2 and first["next"]
    r = await site.client.get("/api/jobs", params={"limit": 2, "after": first["next"]}, headers=site.bearer)
    assert r.status_code == 200
    assert [i["id"] for i in r.json()["items"]] == [site.job_id]
    r = await site.client.get("/jobs", params={"after": first["next"]})
    assert r.status_code == 200 and site.job_id in r.text


def test_the_words_say_where_a_good_cursor_is() -> None:
    assert "'next'" in cursor_words(Cursor.ID) and "Older link" in cursor_words(Cursor.ID)
    assert "seq" in cursor_words(Cursor.SEQ)
