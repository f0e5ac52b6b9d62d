"""Batches: many jobs of one type started together — the rows of a spreadsheet, many dropped files, or
``POST /api/batches``.

A batch is a ``batches`` row and its jobs (``jobs.batch_id``). Every row is validated before anything
is created (:func:`check_rows`: each problem named ``rows[<i>].<field>``), then all jobs go in with
:func:`app.jobs.queue.enqueue_many` — one statement, in the caller's transaction, so a batch is created
whole or not at all. The jobs' ids are made in row order (UUIDv7, sorted), so a job's row number is its
rank by id within the batch, whatever happens to it later (a retry keeps its id).

A batch's status is derived from its jobs' statuses whenever it is read (:func:`derive_status`), one
indexed count per read (``ix_jobs_batch_id_status``), so no transition anywhere has to keep it current:
``queued`` until a row starts, ``running`` while any row is live, then ``completed`` when every row
completed, ``failed`` when any failed, ``cancelled`` when the rest were cancelled.

Who may start one, the limits and the retry of failed rows are :mod:`app.actions.batches`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import BadInput, KeyReused, NotFound, TooLarge, TooLargeFields, differ_words
from app.formatting import isolated_within
from app.jobs import queue
from app.jobs.file_inputs import file_refs
from app.jobs.payload import check_input, json_text, storable_text
from app.jobs.queue import NewJob, new_id
from app.jobs.queue.many_jobs import renamed
from app.jobs.types import ProcessorSpec
from app.request_keys import Keyed, made_by
from app.settings import Settings
from app.spreadsheets import MAX_ROWS

__all__ = ["MAX_ROWS", "BatchView", "check_rows", "create", "derive_status", "get", "load", "results"]

MAX_ERRORS = 500
"""Row problems reported at most; a file with more is almost always mapped wrong, and the first few
hundred say how."""
NAME_MAX = 200
STATUSES = ("queued", "in_progress", "waiting_approval", "completed", "failed", "cancelled")
LIVE = ("queued", "in_progress", "waiting_approval")
NOTHING_STARTED = "Nothing was started."
"""The sentence every refusal of a batch ends with (:func:`refused`): a person who sees a problem in one
row needs to know whether the other rows went in."""
_ROW = re.compile(r"rows\[\d+\]")

BATCH_COLUMNS = "id, user_id, type, name, source, total, form_key, created_at"
INSERT_BATCH = text(
    f"""
    INSERT INTO batches (id, user_id, type, name, source, total, form_key, idempotency_key, request_digest)
    VALUES (:id, :user_id, :type, :name, :source, :total, :form_key, :idempotency_key, :request_digest)
    ON CONFLICT DO NOTHING
    RETURNING {BATCH_COLUMNS}
    """
)
BY_FORM_KEY = text(f"SELECT {BATCH_COLUMNS} FROM batches WHERE user_id = :user_id AND form_key = :form_key")
BATCH_ROW = text(f"SELECT {BATCH_COLUMNS} FROM batches WHERE id = :id")
# Sets the batch of jobs created a moment ago in this same transaction (no worker can see them yet).
# Not a status change: the queue's enqueue knows nothing of batches, and this keeps it so.
SET_BATCH = text("UPDATE jobs SET batch_id = :batch_id WHERE id = ANY(CAST(:ids AS uuid[]))")
COUNTS = text(
    "SELECT status, count(*) AS n, max(completed_at) AS last FROM jobs WHERE batch_id = :id GROUP BY status"
)
COUNTS_OF = text(
    """
    SELECT batch_id, status, count(*) AS n, max(completed_at) AS last FROM jobs
    WHERE batch_id = ANY(CAST(:ids AS uuid[]))
    GROUP BY batch_id, status
    """
)
JOBS = text(
    """
    SELECT id, row_number() OVER (ORDER BY id) AS row, status, title, attempts, max_attempts, error_message,
           created_at, started_at, completed_at, progress
    FROM jobs WHERE batch_id = :id ORDER BY id
    """
)
FAILED_IDS = text(
    "SELECT id, pipeline_id, left(error_message, 1000) AS error_preview FROM jobs "
    "WHERE batch_id = :id AND status = 'failed' ORDER BY id"
)
RESULTS_PAGE = text(
    """
    SELECT id, status, input_data, result_data, error_message, completed_at FROM jobs
    WHERE batch_id = :id AND (CAST(:after AS uuid) IS NULL OR id > :after) ORDER BY id LIMIT :limit
    """
)
LIST_BATCHES = text(
    f"""
    SELECT {BATCH_COLUMNS} FROM batches WHERE (CAST(:user_id AS int) IS NULL OR user_id = :user_id)
      AND (CAST(:after AS uuid) IS NULL OR id < CAST(:after AS uuid))
    ORDER BY id DESC LIMIT :limit
    """
)


@dataclass
class BatchView:
    """A batch as pages and the API show it: its row, counts by status, the derived status."""

    row: Mapping[Any, Any]
    counts: dict[str, int]
    status: str
    finished: bool
    finished_at: datetime | None = None
    """When its last row ended (completed, failed or was cancelled), once the batch is finished."""

    @property
    def id(self) -> uuid.UUID:
        return uuid.UUID(str(self.row["id"]))

    @property
    def total(self) -> int:
        return int(self.row["total"])

    @property
    def done(self) -> int:
        return sum(self.counts.get(s, 0) for s in ("completed", "failed", "cancelled"))

    @property
    def percent(self) -> int:
        jobs = sum(self.counts.values())
        return 100 if jobs == 0 else int(100 * self.done / jobs)


def derive_status(counts: Mapping[str, int]) -> tuple[str, bool]:
    """``(status, finished)`` of a batch from its jobs' counts by status (see the module's words)."""
    live = sum(counts.get(s, 0) for s in LIVE)
    started = counts.get("in_progress", 0) + sum(
        counts.get(s, 0) for s in ("completed", "failed", "cancelled")
    )
    if live:
        if counts.get("waiting_approval", 0) and live == counts["waiting_approval"]:
            return "waiting_approval", False
        return ("running" if started else "queued"), False
    if counts.get("failed", 0):
        return "failed", True
    if counts.get("cancelled", 0) and not counts.get("completed", 0):
        return "cancelled", True
    return "completed", True


# --- checking and creating ---------------------------------------------------------------------------


def nothing_started(detail: str) -> str:
    """``detail`` ending with :data:`NOTHING_STARTED`, the words every refusal of a batch ends with,
    whatever refused it: a row, the name, the limits, or the request's own shape (text that cannot be
    stored, a field the request may not have), checked before the batch's own checks run."""
    if detail.endswith(NOTHING_STARTED):
        return detail
    said = detail.rstrip().removesuffix(".")
    return f"{said}. {NOTHING_STARTED}" if said else NOTHING_STARTED


def refused(exc: BadInput) -> BadInput:
    """``exc`` as a batch's refusal, in the one form every one has: its first problem, how many more rows
    have one, and :data:`NOTHING_STARTED` (a batch is created whole or not at all). The class and its
    ``errors`` are kept (a :class:`~app.errors.TooLargeFields` stays a 413); a reused key
    (:class:`~app.errors.KeyReused`, which says what the first request made) and a refusal already in
    this form are returned as they are."""
    if isinstance(exc, KeyReused) or exc.detail.endswith(NOTHING_STARTED):
        return exc
    errors = exc.errors or {"": exc.detail}
    first, message = next(iter(errors.items()))
    bad_rows = len({m.group() if (m := _ROW.match(path)) else path for path in errors})
    more = (
        "" if bad_rows <= 1 else f" (and problems in {bad_rows - 1:,} more row{'s' if bad_rows > 2 else ''})"
    )
    said = f"{first}: {message.removesuffix('.')}" if first else message.removesuffix(".")
    out = type(exc).__new__(type(exc))
    out.__dict__.update(exc.__dict__)
    out.detail = nothing_started(f"{said}{more}")
    out.args = (out.detail,)
    return out


def _check_row(spec: ProcessorSpec, row: Any, settings: Settings, path: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise BadInput.field(path, "must be an object of the job type's input fields")
    try:
        check_input(row, settings.job_max_input_bytes, field=path)
    except TooLarge as exc:
        # said once, on the row's path: the limit's words begin with the path themselves
        raise TooLargeFields.field(path, exc.detail.removeprefix(f"{path} ").removesuffix(".")) from None
    data = spec.validate_input(row, field_prefix=path)
    # The type's checks at submission (Jobdesk's own address, an input a job without parents could only
    # fail with: a row's job has none) run here with the schema's, so that their problems are named by
    # row and column as every other row's are.
    spec.check_submission(data, settings, has_parents=False, field_prefix=path)
    return data


def check_rows(spec: ProcessorSpec, rows: Any, settings: Settings) -> list[dict[str, Any]]:
    """Every row validated against the type's input schema and its checks that need the settings
    (:meth:`~app.jobs.types.ProcessorSpec.check_submission`); their normalised inputs (defaults filled in).

    Raises:
        BadInput: ``rows`` empty, not a list or longer than :data:`MAX_ROWS`; otherwise one entry per
        problem, keyed ``rows[<index>].<field>`` (at most :data:`MAX_ERRORS`), for all rows at once —
        a :class:`~app.errors.TooLargeFields` (413) when a row is over ``JOB_MAX_INPUT_BYTES``, the status
        a job's, a pipeline's or a schedule's input over it gets.
    """
    if not isinstance(rows, list) or not rows:
        raise refused(BadInput.field("rows", "give at least one row (a list of input objects)"))
    if len(rows) > MAX_ROWS:
        raise refused(
            BadInput.field("rows", f"a batch may have at most {MAX_ROWS:,} rows (this one has {len(rows):,})")
        )
    errors: dict[str, str] = {}
    too_large = False
    inputs: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        try:
            inputs.append(_check_row(spec, row, settings, f"rows[{i}]"))
        except BadInput as exc:
            too_large = too_large or isinstance(exc, TooLargeFields)
            errors.update(exc.errors or {f"rows[{i}]": exc.detail})
            if len(errors) >= MAX_ERRORS:
                break
    if errors:
        raise refused((TooLargeFields if too_large else BadInput)("", errors=errors))
    return inputs


def _title(name: str, row_number: int) -> str:
    """A row's job title: the batch's name set apart in its own direction (a name holding U+202E would
    reverse " · row 3" on every page, notice and e-mail that shows the title), then the row."""
    return f"{isolated_within(name, NAME_MAX - 20, mark='')} · row {row_number}"


def _asked(
    spec: ProcessorSpec, inputs: Sequence[dict[str, Any]], name: str, source: str, row_numbers: Any
) -> dict[str, Any]:
    """What a batch request asks for, as stored: its type, name, source, and each row's input and title."""
    name = storable_text((name or "").strip())[:NAME_MAX] or spec.title
    numbers = list(row_numbers) if row_numbers is not None else list(range(1, len(inputs) + 1))
    return {
        "type": spec.type,
        "name": name,
        "source": storable_text(source)[:200],
        "inputs": [json_text(data) for data in inputs],
        "titles": [_title(name, numbers[i]) for i in range(len(inputs))],
    }


async def repeat_of(
    db: AsyncConnection | AsyncSession,
    *,
    spec: ProcessorSpec,
    inputs: Sequence[dict[str, Any]],
    user_id: int,
    name: str,
    source: str,
    form_key: str,
    row_numbers: Sequence[int] | None = None,
) -> RowMapping | None:
    """The batch ``form_key`` started, if any, when this request asks for the same batch (as
    :func:`create` answers a repeat, without creating anything).

    Raises:
        KeyReused: the key started a batch with other rows, name, type or source.
    """
    conn = await queue.conn_of(db)
    existing = await by_form_key(conn, user_id, form_key)
    if existing is None:
        return None
    return await _same_batch(conn, existing, _asked(spec, inputs, name, source, row_numbers))


async def create(
    db: AsyncConnection | AsyncSession,
    *,
    spec: ProcessorSpec,
    inputs: Sequence[dict[str, Any]],
    user_id: int,
    settings: Settings,
    name: str,
    source: str,
    row_numbers: Sequence[int] | None = None,
    request_id: str | None = None,
    form_key: str | None = None,
    keyed: Keyed | None = None,
) -> tuple[RowMapping, bool]:
    """Create the batch and one queued job per input (already checked by :func:`check_rows`), in the
    caller's transaction; ``(batch row, created)``. A repeated ``form_key`` asking for the same batch
    (:func:`_same_batch`) returns the batch it made before, with ``created=False``; asking for another
    it is refused. ``row_numbers`` name each row in its job's title (the spreadsheet's own row
    numbers; 1, 2, … by default). ``keyed``: the API's idempotency key, stored with the digest of its
    request; when a concurrent first request with it made its batch first, that batch is answered
    (:func:`app.request_keys.made_by`).

    Raises:
        BadInput: a file id in a row that is not the owner's (``rows[i].<field>``).
        KeyReused: ``form_key`` started a batch with other rows, name, type or source.
    """
    conn = await queue.conn_of(db)
    asked = _asked(spec, inputs, name, source, row_numbers)
    name = asked["name"]
    if form_key is not None:
        existing = await by_form_key(conn, user_id, form_key)
        if existing is not None:
            return await _same_batch(conn, existing, asked), False
    refs = [
        (user_id, *ref)
        for i, data in enumerate(inputs)
        for ref in file_refs(spec.input_model, data, f"rows[{i}]")
    ]
    try:
        await queue.check_file_owners(conn, refs)
    except BadInput as exc:
        raise refused(exc) from None
    values = {
        "id": new_id(),
        "user_id": user_id,
        "type": spec.type,
        "name": name,
        "source": asked["source"],
        "total": len(inputs),
        "form_key": form_key,
        "idempotency_key": keyed.key if keyed else None,
        "request_digest": keyed.stored if keyed else None,
    }
    row = (await conn.execute(INSERT_BATCH, values)).mappings().first()
    if row is None and form_key is None and keyed is not None:  # the API's key sent twice at once
        existing = await made_by(conn, "batches", user_id, keyed)
        assert existing is not None, "ON CONFLICT without an existing batch"
        return existing, False
    if row is None:  # the same form sent twice at once: the other request made it
        existing = (
            (await conn.execute(BY_FORM_KEY, {"user_id": user_id, "form_key": form_key})).mappings().one()
        )
        return await _same_batch(conn, existing, asked), False
    ids = sorted(new_id() for _ in inputs)
    jobs = [
        NewJob(
            type=spec.type,
            input_data=data,
            user_id=user_id,
            title=asked["titles"][i],
            request_id=request_id,
            id=ids[i],
        )
        for i, data in enumerate(inputs)
    ]
    try:
        await queue.enqueue_many(conn, jobs, settings, actor=f"user:{user_id}", skip_schema=True)
    except BadInput as exc:
        # :func:`check_rows` ran the queue's input checks already; any other the queue makes is still
        # named by the person's row (``rows[1].url``), never by the job's index in the insert.
        out = renamed(exc, [f"rows[{i}]" for i in range(len(jobs))])
        raise refused(out) if isinstance(out, BadInput) else out from None
    await conn.execute(SET_BATCH, {"batch_id": row["id"], "ids": ids})
    return row, True


SAME_BATCH = text(
    """
    WITH given AS (
        SELECT * FROM unnest(CAST(:inputs AS text[]), CAST(:titles AS text[])) WITH ORDINALITY AS g(input, title, n)
    ), stored AS (
        SELECT input_data, title, row_number() OVER (ORDER BY id) AS n FROM jobs WHERE batch_id = :id
    )
    SELECT b.type = :type AS same_type, b.name = :name AS same_name, b.source = :source AS same_source,
           NOT EXISTS (
               SELECT FROM given FULL JOIN stored USING (n)
               WHERE CAST(given.input AS jsonb) IS DISTINCT FROM stored.input_data
                  OR given.title IS DISTINCT FROM stored.title
           ) AS same_rows
    FROM batches b WHERE b.id = :id
    """
)


async def _same_batch(conn: AsyncConnection, existing: RowMapping, asked: dict[str, Any]) -> RowMapping:
    """``existing``, the batch a repeated form key made, when the repeat asks for the same batch: the
    same type, name and source, and the same rows in the same order (each job's stored input, compared
    as ``jsonb``, and title — compared with the batch's jobs as they are now, so a row deleted since
    makes it another request). Compared in the caller's transaction, after the insert's conflict waited
    for the first request to commit.

    Raises:
        KeyReused: on ``form_key``, naming the batch and what differs.
    """
    row = (await conn.execute(SAME_BATCH, {**asked, "id": existing["id"]})).mappings().one()
    differs = tuple(f for f in ("type", "name", "source", "rows") if not row[f"same_{f}"])
    if differs:
        raise KeyReused(
            f"this form was already sent and started batch {existing['id']}"
            f"{differ_words(differs)}; a new batch needs a new form",
            field="form_key",
            kind="batch",
            existing_id=existing["id"],
            differs=differs,
        )
    return existing


async def by_form_key(db: AsyncConnection | AsyncSession, user_id: int, form_key: str) -> RowMapping | None:
    """The batch ``user_id`` started with the form key ``form_key``, if any."""
    conn = await queue.conn_of(db)
    return (await conn.execute(BY_FORM_KEY, {"user_id": user_id, "form_key": form_key})).mappings().first()


# --- reading -----------------------------------------------------------------------------------------


def _batch_id(value: Any) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(f"No batch with id {str(value)[:64]!r}.") from None


async def load(db: AsyncConnection | AsyncSession, batch_id: Any, principal: Any) -> RowMapping:
    """The batch's row, for its owner or an admin.

    Raises:
        NotFound: unknown, malformed or another person's id (one answer for all).
    """
    bid = _batch_id(batch_id)
    row = (await (await queue.conn_of(db)).execute(BATCH_ROW, {"id": bid})).mappings().first()
    if row is None or (not principal.is_admin and row["user_id"] != principal.id):
        raise NotFound(f"No batch with id {bid}.")
    return row


async def get(db: AsyncConnection | AsyncSession, batch_id: Any, principal: Any) -> BatchView:
    """The batch with its counts by status and derived status (owner or admin; else :class:`NotFound`)."""
    row = await load(db, batch_id, principal)
    result = (await (await queue.conn_of(db)).execute(COUNTS, {"id": row["id"]})).mappings().all()
    counts = {r["status"]: int(r["n"]) for r in result}
    return _view(row, counts, [r["last"] for r in result if r["last"] is not None])


def _view(row: Mapping[Any, Any], counts: dict[str, int], ends: Sequence[datetime]) -> BatchView:
    """The view of a batch from its jobs' counts by status and the latest end of each status's rows."""
    status, finished = derive_status(counts)
    return BatchView(row, counts, status, finished, max(ends) if finished and ends else None)


async def jobs_of(db: AsyncConnection | AsyncSession, batch_id: uuid.UUID) -> list[RowMapping]:
    """The batch's jobs in row order, with their row numbers (``row``)."""
    return list((await (await queue.conn_of(db)).execute(JOBS, {"id": batch_id})).mappings().all())


async def failed_rows(db: AsyncConnection | AsyncSession, batch_id: uuid.UUID) -> list[RowMapping]:
    """The batch's failed jobs: ``id``, ``pipeline_id`` and ``error_preview`` (enough for
    :func:`app.jobs.error_text.retry_refusal`)."""
    return list((await (await queue.conn_of(db)).execute(FAILED_IDS, {"id": batch_id})).mappings().all())


async def list_for(
    db: AsyncConnection | AsyncSession, principal: Any, limit: int = 50, after: uuid.UUID | None = None
) -> list[dict[str, Any]]:
    """The person's latest batches (an admin's own too: the list is "mine"), newest first, those older than
    batch ``after`` when given (keyset pages), straight on asyncpg (My jobs shows the newest on every first
    page)."""
    params = {"user_id": principal.id, "limit": limit, "after": after}
    return await queue.fetch_rows(await queue.conn_of(db), LIST_BATCHES, params)


async def recent_views(
    db: AsyncConnection | AsyncSession, principal: Any, limit: int, after: uuid.UUID | None = None
) -> list[BatchView]:
    """The person's newest ``limit`` batches (older than ``after``) with their counts and status (two
    queries in all)."""
    conn = await queue.conn_of(db)
    rows = await list_for(conn, principal, limit, after)
    counts: dict[Any, dict[str, int]] = {r["id"]: {} for r in rows}
    ends: dict[Any, list[datetime]] = {r["id"]: [] for r in rows}
    if rows:
        for c in await queue.fetch_rows(conn, COUNTS_OF, {"ids": list(counts)}):
            counts[c["batch_id"]][c["status"]] = int(c["n"])
            if c["last"] is not None:
                ends[c["batch_id"]].append(c["last"])
    return [_view(r, counts[r["id"]], ends[r["id"]]) for r in rows]


async def results(
    conn: AsyncConnection, batch_id: uuid.UUID, page: int = 1000
) -> AsyncIterator[list[RowMapping]]:
    """The batch's jobs in row order, ``page`` at a time (input, result, error), for the download."""
    after: uuid.UUID | None = None
    while True:
        rows = (
            (await conn.execute(RESULTS_PAGE, {"id": batch_id, "after": after, "limit": page}))
            .mappings()
            .all()
        )
        if not rows:
            return
        yield list(rows)
        after = rows[-1]["id"]
