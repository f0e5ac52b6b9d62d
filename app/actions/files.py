"""A person's upload: one file stored as theirs, within ``UPLOAD_MAX_BYTES`` per file and
``USER_MAX_UPLOAD_BYTES`` in all (:mod:`app.actions.quotas`).

Both ways in — ``POST /api/files`` and a file field of a job or pipeline form — store through
:func:`store_upload`, in the caller's transaction.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from app.actions import quotas
from app.files import FileStore
from app.formatting import format_bytes
from app.settings import Settings


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
