"""An uploaded text file is read in the encoding its byte-order mark names — UTF-8, UTF-16 or UTF-32,
either byte order — by every reader of one (a batch's spreadsheet, the CSV jobs, the type stored with the
upload), and UTF-16 or UTF-32 without a mark is refused naming it, not read as another encoding or
called binary."""

from __future__ import annotations

import codecs

import pytest
from litestar.testing import AsyncTestClient

from app import spreadsheets
from app.errors import BadInput
from app.processors import PermanentError
from app.processors.reports import decode
from tests.api.test_approvals_api import token_of
from tests.support.webkit import add_user

TEXT = "name,city\nÅsa,Zürich\n"
MARKED = {
    "utf-8": codecs.BOM_UTF8 + TEXT.encode("utf-8"),
    "utf-16-le": codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"),
    "utf-16-be": codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"),
    "utf-32-le": codecs.BOM_UTF32_LE + TEXT.encode("utf-32-le"),
    "utf-32-be": codecs.BOM_UTF32_BE + TEXT.encode("utf-32-be"),
}


@pytest.mark.parametrize("encoding", list(MARKED))
def test_a_marked_csv_is_read_by_the_spreadsheet_and_the_csv_jobs(encoding: str) -> None:
    data = MARKED[encoding]
    sheet = spreadsheets.read(data, "export.csv")
    assert sheet.columns == ["name", "city"] and sheet.rows == [(2, ["Åsa", "Zürich"])]
    text, _ = decode(data, "auto")
    assert text == TEXT


ORDER = {"le": "little-endian, low byte first", "be": "big-endian, high byte first"}


@pytest.mark.parametrize(("encoding", "named"), [(e, e[:6].upper()) for e in MARKED if e != "utf-8"])
def test_wide_text_without_its_mark_is_refused_naming_what_was_found_and_the_choice_that_reads_it(
    encoding: str, named: str
) -> None:
    """Not only "re-save it": the width and byte order found, and for the CSV jobs, whose form has a
    text encoding to choose, the choice that reads the file, which then does (either byte order)."""
    data = TEXT.encode(encoding)
    found = f"{named} text ({ORDER[encoding[-2:]]}) without a byte-order mark"
    with pytest.raises(BadInput) as refused:
        spreadsheets.read(data, "export.csv")
    assert f"saved as {found}" in refused.value.errors["file"]
    assert '"CSV UTF-8"' in refused.value.errors["file"]
    for chosen, said in (("auto", "'Find out automatically'"), ("cp1252", "'Windows (cp1252)'")):
        with pytest.raises(PermanentError) as failed:
            decode(data, chosen)
        assert f"This file is {found}, which " in str(failed.value), failed.value
        assert said in str(failed.value) and f"choose '{named}' under Text encoding" in str(failed.value)
    assert decode(data, named.lower()) == (TEXT, encoding)
    with pytest.raises(BadInput, match="binary data"):
        spreadsheets.read(b"name,city\n\x00\x01\x02\x03garbage\n", "export.csv")


async def test_an_uploaded_wide_csv_is_a_table_a_csv_job_takes(client: AsyncTestClient, db_url: str) -> None:
    ann = await token_of(db_url, await add_user(db_url, "ann@example.com"))
    for encoding, data in MARKED.items():
        up = await client.post("/api/files", files={"file": ("export.csv", data, "text/csv")}, headers=ann)
        assert up.status_code == 201, up.text
        assert up.json()["content_type"] == "text/csv", encoding
        job = {"type": "report.csv_check", "input_data": {"file": up.json()["id"]}}
        r = await client.post("/api/jobs", json=job, headers=ann)
        assert r.status_code == 201, (encoding, r.text)
