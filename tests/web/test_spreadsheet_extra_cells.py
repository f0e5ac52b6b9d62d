"""A spreadsheet row with a value past the header's last column is refused naming the row: the value
belongs to no column, and dropping it ran the row without it (often a comma in an unquoted value)."""

from __future__ import annotations

import pytest

from app import spreadsheets
from app.errors import BadInput


def test_a_value_past_the_last_header_is_refused_naming_the_row() -> None:
    data = b"url,method\nhttp://example.com/a,GET\nhttp://example.com/b,POST,extra\n"
    with pytest.raises(BadInput) as caught:
        spreadsheets.read(data, "rows.csv")
    message = caught.value.errors["file"]
    assert message.startswith("Row 3 has a value in column 3, past the last of the header's 2 columns"), (
        message
    )


def test_empty_cells_past_the_header_are_not_values() -> None:
    sheet = spreadsheets.read(b"url,method\nhttp://example.com/a,GET,,\n", "rows.csv")
    assert sheet.rows == [(2, ["http://example.com/a", "GET"])]
