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


def _xlsx(rows: dict[str, object]) -> bytes:
    import io

    from openpyxl import Workbook

    book = Workbook()
    for ref, value in rows.items():
        book.active[ref] = value
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


FAR = spreadsheets.MAX_COLUMNS + 100  # past the cells a row is cleaned to


@pytest.mark.parametrize("kind", ["csv", "xlsx"])
@pytest.mark.parametrize("alone", [False, True], ids=["beside-values", "alone-in-its-row"])
def test_a_value_far_past_the_header_is_refused_too(kind: str, alone: bool) -> None:
    """Only the first ``MAX_COLUMNS + 1`` cells of a row were looked at (a workbook's were not even
    read): a value further right was dropped, and a row holding nothing else was skipped as empty."""
    from openpyxl.utils import get_column_letter

    if kind == "csv":
        row = ("" if alone else "http://example.com/b,POST") + "," * (FAR - (1 if alone else 2)) + "far"
        data, name = f"url,method\nhttp://example.com/a,GET\n{row}\n".encode(), "rows.csv"
    else:
        cells: dict[str, object] = {"A1": "url", "B1": "method", "A2": "http://example.com/a", "B2": "GET"}
        if not alone:
            cells.update({"A3": "http://example.com/b", "B3": "POST"})
        cells[f"{get_column_letter(FAR)}3"] = "far"
        data, name = _xlsx(cells), "rows.xlsx"
    with pytest.raises(BadInput) as caught:
        spreadsheets.read(data, name)
    message = caught.value.errors["file"]
    assert message.startswith(f"Row 3 has a value in column {FAR}, past the last of the header's 2"), message


def test_a_header_far_past_the_column_limit_is_refused() -> None:
    from openpyxl.utils import get_column_letter

    data = _xlsx({"A1": "url", f"{get_column_letter(FAR)}1": "far", "A2": "http://example.com/a"})
    with pytest.raises(BadInput) as caught:
        spreadsheets.read(data, "rows.xlsx")
    assert (
        caught.value.errors["file"] == f"This spreadsheet has more than {spreadsheets.MAX_COLUMNS} columns."
    )


def test_a_workbook_whose_dimension_is_wider_than_its_cells_reads_as_its_cells() -> None:
    import io

    from openpyxl import Workbook
    from openpyxl.styles import Font

    book = Workbook()
    book.active["A1"], book.active["A2"] = "url", "http://example.com/a"
    book.active["Z9"].font = Font(bold=True)  # a formatted, empty cell: written, and in the dimension
    out = io.BytesIO()
    book.save(out)
    sheet = spreadsheets.read(out.getvalue(), "rows.xlsx")
    assert sheet.columns == ["url"] and sheet.rows == [(2, ["http://example.com/a"])]
