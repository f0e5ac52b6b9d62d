"""A field with nothing in it is left out of a job's input and result, never written as Python's
``None``, ``[]``, ``{}`` or "none" (app.web.result_display)."""

from __future__ import annotations

import re
from typing import Any

from litestar.testing import AsyncTestClient

from app.settings import Settings
from app.web.result_display import input_items, result_items
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import sign_in_as


def _rows(page: str) -> dict[str, str]:
    """Each ``<dt>`` of the page with the text of its ``<dd>``, tags removed."""
    pairs = re.findall(r"<dt>(.*?)</dt>\s*<dd>(.*?)</dd>", page, re.S)
    return {dt.strip(): re.sub(r"<[^>]+>", " ", dd).strip() for dt, dd in pairs}


async def test_a_contact_sheet_step_shows_its_pictures_count_not_pictures_none(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings
) -> None:
    """The Photo batch's contact sheet step takes its pictures from the earlier steps, so its own
    ``images`` is empty: the page shows the result's count, and no "Pictures none" in the input."""
    user = await sign_in_as(client, db_url, "ann@example.com")
    # without pictures of its own a sheet needs a step before it (one on its own is refused)
    parent = await enqueue(engine, ui_settings, user.id, "noop")
    await claim(engine, parent)
    await finish(engine, ui_settings, parent, "completed", result={})
    jid = await enqueue(
        engine,
        ui_settings,
        user.id,
        "images.contact_sheet",
        input_data={"columns": 4, "title": "3 pictures"},
        depends_on=[parent],
    )
    await claim(engine, jid)
    result = {"pictures": 3, "columns": 3, "rows": 1, "width": 700, "height": 300, "zip_members": ["a.jpg"]}
    await finish(engine, ui_settings, jid, "completed", result=result)
    page = (await client.get(f"/jobs/{jid}")).text
    assert ">none<" not in page
    assert page.count("<dt>Pictures</dt>") == 1, page  # the result's count only
    assert _rows(page)["Pictures"] == "3"


async def test_an_email_result_with_no_refusals_has_no_refused_row(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings
) -> None:
    """``email.send``'s result keeps ``refused: {}`` when every recipient took the message; the page
    showed "Refused {}". It shows the accepted addresses and no Refused row (nor "Cc none")."""
    user = await sign_in_as(client, db_url, "ann@example.com")
    data = {"to": ["x@example.com"], "cc": [], "reply_to": "", "subject": "Hello", "body": "Hi"}
    jid = await enqueue(engine, ui_settings, user.id, "email.send", input_data=data)
    await claim(engine, jid)
    result = {
        "to": ["x@example.com"],
        "cc": [],
        "subject": "Hello",
        "message_id": "<1@example.com>",
        "server": "mx.example.com:25",
        "accepted": ["x@example.com"],
        "refused": {},
    }
    await finish(engine, ui_settings, jid, "completed", result=result)
    page = (await client.get(f"/jobs/{jid}")).text
    rows = _rows(page)
    assert "Refused" not in rows and "Cc" not in rows, rows
    assert rows["Accepted"] == "x@example.com"
    assert all(v not in ("{}", "[]", "None", "none", "null") for v in rows.values()), rows


def test_nothing_is_written_out_as_none_an_empty_list_or_an_empty_object() -> None:
    """The class of the two above, on every way a value reaches the page: top-level fields, an
    object's fields, a table's nested cells and a job's input."""
    items = result_items(
        {
            "a": None,
            "b": [],
            "c": {},
            "d": "",
            "e": {"inner": {}, "also": None},
            "f": {"kept": 1, "gone": []},
            "rows": [{"n": 1, "extra": {"x": None, "y": 2}, "tags": [None, "a"]}],
        }
    )
    labels = [it["label"] for it in items]
    assert labels == ["Rows", "F"], labels
    rows, fields = items
    assert [f["label"] for f in fields["value"]] == ["Kept"]
    assert [c["value"] for c in rows["value"]["rows"][0]] == ["1", "Y 2", "a"]

    from app.processors import registry
    from app.web.forms import form_fields

    fields_of_sheet = form_fields(registry.get("images.contact_sheet").input_model)
    shown = input_items({"images": [], "columns": 4, "cell": 240, "title": ""}, fields_of_sheet, {})
    assert [it["label"] for it in shown] == ["Pictures per row", "Picture size on the sheet (pixels)"]


def test_a_waiting_steps_result_with_nothing_to_show_is_no_result_not_its_json() -> None:
    """The approvals pages show a step's JSON only when it has no fields to list; an object whose
    fields are all empty reads "no result" there, not ``{"refused": {}}``."""
    from datetime import UTC, datetime

    from app.web.approvals import with_result

    row = with_result({"type": "noop", "result_data": {"refused": {}}, "waiting_since": datetime.now(UTC)})
    assert row["result_items"] == [] and row["result_json"] is None
    row = with_result({"type": "noop", "result_data": [1, 2], "waiting_since": datetime.now(UTC)})
    assert row["result_json"] == "[\n  1,\n  2\n]"


def test_spaces_and_lists_of_blanks_are_nothing_to_show() -> None:
    """A text of spaces showed a label with nothing beside it, and ``[null, "", {}]`` its raw JSON."""
    items = result_items({"spaces": "   ", "blanks": [None, "", {}], "nested": {"x": [" "]}, "kept": 1})
    assert [it["label"] for it in items] == ["Kept"], items

    from app.processors import registry
    from app.web.forms import form_fields

    fields_of_sheet = form_fields(registry.get("images.contact_sheet").input_model)
    shown = input_items({"images": [None, ""], "columns": 4, "title": "  "}, fields_of_sheet, {})
    assert [it["label"] for it in shown] == ["Pictures per row"], shown


async def test_a_result_with_nothing_to_show_reads_no_result_as_an_empty_input_does(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings
) -> None:
    """A result of ``{}`` showed a "Result" heading with only "Details" holding ``{}``."""
    user = await sign_in_as(client, db_url, "ann@example.com")
    for result in ({}, {"note": "  ", "rows": [None, "", {}]}):
        jid = await enqueue(engine, ui_settings, user.id, "noop", input_data={})
        await claim(engine, jid)
        await finish(engine, ui_settings, jid, "completed", result=result)
        page = (await client.get(f"/jobs/{jid}")).text
        section = page.split('id="result"', 1)[1].split("</section>", 1)[0]
        assert "No result." in section and "Details" not in section, section
        assert "{}" not in section and "null" not in section, section


async def test_the_admin_page_says_nobody_is_waiting_not_none(client: AsyncTestClient, db_url: str) -> None:
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    page = (await client.get("/admin")).text
    stat = page.split('id="stat-oldest"', 1)[1].split("</article>", 1)[0]
    assert ">none<" not in stat and "nobody is waiting" in stat, stat


def test_the_audit_trail_leaves_out_details_with_nothing_in_them() -> None:
    """A bulk action on ticked rows has no filter: its entry showed "filter {}"."""
    from app.web.admin.audit import detail_fields

    fields = detail_fields({"filter": {}, "scope": "selected", "skipped": 0, "ids": [None, "a"], "note": " "})
    assert fields == [
        {"label": "ids", "value": "a"},
        {"label": "scope", "value": "selected"},
        {"label": "skipped", "value": "0"},
    ], fields
