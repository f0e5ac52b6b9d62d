"""A batch's results as one download: ``results.csv`` (one line per row: its input, status, result and
error), alone or in a zip with every file the rows produced (``files/row-0003-<name>``).

Both are streamed: the rows are read a page at a time on a connection of their own (the request's
session has closed by the time the body is sent), and each file is copied into the zip in chunks. The
batch's owner (or an admin) is checked before anything is sent; each row's files are then opened only
through :meth:`app.files.FileStore.owned_files` for the batch's owner — a result naming somebody
else's file id gets nothing.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import csv
import io
import json
import uuid
import zipfile
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app import batches
from app.files import FileStore, ids_in_results

CHUNK = 256 * 1024
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""A cell starting with one of these is a formula to a spreadsheet program: written with a leading
apostrophe so that a result cannot run as one when the CSV is opened."""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return "'" + text if text.startswith(FORMULA_START) else text


def header(fields: Sequence[str]) -> list[str]:
    return ["row", "job_id", "status", *fields, "result", "error"]


def csv_line(values: Sequence[Any]) -> bytes:
    out = io.StringIO()
    csv.writer(out).writerow([_cell(v) for v in values])
    return out.getvalue().encode("utf-8")


def line_of(number: int, job: Mapping[Any, Any], fields: Sequence[str]) -> list[Any]:
    data = job["input_data"] or {}
    result = job["result_data"]
    return [
        number,
        str(job["id"]),
        job["status"],
        *[data.get(f) for f in fields],
        None if result is None else json.dumps(result, ensure_ascii=False, default=str),
        job["error_message"],
    ]


async def csv_chunks(engine: AsyncEngine, batch_id: uuid.UUID, fields: Sequence[str]) -> AsyncIterator[bytes]:
    """``results.csv`` (UTF-8 with a byte-order mark, which Excel needs to read it as UTF-8)."""
    yield b"\xef\xbb\xbf" + csv_line(header(fields))
    number = 0
    async with engine.connect() as conn:
        async for page in batches.results(conn, batch_id):
            lines = []
            for job in page:
                number += 1
                lines.append(csv_line(line_of(number, job, fields)))
            yield b"".join(lines)


class _Sink(io.RawIOBase):
    """A write-only, unseekable stream whose bytes are taken out as they come: zipfile then writes
    each entry's sizes after its data, so the archive is never held whole."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.chunks.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out = b"".join(self.chunks)
        self.chunks.clear()
        return out


def _entry_name(number: int, name: str, used: set[str]) -> str:
    safe = "".join(c if c.isalnum() or c in "._- " else "_" for c in name).strip(" .") or "file"
    entry = f"files/row-{number:05d}-{safe[:100]}"
    n = 2
    while entry in used:
        entry = f"files/row-{number:05d}-{n}-{safe[:100]}"
        n += 1
    used.add(entry)
    return entry


async def zip_chunks(
    engine: AsyncEngine, store: FileStore, batch_id: uuid.UUID, owner_id: int, fields: Sequence[str]
) -> AsyncIterator[bytes]:
    """A zip of ``results.csv`` and every stored file the rows' results name (owner's files only)."""
    sink = _Sink()
    used: set[str] = set()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("results.csv", "w", force_zip64=True) as out:
            async for chunk in csv_chunks(engine, batch_id, fields):
                out.write(chunk)
        yield sink.take()
        number = 0
        async with engine.connect() as conn:
            async for page in batches.results(conn, batch_id):
                for job in page:
                    number += 1
                    ids = ids_in_results(job["result_data"] or {})
                    found = await store.owned_files(conn, owner_id, ids) if ids else {}
                    for fid in ids:
                        stored = found.get(fid)
                        if stored is None:
                            continue
                        entry = _entry_name(number, str(stored.row["name"]), used)
                        with archive.open(entry, "w", force_zip64=True) as out, stored.path.open("rb") as src:
                            while block := src.read(CHUNK):
                                out.write(block)
                                yield sink.take()
                        found.pop(fid)
    yield sink.take()
