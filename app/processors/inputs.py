"""Input helpers shared by the built-in processors: validation messages, input files on disk, which
input fields hold file ids (:func:`file_fields`, :func:`file_ids_in`, :func:`file_refs`, defined in
:mod:`app.jobs.types` because the queue checks them too), and what kind of file some bytes are.

Not a processor module: it registers nothing.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pydantic_core import PydanticCustomError

from app.jobs.file_inputs import file_fields, file_ids_in, file_refs
from app.processors import CpuContext

__all__ = ["describe_bytes", "file_fields", "file_ids_in", "file_refs", "invalid", "stored_file"]

# This module is imported by CPU-bound processors in their own processes: keep its imports light
# (no SQLAlchemy at import time).


def invalid(message: str) -> PydanticCustomError:
    """A validation error whose message is ``message`` as written (no "Value error," prefix)."""
    return PydanticCustomError("invalid", "{reason}", {"reason": message})


def stored_file(ctx: CpuContext, file_id: uuid.UUID | str, what: str = "file") -> Path:
    """The bytes of one of a CPU-bound job's files, as the worker resolved them for the job's owner
    (:meth:`app.processors.CpuContext.input_path`); ``what`` names the file in the error.

    Raises:
        PermanentError: not one of the job's files (not an id, unknown, deleted, or not the owner's).
    """
    return ctx.input_path(file_id, what)


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
