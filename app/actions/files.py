"""A person's upload: one file stored as theirs, within ``UPLOAD_MAX_BYTES`` per file and
``USER_MAX_UPLOAD_BYTES`` in all (:mod:`app.actions.quotas`).

Every way in — ``POST /api/files``, a file field of a job or pipeline form, the batch form's
spreadsheet and files — stores through :func:`store_upload`, in the caller's transaction. A form's
upload carries the form's one-time key: the same form sent again (a reload, the back button, a double
click) with the same file is answered with the file stored the first time, looked up under the person's
lock before anything is stored or counted, so a repeat neither fills their storage nor is refused at
their storage limit.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from app.actions import quotas
from app.files import FileStore
from app.formatting import format_sizes
from app.quotas import lock as lock_limits
from app.settings import Settings


def _copy_upload(src: Any, directory: Path, limit: int) -> tuple[Path | None, int, str]:
    """Copy an upload to a temporary file in ``directory``; ``(path, size, sha256)``, or
    ``(None, size, "")`` when above ``limit``."""
    directory.mkdir(parents=True, exist_ok=True)
    src.seek(0, os.SEEK_END)
    size = src.tell()
    src.seek(0)
    if size > limit:
        return None, size, ""
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".upload-")
    with os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
    return Path(tmp), size, digest.hexdigest()


async def store_upload(
    upload: Any,
    conn: Any,
    store: FileStore,
    *,
    user_id: int,
    max_bytes: int,
    person: Any = None,
    settings: Settings | None = None,
    form_key: str | None = None,
) -> tuple[Any | None, str | None, int]:
    """Store one uploaded file (an ``UploadFile``) owned by ``user_id`` in the caller's transaction.

    Returns ``(row, None, size)`` on success, or ``(None, message, size)`` when the file is empty or
    larger than ``max_bytes`` (``UPLOAD_MAX_BYTES``; the message names the limit in words). With
    ``person`` and ``settings``, the person's stored bytes are checked too. With ``form_key`` (the
    one-time key of the form the file came with), the file this person stored with that key, name and
    bytes before is returned instead of a new copy (nothing stored, nothing counted).

    Raises:
        RateLimited: 429, the file would take the person above ``USER_MAX_UPLOAD_BYTES``.
    """
    path, size, sha256 = await asyncio.to_thread(_copy_upload, upload.file, store.dir, max_bytes)
    if path is None:
        said, most = format_sizes(size, max_bytes)
        return (
            None,
            f"This file is {said}; the largest file you can upload is {most}.",
            size,
        )
    if size == 0:
        path.unlink(missing_ok=True)
        return None, "This file is empty. Choose a file with something in it.", 0
    try:
        if form_key is not None:
            # Under the person's lock (held to the transaction's end, as their uploads take it): a
            # repeat in flight waits for the first and finds its file.
            await lock_limits(conn, user_id)
            earlier = await store.stored_with(
                conn, user_id=user_id, form_key=form_key, sha256=sha256, name=upload.filename or ""
            )
            if earlier is not None:
                return earlier, None, size
        if person is not None and settings is not None:
            await quotas.check_upload(conn, person, settings, size)
        row = await store.save(
            conn,
            user_id=user_id,
            name=upload.filename,
            source=path,
            move=True,
            content_type=getattr(upload, "content_type", None),
            form_key=form_key,
            # The storage rule every file stored for a person goes through (checked above already, in
            # this transaction and under the same lock, to answer with a 429 in words).
            limit=settings.user_max_upload_bytes if person is not None and settings is not None else 0,
        )
    finally:
        path.unlink(missing_ok=True)
    return row, None, size
