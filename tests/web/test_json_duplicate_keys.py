"""JSON a person gave that names a key twice in one object is refused naming the key, on every path that
reads such JSON — the API's request bodies (a job, a pipeline), a job form's JSON field, a spreadsheet's
cell — instead of being read as the key's last value without a word."""

from __future__ import annotations

import html
import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, test.step)
from app import spreadsheets, typed_json
from app.errors import BadInput
from app.processors import registry
from app.settings import Settings
from tests.support.webkit import add_token, add_user, csrf, sign_in_as

TWICE = 'The key "a" is given twice.'


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


def test_the_shared_reader_names_the_key_and_its_path() -> None:
    with pytest.raises(typed_json.DuplicateKey) as caught:
        typed_json.parse('{"x": [1, {"a": 1, "b": 2, "a": 3}]}')
    assert str(caught.value) == TWICE and caught.value.path == "x[1].a"
    assert typed_json.parse('{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}') == {
        "a": {"a": 1},
        "b": [{"a": 2}, {"a": 3}],
    }
    # escaped or not, it is the same key
    assert typed_json.duplicate_key(b'{"a": 1, "\\u0061": 2}') is not None


async def test_an_api_body_giving_a_key_twice_is_a_422_naming_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com")
    headers = {
        "Authorization": f"Bearer {await add_token(db_url, ann.id)}",
        "Content-Type": "application/json",
    }
    nested = b'{"type": "test.form", "input_data": {"name": "Ann", "extra": {"a": 1, "a": 2}}}'
    r = await client.post("/api/jobs", content=nested, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == {"input_data.extra.a": TWICE}, r.text
    top = b'{"type": "test.form", "input_data": {"name": "Ann"}, "type": "noop"}'
    r = await client.post("/api/jobs", content=top, headers=headers)
    assert r.status_code == 422 and r.json()["errors"] == {"type": 'The key "type" is given twice.'}, r.text
    step = b'{"name": "p", "steps": [{"key": "s", "type": "test.step", "key": "t"}]}'
    r = await client.post("/api/pipelines", content=step, headers=headers)
    assert r.status_code == 422 and r.json()["errors"] == {"steps[0].key": 'The key "key" is given twice.'}, (
        r.text
    )
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0

    # the same body with each key once goes in
    once = b'{"type": "test.form", "input_data": {"name": "Ann", "extra": {"a": 1, "b": 2}}}'
    assert (await client.post("/api/jobs", content=once, headers=headers)).status_code == 201


async def test_a_form_s_json_field_giving_a_key_twice_is_an_error_beside_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    data = {"_csrf_token": await csrf(client), "name": "Ann", "extra": '{"a": 1, "a": 2}'}
    r = await client.post("/jobs/new/test.form", data=data, follow_redirects=False)
    assert r.status_code == 422, r.text
    shown = re.search(r'<small id="e-extra" class="field-error">([^<]*)</small>', r.text)
    assert shown is not None and html.unescape(shown.group(1)) == TWICE, r.text[-3000:]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


def test_a_spreadsheet_cell_giving_a_key_twice_is_named_by_row_and_field() -> None:
    fields = spreadsheets.fields_of(registry.get("test.form").input_model)  # type: ignore[union-attr]
    sheet = spreadsheets.read(b'name,extra\nAnn,"{""b"": 1}"\nBo,"{""a"": 1, ""a"": 2}"\n', "rows.csv")
    mapping = spreadsheets.match_columns(fields, sheet.columns)
    with pytest.raises(BadInput) as caught:
        spreadsheets.row_inputs(fields, sheet.rows, mapping)
    assert caught.value.errors == {"rows[1].extra": TWICE}


async def test_a_batch_form_shows_the_cell_giving_a_key_twice_and_starts_nothing(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/test.form")
    token = re.search(r'name="_csrf_token" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    sheet = b'name,extra\nAnn,"{""a"": 1, ""a"": 2}"\n'
    mapped = await client.post(
        "/batches/new/test.form",
        data={"_csrf_token": token, "_form_key": key},
        files={"sheet": ("rows.csv", sheet, "text/csv")},
    )
    assert mapped.status_code == 200, mapped.text
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text).group(1)  # type: ignore[union-attr]
    start = {"_csrf_token": token, "_form_key": key, "sheet_id": sheet_id, "map.name": "0", "map.extra": "1"}
    refused = await client.post("/batches/new/test.form", data=start)
    assert refused.status_code == 422, refused.text
    assert TWICE in html.unescape(refused.text) and "Nothing was started" in refused.text
    assert await pg.fetchval("SELECT count(*) FROM batches") == 0
