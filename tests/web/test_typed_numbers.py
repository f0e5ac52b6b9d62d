"""A number is read as what a person means, and nothing else is taken as one.

A form's number field takes ASCII digits with an optional sign and decimal point (spaces between digits
and a decimal comma, as before): ``int()``, ``float()`` and ``Decimal()`` also read ``1_0`` and a
full-width ``１０`` as 10, which a form took without a word. A spreadsheet's cell, text by nature, is
read by the same rule (and an exponent, as spreadsheet programs write large numbers in a CSV). The JSON
API takes a number as a JSON number: text such as ``"85"`` for a number of ``input_data`` is a 422 naming
the field on every path (jobs, batches, pipelines, schedules), as a flag is."""

from __future__ import annotations

import re
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (test.form, test.steps)
from app import spreadsheets
from app.web.form_values import convert
from app.web.forms import form_fields
from tests.support.forms import EveryFieldInput
from tests.support.webkit import add_token, add_user, csrf, sign_in_as

LOOSE = ["1_0", "\uff11\uff10", "1e1", "nan", "inf", "0x10", "\u0661\u0660"]
"""Text ``int``, ``float`` or ``Decimal`` read as a number that no one typing it into a form means."""
WHOLE = "Enter a whole number, like 42"
NUMBER = "Enter a number, like 2.5"
UTC = ZoneInfo("UTC")


def form_body(csrf_token: str, **fields: Any) -> dict[str, Any]:
    return {"_csrf_token": csrf_token, **fields}


def _field(name: str) -> Any:
    return next(f for f in form_fields(EveryFieldInput) if f.name == name)


@pytest.mark.parametrize("text", LOOSE)
def test_a_forms_number_fields_refuse_loose_text(text: str) -> None:
    for name, said in (("copies", WHOLE), ("scale", NUMBER), ("price", NUMBER)):
        value, problem = convert(_field(name), text, UTC)
        assert value is None and problem is not None and problem.startswith(said), (name, text, value)


def test_a_forms_number_fields_take_what_a_person_types() -> None:
    assert convert(_field("copies"), " -1 000 ", UTC) == (-1000, None)
    assert convert(_field("copies"), "+7", UTC) == (7, None)
    assert convert(_field("scale"), "2,5", UTC) == (2.5, None)
    assert convert(_field("scale"), "-.5", UTC) == (-0.5, None)
    assert convert(_field("price"), "19.99", UTC) == ("19.99", None)


def test_a_list_of_numbers_refuses_loose_text() -> None:
    from app.processors import registry

    sizes = next(f for f in form_fields(registry.get("images.thumbnail").input_model) if f.name == "sizes")
    assert convert(sizes, "160, 640", UTC) == ([160, 640], None)
    for text in ("1_60", "\uff11\uff16\uff10"):
        value, problem = convert(sizes, f"{text}, 640", UTC)
        assert value is None and problem is not None and "is not a whole number" in problem, (text, value)


@pytest.mark.parametrize(("field", "text"), [("copies", "1_0"), ("copies", "\uff11\uff10"), ("scale", "1_0")])
async def test_the_form_shows_the_refusal_beside_the_field(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, field: str, text: str
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    data = {"name": "Ann", "copies": "2", field: text}
    r = await client.post("/jobs/new/test.form", data=form_body(token, **data), follow_redirects=False)
    assert r.status_code == 422, r.text[:300]
    said = WHOLE if field == "copies" else NUMBER
    assert re.search(rf'<small id="e-{field}" class="field-error">{said}', r.text), r.text[-2000:]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


def test_a_spreadsheet_cell_is_read_as_a_number_by_the_same_rule() -> None:
    whole = spreadsheets.SheetField("copies", "Copies", "integer", False)
    number = spreadsheets.SheetField("scale", "Scale", "number", False)
    assert spreadsheets.convert(whole, "10") == 10
    assert spreadsheets.convert(whole, "-3.0") == -3
    assert spreadsheets.convert(whole, "1.5E+3") == 1500
    assert spreadsheets.convert(number, "2.5") == 2.5
    assert spreadsheets.convert(number, 7) == 7
    for text in [t for t in LOOSE if t != "1e1"]:  # an exponent is a spreadsheet's own
        assert spreadsheets.convert(whole, text) == text, text  # left for the schema to refuse
        assert spreadsheets.convert(number, text) == text, text
    assert spreadsheets.convert(number, "1E+999") == "1E+999"


async def test_text_for_a_number_in_input_data_is_refused_on_every_api_path(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    auth = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}

    async def refused(path: str, body: dict[str, Any], errors: dict[str, str]) -> None:
        r = await client.post(path, json=body, headers=auth)
        assert r.status_code == 422, (path, r.status_code, r.text[:300])
        assert r.json()["errors"] == errors, (path, r.json())

    texts = {"name": "a", "copies": "5", "scale": "1_0", "extra": {"n": "\uff11"}, "price": "2.50"}
    said = {"copies": WHOLE, "scale": NUMBER, "extra.n": WHOLE}  # a Decimal's schema takes text
    await refused(
        "/api/jobs",
        {"type": "test.form", "input_data": texts},
        {f"input_data.{k}": v for k, v in said.items()},
    )
    await refused(
        "/api/batches",
        {"type": "test.form", "rows": [{"name": "a"}, texts]},
        {f"rows[1].{k}": v for k, v in said.items()},
    )
    step = {"key": "a", "type": "test.form", "input_data": texts}
    await refused(
        "/api/pipelines",
        {"name": "p", "steps": [step]},
        {f"steps[0].input_data.{k}": v for k, v in said.items()},
    )
    await refused(
        "/api/pipelines",
        {"template": "test.steps", "input_data": {"seconds": "1"}},
        {"input_data.seconds": NUMBER},
    )
    await refused(
        "/api/schedules",
        {"cron": "@daily", "type": "test.form", "input_data": texts},
        {f"input_data.{k}": v for k, v in said.items()},
    )
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    ok = await client.post(
        "/api/jobs",
        json={"type": "test.form", "input_data": {"name": "a", "copies": 5, "price": "2.50"}},
        headers=auth,
    )
    assert ok.status_code == 201, ok.text
