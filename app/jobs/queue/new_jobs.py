"""Enqueueing: one job or many, validated first, inserted with their ``enqueued`` events, in the caller's
transaction (so an application can enqueue atomically with its own writes)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.db import write_rows
from app.errors import BadInput
from app.file_types import kind_problem
from app.jobs.fanout import has_literals, unwrap_literals
from app.jobs.file_inputs import file_fields, file_refs
from app.jobs.payload import check_input, check_text, json_text, unstorable_json
from app.jobs.queue.common import JOB_COLUMNS, JOBS_CHANNEL, conn_of, new_id, notify_jobs, sql
from app.jobs.queue.repeats import Repeat, check_key, compare, refusal, requested_run_at
from app.jobs.rows import JobRow, job_row
from app.jobs.run_at import check_run_at
from app.jobs.states import Status
from app.jobs.types import (
    PRIORITY_RANGE,
    ProcessorSpec,
    may_submit,
    registry,
    type_shown,
    validation_error,
)
from app.settings import Settings

MAX_ATTEMPTS_RANGE = (1, 1000)
"""Accepted ``max_attempts`` on enqueue: outside gets a 422."""


@dataclass
class NewJob:
    """One job to insert. ``depends_on`` are ids of existing jobs; ``run_at`` must carry a UTC offset.

    ``max_attempts`` defaults to the type's option, else ``len(JOB_RETRY_INTERVALS) + 1``.
    """

    type: str
    input_data: dict[str, Any]
    user_id: int
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    title: str | None = None
    request_id: str | None = None
    pipeline_id: uuid.UUID | None = None
    step_key: str | None = None
    depends_on: Sequence[uuid.UUID] = ()
    requires_approval: bool = False
    created_by_job: uuid.UUID | None = None
    id: uuid.UUID = field(default_factory=new_id)


@dataclass(frozen=True)
class Enqueued:
    """Result of :func:`enqueue`: the job row and whether it was created (``False`` = idempotent repeat)."""

    job: JobRow
    created: bool


@dataclass(frozen=True)
class Guard:
    """A check written into a job's insert statement, so that checking and inserting are one round trip
    (the per-person limits: :mod:`app.actions.quotas`). ``sql`` is a ``SELECT`` of one row with a boolean
    column ``ok`` (other columns named unlike a job's, parameters unlike :func:`prepare`'s); the job is
    inserted only when ``ok``, and otherwise :func:`enqueue` raises ``refusal(row)``. What the check
    locks stays locked until the caller's transaction ends (given the engine: until the statement
    commits)."""

    sql: str
    params: Mapping[str, Any]
    refusal: Callable[[Mapping[Any, Any]], Exception]


# --- validation ---------------------------------------------------------------------------------


def _whole_number(value: Any, bounds: tuple[int, int]) -> bool:
    lo, hi = bounds
    return not isinstance(value, bool) and isinstance(value, int) and lo <= value <= hi


def _check_fields(job: NewJob, max_attempts: Any, p: str) -> None:
    """The job's own fields (not its input): attempts, priority, due time, idempotency key, title."""
    if not _whole_number(max_attempts, MAX_ATTEMPTS_RANGE):
        lo, hi = MAX_ATTEMPTS_RANGE
        raise BadInput.field(f"{p}max_attempts", f"must be a whole number from {lo} to {hi}")
    if not _whole_number(job.priority, PRIORITY_RANGE):
        lo, hi = PRIORITY_RANGE
        raise BadInput.field(f"{p}priority", f"must be a whole number from {lo} to {hi} (higher runs first)")
    # The field names are built only for the fields that are set: a bulk enqueue checks thousands of jobs.
    if job.run_at is not None:
        check_run_at(job.run_at, f"{p}run_at")
    if job.idempotency_key is not None:
        check_key(job.idempotency_key, f"{p}idempotency_key")
    if job.title is not None:
        if len(job.title) > 200:
            raise BadInput.field(
                f"{p}title", f"must be at most 200 characters (this one has {len(job.title):,})"
            )
        check_text(job.title, f"{p}title")


@dataclass(frozen=True)
class _TypeCheck:
    """What validating a type's input needs, looked up once per registered type: its spec (the input
    model, whose schema pydantic compiles once) and whether any input field holds file ids (most types
    have none, and then the input is validated and written as JSON text in one pass)."""

    spec: ProcessorSpec
    has_files: bool


_TYPE_CHECKS: dict[str, _TypeCheck] = {}


def _type_check(spec: ProcessorSpec) -> _TypeCheck:
    hit = _TYPE_CHECKS.get(spec.type)
    if hit is None or hit.spec is not spec:  # a type registered again (tests) gets a fresh entry
        hit = _TypeCheck(spec, bool(file_fields(spec.input_model)))
        _TYPE_CHECKS[spec.type] = hit
    return hit


def _validated(check: _TypeCheck, data: dict[str, Any], path: str) -> tuple[str, dict[str, Any] | None]:
    """``data`` validated against the type's schema: its normalised JSON text, and the normalised dict
    when the type has file fields (to find the file ids), else ``None``."""
    try:
        model = check.spec.input_model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, path, check.spec.input_model) from None
    if check.has_files:
        normalized = model.model_dump(mode="json")
        return json_text(normalized), normalized
    try:
        text = model.model_dump_json()
    except ValueError:  # something pydantic's encoder refuses (e.g. a lone surrogate a validator made)
        return json_text(model.model_dump(mode="json")), None
    return (json_text(model.model_dump(mode="json")) if unstorable_json(text) else text), None


def _counted(n: int, word: str, words: str | None = None) -> str:
    """``n`` with thousands separators and its noun, which agree: "1 job", "2,000 jobs", "1 dependency"."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def dependencies_problem(settings: Settings, count: int) -> str | None:
    """Why a list of ``count`` dependencies is too long, or ``None``: the rule that bounds a pipeline's
    dependencies (``PIPELINE_MAX_EDGES``) bounds one job's list too, counted as sent (repeats included),
    so that a list of hundreds of thousands of ids is refused before the database looks them up."""
    limit = settings.pipeline_max_edges
    if limit and count > limit:
        return f"a job may depend on at most {_counted(limit, 'job')} (PIPELINE_MAX_EDGES); this list has {count:,}"
    return None


def pipeline_size_refusal(settings: Settings, steps: int, edges: int) -> BadInput | None:
    """The one rule on a pipeline's size as it starts (``PIPELINE_MAX_STEPS``, ``PIPELINE_MAX_EDGES``): a
    422 naming ``steps`` when it has more steps or ``depends_on`` entries than allowed, else ``None``.
    Every path that makes a pipeline meets it: an ad-hoc one as sent (:mod:`app.actions.quotas`), and
    every one once built and expanded (:func:`app.jobs.queue.pipelines.check_spec`), a template's and a
    schedule's, when the schedule is made or changed and when it fires, included."""
    if settings.pipeline_max_steps and steps > settings.pipeline_max_steps:
        return BadInput.field(
            "steps",
            f"a pipeline may have at most {_counted(settings.pipeline_max_steps, 'step')} "
            f"(this one has {steps:,})",
        )
    if settings.pipeline_max_edges and edges > settings.pipeline_max_edges:
        limit = settings.pipeline_max_edges
        return BadInput.field(
            "steps",
            f"a pipeline may have at most {_counted(limit, 'dependency', 'dependencies')} "
            f"between its steps (this one has {edges:,})",
        )
    return None


def check_dependency_list(depends_on: Any, settings: Settings, field: str) -> None:
    """The one cap on a job's dependencies, for every path that creates jobs — a submitted job
    (:func:`prepare`), a pipeline's step (:func:`app.jobs.queue.pipelines.check_spec`, which a schedule of
    a pipeline goes through when it is made and when it fires) and a processor's next job
    (:func:`app.jobs.queue.pipelines.insert_next_jobs`) — counted as sent (repeats included), before any
    of them is looked up. Anything but a list is left to the caller's own checks.

    Raises:
        BadInput: naming ``field``, more dependencies than :func:`dependencies_problem` allows.
    """
    if not isinstance(depends_on, list | tuple):
        return
    problem = dependencies_problem(settings, len(depends_on))
    if problem is not None:
        raise BadInput.field(field, problem)


def check_dependencies(job: NewJob, settings: Settings, field: str = "dependent_on_jobs") -> None:
    """Raises:
    BadInput: naming ``field``, ``job`` depends on more jobs than :func:`check_dependency_list` allows.
    """
    check_dependency_list(list(job.depends_on), settings, field)


def prepare(
    job: NewJob,
    settings: Settings,
    *,
    field_prefix: str = "",
    skip_schema: bool = False,
    has_parents: bool | None = None,
) -> dict[str, Any]:
    """Validate ``job`` and return the insert parameters.

    Checks: the type is registered; ``input_data`` has no NUL or lone surrogate, fits ``JOB_MAX_INPUT_BYTES`` and
    validates against the processor's input schema (stored in its normalised form, defaults filled in);
    ``max_attempts`` and ``priority`` are in range; ``run_at`` has a UTC offset; the type's own checks at
    submission (:meth:`~app.jobs.types.ProcessorSpec.check_submission`) pass for a job that will have
    parents or not: ``has_parents``, else whether ``depends_on`` names any (a pipeline's steps and next
    jobs get theirs from :func:`~app.jobs.queue.many_jobs.enqueue_many`'s edges).

    Raises:
        BadInput: with the field path (``input_data.seconds``, ``max_attempts``, …) and the reason.
        TooLarge: input above ``JOB_MAX_INPUT_BYTES``.
    """
    p = field_prefix
    if job.depends_on:
        check_dependencies(job, settings, f"{p}dependent_on_jobs")
    spec = registry.get(job.type)
    if spec is None:
        # The person is not known here: the types anyone may submit (the actions layer names the
        # person's own, admins' included for an admin, before a person's job gets here).
        known = ", ".join(sorted(s.type for s in registry.all() if may_submit(False, s))) or "none"
        raise BadInput.field(f"{p}type", f"unknown job type {type_shown(job.type)}; known types: {known}")
    raw_text = check_input(job.input_data, settings.job_max_input_bytes, field=f"{p}input_data")
    check = _type_check(spec)
    normalized: dict[str, Any] | None
    if skip_schema:
        text, normalized = raw_text, job.input_data
    else:
        text, normalized = _validated(check, job.input_data, f"{p}input_data")
    # Every check sees the values the job will run with: a pipeline step's ``{"$literal": v}`` is ``v``
    # then (a ``$ref`` inside it stays a value, which no check reads as a reference).
    checked = normalized or job.input_data
    if job.pipeline_id is not None and has_literals(checked):
        checked = unwrap_literals(checked)
    parents = bool(job.depends_on) if has_parents is None else has_parents
    spec.check_submission(checked, settings, has_parents=parents, field_prefix=f"{p}input_data")
    max_attempts = (
        job.max_attempts
        if job.max_attempts is not None
        else spec.max_attempts or settings.default_max_attempts
    )
    _check_fields(job, max_attempts, p)
    return {
        "id": job.id,
        "type": job.type,
        "user_id": job.user_id,
        "input": text,
        "priority": job.priority,
        "run_at": job.run_at,
        "max_attempts": max_attempts,
        "idempotency_key": job.idempotency_key,
        "title": job.title,
        "request_id": job.request_id,
        "pipeline_id": job.pipeline_id,
        "step_key": job.step_key,
        "requires_approval": job.requires_approval,
        "created_by_job": job.created_by_job,
        "files": file_refs(spec.input_model, checked, f"{p}input_data")
        if check.has_files and checked
        else [],
    }


# --- files named in inputs --------------------------------------------------------------------------

FILE_OWNERS = sql("SELECT id, user_id, content_type FROM files WHERE id = ANY(CAST(:ids AS uuid[]))")


async def check_file_owners(
    conn: AsyncConnection, refs: Sequence[tuple[int, str, uuid.UUID, str | None]]
) -> None:
    """Every file id a job's input names must be a file of the job's owner — admins' jobs included: a
    job only reads its owner's files — and of the kind its field accepts (a picture for ``image/*``, a
    table for ``text/csv``: :func:`app.file_types.kind_problem`), so that a CSV given as a picture is an error
    at submission on every path rather than a job that fails when it runs. ``refs`` is ``[(owner user
    id, field path, file id, accept hint or None)]`` (:func:`app.jobs.file_inputs.file_refs`). Another user's
    file gets the same answer as an unknown id, so that file ids cannot be probed.

    Raises:
        BadInput: ``input_data.<field>`` (or ``…[i]``) → "no such file (<id>); upload it first", or the
        file's kind in words.
    """
    if not refs:
        return
    wanted = sorted({fid for _, _, fid, _ in refs}, key=str)
    found = {r[0]: (r[1], r[2]) for r in (await conn.execute(FILE_OWNERS, {"ids": wanted})).all()}
    errors: dict[str, str] = {}
    for uid, path, fid, accept in refs:
        owner, content_type = found.get(fid, (None, None))
        if owner != uid:
            errors[path] = f"no such file ({fid}); upload it first"
        elif accept and (problem := kind_problem(content_type, accept)):
            errors[path] = problem
    if errors:
        first, message = next(iter(errors.items()))
        raise BadInput(f"{first}: {message}", errors=errors)


LINK_FILES = sql(
    """
    UPDATE files f SET job_id = l.job_id
    FROM (SELECT DISTINCT ON (file_id) * FROM unnest(CAST(:jobs AS uuid[]), CAST(:files AS uuid[])) AS t(job_id, file_id)
          ORDER BY file_id, job_id) l
    WHERE f.id = l.file_id AND f.job_id IS NULL
    """
)


async def link_files(conn: AsyncConnection, pairs: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Attach each still-unattached upload to the first new job that names it, so retention deletes it
    with that job; uploads no job ever used are deleted by the sweep's prune after retention."""
    if pairs:
        await conn.execute(LINK_FILES, {"jobs": [j for j, _ in pairs], "files": [f for _, f in pairs]})


async def check_files(conn: AsyncConnection, prepared: Sequence[dict[str, Any]]) -> None:
    await check_file_owners(conn, [(p["user_id"], *ref) for p in prepared for ref in p["files"]])


# --- dependencies ---------------------------------------------------------------------------------

LOCK_PARENTS = sql(
    "SELECT id, user_id, status FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR SHARE"
)


async def lock_parents(
    conn: AsyncConnection, user_id: int, ids: list[uuid.UUID], *, owner_is_admin: bool
) -> int:
    """Lock the parent rows (``FOR SHARE``) so none can finish while the child's edges are being
    written, and return how many have not completed. A parent's completion then waits for this
    transaction and, in its own next statement, sees the new edges (no lost decrement).

    Raises:
        BadInput: an id that does not exist, belongs to another user, or has failed/been cancelled —
            without saying which of the first two.
    """
    unique = sorted(set(ids), key=str)
    rows = (await conn.execute(LOCK_PARENTS, {"ids": unique})).mappings().all()
    found = {r["id"]: r for r in rows if owner_is_admin or r["user_id"] == user_id}
    for dep in unique:
        if dep not in found:
            raise BadInput.field("dependent_on_jobs", f"unknown dependency {dep}")
        if found[dep]["status"] in (Status.FAILED, Status.CANCELLED):
            # In words, not the status's name: "has cancelled" read as if the dependency had cancelled
            # something.
            ended = "has failed" if found[dep]["status"] == Status.FAILED else "was cancelled"
            raise BadInput.field("dependent_on_jobs", f"dependency {dep} {ended} and can never complete")
    return sum(1 for r in found.values() if r["status"] != Status.COMPLETED)


INSERT_EDGES = sql(
    "INSERT INTO job_dependencies (job_id, depends_on) "
    "SELECT * FROM unnest(CAST(:children AS uuid[]), CAST(:parents AS uuid[])) ON CONFLICT DO NOTHING"
)


async def insert_edges(conn: AsyncConnection, edges: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Insert ``(child, parent)`` dependency edges."""
    if edges:
        await conn.execute(
            INSERT_EDGES, {"children": [c for c, _ in edges], "parents": [p for _, p in edges]}
        )


# --- one job --------------------------------------------------------------------------------------

ON_KEY_CONFLICT = "ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
"""A repeat of an idempotency key inserts nothing (and is then compared with the job the key made:
:mod:`app.jobs.queue.repeats`). Only a job with a key can conflict (the unique index
leaves out rows without one), so jobs without keys are inserted without this clause: a plain insert costs
PostgreSQL about a tenth less than a speculative one (measured on 10,000 rows: 335 against 370 ms of
backend CPU)."""


def _insert_job(on_conflict: str, guard: str | None = None) -> str:
    columns = """
        id, type, user_id, input_data, priority, run_at, max_attempts, idempotency_key, title, request_id,
        pipeline_id, step_key, requires_approval, created_by_job, pending_parents"""
    values = """
        :id, :type, :user_id, CAST(CAST(:input AS text) AS jsonb), :priority, COALESCE(:run_at, now()),
        :max_attempts, :idempotency_key, :title, :request_id, :pipeline_id, :step_key, :requires_approval,
        :created_by_job, :pending_parents"""
    if guard is None:
        head, source, answer = "", f"VALUES ({values})", "FROM ins"
    else:
        # The guard first (MATERIALIZED: once, before the insert reads it); its row is answered whether
        # or not the job went in.
        head = f"guard AS MATERIALIZED ({guard}), "
        source = f"SELECT {values} FROM guard WHERE guard.ok"
        answer = "FROM guard LEFT JOIN ins ON true"
    return f"""
    WITH {head}ins AS (
        INSERT INTO jobs ({columns})
        {source}
        {on_conflict}
        RETURNING {JOB_COLUMNS}
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, to_status, actor, data)
        SELECT id, pipeline_id, 'enqueued', 'queued', :actor, CAST(CAST(:event_data AS text) AS jsonb) FROM ins
    ), notify AS (
        SELECT pg_notify('{JOBS_CHANNEL}', '') FROM ins WHERE pending_parents = 0 LIMIT 1
    )
    SELECT {"guard.*, " if guard is not None else ""}ins.*, (SELECT count(*) FROM notify) AS notified {answer}
    """


INSERT_JOB = sql(_insert_job(ON_KEY_CONFLICT))
INSERT_JOB_WITHOUT_KEY = sql(_insert_job(""))
_GUARDED: dict[tuple[str, bool], Any] = {}


def _insert_statement(job: NewJob, guard: Guard | None) -> Any:
    """The insert for ``job`` (with ``ON CONFLICT`` only for a job with an idempotency key), its guard
    in it; each guarded statement is made once, so that its compiled form and prepared plan are kept."""
    keyed = job.idempotency_key is not None
    if guard is None:
        return INSERT_JOB if keyed else INSERT_JOB_WITHOUT_KEY
    hit = _GUARDED.get((guard.sql, keyed))
    if hit is None:
        hit = _GUARDED[(guard.sql, keyed)] = sql(_insert_job(ON_KEY_CONFLICT if keyed else "", guard.sql))
    return hit


def _inserted(rows: Sequence[Mapping[Any, Any]], guard: Guard | None) -> Mapping[Any, Any] | None:
    """The new job's row, ``None`` for an idempotent repeat; raises the guard's refusal."""
    row = rows[0] if rows else None
    if guard is not None:
        assert row is not None, "a guard answers one row"
        if not row["ok"]:
            raise guard.refusal(row)
        if row["id"] is None:
            return None
    return row


async def enqueue(
    db: AsyncEngine | AsyncConnection | AsyncSession,
    job: NewJob,
    settings: Settings,
    *,
    actor: str | None = None,
    guard: Guard | None = None,
) -> Enqueued:
    """Insert one job (status ``queued``) with its ``enqueued`` event; NOTIFY idle workers on commit
    (also for a job due later, so that they shorten their sleep to its ``run_at``). ``guard``: a check
    made in the insert statement itself (:class:`Guard`).

    Given a connection or session, it joins the caller's transaction (so a job can be enqueued atomically
    with the caller's own writes). Given the engine, it commits on its own: a job without dependencies or
    file inputs is one autocommit statement — the row, its event and the NOTIFY together, one round
    trip — and any other job one short transaction.

    An ``idempotency_key`` is unique per owner. A repeat of the same request (what that means:
    :mod:`app.jobs.queue.repeats`) returns the existing row untouched with ``created=False``; a repeat
    with a different request is refused (:class:`~app.errors.KeyReused`), never answered with the first
    request's job as if it had gone in. Concurrent first requests with one key create exactly one row
    (``INSERT … ON CONFLICT``): the others wait for it and are compared with it.
    ``depends_on`` ids must exist, be visible to the owner and not create a cycle.

    Raises:
        BadInput: see :func:`prepare`; also unknown/foreign dependency ids (422 "unknown dependency").
        KeyReused: (a ``BadInput``, 422 on ``idempotency_key``) the key made a job for a different
            request; nothing is inserted.
        TooLarge: input above ``JOB_MAX_INPUT_BYTES``.
        Exception: the guard's refusal.
    """
    params = prepare(job, settings)
    if isinstance(db, AsyncEngine):
        if params["files"] or job.depends_on:
            async with db.begin() as conn:
                return await _insert_one(conn, job, params, actor, guard)
        return await _insert_alone(db, job, params, actor, guard)
    return await _insert_one(await conn_of(db), job, params, actor, guard)


def _insert_params(
    params: dict[str, Any], pending: int, actor: str | None, user_id: int, guard: Guard | None
) -> dict[str, Any]:
    return {
        **params,
        **(guard.params if guard is not None else {}),
        "pending_parents": pending,
        "actor": actor or f"user:{user_id}",
        "event_data": json_text({"attempts_allowed": params["max_attempts"], **requested_run_at(params)}),
    }


async def _insert_alone(
    engine: AsyncEngine, job: NewJob, params: dict[str, Any], actor: str | None, guard: Guard | None
) -> Enqueued:
    """A job without dependencies or files, as one autocommit statement (its guard in it)."""
    params.pop("files")
    inserted = _insert_params(params, 0, actor, job.user_id, guard)
    row = _inserted(await write_rows(engine, _insert_statement(job, guard), inserted), guard)
    if row is not None:
        return Enqueued(job=job_row(row), created=True)
    return Enqueued(job=_same_request(job, await compare(engine, [(0, params)], {0: []})), created=False)


def _same_request(job: NewJob, repeats: dict[int, Repeat]) -> JobRow:
    """The job a repeated key made, when the repeat asks for the same job; else its refusal."""
    repeat = repeats.get(0)
    assert repeat is not None, "ON CONFLICT without an existing row"
    if repeat.differs:
        raise refusal(repeat)
    return repeat.job


async def repeat_of(db: AsyncConnection | AsyncSession, job: NewJob, settings: Settings) -> JobRow | None:
    """The job ``job``'s idempotency key made, if any and if ``job`` asks for the same job (what a repeat
    is answered with when it is not inserted at all, e.g. over a person's limit); ``None`` for a key not
    used yet or no key.

    Raises:
        BadInput: ``job`` does not validate (:func:`prepare`). KeyReused: the key made a job for a
        different request.
    """
    if job.idempotency_key is None:
        return None
    params = prepare(job, settings)
    repeats = await compare(await conn_of(db), [(0, params)], {0: list(job.depends_on)})
    return _same_request(job, repeats) if repeats else None


async def _insert_one(
    conn: AsyncConnection, job: NewJob, params: dict[str, Any], actor: str | None, guard: Guard | None
) -> Enqueued:
    """:func:`enqueue` in the caller's transaction."""
    await check_files(conn, [params])
    files = params.pop("files")
    pending = 0
    if job.depends_on:
        pending = await lock_parents(conn, job.user_id, list(job.depends_on), owner_is_admin=False)
    inserted = _insert_params(params, pending, actor, job.user_id, guard)
    statement = _insert_statement(job, guard)
    row = _inserted((await conn.execute(statement, inserted)).mappings().all(), guard)
    if row is None:
        repeats = await compare(conn, [(0, params)], {0: list(job.depends_on)})
        return Enqueued(job=_same_request(job, repeats), created=False)
    if job.depends_on:
        await insert_edges(conn, [(job.id, d) for d in job.depends_on])
        if pending == 0:
            await notify_jobs(conn)
    await link_files(conn, [(job.id, fid) for _, fid, _ in files])
    return Enqueued(job=job_row(row), created=True)
