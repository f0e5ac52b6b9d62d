"""A spreadsheet costs what its upload limit allows, however it is packed: a workbook that unpacks far
beyond its size (a "zip bomb"), a part packed in a way no spreadsheet program uses, a zip directory that
understates a part's size, one shared string named by every cell — each refused next to the file with
little memory taken; and a workbook is read off the event loop, so other pages answer meanwhile."""

from __future__ import annotations

import asyncio
import io
import struct
import threading
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from app import spreadsheets
from app.errors import BadInput
from tests.support.webkit import csrf_from, sign_in_as

BOMB_CHARS = 20 * 1024 * 1024
"""One cell's text in the bomb: some 20 KB packed."""
SHARED_STRINGS_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"


def _workbook(rows: list[list[Any]]) -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    for row in rows:
        book.active.append(row)  # type: ignore[union-attr]
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _rewritten(
    data: bytes,
    change: Callable[[str, bytes], bytes],
    *,
    extra: dict[str, bytes] | None = None,
    method: int = zipfile.ZIP_DEFLATED,
) -> bytes:
    """``data``'s parts, each through ``change(name, bytes)``, plus ``extra``, packed with ``method``."""
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, change(item.filename, src.read(item.filename)))
        for name, body in (extra or {}).items():
            dst.writestr(name, body)
    return out.getvalue()


def _bomb(method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A workbook whose one data cell holds :data:`BOMB_CHARS` characters (inline, in the sheet's XML)."""

    def grow(name: str, body: bytes) -> bytes:
        return body.replace(b"http://a/", b"A" * BOMB_CHARS) if name.endswith("sheet1.xml") else body

    return _rewritten(_workbook([["url"], ["http://a/"]]), grow, method=method)


def _understated(data: bytes, part: str, declared: int) -> bytes:
    """``data`` with ``part``'s unpacked size given as ``declared`` in its local header and in the
    central directory (the bytes packed unchanged)."""
    out = bytearray(data)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(part)
    struct.pack_into("<I", out, info.header_offset + 22, declared)  # local header: uncompressed size
    name = part.encode()
    at = out.find(b"PK\x01\x02")
    while at >= 0:
        (length,) = struct.unpack_from("<H", out, at + 28)
        if bytes(out[at + 46 : at + 46 + length]) == name:
            struct.pack_into("<I", out, at + 24, declared)  # central directory: uncompressed size
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


def _peak_while(call: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """The most memory Python held (above the start) while ``call`` ran, and what it raised."""
    tracemalloc.start()
    try:
        call()
        raised: BaseException | None = None
    except BaseException as exc:
        raised = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, raised


def test_a_workbook_unpacking_far_beyond_its_size_is_refused_before_it_is_unpacked() -> None:
    bomb = _bomb()
    assert len(bomb) < 100_000  # 20 MB of text in a small file
    peak, raised = _peak_while(lambda: spreadsheets.read(bomb, "bomb.xlsx"))
    assert isinstance(raised, BadInput), f"read without an error ({raised!r})"
    assert (
        "too large to read" in raised.errors["file"] and "xl/worksheets/sheet1.xml" in raised.errors["file"]
    )
    assert peak < 2 * 1024 * 1024, f"peak {peak:,} bytes"


def test_a_workbook_unpacking_past_the_upload_limit_is_refused_whatever_it_packs_to() -> None:
    rows = [["url", "note"]] + [[f"http://a/{i}", f"{i} {'x' * 200}"] for i in range(400)]
    book = _workbook(rows)  # about 100 KB of sheet XML, packed twenty to one or so
    assert len(spreadsheets.read(book, "ok.xlsx").rows) == 400
    with pytest.raises(BadInput) as exc:
        spreadsheets.read(book, "big.xlsx", max_bytes=20_000)
    assert "unpacked, it would be more than 78.1 KiB" in exc.value.errors["file"]


def test_a_part_packed_as_no_spreadsheet_program_does_is_refused() -> None:
    # bzip2 unpacks each chunk it is given whole, whatever size the directory declares
    with pytest.raises(BadInput) as exc:
        spreadsheets.read(_bomb(zipfile.ZIP_BZIP2), "bomb.xlsx")
    assert "packed in a way spreadsheet programs do not use" in exc.value.errors["file"]


def test_a_zip_directory_understating_a_part_gets_no_further_than_the_size_it_declares() -> None:
    lying = _understated(_bomb(), "xl/worksheets/sheet1.xml", 100_000)
    peak, raised = _peak_while(lambda: spreadsheets.read(lying, "bomb.xlsx"))
    assert isinstance(raised, BadInput), f"read without an error ({raised!r})"
    assert "cannot be read as a spreadsheet" in raised.errors["file"]
    assert peak < 4 * 1024 * 1024, f"peak {peak:,} bytes"


def test_one_shared_string_named_by_every_cell_counts_as_the_text_it_makes() -> None:
    """A cell names a shared string by its number: 2,000 cells naming one 90,000-character string are
    180 million characters of job input from a file of a few kilobytes."""
    cells = "".join(f'<row r="{r}"><c r="A{r}" t="s"><v>1</v></c></row>' for r in range(2, 2002))

    def shared(name: str, body: bytes) -> bytes:
        if name.endswith("sheet1.xml"):
            body = body.replace(b'<dimension ref="A1:A1" />', b'<dimension ref="A1:A2001" />')
            head, _, tail = body.partition(b"<sheetData>")
            return (
                head
                + b'<sheetData><row r="1"><c r="A1" t="s"><v>0</v></c></row>'
                + cells.encode()
                + (b"</sheetData>" + tail.partition(b"</sheetData>")[2])
            )
        if name == "[Content_Types].xml":
            override = f'<Override PartName="/xl/sharedStrings.xml" ContentType="{SHARED_STRINGS_TYPE}" />'
            return body.replace(b"</Types>", override.encode() + b"</Types>")
        return body

    strings = (
        '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" count="2" uniqueCount="2">'
        f"<si><t>note</t></si><si><t>{'n' * 90_000}</t></si></sst>"
    )
    book = _rewritten(_workbook([["x"]]), shared, extra={"xl/sharedStrings.xml": strings.encode()})
    assert len(book) < 50_000
    with pytest.raises(BadInput) as exc:
        spreadsheets.read(book, "shared.xlsx", max_bytes=1024 * 1024)
    assert "holds more than 1 MiB of text" in exc.value.errors["file"]
    # a CSV file is bounded the same way
    with pytest.raises(BadInput) as exc:
        spreadsheets.read((("note\n" + "n" * 600 + "\n") * 2).encode(), "n.csv", max_bytes=1000)
    assert "holds more than 1000 bytes of text" in exc.value.errors["file"]


def test_row_numbers_far_apart_are_a_bounded_count_of_empty_rows() -> None:
    """A workbook's next row may be numbered a million: its reader gives every row between as empty."""

    def far(name: str, body: bytes) -> bytes:
        if name.endswith("sheet1.xml"):
            body = body.replace(b'<dimension ref="A1:A2" />', b'<dimension ref="A1:A1048576" />')
            return body.replace(b'<row r="2"><c r="A2"', b'<row r="1048576"><c r="A1048576"')
        return body

    book = _rewritten(_workbook([["url"], ["http://a/"]]), far)
    started = time.monotonic()
    with pytest.raises(BadInput) as exc:
        spreadsheets.read(book, "far.xlsx")
    assert "more than 100,000 empty rows" in exc.value.errors["file"]
    assert time.monotonic() - started < 5
    near = _rewritten(
        _workbook([["url"], ["http://a/"]]),
        lambda name, body: body.replace(b'r="2"', b'r="900"').replace(b'ref="A1:A2"', b'ref="A1:A900"'),
    )
    assert [n for n, _ in spreadsheets.read(near, "near.xlsx").rows] == [900]


def _post_file(name: str, data: bytes) -> dict[str, Any]:
    return {"sheet": (name, data, "application/octet-stream")}


async def test_a_bomb_is_refused_next_to_the_file_on_upload_and_on_start(
    client: AsyncTestClient, db_url: str
) -> None:
    from tests.support.webkit import add_token

    ann = await sign_in_as(client, db_url, "ann@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    token = csrf_from((await client.get("/batches/new/http.request")).text)
    bomb = _bomb()
    uploaded = await client.post(
        "/batches/new/http.request", data={"_csrf_token": token}, files=_post_file("bomb.xlsx", bomb)
    )
    assert uploaded.status_code == 422, uploaded.status_code
    assert "This workbook is too large to read" in uploaded.text
    stored = await client.post("/api/files", files={"file": ("bomb.xlsx", bomb)}, headers=bearer)
    assert stored.status_code == 201, stored.text
    start = {"_csrf_token": token, "sheet_id": stored.json()["id"], "map.url": "0"}
    started = await client.post("/batches/new/http.request", data=start)
    assert started.status_code == 422 and "This workbook is too large to read" in started.text


async def test_a_stored_file_larger_than_an_upload_is_not_read_as_a_spreadsheet(
    make_settings: Any, db_url: str
) -> None:
    """The start form names a stored file, which may be a job's output of any size: refused unread."""
    from tests.support.webkit import add_token, app_client

    settings = make_settings(worker_enabled=False, upload_max_bytes=4096)
    async with app_client(settings) as client:
        ann = await sign_in_as(client, db_url, "ann@example.com")
        bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
        token = csrf_from((await client.get("/batches/new/http.request")).text)
        stored = await client.post(
            "/api/files", files={"file": ("a.csv", b"url\nhttp://a/\n")}, headers=bearer
        )
        assert stored.status_code == 201, stored.text
        file_id = stored.json()["id"]
        path = next(p for p in settings.data_dir.rglob(file_id) if p.is_file())
        path.write_bytes(b"url\n" + b"http://a/\n" * 1000)  # as a job's output could be
        start = {"_csrf_token": token, "sheet_id": file_id, "map.url": "0"}
        started = await client.post("/batches/new/http.request", data=start)
        assert started.status_code == 422 and "larger than you can upload" in started.text


async def test_pages_answer_while_a_spreadsheet_is_read(
    client: AsyncTestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upload and the start both read the sheet in a thread: ``/healthz``, asked while a (slow) read
    is under way, answers before it ends."""
    from tests.support.webkit import add_token

    ann = await sign_in_as(client, db_url, "ann@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    token = csrf_from((await client.get("/batches/new/http.request")).text)
    book = _workbook([["url"], ["http://a/"]])
    stored = await client.post("/api/files", files={"file": ("book.xlsx", book)}, headers=bearer)
    assert stored.status_code == 201, stored.text
    real_read = spreadsheets.read
    reading, done = threading.Event(), threading.Event()

    def slow_read(*args: Any, **kw: Any) -> Any:
        reading.set()
        time.sleep(1.0)  # as long as a large workbook takes
        try:
            return real_read(*args, **kw)
        finally:
            done.set()

    monkeypatch.setattr(spreadsheets, "read", slow_read)
    # The app runs on the test client's own loop (in another thread); these requests are made there, so
    # that the health check can be asked while the upload is still being answered.
    app, cookies = client.app, client.cookies

    async def meanwhile(send: dict[str, Any]) -> tuple[int, int, float, bool]:
        reading.clear()
        done.clear()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url=str(client.base_url), cookies=cookies
        ) as c:
            sheet = asyncio.create_task(c.post("/batches/new/http.request", **send))
            while not reading.is_set():
                await asyncio.sleep(0.01)
            asked = time.monotonic()
            health = await c.get("/healthz")
            waited, during = time.monotonic() - asked, not done.is_set()
            return (await sheet).status_code, health.status_code, waited, during

    sends = {
        "upload": {"data": {"_csrf_token": token}, "files": _post_file("book.xlsx", book)},
        "start": {"data": {"_csrf_token": token, "sheet_id": stored.json()["id"], "map.url": "0"}},
    }
    for step, send in sends.items():
        sheet_status, health_status, waited, during = await asyncio.to_thread(
            client.blocking_portal.call, meanwhile, send
        )
        assert sheet_status in (200, 303), (step, sheet_status)
        assert health_status == 200
        assert during and waited < 0.5, f"{step}: /healthz waited {waited:.2f} s, during the read: {during}"
