"""A query parameter the API cannot read is a 422 that names it and says what it takes, in words made
from its declaration — not the decoder's "Expected `int`, got `str`" or "Invalid UUID". Every query
parameter of every API route is driven, so a new one is covered as it is added."""

from __future__ import annotations

import re
from typing import Any

import pytest

from app.jobs.cursors import Cursor, cursor_words
from app.web.input_guard import _QUERY_WHOLE, _query_names
from app.web.param_words import describe
from tests.support.webkit import add_token, add_user, app_client, sign_in_as

ID = "01a20000-0000-7000-8000-000000000000"
JUNK = ("zz z", "1.5", "-1", "0", "99999999999", "x" * 300)


async def test_every_query_parameter_of_every_api_route_refuses_in_words(
    make_settings: Any, db_url: str
) -> None:
    settings = make_settings(worker_enabled=False)
    root = await add_user(db_url, "root@example.com", admin=True)
    auth = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    refused: dict[str, str] = {}
    async with app_client(settings) as client:
        for route in client.app.routes:
            if not route.path.startswith("/api/"):
                continue
            path = re.sub(r"\{[a-z_]+:int\}", "999999", route.path)
            path = re.sub(r"\{[a-z_]+:str\}", ID, path)
            for handler in getattr(route, "route_handlers", []):
                if "GET" not in handler.http_methods:
                    continue
                takes = _query_names(handler, route.path_parameters) or frozenset()
                for name in sorted(takes):
                    for junk in JUNK:
                        r = await client.get(path, params={name: junk}, headers=auth)
                        assert r.status_code != 500, (path, name, junk, r.text)
                        if r.status_code != 422 or name not in r.json().get("errors", {}):
                            continue
                        said = r.json()["errors"][name]
                        refused[f"{path}?{name}"] = said
                        assert not re.search(r"`|Expected|Invalid", said), (path, name, junk, said)
                        assert r.json()["detail"].startswith(f"{name}: "), r.text
    assert refused["/api/jobs?limit"] == "must be a whole number from 1 to 200"
    assert refused["/api/jobs?after"] == cursor_words(Cursor.ID)
    assert refused["/api/pipelines?limit"] == "must be a whole number from 1 to 200"
    assert refused[f"/api/jobs/{ID}?wait"] == "must be a number from 0 to 60"
    assert refused["/api/jobs?tag"] == "a tag is 1 to 50 characters"  # the words a submission gets


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("limit=1.5", "limit: must be a whole number from 1 to 200"),
        ("limit=0", "limit: must be a whole number from 1 to 200"),
        ("limit=", "limit: is empty; give a whole number from 1 to 200, or leave limit out"),
        ("after=zzz", f"after: {cursor_words(Cursor.ID)}"),
        ("user_id=x", "user_id: must be a whole number from 1 to 2147483647"),
    ],
)
async def test_the_reported_parameters(make_settings: Any, db_url: str, query: str, words: str) -> None:
    settings = make_settings(worker_enabled=False)
    root = await add_user(db_url, "root@example.com", admin=True)
    auth = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    async with app_client(settings) as client:
        r = await client.get(f"/api/jobs?{query}", headers=auth)
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == words


def test_the_words_of_each_kind() -> None:
    from datetime import datetime
    from typing import Literal
    from uuid import UUID

    from litestar.params import QueryParameter

    assert describe(bool) == "must be true or false"
    assert describe(int | None, QueryParameter(ge=1)) == "must be a whole number at least 1"
    assert describe(float, QueryParameter(gt=0, le=5)) == "must be a number above 0 and at most 5"
    assert describe(UUID | None) == f"must be an id, e.g. {ID}"
    assert describe(datetime) == "must be a date and time with a UTC offset, e.g. 2026-12-01T09:00:00+01:00"
    assert describe(Literal["a", "b"]) == "must be one of a, b"
    assert describe(str) is None


async def test_a_whole_number_parameter_refuses_a_fraction_or_an_exponent_on_every_route(
    make_settings: Any, db_url: str
) -> None:
    """``?limit=2.0`` was read as 2 and ``?limit=1e1`` as 10 (the decoder takes a float's text for an
    int when it is whole). Every query parameter of every route (pages and API) that takes a whole
    number refuses them in the words of any other value that does not fit, and still takes ``2``."""
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        root = await sign_in_as(client, db_url, "root@example.com", admin=True)
        auth = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
        checked = []
        for route in client.app.routes:
            path = re.sub(r"\{[a-z_]+:int\}", "999999", route.path)
            path = re.sub(r"\{[a-z_]+:str\}", ID, path)
            for handler in getattr(route, "route_handlers", []):
                if "GET" not in handler.http_methods:
                    continue
                _query_names(handler, route.path_parameters)
                for name in sorted(handler.opt[_QUERY_WHOLE]):
                    checked.append(f"{route.path}?{name}")
                    words = describe(handler.parsed_fn_signature.parameters[name].annotation, None)
                    for junk in ("2.0", "1e1", "2.", "-0.0"):
                        r = await client.get(path, params={name: junk}, headers=auth)
                        assert r.status_code == 422, (path, name, junk, r.text)
                        expected = words or "must be a whole number"
                        if not path.startswith("/api/"):  # a page answers with a page saying it
                            assert f"{name}: {expected}" in r.text, (path, name, r.text)
                            continue
                        said = r.json()["errors"][name]
                        assert said.startswith(expected), (path, name, said)
                        assert not re.search(r"`|Expected|Invalid", said), (path, name, said)
        assert {"/api/jobs?limit", "/api/jobs?user_id", "/jobs/{job_id:str}/status?bell"} <= set(checked)
        ok = await client.get("/api/jobs?limit=2", headers=auth)
        assert ok.status_code == 200, ok.text
