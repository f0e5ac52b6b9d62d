"""Helpers shared by the built-in processors (issue 9): input files on disk, and which input fields
hold file ids.

Not a processor module: it registers nothing.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticCustomError

from app.errors import BadInput
from app.processors import Input, PermanentError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

# This module is imported by CPU-bound processors in their own processes: keep its imports light
# (no SQLAlchemy at import time).


def invalid(message: str) -> PydanticCustomError:
    """A validation error whose message is ``message`` as written (no "Value error," prefix)."""
    return PydanticCustomError("invalid", "{reason}", {"reason": message})


def stored_file(files_dir: Path, file_id: uuid.UUID | str, what: str = "file") -> Path:
    """The stored bytes of an uploaded file, for a CPU-bound processor (``CpuContext.files_dir``).

    Raises:
        PermanentError: the file is not in storage (deleted by retention, or never uploaded).
    """
    path = Path(files_dir) / str(file_id)
    if not path.is_file():
        raise PermanentError(
            f"The {what} {file_id} is not in storage any more (it may have been deleted); upload it again."
        )
    return path


def file_fields(model: type[Input]) -> dict[str, str]:
    """The input fields of ``model`` that hold uploaded file ids: ``{field name: "file" | "files"}``,
    read from the ``widget`` hint that :data:`app.processors.FileId` / ``FileIds`` put in the schema."""
    schema = model.model_json_schema()
    found: dict[str, str] = {}
    for name, prop in (schema.get("properties") or {}).items():
        widget = prop.get("widget")
        if widget in ("file", "files"):
            found[name] = widget
    return found


def file_ids_in(model: type[Input], data: dict[str, Any]) -> dict[str, list[uuid.UUID]]:
    """The file ids that ``data`` (a job's ``input_data``) gives in file fields, by field name.
    Values that are not ids (e.g. an unresolved ``{"$ref": …}``) are skipped: the schema check reports
    them."""
    out: dict[str, list[uuid.UUID]] = {}
    for name, kind in file_fields(model).items():
        value = data.get(name)
        values = value if kind == "files" and isinstance(value, list) else [value]
        ids = []
        for v in values:
            try:
                ids.append(uuid.UUID(str(v)))
            except ValueError:
                continue
        if ids:
            out[name] = ids
    return out


OWNED_FILES = "SELECT id FROM files WHERE id = ANY(CAST(:ids AS uuid[])) AND user_id = :user_id"
ANY_FILES = "SELECT id FROM files WHERE id = ANY(CAST(:ids AS uuid[]))"


async def check_files_owned(
    conn: AsyncConnection, model: type[Input], data: dict[str, Any], principal: Any
) -> None:
    """Refuse input that names files the submitter may not read (case C20: another user's file is the
    same "no such file" as an unknown id; admins may use any file).

    CPU-bound processors get only a path (:meth:`app.processors.CpuContext.input_path`) and cannot
    check the owner themselves, so this check belongs where jobs are submitted.

    Raises:
        BadInput: ``input_data.<field>`` (or ``input_data.<field>[i]``) → "no such file; upload it first".
    """
    from sqlalchemy import text

    wanted = file_ids_in(model, data)
    all_ids = sorted({i for ids in wanted.values() for i in ids}, key=str)
    if not all_ids:
        return
    if getattr(principal, "is_admin", False):
        rows = await conn.execute(text(ANY_FILES), {"ids": all_ids})
    else:
        rows = await conn.execute(text(OWNED_FILES), {"ids": all_ids, "user_id": principal.id})
    known = set(rows.scalars())
    errors: dict[str, str] = {}
    for name, ids in wanted.items():
        for i, fid in enumerate(ids):
            if fid not in known:
                path = (
                    f"input_data.{name}" if file_fields(model)[name] == "file" else f"input_data.{name}[{i}]"
                )
                errors[path] = f"no such file ({fid}); upload it first"
    if errors:
        first, message = next(iter(errors.items()))
        raise BadInput(f"{first}: {message}", errors=errors)


MAGIC: list[tuple[bytes, str]] = [
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (Excel .xlsx and Word .docx files are ZIP archives too)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old-style Microsoft Office file (.xls or .doc)"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"ID3", "an MP3 audio file"),
    (b"\x7fELF", "a program (ELF executable)"),
]


def describe_bytes(head: bytes) -> str | None:
    """What kind of file starts with ``head``, in words (``"a PDF document"``), when it is a well-known
    binary format; ``None`` otherwise. Used to say what an upload is when it is not what a job needs."""
    for magic, words in MAGIC:
        if head.startswith(magic):
            return words
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    if head[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1"):
        return "a HEIC photo (as iPhones save them)"
    if head[4:8] == b"ftyp":
        return "a video or HEIC/AVIF image"
    return None
