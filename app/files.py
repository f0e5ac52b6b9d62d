"""Stored files: uploads, and files produced by processors (issue 6 §6, issue 9 §1).

Bytes live under ``JOBDESK_DATA_DIR/files/<id>``; the ``files`` row holds the owner, name, type, size
and the job that produced it. Reads are checked against the owner (admins may read all; anyone else gets
the same :class:`~app.errors.NotFound` as for an unknown id, case C20). Files produced by a job belong to
the job's owner and are deleted with the job by retention.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from uuid_utils.compat import uuid7

from app.errors import BadInput, NotFound

MAX_NAME = 200

INSERT_FILE = text(
    """
    INSERT INTO files (id, user_id, job_id, name, content_type, size, sha256)
    VALUES (:id, :user_id, :job_id, :name, :content_type, :size, :sha256)
    RETURNING id, user_id, job_id, name, content_type, size, sha256, created_at
    """
)
GET_FILE = text(
    "SELECT id, user_id, job_id, name, content_type, size, sha256, created_at FROM files WHERE id = :id"
)


def clean_name(name: str | None) -> str:
    """A safe display/download name: no path, no control characters, at most 200 characters."""
    base = os.path.basename((name or "").replace("\\", "/")).strip()
    base = "".join(ch for ch in base if ch.isprintable() and ch not in '"<>|:*?')
    return (base or "file")[:MAX_NAME]


def guess_type(name: str, declared: str | None = None) -> str:
    if declared and declared != "application/octet-stream" and "/" in declared and len(declared) < 120:
        return declared.split(";")[0].strip()
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def file_ref(row: RowMapping | dict[str, Any]) -> dict[str, Any]:
    """How a file appears in ``result_data``: ``{"file_id", "name", "size", "content_type"}``; the UI
    renders such an object as a download link."""
    return {
        "file_id": str(row["id"]),
        "name": row["name"],
        "size": row["size"],
        "content_type": row["content_type"],
    }


class FileStore:
    """Files under ``files_dir``. Writes go to a temporary file first and are renamed into place, so a
    crash never leaves a half-written file under a real id."""

    def __init__(self, files_dir: Path) -> None:
        self.dir = files_dir

    def path(self, file_id: uuid.UUID | str) -> Path:
        return self.dir / str(uuid.UUID(str(file_id)))

    def _place(self, file_id: uuid.UUID, source: Path, *, move: bool) -> tuple[int, str]:
        self.dir.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(source, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        size = source.stat().st_size
        target = self.path(file_id)
        if move:
            shutil.move(str(source), target)
        else:
            shutil.copyfile(source, target)
        return size, digest.hexdigest()

    async def save(
        self,
        conn: AsyncConnection,
        *,
        user_id: int,
        name: str,
        data: bytes | None = None,
        source: Path | None = None,
        content_type: str | None = None,
        job_id: uuid.UUID | None = None,
        move: bool = False,
    ) -> RowMapping:
        """Store ``data`` (or the file at ``source``) and insert its row in the caller's transaction.

        Raises:
            BadInput: neither or both of ``data`` and ``source``.
        """
        if (data is None) == (source is None):
            raise BadInput("give either data or a source path")
        file_id = uuid7()
        name = clean_name(name)
        if data is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".upload-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            source, move = Path(tmp), True
        assert source is not None
        size, sha = self._place(file_id, source, move=move)
        try:
            return (
                (
                    await conn.execute(
                        INSERT_FILE,
                        {
                            "id": file_id,
                            "user_id": user_id,
                            "job_id": job_id,
                            "name": name,
                            "content_type": guess_type(name, content_type),
                            "size": size,
                            "sha256": sha,
                        },
                    )
                )
                .mappings()
                .one()
            )
        except BaseException:
            self.path(file_id).unlink(missing_ok=True)
            raise

    async def get(self, conn: AsyncConnection, file_id: Any, principal: Any | None) -> RowMapping:
        """The file's row, checked against ``principal`` (owner or admin; ``None`` = no check).

        Raises:
            NotFound: unknown, malformed or another user's id — the same answer for all three.
        """
        try:
            fid = uuid.UUID(str(file_id))
        except ValueError:
            raise NotFound("No such file.") from None
        row = (await conn.execute(GET_FILE, {"id": fid})).mappings().first()
        if row is None or (
            principal is not None and not principal.is_admin and row["user_id"] != principal.id
        ):
            raise NotFound("No such file.")
        return row

    def remove(self, file_ids: list[uuid.UUID]) -> None:
        """Delete stored bytes (after their rows were deleted and committed)."""
        for fid in file_ids:
            self.path(fid).unlink(missing_ok=True)


class JobFiles:
    """``ctx.files`` for a running job: read the owner's files, save outputs owned by the job's owner."""

    def __init__(self, store: FileStore, engine: AsyncEngine | None, job: Any) -> None:
        self.store = store
        self.engine = engine
        self.job = job

    async def info(self, file_id: Any) -> RowMapping:
        """The file's row, if the job's owner may read it.

        Raises:
            PermanentError: unknown file or not the owner's (retrying cannot fix it).
        """
        from app.processors import PermanentError

        assert self.engine is not None
        owner = _Owner(self.job["user_id"])
        async with self.engine.connect() as conn:
            try:
                return await self.store.get(conn, file_id, owner)
            except NotFound:
                raise PermanentError(f"File {file_id} does not exist or is not yours.") from None

    async def names(self, file_ids: list[Any]) -> dict[str, str]:
        """``{file id: original name}`` for those of ``file_ids`` that the job's owner may read (one
        query by primary key); for CPU-bound processors, which cannot query (``CpuContext.file_names``)."""
        if not file_ids or self.engine is None:
            return {}
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT id, name FROM files WHERE id = ANY(:ids) AND user_id = :owner"),
                {"ids": [uuid.UUID(str(i)) for i in file_ids], "owner": self.job["user_id"]},
            )
            return {str(r.id): r.name for r in rows}

    async def path(self, file_id: Any) -> Path:
        """Path of an input file's bytes (checked against the job's owner)."""
        await self.info(file_id)
        return self.store.path(file_id)

    async def save(
        self,
        name: str,
        data: bytes | None = None,
        *,
        source: Path | None = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """Store an output file owned by the job's owner; returns its :func:`file_ref`."""
        assert self.engine is not None
        async with self.engine.begin() as conn:
            row = await self.store.save(
                conn,
                user_id=self.job["user_id"],
                name=name,
                data=data,
                source=source,
                content_type=content_type,
                job_id=self.job["id"],
                move=source is not None,
            )
        return file_ref(row)


class _Owner:
    def __init__(self, user_id: int) -> None:
        self.id = user_id
        self.is_admin = False
