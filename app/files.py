"""Stored files: uploads, and files produced by processors.

Bytes live under ``JOBDESK_DATA_DIR/files/<id>``. A file id is a UUID and nothing else: every path under
that folder is made by :meth:`FileStore._bytes_path` from a parsed :class:`uuid.UUID`, never from text a
person or a job gave. The ``files`` row holds the owner, name, type, size and the job that produced it.

Who reads what:

* a person reads their own files (admins: every file); anyone else gets the same
  :class:`~app.errors.NotFound` as for an unknown id, so ids of other people's files cannot be probed;
* a person named as an approver of a step that waits for a decision also reads the files that step's
  result lists, and only while it waits: they are asked to judge that result, and cannot without opening
  it. Not the pipeline's other files (inputs, other steps' outputs), and not after the step is decided —
  the decision is what the access was for, and what stays is the owner's (:meth:`FileStore.get`);
* a job reads only its owner's files — an admin's job too, because a job acts for the person who
  submitted it. Every read goes through :meth:`FileStore.owned_files`, which asks the database at that
  moment; that holds for ids given inline, taken from a parent's result by ``$ref``, or listed in a
  parent's result. CPU-bound processors, which run in a child process without a database, get only
  the files the worker resolved through it (:meth:`JobFiles.for_process`).

The stored content type is derived from the bytes (:mod:`app.file_types`), never taken as sent, and a
file is stored within its owner's storage limit (:mod:`app.storage_limit`). Files produced by a job
belong to the job's owner. Retention (:func:`app.jobs.queue.prune`) deletes a file
once no job holds it (``files.job_id``: the job that produced it or first used it, until that job is
deleted) and it is older than ``JOB_RETENTION_DAYS`` — but never while a job still in the database, a
pipeline or a schedule names it in its input, since those can still run with it. Bytes whose row was
never committed are found in the folder (:meth:`FileStore.unrecorded_candidates`) and deleted once as
old (:class:`app.worker.maintenance.Retention`).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import event, text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.util import await_only
from sqlalchemy.util.concurrency import in_greenlet
from uuid_utils.compat import uuid7

from app.errors import BadInput, NotFound, Unavailable
from app.file_types import derive_type
from app.storage_limit import check_room

log = structlog.get_logger("jobdesk.files")

NO_ROOM = (errno.ENOSPC, errno.EDQUOT)
"""A write refused for want of room: the disk (or the quota) of the files folder is full."""

MAX_NAME = 200
MAX_PROCESS_FILES = 2000
"""Most files a CPU-bound job is given (its input's files plus those its parents' results list)."""

_COLUMNS = "id, user_id, job_id, name, content_type, size, sha256, created_at"
INSERT_FILE = text(
    f"""
    INSERT INTO files (id, user_id, job_id, name, content_type, size, sha256, form_key)
    VALUES (:id, :user_id, :job_id, :name, :content_type, :size, :sha256, :form_key)
    RETURNING {_COLUMNS}
    """
)
FORM_FILE = text(
    f"""
    SELECT {_COLUMNS} FROM files
    WHERE user_id = :user_id AND form_key = :form_key AND sha256 = :sha256 AND name = :name
    """
)
GET_FILE = text(f"SELECT {_COLUMNS} FROM files WHERE id = :id")
OWNED_FILES = text(f"SELECT {_COLUMNS} FROM files WHERE id = ANY(CAST(:ids AS uuid[])) AND user_id = :owner")
RECORDED = text("SELECT id FROM files WHERE id = ANY(CAST(:ids AS uuid[]))")
APPROVER_READS = text(
    """
    SELECT EXISTS (
        SELECT 1 FROM jobs j JOIN job_approval_rules r ON r.job_id = j.id
        WHERE j.status = 'waiting_approval' AND j.user_id = :owner AND :reader = ANY(r.user_ids)
          AND jsonb_path_exists(j.result_data, '$.** ? (@.file_id == $id)', jsonb_build_object('id', CAST(:id AS text)))
    )
    """
)
"""Whether ``reader`` is named as an approver of a step of ``owner``'s that waits for a decision and
whose result lists the file ``id`` (a ``file_id`` at any depth, as :func:`ids_in_results` reads it).
The step's rule is kept in ``job_approval_rules`` (:mod:`app.jobs.approvals`); the owner and admins
read every such file anyway, so the named people are the only ones this adds."""

DELETE_JOB_FILES = text(
    "DELETE FROM files WHERE id = ANY(CAST(:ids AS uuid[])) AND job_id = :job_id RETURNING id"
)
DELETE_JOB_OUTPUTS = text(
    r"""
    WITH job AS (
        SELECT id, user_id, lower(COALESCE(CAST(input_data AS text), '')) AS input FROM jobs WHERE id = :job_id
    ),
    outputs AS (
        SELECT f.id FROM files f JOIN job ON f.job_id = job.id WHERE strpos(job.input, CAST(f.id AS text)) = 0
    ),
    named AS MATERIALIZED (
        SELECT DISTINCT CAST(m[1] AS uuid) AS id
        FROM (
            SELECT o.input_data FROM jobs o JOIN job ON o.user_id = job.user_id AND o.id <> job.id
            UNION ALL SELECT p.input_data FROM pipelines p JOIN job ON p.user_id = job.user_id
            UNION ALL SELECT s.input_data FROM schedules s
        ) i,
        regexp_matches(lower(CAST(i.input_data AS text)), '([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})', 'g') m
        WHERE EXISTS (SELECT 1 FROM outputs)
    )
    DELETE FROM files f USING outputs o
    WHERE f.id = o.id AND NOT EXISTS (SELECT 1 FROM named n WHERE n.id = o.id)
    RETURNING f.id
    """
)
"""The files a job produced (its outputs), deleted with the job: those attached to it that its own input
does not name (an upload is attached to the first job naming it, and stays its owner's when the job
goes). An output that another of the owner's jobs or pipelines, or a schedule, names in its input stays
too, left to retention as a file whose job was deleted (:data:`app.jobs.queue.sweep.PRUNE_ORPHAN_FILES`
re-homes it to the job naming it). The caller removes the bytes after commit (:func:`remove_after_commit`).

The inputs that may name an output are read once for all the job's outputs, and only when it has some:
every file id they hold is taken out of them in that one pass (``named``; an id is a fixed pattern, so
that finds exactly the ids a text search for each would) and the outputs are compared with those, where
a search of every input per output read the owner's inputs once per output file."""


def remove_after_commit(
    db: AsyncConnection | AsyncSession, store: FileStore, file_ids: list[uuid.UUID]
) -> None:
    """Delete the bytes of ``file_ids`` (whose rows the session ``db``'s transaction deleted) once that
    transaction commits; if it rolls back, the rows are back and the bytes stay. Bytes no row names after
    a crash between the commit and this, or deleted on a bare connection, are retention's
    (:meth:`FileStore.unrecorded_candidates`).

    The deletion runs in a thread, as retention's does, and the commit waits for it: its caller (a
    request's answer) comes after the bytes are gone, while the event loop goes on. On the loop, a slow or
    stalled file system (a network mount) stopped everything else the process does meanwhile — under
    ``jobdesk serve``, the in-app worker's lease renewals, claims and outcomes."""
    if not file_ids or not isinstance(db, AsyncSession):
        return
    session = db.sync_session
    pending = list(file_ids)

    # Both events fire for a savepoint too: only the outermost transaction's end decides. The listeners
    # stay registered (removing one while it is called is not allowed) and do nothing after the first end.
    def committed(_: Any) -> None:
        if pending and not session.in_nested_transaction():
            gone = list(pending)
            pending.clear()
            if in_greenlet():  # an AsyncSession's commit: its sync part runs in SQLAlchemy's greenlet,
                # which can wait on the event loop for a coroutine, here the deletion in a thread
                await_only(asyncio.to_thread(_remove_or_log, store, gone))
            else:
                _remove_or_log(store, gone)

    def rolled_back(_: Any) -> None:
        if not session.in_nested_transaction():
            pending.clear()

    event.listen(session, "after_commit", committed)
    event.listen(session, "after_rollback", rolled_back)


def _remove_or_log(store: FileStore, file_ids: list[uuid.UUID]) -> None:
    """Delete the bytes of ``file_ids`` after their rows' deletion committed, each on its own: one that
    cannot be deleted (a permission, a read-only or lost mount) is logged and left to retention, which
    deletes bytes no row names (:meth:`FileStore.unrecorded_candidates`). Raising here raised out of the
    commit that had already succeeded, and the request answered that nothing was saved."""
    for fid in file_ids:
        try:
            store.remove([fid])
        except Exception as exc:
            log.warning(
                "could not delete a deleted file's bytes; retention will retry",
                file_id=str(fid),
                error=repr(exc)[:300],
            )


_UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def parse_file_id(value: object) -> uuid.UUID:
    """``value`` as a file id: a :class:`uuid.UUID`, or the 36-character text of one — nothing else (no
    path, no ``urn:`` or brace forms, no surrounding spaces).

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str) and _UUID_TEXT.fullmatch(value):
        return uuid.UUID(value)
    raise ValueError(f"not a file id: {str(value)[:100]!r}")


def _made_ms(name: str) -> int:
    """When the UUIDv7 whose text is ``name`` was made, in ms since the epoch (its first 12 hex digits);
    0 when they are not hex (the name is then parsed, and refused, as it would be without this)."""
    try:
        return int(name[:8] + name[9:13], 16)
    except ValueError:
        return 0


FALLBACK_NAME = "file"
"""The name of a file whose own name leaves nothing usable (``..``, ``/``, only dots or spaces)."""
_RESERVED = re.compile(r"(?i)(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³])(\.|$)")
"""Names Windows keeps for devices, with any extension: a download saved as ``nul.csv`` writes nowhere."""


def clean_name(name: str | None) -> str:
    """The one name every stored file is given (an upload on every path, a job's output): its last part
    after either separator, without characters that are not printable (controls, direction marks) or
    that a file name may not hold on some system (``"<>|:*?``), without spaces around it and dots after
    it (a name of only dots is a directory's, ``.`` or ``..``; Windows drops a trailing one), at most
    :data:`MAX_NAME` characters with its extension kept, a Windows device name set apart with ``_``, and
    :data:`FALLBACK_NAME` when nothing is left."""
    kept = "".join(ch for ch in (name or "") if ch.isprintable() and ch not in '"<>|:*?')
    base = kept.replace("\\", "/").rsplit("/", 1)[-1].strip(" ").rstrip(" .")
    if len(base) > MAX_NAME:
        stem, dot, ext = base.rpartition(".")
        ext = f"{dot}{ext}" if stem and len(ext) <= 16 else ""
        base = base[: len(base) - len(ext)][: MAX_NAME - len(ext)].rstrip(" .") + ext
    if _RESERVED.match(base):
        base = f"_{base}"[:MAX_NAME]
    return base or FALLBACK_NAME


def file_ref(row: RowMapping | dict[str, Any]) -> dict[str, Any]:
    """How a file appears in ``result_data``: ``{"file_id", "name", "size", "content_type"}``; the UI
    renders such an object as a download link."""
    return {
        "file_id": str(row["id"]),
        "name": row["name"],
        "size": row["size"],
        "content_type": row["content_type"],
    }


@dataclass(frozen=True)
class StoredFile:
    """A file a reader may open: its row and the path of its bytes."""

    row: RowMapping
    path: Path


class FileStore:
    """Files under ``files_dir``. Writes go to a temporary file first and are renamed into place, so a
    crash never leaves a half-written file under a real id."""

    def __init__(self, files_dir: Path) -> None:
        self.dir = files_dir

    def _bytes_path(self, file_id: uuid.UUID) -> Path:
        """The one place a path under the files folder is made, from a parsed UUID only."""
        if not isinstance(file_id, uuid.UUID):
            raise TypeError("a stored file's path is made from a UUID only")
        return self.dir / str(file_id)

    def path(self, file_id: uuid.UUID | str) -> Path:
        """Where the bytes of ``file_id`` are (or would be); no owner check — for the web's downloads
        after :meth:`get`, and for maintenance. Jobs use :meth:`owned_files`.

        Raises:
            ValueError: ``file_id`` is not a file id.
        """
        return self._bytes_path(parse_file_id(file_id))

    def _store_bytes(
        self, file_id: uuid.UUID, data: bytes | None, source: Path | None, move: bool
    ) -> tuple[int, str, bytes]:
        """``data`` (through a temporary file in the folder) or the file at ``source``, placed under
        ``file_id``: its size, SHA-256 and first bytes. Blocking: run in a thread."""
        if data is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".upload-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            source, move = Path(tmp), True
        assert source is not None
        return self._place(file_id, source, move=move)

    def _place(self, file_id: uuid.UUID, source: Path, *, move: bool) -> tuple[int, str, bytes]:
        self.dir.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(source, "rb") as fh:
            head = fh.read(1 << 12)
            digest.update(head)
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        size = source.stat().st_size
        target = self._bytes_path(file_id)
        if move:
            shutil.move(str(source), target)
        else:
            shutil.copyfile(source, target)
        return size, digest.hexdigest(), head

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
        form_key: str | None = None,
        limit: int = 0,
    ) -> RowMapping:
        """Store ``data`` (or the file at ``source``) and insert its row in the caller's transaction.
        ``content_type`` is only a hint: the stored type is
        :func:`~app.file_types.derive_type` of the bytes. ``form_key``: the one-time key of the form it
        was uploaded with (:meth:`stored_with`). ``limit``: the owner's ``USER_MAX_UPLOAD_BYTES``
        (:func:`~app.storage_limit.check_room`, once the size is known; the bytes are removed when it
        refuses).

        Raises:
            BadInput: neither or both of ``data`` and ``source``.
            StorageFull: (:mod:`app.storage_limit`) the file would take its owner's files above ``limit``.
        """
        if (data is None) == (source is None):
            raise BadInput("give either data or a source path")
        file_id = uuid7()
        name = clean_name(name)
        # Off the event loop: writing, hashing and copying take seconds for a large file (a job's output),
        # and the loop renews leases and answers requests meanwhile. Bytes placed for a call cancelled
        # while the thread worked are removed once it is done (retention would find them otherwise).
        placing = asyncio.ensure_future(asyncio.to_thread(self._store_bytes, file_id, data, source, move))
        try:
            size, sha, head = await asyncio.shield(placing)
        except asyncio.CancelledError:
            placing.add_done_callback(lambda _: self._bytes_path(file_id).unlink(missing_ok=True))
            raise
        except OSError as exc:
            raise self._cannot_store(exc) from exc
        values = {
            "id": file_id,
            "user_id": user_id,
            "job_id": job_id,
            "name": name,
            "content_type": derive_type(head, name, content_type),
            "size": size,
            "sha256": sha,
            "form_key": form_key,
        }
        try:
            await check_room(conn, user_id, size, limit)
            return (await conn.execute(INSERT_FILE, values)).mappings().one()
        except BaseException:
            self._bytes_path(file_id).unlink(missing_ok=True)
            raise

    def _cannot_store(self, exc: OSError) -> Unavailable:
        """A write to the files folder that failed (the disk full, the folder read-only or not ours) as a
        503 in words, logged for the administrators with the error: the server's fault, not the
        person's, and not the database's, and one to try again once it is mended."""
        full = exc.errno in NO_ROOM
        log.error("a file could not be stored", files_dir=str(self.dir), error=f"{type(exc).__name__}: {exc}")
        reason = (
            "the server has no room left for files" if full else "the server cannot write its files folder"
        )
        return Unavailable(
            f"The file could not be stored: {reason}. Nothing was saved; try again later, and tell an "
            "administrator if it goes on."
        )

    async def stored_with(
        self, conn: AsyncConnection, *, user_id: int, form_key: str, sha256: str, name: str
    ) -> RowMapping | None:
        """The file ``user_id`` uploaded with the form key ``form_key`` with these bytes and name, if
        any: the same form sent again is answered with it instead of a second copy."""
        values = {"user_id": user_id, "form_key": form_key, "sha256": sha256, "name": clean_name(name)}
        return (await conn.execute(FORM_FILE, values)).mappings().first()

    async def get(
        self, conn: AsyncConnection, file_id: Any, principal: Any | None, *, approvers: bool = True
    ) -> RowMapping:
        """The file's row, checked against a signed-in ``principal`` (owner or admin; ``None`` = no
        check). With ``approvers`` (every download: the page, its ``?view=1`` and the API), a person
        named as an approver of a step waiting for a decision also reads the files its result lists
        (:data:`APPROVER_READS`); a form that puts files into a job's input passes ``False``, since
        only the owner's own files may go there. Not for jobs: they read through :meth:`owned_files`.

        Raises:
            NotFound: unknown, malformed or another user's id — the same answer for all three.
        """
        try:
            fid = parse_file_id(file_id)
        except ValueError:
            raise NotFound("No such file.") from None
        row = (await conn.execute(GET_FILE, {"id": fid})).mappings().first()
        if row is None:
            raise NotFound("No such file.")
        if principal is None or principal.is_admin or row["user_id"] == principal.id:
            return row
        if approvers:
            params = {"owner": row["user_id"], "reader": principal.id, "id": str(fid)}
            if (await conn.execute(APPROVER_READS, params)).scalar_one():
                return row
        raise NotFound("No such file.")

    async def owned_files(
        self, conn: AsyncConnection, owner_id: int, file_ids: Iterable[object]
    ) -> dict[str, StoredFile]:
        """The files among ``file_ids`` that belong to ``owner_id`` and whose bytes are stored, by id text,
        asked of the database now. This is how a job opens a file: ids that are not UUIDs, unknown,
        another user's (whoever the owner is, admins included) or without bytes are left out."""
        ids: list[uuid.UUID] = []
        for value in file_ids:
            try:
                ids.append(parse_file_id(value))
            except ValueError:
                continue
        if not ids:
            return {}
        rows = await conn.execute(OWNED_FILES, {"ids": list(dict.fromkeys(ids)), "owner": owner_id})
        found: dict[str, StoredFile] = {}
        for row in rows.mappings():
            path = self._bytes_path(row["id"])
            if path.is_file():
                found[str(row["id"])] = StoredFile(row, path)
        return found

    def remove(self, file_ids: list[uuid.UUID]) -> None:
        """Delete stored bytes (after their rows were deleted and committed)."""
        for fid in file_ids:
            self._bytes_path(parse_file_id(fid)).unlink(missing_ok=True)

    async def remove_unrecorded(
        self, conn: AsyncConnection, file_ids: Iterable[uuid.UUID]
    ) -> list[uuid.UUID]:
        """Delete the bytes of those of ``file_ids`` that have no row as ``conn`` sees them, and return
        their ids. After a savepoint that stored files was rolled back (a refused form) their rows are
        gone, but their bytes were written before the insert. Files with a row — stored earlier and found
        again by a form's key — keep theirs."""
        ids = list(dict.fromkeys(file_ids))
        if not ids:
            return []
        kept = set((await conn.execute(RECORDED, {"ids": ids})).scalars())
        gone = [fid for fid in ids if fid not in kept]
        await asyncio.to_thread(self.remove, gone)  # off the event loop, as every bulk deletion
        return gone

    def unrecorded_candidates(self, before: float) -> tuple[list[uuid.UUID], list[Path]]:
        """What the files folder holds that was made and last written before ``before`` (seconds since
        the epoch), for retention to check against the rows: stored files' ids, and temporary files
        (``.upload-…``) that a process stopped while writing left. Bytes are written before their row is
        inserted, so a transaction that rolled back or never ended (a refused request, a failed commit, a
        killed process) leaves bytes no row names; retention deletes files by their rows and would never
        find them. A UUIDv7 name says when its id was made: a newer one is not looked at further."""
        ids: list[uuid.UUID] = []
        temps: list[Path] = []
        if not self.dir.is_dir():
            return ids, temps
        with os.scandir(self.dir) as entries:
            for entry in entries:
                name, fid = entry.name, None
                if not name.startswith(".upload-"):
                    if len(name) == 36 and name[14] == "7" and _made_ms(name) >= before * 1000:
                        continue  # most names: a recent UUIDv7, passed over without parsing it
                    try:
                        fid = parse_file_id(name)
                    except ValueError:
                        continue
                    if str(fid) != name:
                        continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    if entry.stat(follow_symlinks=False).st_mtime >= before:
                        continue
                except OSError:
                    continue  # deleted meanwhile
                if fid is None:
                    temps.append(Path(entry.path))
                else:
                    ids.append(fid)
        return ids, temps


def ids_in_results(results: Mapping[str, Any], limit: int = MAX_PROCESS_FILES) -> list[str]:
    """Every ``file_id`` value in the parents' results (file references such as ``{"file_id", "name",
    …}``, at any depth), at most ``limit``; values that are not text are skipped."""
    found: list[str] = []

    def walk(value: Any, depth: int) -> Iterator[str]:
        if depth > 20:
            return
        if isinstance(value, dict):
            if isinstance(value.get("file_id"), str):
                yield value["file_id"]
            for v in value.values():
                yield from walk(v, depth + 1)
        elif isinstance(value, list):
            for v in value:
                yield from walk(v, depth + 1)

    for fid in walk(dict(results), 0):
        if len(found) >= limit:
            break
        found.append(fid)
    return found
