"""A JSON body with a number the decoder cannot take (a whole number of more than 4,300 digits, or ``1e400``) is a 422
naming the number's path on every JSON route, not a 400 naming ``$[...]``; and an unknown job type is
answered with the types the person may submit, not the admins' ones too."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, a public type)
from tests.support.webkit import add_token, add_user

HUGE = "1" + "0" * 5000


async def token(db_url: str, email: str, *, admin: bool = False) -> dict[str, str]:
    user = await add_user(db_url, email, admin=admin)
    return {"Authorization": f"Bearer {await add_token(db_url, user.id)}", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("path", "body", "field", "shown"),
    [
        (
            "/api/jobs",
            '{"type": "test.form", "input_data": {"name": "A", "n": HUGE}}',
            "input_data.n",
            "100000000000…000000 (5,001 characters)",
        ),
        ("/api/jobs", '{"type": "test.form", "input_data": {"x": [1, 1e400]}}', "input_data.x[1]", "1e400"),
        ("/api/jobs", '{"type": "test.form", "priority": -HUGE}', "priority", "at most 4,300 digits"),
        (
            "/api/pipelines",
            '{"name": "p", "steps": [{"key": "a", "type": "test.form", "input_data": {"v": {"w": 1e400}}}]}',
            "steps[0].input_data.v.w",
            "1e400",
        ),
        ("/api/batches", '{"type": "test.form", "rows": [{}, {"copies": HUGE}]}', "rows[1].copies", "…"),
    ],
)
async def test_a_number_out_of_the_decoders_range_is_a_422_naming_its_path(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, path: str, body: str, field: str, shown: str
) -> None:
    h = await token(db_url, "bob@example.com")
    r = await client.post(path, content=body.replace("HUGE", HUGE).encode(), headers=h)
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert list(errors) == [field], errors
    assert "is out of range" in errors[field] and shown in errors[field], errors[field]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_numbers_in_range_and_malformed_bodies_keep_their_answers(
    client: AsyncTestClient, db_url: str
) -> None:
    h = await token(db_url, "bob@example.com")
    body = {"type": "test.form", "input_data": {"name": "A", "copies": 10**4000}}
    r = await client.post("/api/jobs", content=json.dumps(body).encode(), headers=h)
    assert r.status_code == 422 and "input_data.copies" in r.json()["errors"]  # the schema's own limit
    assert (await client.post("/api/jobs", content=b'{"type": 1e400', headers=h)).status_code == 400


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/jobs", {"type": "nope"}, "type"),
        ("/api/batches", {"type": "nope", "rows": [{}]}, "type"),
        ("/api/pipelines", {"name": "p", "steps": [{"key": "a", "type": "nope"}]}, "steps[0].type"),
    ],
)
async def test_an_unknown_type_is_answered_with_the_types_the_person_may_submit(
    client: AsyncTestClient, db_url: str, path: str, body: dict[str, Any], field: str
) -> None:
    bob = await token(db_url, "bob@example.com")
    root = await token(db_url, "root@example.com", admin=True)
    said = (await client.post(path, json=body, headers=bob)).json()["errors"][field]
    assert "unknown job type 'nope'; known types: " in said and "test.form" in said, said
    assert "'noop'" not in said and " noop" not in said and "test.echo" not in said, said
    said = (await client.post(path, json=body, headers=root)).json()["errors"][field]
    assert "noop" in said and "test.form" in said, said
