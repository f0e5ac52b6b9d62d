"""A spreadsheet's first row holds the column names. An empty first row is refused, naming the problem,
rather than the row below it silently becoming the header (a data row read as column names, and every
row number off by one) — for a CSV and a workbook, on the batch form as an error beside the file."""

from __future__ import annotations

import html
import io

import pytest
from litestar.testing import AsyncTestClient

from app import spreadsheets
from app.errors import BadInput
from tests.support.webkit import csrf_from, sign_in_as

WHY = "The first row of this spreadsheet is empty, but it must hold the column names"


def _workbook(*rows: list[object]) -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    ws = book.active
    assert ws is not None
    for row in rows:
        ws.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "name", "first"),
    [
        (b"\nurl\nhttp://a/\nhttp://b/\n", "rows.csv", 2),
        (b";;\r\n;;\r\nurl;timeout\r\nhttp://a/;3\r\n", "rows.csv", 3),
        (_workbook([None, None], ["url", "timeout"], ["http://a/", 3]), "rows.xlsx", 2),
    ],
)
def test_an_empty_first_row_is_refused_naming_the_first_row_with_anything_in_it(
    data: bytes, name: str, first: int
) -> None:
    with pytest.raises(BadInput) as refused:
        spreadsheets.read(data, name)
    message = refused.value.errors["file"]
    assert message.startswith(WHY) and f"row {first}" in message, message


def test_empty_rows_below_the_header_are_still_skipped() -> None:
    sheet = spreadsheets.read(b"url\n\nhttp://a/\n,\nhttp://b/\n", "rows.csv")
    assert sheet.columns == ["url"] and [n for n, _ in sheet.rows] == [3, 5]


async def test_the_batch_form_says_so_beside_the_file(client: AsyncTestClient, db_url: str) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = csrf_from((await client.get("/batches/new/http.request")).text)
    r = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token},
        files={"sheet": ("rows.csv", b"\nurl\nhttp://a/\n", "text/csv")},
    )
    assert r.status_code == 422 and WHY in html.unescape(r.text), r.text[-800:]
