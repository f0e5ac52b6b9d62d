"""A file is stored under a name a person can use, whatever name it was sent with and on every path that
names one (the API's upload, a job form's file field): a name that is only a directory (``..``, ``.``, a
trailing separator), only dots and spaces, with control characters, or longer than a stored name is
cleaned (``file`` when nothing usable is left; a long one keeps its extension)."""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form)
from app.files import MAX_NAME, clean_name
from app.settings import Settings
from tests.support.webkit import add_token, add_user, csrf, sign_in_as

SENT_AND_STORED = [
    ("..", "file"),
    (".", "file"),
    (" . . ", "file"),
    ("a/..", "file"),
    ("..\\", "file"),
    ("C:\\Users\\ann\\..", "file"),
    ("reports/", "file"),
    ("x\x01y\x1b.txt", "xy.txt"),
    ("\u202etxt.exe", "txt.exe"),
    ("report. ", "report"),
    (".profile", ".profile"),
    ("../../etc/passwd", "passwd"),
    ("CON.csv", "_CON.csv"),
    ("n" * 300 + ".csv", "n" * (MAX_NAME - 4) + ".csv"),
]


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


@pytest.mark.parametrize(("sent", "stored"), SENT_AND_STORED)
def test_the_one_rule(sent: str, stored: str) -> None:
    assert clean_name(sent) == stored


async def test_an_api_upload_is_stored_under_a_usable_name(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    # the test client writes a control character in a part's file name as its %-escape: the unit test has them
    for sent, stored in [(n, s) for n, s in SENT_AND_STORED if n.isprintable()]:
        r = await client.post(
            "/api/files", files={"file": (sent, b"a,b\n1,2\n", "text/csv")}, headers=headers
        )
        assert r.status_code == 201, (sent, r.text)
        assert r.json()["name"] == stored, sent
        assert await pg.fetchval("SELECT name FROM files WHERE id = $1::uuid", r.json()["id"]) == stored


async def test_a_job_form_upload_named_dot_dot_is_stored_as_file(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    form = {"_csrf_token": await csrf(client), "name": "Ann"}
    files = [("document", ("..", b"%PDF-1.4 hello", "application/pdf"))]
    r = await client.post("/jobs/new/test.form", data=form, files=files, follow_redirects=False)
    assert r.status_code == 303, r.text
    document = json.loads(await pg.fetchval("SELECT input_data FROM jobs"))["document"]
    assert await pg.fetchval("SELECT name FROM files WHERE id = $1::uuid", document) == "file"


async def test_a_spreadsheet_named_dot_dot_names_its_batch_and_file_as_stored(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/http.request")
    token = re.search(r'name="_csrf_token" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    mapped = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": key},
        files={"sheet": ("..", b"url\nhttp://jobs.test:9/a\n", "text/csv")},
    )
    assert mapped.status_code == 200, mapped.text
    assert await pg.fetchval("SELECT name FROM files") == "file"
    assert "— file" in mapped.text and "— .." not in mapped.text
