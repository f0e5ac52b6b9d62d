"""Messages a person who is not an engineer can act on, on every path that shows them: a batch row's bad
number says what the job form says; a file field given something else says what it takes; counts agree
with their nouns; a spreadsheet with an empty first row or saved as UTF-16 says so; a file name too long
to read is a 422 about the name; a rejection's reason is taken under either name on both routes."""

from __future__ import annotations

import codecs
import uuid

import pytest
from litestar.testing import AsyncTestClient
from pydantic import BaseModel, Field, ValidationError

import tests.support.forms  # noqa: F401  (test.form, test.step)
from app import spreadsheets
from app.errors import BadInput
from app.jobs.input_words import problem_words, sentence_of
from app.processors import registry
from app.web import submit
from app.web.batch_page import problems_of
from tests.api.test_approvals_api import spec, token_of, waiting
from tests.support.webkit import add_user


async def test_a_batch_row_and_the_job_form_say_a_bad_number_in_the_same_words(
    client: AsyncTestClient, db_url: str
) -> None:
    ann = await token_of(db_url, await add_user(db_url, "ann@example.com"))
    model = registry.get("test.form").input_model  # type: ignore[union-attr]
    form = submit.validate(model, {"name": "a", "scale": "abc", "copies": "x"})
    assert form == {"scale": "Enter a number, like 2.5.", "copies": "Enter a whole number, like 42."}

    rows = [{"name": "a", "scale": "abc", "copies": "x"}]
    r = await client.post("/api/batches", json={"type": "test.form", "rows": rows}, headers=ann)
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert errors == {
        "rows[0].scale": "Enter a number, like 2.5",
        "rows[0].copies": "Enter a whole number, like 42",
    }
    assert "unable to parse" not in r.text and "input should be" not in r.text.lower()
    # the spreadsheet page's table of row problems: the form's sentences, word for word
    shown = problems_of(errors, [2], [], ["Scale", "Copies"], {"scale": 0, "copies": 1})
    assert sorted(p.message for p in shown) == sorted([form["scale"], form["copies"]])
    assert sentence_of(errors["rows[0].scale"]) == form["scale"]


async def test_a_file_field_given_an_object_says_what_a_file_field_takes(
    client: AsyncTestClient, db_url: str
) -> None:
    ann = await token_of(db_url, await add_user(db_url, "ann@example.com"))
    body = {"type": "test.form", "input_data": {"name": "a", "document": {"file_id": str(uuid.uuid4())}}}
    r = await client.post("/api/jobs", json=body, headers=ann)
    assert r.status_code == 422, r.text
    message = r.json()["errors"]["input_data.document"]
    assert "uUID" not in r.text and "UUID object" not in r.text
    assert "id of an uploaded file" in message and "POST /api/files" in message
    r = await client.post(
        "/api/jobs",
        json={"type": "test.form", "input_data": {"name": "a", "attachments": [{"x": 1}]}},
        headers=ann,
    )
    assert r.status_code == 422 and "ids of uploaded files" in r.json()["errors"]["input_data.attachments[0]"]


async def test_one_approval_is_said_in_the_singular(client: AsyncTestClient, db_url: str) -> None:
    owner = await add_user(db_url, "owner@example.com")
    r = await client.post(
        "/api/pipelines",
        json=spec(approvers=["owner@example.com"], approvals_needed=1),
        headers=await token_of(db_url, owner),
    )
    assert r.status_code == 422, r.text
    message = r.json()["errors"]["steps[0].approvals_needed"]
    assert message.startswith("needs 1 approval, but only 0 people"), message


def test_an_empty_first_row_is_named_as_such() -> None:
    with pytest.raises(BadInput) as refused:
        spreadsheets.read(b",,,\n1,2,3\n", "rows.csv")
    assert "first row of this spreadsheet is empty" in refused.value.errors["file"]
    with pytest.raises(BadInput) as refused:
        spreadsheets.read(b"a,b\n", "rows.csv")
    assert "header row but no rows below it" in refused.value.errors["file"]


def test_a_utf16_csv_is_read_with_its_mark_and_named_without_one() -> None:
    text = "name\tcount\nÅse\t2\n"
    for encoded in (
        codecs.BOM_UTF16_LE + text.encode("utf-16-le"),
        codecs.BOM_UTF16_BE + text.encode("utf-16-be"),
    ):
        sheet = spreadsheets.read(encoded, "export.txt")
        assert sheet.columns == ["name", "count"] and sheet.rows == [(2, ["Åse", "2"])]
    with pytest.raises(BadInput) as refused:
        spreadsheets.read(text.encode("utf-16-le"), "export.csv")
    message = refused.value.errors["file"]
    assert "UTF-16" in message and "CSV UTF-8" in message and "binary" not in message


async def test_a_file_name_too_long_to_read_is_a_422_about_the_name(
    client: AsyncTestClient, db_url: str
) -> None:
    ann = await token_of(db_url, await add_user(db_url, "ann@example.com"))
    r = await client.post("/api/files", files={"file": ("n" * 5000 + ".txt", b"hello")}, headers=ann)
    assert r.status_code == 422, (r.status_code, r.text)
    assert "name" in r.json()["errors"]["form"] and "too long" in r.json()["errors"]["form"]
    assert "Entity" not in r.text


async def test_a_rejection_s_reason_is_taken_as_reason_or_comment_on_both_routes(
    client: AsyncTestClient, db_url: str, engine, ui_settings, pg
) -> None:
    await add_user(db_url, "ann@example.com")
    owner = await token_of(db_url, await add_user(db_url, "owner@example.com"))
    root = await token_of(db_url, await add_user(db_url, "root@example.com", admin=True))
    for route, field in (("/api/jobs/{}/reject", "comment"), ("/api/approvals/{}/reject", "reason")):
        jid = await waiting(client, engine, ui_settings, pg, owner)
        r = await client.post(route.format(jid), json={field: "numbers are off"}, headers=root)
        assert r.status_code == 200, (route, r.text)
        assert (
            await pg.fetchval("SELECT error_message FROM jobs WHERE id = $1", jid)
            == "rejected: numbers are off"
        )
    # the old names still work, and two different texts are refused rather than one picked
    jid = await waiting(client, engine, ui_settings, pg, owner)
    r = await client.post(f"/api/jobs/{jid}/reject", json={"reason": "a", "comment": "b"}, headers=root)
    assert r.status_code == 422 and "reason" in r.json()["errors"], r.text
    r = await client.post(f"/api/approvals/{jid}/reject", json={"comment": "old name"}, headers=root)
    assert r.status_code == 200, r.text


class _Bounded(BaseModel):
    body: str = Field("", max_length=1_000_000)
    note: str = Field("", min_length=0, max_length=2_000)
    copies: int = Field(0, le=1_000_000)
    scale: float = Field(0.0, ge=-2_500.0)
    items: list[int] = Field([], max_length=1_500)


def test_a_schema_s_bounds_are_said_with_thousands_separators() -> None:
    """A schema's length message read "Use at most 1000000 characters" where every other number in a
    message has its separators ("1,024 characters"): lengths, bounds and counts of items alike."""
    with pytest.raises(ValidationError) as caught:
        _Bounded(body="x" * 1_000_001, note="y" * 2_001, copies=1_000_001, scale=-2_501, items=[0] * 1_501)
    words = {str(e["loc"][0]): problem_words(e) for e in caught.value.errors()}
    assert words == {
        "body": "Use at most 1,000,000 characters.",
        "note": "Use at most 2,000 characters.",
        "copies": "Must be at most 1,000,000.",
        "scale": "Must be at least -2,500.",
        "items": "Give at most 1,500 items.",
    }


def test_a_count_of_pictures_says_pictures_on_the_api_and_the_form() -> None:
    """The photo batch's "Pictures" over its 50 read "Give at most 50 items": what was counted is said
    (the field's title, in the singular for one), on the API's path and the form's alike."""
    model = registry.get("images.batch").input_model  # type: ignore[union-attr]
    many = [str(uuid.uuid4())] * 51
    for images, words in ((many, "Give at most 50 pictures"), ([], "Give at least 1 picture")):
        with pytest.raises(BadInput) as refused:
            registry.get("images.batch").validate_input({"images": images})  # type: ignore[union-attr]
        assert refused.value.errors == {"input_data.images": words}
        assert submit.validate(model, {"images": images}) == {"images": f"{words}."}
