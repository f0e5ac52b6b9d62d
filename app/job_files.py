"""``ctx.files`` for one attempt of a running job (:class:`JobFiles`): the owner's files it may read,
and its outputs, stored for the owner within their storage limit (:func:`app.storage_limit.check_room`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine

from app.files import (
    DELETE_JOB_FILES,
    MAX_PROCESS_FILES,
    FileStore,
    StoredFile,
    clean_name,
    file_ref,
    ids_in_results,
)
from app.formatting import format_bytes, format_sizes
from app.jobs.file_inputs import file_ids_in
from app.jobs.types import Input, PermanentError
from app.silence import answered_within
from app.storage_limit import StorageFull


class JobFiles:
    """``ctx.files`` for one attempt of a running job: read the owner's files, save outputs owned by the
    job's owner within their storage limit (``limit``, ``USER_MAX_UPLOAD_BYTES``; 0: none).

    An output that would take the owner above the limit fails the attempt for good (a retry would meet
    the same limit): the files this attempt saved before it are deleted too, so a half-made result
    takes no room, and :attr:`refused` keeps the reason, so that a processor that catches the error
    cannot complete the job anyway."""

    def __init__(
        self,
        store: FileStore,
        engine: AsyncEngine | None,
        job: Any,
        *,
        limit: int = 0,
        retention_days: float | None = None,
        answer_secs: float | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.answer_secs = answer_secs
        """How long each of its transactions may wait for the database's answer (its commit included)
        before its connection is closed (:func:`app.silence.answered_within`): on a connection gone silent
        the processor would otherwise wait for ever. ``None``: no bound."""
        self.job = job
        self.limit = limit
        self.retention_days = retention_days
        self.saved: list[uuid.UUID] = []
        """The files this attempt stored, in order."""
        self.refused: str | None = None
        """Why an output was refused (the job's error), once one was."""

    async def _open(self, file_id: Any) -> StoredFile:
        assert self.engine is not None
        async with answered_within(self.engine.connect(), self.answer_secs) as conn:
            found = await self.store.owned_files(conn, self.job["user_id"], [file_id])
        if not found:
            raise PermanentError(
                f"File {str(file_id)[:100]} does not exist, is no longer stored, or is not yours."
            )
        return next(iter(found.values()))

    async def info(self, file_id: Any) -> RowMapping:
        """The file's row, if the job's owner may read it.

        Raises:
            PermanentError: not a file id, unknown, gone, or not the owner's (retrying cannot fix it).
        """
        return (await self._open(file_id)).row

    async def path(self, file_id: Any) -> Path:
        """Path of an input file's bytes, checked against the job's owner when called.

        Raises:
            PermanentError: see :meth:`info`.
        """
        return (await self._open(file_id)).path

    async def for_process(
        self, model: Input, parents: Mapping[str, Any]
    ) -> tuple[dict[str, Path], dict[str, str]]:
        """``(paths, names)`` by file id, of the files a CPU-bound processor may read: those named in
        its input's file fields (``$ref`` already resolved) and those listed in its parents' results,
        resolved now through :meth:`FileStore.owned_files` for the job's owner. The child process gets
        only these paths; asking for any other id is its permanent error."""
        wanted: list[object] = [
            i for ids in file_ids_in(type(model), model.model_dump(mode="json")).values() for i in ids
        ]
        wanted += ids_in_results(parents, MAX_PROCESS_FILES - len(wanted))
        if not wanted or self.engine is None:
            return {}, {}
        async with answered_within(self.engine.connect(), self.answer_secs) as conn:
            found = await self.store.owned_files(conn, self.job["user_id"], wanted)
        return {k: f.path for k, f in found.items()}, {k: f.row["name"] for k, f in found.items()}

    async def save(
        self,
        name: str,
        data: bytes | None = None,
        *,
        source: Path | None = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """Store an output file owned by the job's owner; returns its :func:`file_ref`.

        Raises:
            PermanentError: the file would take the owner's files above their storage limit (the
            attempt's earlier outputs are deleted; :attr:`refused` says why), or one already did.
        """
        assert self.engine is not None
        if self.refused is not None:
            raise PermanentError(self.refused)
        try:
            async with answered_within(self.engine.begin(), self.answer_secs) as conn:
                row = await self.store.save(
                    conn,
                    user_id=self.job["user_id"],
                    name=name,
                    data=data,
                    source=source,
                    content_type=content_type,
                    job_id=self.job["id"],
                    move=source is not None,
                    limit=self.limit,
                )
        except StorageFull as full:
            removed = await self._remove_saved()
            self.refused = self._full_words(full, clean_name(name), removed)
            raise PermanentError(self.refused) from None
        self.saved.append(row["id"])
        return file_ref(row)

    async def _remove_saved(self) -> int:
        """Delete the files this attempt stored (rows, then bytes); how many there were."""
        if not self.saved or self.engine is None:
            return 0
        async with answered_within(self.engine.begin(), self.answer_secs) as conn:
            rows = await conn.execute(DELETE_JOB_FILES, {"ids": self.saved, "job_id": self.job["id"]})
            gone = [r.id for r in rows]
        await asyncio.to_thread(self.store.remove, gone)  # off the event loop the worker's leases need
        self.saved = []
        return len(gone)

    def _full_words(self, full: StorageFull, name: str, removed: int) -> str:
        total, most = format_sizes(full.stored + full.adding, full.limit)
        words = (
            f"Not enough room for this job's results: storing {name} ({format_bytes(full.adding)}) would "
            f"take your stored files to {total}, above the limit of {most} per person."
        )
        if removed:
            words += f" The {removed} file{'s' if removed != 1 else ''} this job had stored were deleted."
        if self.retention_days is not None:
            words += (
                f" Files are deleted {self.retention_days:g} days after the job that used them finished;"
                " run it again once there is room."
            )
        return words
