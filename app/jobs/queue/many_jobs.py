"""Bulk enqueue: many jobs validated, then written with their ``enqueued`` events in the caller's
transaction (batches, pipelines, fan-out steps, Python callers): a large batch by ``COPY`` (the largest
checked while the copy runs, so that the database writes the first rows while the client checks the
next), a small one by one insert statement, and a batch in which some jobs have idempotency keys by one
``INSERT … ON CONFLICT`` statement."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Sequence
from operator import itemgetter
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.db import discarded_if_lost, driver_connection
from app.errors import BadInput, KeyReused, TooLarge
from app.jobs.queue.common import JOBS_CHANNEL, conn_of, notify_jobs, sql
from app.jobs.queue.new_jobs import ON_KEY_CONFLICT, NewJob, check_files, insert_edges, link_files, prepare
from app.jobs.queue.repeats import compare, refusals
from app.settings import Settings


def _insert_many(on_conflict: str) -> str:
    # A keyed job's event keeps the run_at it asked for, to compare a repeat with (app.jobs.queue.repeats).
    keyed = bool(on_conflict)
    data = "CASE WHEN r.idempotency_key IS NOT NULL THEN jsonb_build_object('run_at', r.run_at) END"
    events = f"SELECT ins.id, ins.pipeline_id, {data}, ins.user_id FROM ins JOIN rows r ON r.id = ins.id"
    return f"""
    WITH rows AS (
        SELECT * FROM unnest(
            CAST(:ids AS uuid[]), CAST(:types AS text[]), CAST(:user_ids AS int[]), CAST(:inputs AS text[]),
            CAST(:priorities AS int[]), CAST(:run_ats AS timestamptz[]), CAST(:max_attempts AS int[]),
            CAST(:keys AS text[]), CAST(:titles AS text[]), CAST(:pipeline_ids AS uuid[]), CAST(:step_keys AS text[]),
            CAST(:approvals AS boolean[]), CAST(:created_by AS uuid[]), CAST(:pending AS int[]), CAST(:request_ids AS text[])
        ) AS r(id, type, user_id, input, priority, run_at, max_attempts, idempotency_key, title, pipeline_id,
               step_key, requires_approval, created_by_job, pending_parents, request_id)
    ), ins AS (
        INSERT INTO jobs (id, type, user_id, input_data, priority, run_at, max_attempts, idempotency_key, title,
                          pipeline_id, step_key, requires_approval, created_by_job, pending_parents, request_id)
        SELECT id, type, user_id, input::jsonb, priority, COALESCE(run_at, now()), max_attempts, idempotency_key,
               title, pipeline_id, step_key, requires_approval, created_by_job, pending_parents, request_id
        FROM rows
        {on_conflict}
        RETURNING id, pipeline_id, user_id, run_at, pending_parents
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, data, kind, to_status, actor)
        SELECT id, pipeline_id, data, 'enqueued', 'queued', COALESCE(:actor, 'user:' || user_id)
        FROM ({events if keyed else "SELECT id, pipeline_id, NULL::jsonb AS data, user_id FROM ins"}) AS n(id, pipeline_id, data, user_id)
    ), notify AS (
        SELECT pg_notify('{JOBS_CHANNEL}', '') FROM ins WHERE pending_parents = 0 LIMIT 1
    )
    SELECT ins.id, (SELECT count(*) FROM notify) AS notified FROM ins
    """


INSERT_MANY = sql(_insert_many(ON_KEY_CONFLICT))
INSERT_MANY_WITHOUT_KEYS = sql(_insert_many(""))

COPY_FROM = 64
"""Fewest jobs without keys written by ``COPY`` (:func:`_copy_in`) rather than by the insert statement.
Two ``COPY``s and the ``NOTIFY`` take five round trips where the statement takes one, so a small batch
(a pipeline's steps, a processor's next jobs) is quicker through the statement: measured here, 1 to 10
jobs 1.07–1.37 ms by the statement against 1.33–1.59 ms by ``COPY``; alike at 50; ``COPY`` ahead from
about 75, and by a third at 10,000."""

_COLUMNS = (
    ("ids", "id", "id"),
    ("types", "type", "type"),
    ("user_ids", "user_id", "user_id"),
    ("inputs", "input_data", "input"),
    ("priorities", "priority", "priority"),
    ("run_ats", "run_at", "run_at"),
    ("max_attempts", "max_attempts", "max_attempts"),
    ("keys", "idempotency_key", "idempotency_key"),
    ("titles", "title", "title"),
    ("pipeline_ids", "pipeline_id", "pipeline_id"),
    ("step_keys", "step_key", "step_key"),
    ("approvals", "requires_approval", "requires_approval"),
    ("created_by", "created_by_job", "created_by_job"),
    ("request_ids", "request_id", "request_id"),
)
"""Each field of a new job: the array parameter of :data:`INSERT_MANY`, the column of ``jobs``
(:func:`_copy_in`) and the key of :func:`prepare`'s parameters."""
_MANY_COLUMNS = {param: key for param, _, key in _COLUMNS}


_JOB_PATH = re.compile(r"(?<![\w.])jobs\[(\d+)\](\.input_data)?")


def renamed(exc: BadInput | TooLarge, inputs: Sequence[str]) -> BadInput | TooLarge:
    """``exc`` from :func:`enqueue_many` in the caller's names, for a caller whose jobs the person wrote
    elsewhere or in another order (a pipeline's steps, inserted parents first; a processor's next jobs;
    the instances of a step run once per item): ``jobs[k].input_data…`` becomes ``inputs[k]…``
    (``steps[2].input_data.image``, ``steps[2].for_each[1].image``), and another field of ``jobs[k]``
    becomes that field of the step ``inputs[k]`` is in (``steps[2].title``). The error keeps its class and
    attributes: an input over its limit (:class:`TooLarge`) stays one, and a reused key
    (:class:`~app.errors.KeyReused`) stays one, its ``key_field`` named the same way."""

    def name(match: re.Match[str]) -> str:
        k = int(match.group(1))
        if k >= len(inputs):
            return match.group(0)
        return inputs[k] if match.group(2) else inputs[k].split(".", 1)[0]

    # A copy of the same class with the same attributes, only the names changed: a KeyReused (the
    # repeat's kind, the job it made, what differs) and a TooLargeFields (a 413) stay what they are.
    out = type(exc).__new__(type(exc))
    out.__dict__.update(exc.__dict__)
    out.detail = _JOB_PATH.sub(name, exc.detail)
    out.args = (out.detail,)
    if isinstance(out, TooLarge):
        out.field = _JOB_PATH.sub(name, out.field) if out.field else None
    else:
        out.errors = {_JOB_PATH.sub(name, k): v for k, v in out.errors.items()}
        out.extra = {**out.extra, "errors": out.errors}
    if isinstance(out, KeyReused):
        out.key_field = _JOB_PATH.sub(name, out.key_field)
    return out


MANY_ERRORS_SHOWN = 50
"""Most bad jobs a bulk enqueue reports at once (each with its index); the rest are counted."""


class _Checker:
    """The jobs of one bulk enqueue validated in order (each type's schema compiled once, see
    :func:`_type_check`), the problems of every bad job kept by index for one :class:`BadInput`."""

    def __init__(
        self,
        jobs: Sequence[NewJob],
        settings: Settings,
        skip_schema: bool,
        edges: Sequence[tuple[uuid.UUID, uuid.UUID]] = (),
    ) -> None:
        self.jobs, self.settings, self.skip_schema = jobs, settings, skip_schema
        # The jobs that will wait for a parent: a type's checks at submission may depend on it.
        self.children = {child for child, _ in edges}
        self.prepared: list[dict[str, Any]] = []
        self.errors: dict[str, str] = {}
        self.bad = 0
        self.done = 0

    def check(self, i: int) -> dict[str, Any] | None:
        """Job ``i``'s insert parameters, or ``None`` when it is bad (its problems kept)."""
        self.done = i + 1
        try:
            job = self.jobs[i]
            p = prepare(
                job,
                self.settings,
                field_prefix=f"jobs[{i}].",
                skip_schema=self.skip_schema,
                has_parents=bool(job.depends_on) or job.id in self.children,
            )
        except BadInput as exc:
            self.bad += 1
            if self.bad <= MANY_ERRORS_SHOWN:
                self.errors.update(exc.errors or {f"jobs[{i}]": str(exc)})
            return None
        self.prepared.append(p)
        return p

    def finish(self) -> list[dict[str, Any]]:
        """Every job checked (those not checked yet, then), and their parameters.

        Raises:
            BadInput: naming every bad job (up to :data:`MANY_ERRORS_SHOWN`) and counting the rest.
        """
        for i in range(self.done, len(self.jobs)):
            self.check(i)
        if self.bad:
            first, message = next(iter(self.errors.items()))
            more = f" (and {self.bad - 1} more bad jobs)" if self.bad > 1 else ""
            raise BadInput(f"{first}: {message}{more}", errors=self.errors)
        return self.prepared


def _prepare_all(
    jobs: Sequence[NewJob],
    settings: Settings,
    skip_schema: bool,
    edges: Sequence[tuple[uuid.UUID, uuid.UUID]] = (),
) -> list[dict[str, Any]]:
    """Every job validated; the problems of every bad job, by index, in one :class:`BadInput`."""
    return _Checker(jobs, settings, skip_schema, edges).finish()


def _insert_params(
    prepared: Sequence[dict[str, Any]], pending: dict[uuid.UUID, int], actor: str | None
) -> dict[str, Any]:
    params: dict[str, Any] = {name: [p[key] for p in prepared] for name, key in _MANY_COLUMNS.items()}
    params["pending"] = [pending.get(p["id"], 0) for p in prepared]
    params["actor"] = actor
    return params


async def _insert_keyed(
    conn: AsyncConnection, prepared: Sequence[dict[str, Any]], params: dict[str, Any]
) -> list[uuid.UUID]:
    """The bulk insert of jobs some of which have keys, in a savepoint: the keyed jobs it skipped are
    compared with the jobs their keys made, and a different request rolls every insert back."""
    async with conn.begin_nested():
        inserted = [r[0] for r in (await conn.execute(INSERT_MANY, params)).all()]
        created = set(inserted)
        skipped = [
            (i, p)
            for i, p in enumerate(prepared)
            if p["idempotency_key"] is not None and p["id"] not in created
        ]
        refused = refusals(await compare(conn, skipped))
        if refused is not None:
            raise refused  # leaving the block rolls the savepoint back
    return inserted


# Copied jobs have no key, and those without a due time take the column's default (see _copy_in).
_COPIED = {column: key for _, column, key in _COLUMNS if key not in ("idempotency_key", "run_at")}
_COPY_COLUMNS = [*_COPIED, "pending_parents"]
_EVENT_COLUMNS = ["job_id", "pipeline_id", "kind", "to_status", "actor"]


async def _copy_in(
    raw: Any, prepared: Sequence[dict[str, Any]], pending: dict[uuid.UUID, int], actor: str | None
) -> None:
    """Jobs without idempotency keys and their ``enqueued`` events, by ``COPY`` on the transaction's
    asyncpg connection: PostgreSQL writes copied rows in about two thirds of the server time of the same
    rows through ``INSERT … SELECT FROM unnest(…)`` (10,000 jobs: about 150 against 220 ms), with the same
    indexes, checks and foreign keys. A job without a due time gets the column's default, ``now()``, the
    transaction's start, as the insert's ``COALESCE(run_at, now())`` gave it; the others are copied with
    theirs, in a second ``COPY``."""
    row = itemgetter(*_COPIED.values())
    for timed in (False, True):
        group = [p for p in prepared if (p["run_at"] is not None) is timed]
        if group:
            await _copy(
                raw,
                "jobs",
                _COPY_COLUMNS + (["run_at"] if timed else []),
                [(*row(p), pending.get(p["id"], 0), *([p["run_at"]] if timed else [])) for p in group],
            )
    await _copy_events(raw, prepared, actor)


STREAM_FROM = 2_000
"""Fewest jobs without keys whose checks run while their ``COPY`` is under way (:func:`_stream_in`).
The driver sends copied rows in buffers of half a megabyte, so the database starts on the first rows
only once that many are checked (about 4,000 small inputs): a smaller batch gains nothing and pays the
savepoint's two round trips."""

_SAVEPOINT = "jobdesk_bulk_copy"


async def _stream_in(
    conn: AsyncConnection,
    raw: Any,
    checker: _Checker,
    pending: dict[uuid.UUID, int],
    actor: str | None,
) -> list[dict[str, Any]]:
    """:func:`_copy_in` of jobs checked while they are copied: the database writes the first rows (and
    their index entries) while the client checks the next ones, on another core, instead of after
    them. The checks decide as before: at the first bad job the copy ends with the jobs before it,
    those rows are rolled back to a savepoint taken first, the rest are checked for the error, and
    nothing is left written; a batch that checks out is written as :func:`_copy_in` writes it.

    Only ``BadInput`` and the like end the copy early: the generator never raises into the driver,
    which on an exception from its input aborts the ``COPY`` and sends the server a cancel request that
    may land on the next statement (the rollback to the savepoint)."""
    row = itemgetter(*_COPIED.values())
    timed: list[dict[str, Any]] = []
    stopped: list[Exception] = []

    async def untimed() -> AsyncIterator[tuple[Any, ...]]:
        for i in range(len(checker.jobs)):
            try:
                p = checker.check(i)
            except Exception as exc:  # a TooLarge, or a type's own check failing: raised after the copy
                stopped.append(exc)
                return
            if p is None:
                return
            if p["run_at"] is not None:
                timed.append(p)
            else:
                yield (*row(p), pending.get(p["id"], 0))

    async with discarded_if_lost(conn, raw):
        await raw.execute(f"SAVEPOINT {_SAVEPOINT}")
        await _copy(raw, "jobs", _COPY_COLUMNS, untimed())
        try:
            if stopped:
                raise stopped[0]
            prepared = checker.finish()
            await check_files(conn, prepared)
        except Exception:
            await raw.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}; RELEASE SAVEPOINT {_SAVEPOINT}")
            raise
        if timed:
            columns = [*_COPY_COLUMNS, "run_at"]
            await _copy(
                raw, "jobs", columns, [(*row(p), pending.get(p["id"], 0), p["run_at"]) for p in timed]
            )
        await _copy_events(raw, prepared, actor)
        await raw.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    return prepared


async def _copy_events(raw: Any, prepared: Sequence[dict[str, Any]], actor: str | None) -> None:
    await _copy(
        raw,
        "job_events",
        _EVENT_COLUMNS,
        [
            (p["id"], p["pipeline_id"], "enqueued", "queued", actor or f"user:{p['user_id']}")
            for p in prepared
        ],
    )


async def _copy(
    raw: Any, table: str, columns: list[str], records: list[tuple[Any, ...]] | AsyncIterator[tuple[Any, ...]]
) -> None:
    try:
        await raw.copy_records_to_table(table, columns=columns, records=records)
    except (OverflowError, TypeError, ValueError) as exc:
        # A value asyncpg cannot encode (a number out of its column's range, a lone surrogate) is a
        # DataError when it is a statement's parameter, which the web layer answers as input it cannot
        # store (422); its COPY lets the encoder's own error out instead.
        raise asyncpg.DataError(f"a value for {table} cannot be stored: {exc}") from exc


async def enqueue_many(
    db: AsyncConnection | AsyncSession,
    jobs: Sequence[NewJob],
    settings: Settings,
    *,
    actor: str | None = None,
    pending: dict[uuid.UUID, int] | None = None,
    edges: Sequence[tuple[uuid.UUID, uuid.UUID]] = (),
    skip_schema: bool = False,
) -> list[uuid.UUID]:
    """Insert many jobs (bulk enqueue) with their events, and NOTIFY the workers on commit unless every
    job waits for a parent; all are validated first, so a bad one rejects the whole batch (all or
    nothing). Returns the ids actually inserted: a job whose idempotency key
    made a job for the same request (:mod:`app.jobs.queue.repeats`; dependencies not compared) is
    skipped; one whose key made a job for a different request refuses the whole batch, nothing
    inserted, naming each such job by index (``jobs[3].idempotency_key``). Two jobs of one call with one
    key are a first request and its repeat. ``pending`` and ``edges`` are used by pipelines, whose jobs depend on each other (the
    pipeline code validates the graph and the inputs, and passes ``skip_schema``); plain callers leave
    them empty.

    Raises:
        BadInput: with the index of each bad job in its field paths (``jobs[3].input_data.seconds``), for
            every bad job (up to :data:`MANY_ERRORS_SHOWN`), not only the first.
        KeyReused: (a ``BadInput``) a key repeated with a different request, as above.
        TooLarge: an input above ``JOB_MAX_INPUT_BYTES``.
    """
    conn = await conn_of(db)
    if not jobs:
        return []
    pending = pending or {}
    copied = True
    if (
        len(jobs) >= STREAM_FROM
        and all(j.idempotency_key is None for j in jobs)
        and (raw := await driver_connection(conn)) is not None
    ):
        prepared = await _stream_in(conn, raw, _Checker(jobs, settings, skip_schema, edges), pending, actor)
    else:
        prepared = _prepare_all(jobs, settings, skip_schema, edges)
        await check_files(conn, prepared)
        if any(p["idempotency_key"] is not None for p in prepared):
            inserted = await _insert_keyed(conn, prepared, _insert_params(prepared, pending, actor))
            copied = False
        elif len(prepared) >= COPY_FROM and (raw := await driver_connection(conn)) is not None:
            async with discarded_if_lost(conn, raw):
                await _copy_in(raw, prepared, pending, actor)
        else:
            params = _insert_params(prepared, pending, actor)
            inserted = [r[0] for r in (await conn.execute(INSERT_MANY_WITHOUT_KEYS, params)).all()]
            copied = False
    if copied:  # the statements NOTIFY in themselves
        inserted = [p["id"] for p in prepared]
        if any(pending.get(p["id"], 0) == 0 for p in prepared):
            await notify_jobs(conn)
    created = set(inserted)
    await link_files(
        conn, [(p["id"], fid) for p in prepared if p["id"] in created for _, fid, _ in p["files"]]
    )
    if edges:
        await insert_edges(conn, list(edges))
    return inserted
