"""A person's upload: one file stored as theirs, within ``UPLOAD_MAX_BYTES`` per file and
``USER_MAX_UPLOAD_BYTES`` in all (:mod:`app.actions.quotas`).

Both ways in — ``POST /api/files`` and a file field of a job or pipeline form — store through
:func:`store_upload`, in the caller's transaction.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import text

from app.actions import quotas
from app.errors import BadInput
from app.files import FileStore
from app.formatting import format_bytes
from app.jobs.types import InputModel, file_fields, file_ids_in
from app.settings import Settings

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
"""Stored content types (derived from the bytes, :func:`app.files.derive_type`) in words."""
FILE_TYPES = text(
    "SELECT id, content_type FROM files WHERE id = ANY(CAST(:ids AS uuid[])) AND user_id = :user_id"
)


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


@functools.lru_cache(maxsize=512)
def _accepted_kinds(model: InputModel) -> dict[str, str]:
    """``{file field: its accept hint}`` of ``model``, read from its JSON schema once per model: building
    the schema costs more than the rest of a job submission."""
    props = model.model_json_schema().get("properties") or {}
    return {
        name: str(props[name]["accept"])
        for name in file_fields(model)
        if isinstance(props.get(name), dict) and props[name].get("accept")
    }


async def check_file_kinds(
    conn: Any, model: InputModel, data: Any, user_id: int, prefix: str = "input_data"
) -> None:
    """Check at submission that each uploaded file given in a field with an ``accept`` hint is of that
    kind by its bytes, so a CSV chosen as a picture is a form error next to the field (or a 422 naming
    it in the API) rather than a job that fails later. The same check for the job form, the pipeline
    form and the JSON API. Ids that are not the owner's are left to the queue's owner check.

    Raises:
        BadInput: ``<prefix>.<field>`` with the file's kind in words.
    """
    if not isinstance(data, dict):
        return
    wanted = _accepted_kinds(model)
    if not wanted:
        return
    found = {n: ids for n, ids in file_ids_in(model, data).items() if n in wanted}
    if not found:
        return
    all_ids = [i for ids in found.values() for i in ids]
    rows = await conn.execute(FILE_TYPES, {"ids": all_ids, "user_id": user_id})
    types = {r[0]: r[1] for r in rows.all()}
    for name, ids in found.items():
        for n, file_id in enumerate(ids):
            if file_id not in types:
                continue
            problem = kind_problem(types[file_id], wanted[name])
            if problem:
                where = f"{prefix}.{name}" if file_fields(model)[name] == "file" else f"{prefix}.{name}[{n}]"
                raise BadInput.field(where, problem)


def _copy_upload(src: Any, directory: Path, limit: int) -> tuple[Path | None, int]:
    """Copy an upload to a temporary file in ``directory``; ``(None, size)`` when above ``limit``."""
    directory.mkdir(parents=True, exist_ok=True)
    src.seek(0, os.SEEK_END)
    size = src.tell()
    src.seek(0)
    if size > limit:
        return None, size
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".upload-")
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return Path(tmp), size


async def store_upload(
    upload: Any,
    conn: Any,
    store: FileStore,
    *,
    user_id: int,
    max_bytes: int,
    person: Any = None,
    settings: Settings | None = None,
) -> tuple[Any | None, str | None, int]:
    """Store one uploaded file (an ``UploadFile``) owned by ``user_id`` in the caller's transaction.

    Returns ``(row, None, size)`` on success, or ``(None, message, size)`` when the file is empty or
    larger than ``max_bytes`` (``UPLOAD_MAX_BYTES``; the message names the limit in words). With
    ``person`` and ``settings``, the person's stored bytes are checked too.

    Raises:
        RateLimited: 429, the file would take the person above ``USER_MAX_UPLOAD_BYTES``.
    """
    path, size = await asyncio.to_thread(_copy_upload, upload.file, store.dir, max_bytes)
    if path is None:
        return (
            None,
            f"This file is {format_bytes(size)}; the largest file you can upload is {format_bytes(max_bytes)}.",
            size,
        )
    if size == 0:
        path.unlink(missing_ok=True)
        return None, "This file is empty. Choose a file with something in it.", 0
    try:
        if person is not None and settings is not None:
            await quotas.check_upload(conn, person, settings, size)
        row = await store.save(
            conn,
            user_id=user_id,
            name=upload.filename,
            source=path,
            move=True,
            content_type=getattr(upload, "content_type", None),
        )
    finally:
        path.unlink(missing_ok=True)
    return row, None, size
