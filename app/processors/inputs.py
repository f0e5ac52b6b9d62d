"""Helpers shared by the built-in processors (issue 9): input files on disk, and which input fields
hold file ids.

Not a processor module: it registers nothing.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Any

from pydantic_core import PydanticCustomError

from app.processors import Input, PermanentError, widget_of

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


@functools.lru_cache(maxsize=512)
def file_fields(model: type[Input]) -> dict[str, str]:
    """The input fields of ``model`` that hold uploaded file ids: ``{field name: "file" | "files"}``,
    read from the ``widget`` hint that :data:`app.processors.FileId` / ``FileIds`` put in the schema."""
    schema = model.model_json_schema()
    found: dict[str, str] = {}
    for name, prop in (schema.get("properties") or {}).items():
        widget = widget_of(prop)
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


def file_refs(
    model: type[Input], data: dict[str, Any], prefix: str = "input_data"
) -> list[tuple[str, uuid.UUID]]:
    """``[(field path, file id)]`` for every file id in ``data``: ``input_data.image`` for a single-file
    field, ``input_data.images[2]`` for an item of a list. :func:`app.jobs.queue.check_file_owners`
    checks them against the job's owner when the job is submitted (case C20), because CPU-bound
    processors only get a path and cannot check the owner themselves."""
    refs: list[tuple[str, uuid.UUID]] = []
    for name, ids in file_ids_in(model, data).items():
        if file_fields(model)[name] == "file":
            refs.extend((f"{prefix}.{name}", i) for i in ids)
        else:
            refs.extend((f"{prefix}.{name}[{n}]", i) for n, i in enumerate(ids))
    return refs


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
