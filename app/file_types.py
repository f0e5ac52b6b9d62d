"""What a stored file is: its content type, derived from its bytes when it is stored (never taken as
sent), the type a download is served with, the types a browser may show in place, and the kinds a
job's file field takes (pictures, tables) in words.

Nothing here reads the database or the files folder: :class:`app.files.FileStore` calls
:func:`derive_type` with a file's first bytes, the downloads (:mod:`app.web.files`) ask
:func:`served_type` and :data:`INLINE_TYPES`, and a job's submission (:mod:`app.jobs.queue.new_jobs`)
asks :func:`kind_problem` of each file its input names.
"""

from __future__ import annotations

import mimetypes

from app import text_encoding

OCTET = "application/octet-stream"
_MAGIC: list[tuple[bytes, str]] = [
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"PK\x05\x06", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"ID3", "audio/mpeg"),
]
ZIP_BASED = frozenset(
    {
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "application/vnd.oasis.opendocument.text",
        "application/vnd.oasis.opendocument.spreadsheet",
    }
)
"""Formats that are ZIP archives: named by the file's extension when its bytes are a ZIP archive."""
TEXT_TYPES = frozenset(
    {"text/plain", "text/csv", "text/tab-separated-values", "text/markdown", "application/json", "text/html"}
)
"""Text formats a file may be stored as when its bytes are text (no NUL byte) and its name or the sender
says so. Scripts and SVG are not among them: they are stored as ``application/octet-stream``."""
SERVED_TYPES = frozenset(
    {t for _, t in _MAGIC} | {"image/webp", "image/bmp", "image/heic"} | ZIP_BASED | TEXT_TYPES
)
"""Every type :func:`derive_type` can store; a download of any other stored type (rows written before
types were derived) is served as ``application/octet-stream``."""
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "text/plain"})
"""Types a browser may show in place (pictures and plain text, with ``nosniff``); everything else is
downloaded as an attachment, so no upload is ever shown as a page of this site."""


def _magic_type(head: bytes) -> str | None:
    for magic, found in _MAGIC:
        if head.startswith(magic):
            return found
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:2] == b"BM" and head[14:18] in (b"\x0c\x00\x00\x00", b"(\x00\x00\x00", b"|\x00\x00\x00"):
        return "image/bmp"
    if head[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1"):
        return "image/heic"
    return None


def derive_type(head: bytes, name: str, declared: str | None = None) -> str:
    """The content type to store for a file whose bytes start with ``head``: a well-known binary format
    by its magic bytes (a ZIP archive named ``.xlsx`` is a spreadsheet); text as one of
    :data:`TEXT_TYPES` when ``declared`` or the name's extension says so (text is what holds no NUL byte, or
    starts with UTF-16's or UTF-32's byte-order mark); else
    ``application/octet-stream``. What a sender declares is only a hint among safe choices."""
    found = _magic_type(head)
    by_name = mimetypes.guess_type(name)[0]
    if found == "application/zip" and by_name in ZIP_BASED:
        return by_name
    if found:
        return found
    if b"\x00" in head and not text_encoding.is_wide(head):
        return OCTET  # a NUL is no text's, but UTF-16's and UTF-32's, told by their byte-order mark
    hint = (declared or "").split(";")[0].strip().lower()
    for candidate in (hint, by_name):
        if candidate in TEXT_TYPES:
            return candidate
    return OCTET


def served_type(stored: str | None) -> str:
    """The ``Content-Type`` a download is served with: the stored type if it is one Jobdesk stores,
    else ``application/octet-stream`` (a type with control characters or a script type never reaches
    a response header)."""
    return stored if stored in SERVED_TYPES else OCTET


TYPE_WORDS = {
    "image/png": "a PNG picture",
    "image/jpeg": "a JPEG picture",
    "image/gif": "a GIF picture",
    "image/webp": "a WebP picture",
    "image/tiff": "a TIFF picture",
    "image/bmp": "a BMP picture",
    "image/heic": "a HEIC picture",
    "text/csv": "a CSV table",
    "text/tab-separated-values": "a tab-separated table",
    "text/plain": "a text file",
    "text/html": "a web page (HTML)",
    "text/markdown": "a Markdown text",
    "application/json": "a JSON file",
    "application/pdf": "a PDF document",
    "application/zip": "a ZIP archive",
    "application/gzip": "a gzip archive",
    "application/octet-stream": "not a file type Jobdesk recognises",
}
"""Stored content types (derived from the bytes, :func:`derive_type`) in words."""


def kind_problem(content_type: str | None, accept: str) -> str | None:
    """Why a stored file does not fit a field that accepts ``accept`` (the schema's ``accept`` hint, as
    on the form's file input), or ``None`` when it fits. Pictures must be pictures by their bytes; a
    table field takes text, and also a file of unknown type (a UTF-16 CSV has NUL bytes, so it is not
    stored as text) but never a picture, archive or document."""
    ctype = (content_type or "application/octet-stream").lower()
    words = TYPE_WORDS.get(ctype, f"a {ctype} file")
    wants = [a.strip().lower() for a in accept.split(",") if a.strip()]
    if "image/*" in wants:
        if ctype.startswith("image/"):
            return None
        return f"This file is {words}, not a picture. Choose a picture (JPEG, PNG, GIF or WebP)."
    if "text/csv" in wants:
        if ctype.startswith("text/") or ctype == "application/octet-stream":
            return None
        return f"This file is {words}, not a CSV table. Choose a .csv file, for example saved from a spreadsheet."
    return None
