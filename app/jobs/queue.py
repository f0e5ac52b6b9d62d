"""The queue: the one module that writes ``jobs.status`` (issue 3 §1).

Every function here takes a SQLAlchemy ``AsyncConnection`` (or an ``AsyncSession``) and never commits:
the caller owns the transaction, so an application can enqueue in the same transaction as its own
writes (transactional enqueue, issue 3 §2), and a batch of transitions can share one transaction (the
worker's claims and completions). Every status change is

* a compare-and-set: ``WHERE status = <expected>`` built from :mod:`app.jobs.states`, and for a
  worker's writes also ``AND locked_by = <this worker>`` — a transition that lost its race changes
  nothing and is reported to the caller (as ``lost`` ids, or :class:`~app.errors.Conflict`);
* atomic with its ``job_events`` row (same statement or same transaction);
* followed, in the same transaction, by its consequences: dependents released or cancelled (issue 5
  §4), the pipeline's derived status, and alert outbox rows (issue 8 §4).

Semantics are at-least-once: a job whose worker dies is rescued by the sweep and runs again, so
processors should be idempotent (README "At-least-once").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from uuid_utils.compat import uuid7

from app.db import compiled_sql, driver_connection, fetch_dicts
from app.errors import BadInput, Conflict, Forbidden, NotFound
from app.jobs import outbox
from app.jobs.payload import cap_text, check_input, json_text
from app.jobs.states import Actor, Status, sources
from app.processors import registry
from app.processors.support import file_refs
from app.settings import Settings

JOBS_CHANNEL = "jobdesk_jobs"
"""NOTIFY channel: a job may have become claimable (enqueue, retry, rescue, released dependents)."""
CANCEL_CHANNEL = "jobdesk_cancel"
"""NOTIFY channel: payload is the id of a running job whose cancel was requested (issue 4 §5)."""

MAX_ATTEMPTS_RANGE = (1, 1000)
"""Accepted ``max_attempts`` on enqueue (case C05): outside gets a 422."""
PRIORITY_RANGE = (-100, 100)
"""Accepted ``priority`` on enqueue; higher runs first (seed 002's order)."""
RESCUE_LOCK_KEY = 0x6A6F6264  # "jobd": one sweeper at a time across processes (issue 3 §8)
PRUNE_BATCH = 500

# Columns returned to callers (API shape of issue 3 §11, minus the derived ``dependent_on_jobs``).
JOB_COLUMNS = (
    "id, type, status, is_active, user_id, pipeline_id, step_key, title, input_data, result_data, error_message, "
    "priority, run_at, attempts, max_attempts, locked_by, lease_expires_at, idempotency_key, requires_approval, "
    "pending_parents, blocked_by, created_by_job, progress, progress_message, request_id, created_at, updated_at, "
    "started_at, completed_at"
)
CLAIM_COLUMNS = (
    "id, type, user_id, pipeline_id, step_key, title, input_data, priority, run_at, attempts, max_attempts, "
    "requires_approval, request_id, created_at, lease_expires_at"
)


def new_id() -> uuid.UUID:
    """A UUIDv7: time-ordered, so ``id`` breaks ties in creation order (issue 2 §5)."""
    return uuid7()


class Principal(Protocol):
    """Who is acting: anything with ``id`` (user id) and ``is_admin`` — e.g. ``app.auth.CurrentUser``."""

    id: int
    is_admin: bool


@dataclass(frozen=True)
class SystemPrincipal:
    """An admin-equivalent actor for CLI commands and scheduled work."""

    id: int
    is_admin: bool = True
    email: str = "system"


def _actor(principal: Principal) -> str:
    return f"user:{principal.id}"


async def _conn(db: AsyncConnection | AsyncSession) -> AsyncConnection:
    if isinstance(db, AsyncSession):
        return await db.connection()
    return db


def _sql(statement: str) -> Any:
    return text(statement)


# --- the worker's hot path, straight on asyncpg (see app.db: "Hot paths straight on asyncpg") ----------

_compiled = compiled_sql
_driver = driver_connection
_rows = fetch_dicts


# --- reading ------------------------------------------------------------------------------------

GET_JOB = _sql(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id")
GET_JOB_FOR_UPDATE = _sql(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id FOR UPDATE")


def _uuid(value: Any, what: str = "job id") -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(f"No {what.split()[0]} with id {str(value)[:64]!r}.") from None


async def get_job(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal | None = None
) -> RowMapping:
    """The job row, checked against ``principal`` (owner or admin).

    Raises:
        NotFound: unknown id, malformed id, or another user's job — the same answer, so ids cannot be
            probed (case C20).
    """
    conn = await _conn(db)
    jid = _uuid(job_id)
    row = (await conn.execute(GET_JOB, {"id": jid})).mappings().first()
    if row is None or (principal is not None and not principal.is_admin and row["user_id"] != principal.id):
        raise NotFound(f"No job with id {jid}.")
    return row


async def _lock_job(conn: AsyncConnection, job_id: Any, principal: Principal) -> RowMapping:
    jid = _uuid(job_id)
    row = (await conn.execute(GET_JOB_FOR_UPDATE, {"id": jid})).mappings().first()
    if row is None or (not principal.is_admin and row["user_id"] != principal.id):
        raise NotFound(f"No job with id {jid}.")
    return row


DEPENDENCIES_OF = _sql("SELECT depends_on FROM job_dependencies WHERE job_id = :id ORDER BY depends_on")


async def dependencies_of(db: AsyncConnection | AsyncSession, job_id: uuid.UUID) -> list[uuid.UUID]:
    """Ids of the jobs ``job_id`` waits for (``dependent_on_jobs`` in the API, seed 000 §2)."""
    conn = await _conn(db)
    return list((await conn.execute(DEPENDENCIES_OF, {"id": job_id})).scalars())


# --- events -------------------------------------------------------------------------------------

INSERT_EVENT = _sql(
    "INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data) "
    "VALUES (:job_id, :pipeline_id, :kind, :from_status, :to_status, :actor, :message, CAST(CAST(:data AS text) AS jsonb))"
)


async def add_event(
    conn: AsyncConnection,
    job: RowMapping | dict[str, Any],
    kind: str,
    actor: str,
    *,
    from_status: str | None = None,
    to_status: str | None = None,
    message: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Append one ``job_events`` row (no status change by itself; e.g. ``cancel_requested``)."""
    await conn.execute(
        INSERT_EVENT,
        {
            "job_id": job["id"],
            "pipeline_id": job.get("pipeline_id") if isinstance(job, dict) else job["pipeline_id"],
            "kind": kind,
            "from_status": from_status,
            "to_status": to_status,
            "actor": actor,
            "message": cap_text(message),
            "data": json_text(data) if data is not None else None,
        },
    )


# --- enqueue ------------------------------------------------------------------------------------


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

    job: RowMapping
    created: bool


def prepare(
    job: NewJob, settings: Settings, *, field_prefix: str = "", skip_schema: bool = False
) -> dict[str, Any]:
    """Validate ``job`` and return the insert parameters.

    Checks (issue 3 §2, §10; cases C05, C12, C13): the type is registered; ``input_data`` has no NUL, fits
    ``JOB_MAX_INPUT_BYTES`` and validates against the processor's input schema (stored in its normalised
    form, defaults filled in); ``max_attempts`` and ``priority`` are in range; ``run_at`` has a UTC offset.

    Raises:
        BadInput: with the field path (``input_data.seconds``, ``max_attempts``, …) and the reason.
        TooLarge: input above ``JOB_MAX_INPUT_BYTES``.
    """
    p = field_prefix
    spec = registry.get(job.type)
    if spec is None:
        known = ", ".join(sorted(registry.names())) or "none"
        raise BadInput.field(f"{p}type", f"unknown job type {job.type[:100]!r}; known types: {known}")
    check_input(job.input_data, settings.job_max_input_bytes, field=f"{p}input_data")
    normalized = (
        job.input_data if skip_schema else spec.validate_input(job.input_data, field_prefix=f"{p}input_data")
    )
    input_text = json_text(normalized)
    files = file_refs(spec.input_model, normalized, f"{p}input_data")
    max_attempts = (
        job.max_attempts
        if job.max_attempts is not None
        else spec.max_attempts or settings.default_max_attempts
    )
    lo, hi = MAX_ATTEMPTS_RANGE
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not lo <= max_attempts <= hi:
        raise BadInput.field(f"{p}max_attempts", f"must be a whole number from {lo} to {hi}")
    lo, hi = PRIORITY_RANGE
    if isinstance(job.priority, bool) or not isinstance(job.priority, int) or not lo <= job.priority <= hi:
        raise BadInput.field(f"{p}priority", f"must be a whole number from {lo} to {hi} (higher runs first)")
    if job.run_at is not None and (job.run_at.tzinfo is None or job.run_at.utcoffset() is None):
        raise BadInput.field(f"{p}run_at", "needs a UTC offset or time zone, e.g. 2026-01-31T09:00:00+01:00")
    if job.run_at is not None and not (1970 <= job.run_at.year <= 9000):
        raise BadInput.field(f"{p}run_at", "must be a date between 1970 and 9000")
    if (
        job.idempotency_key is not None
        and not (0 < len(job.idempotency_key) <= 200)
        or (job.idempotency_key and "\x00" in job.idempotency_key)
    ):
        raise BadInput.field(f"{p}idempotency_key", "must be 1 to 200 characters without NUL")
    if job.title is not None and (len(job.title) > 200 or "\x00" in job.title):
        raise BadInput.field(f"{p}title", "must be at most 200 characters without NUL")
    return {
        "id": job.id,
        "type": job.type,
        "user_id": job.user_id,
        "input": input_text,
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
        "files": files,
    }


FILE_OWNERS = _sql("SELECT id, user_id FROM files WHERE id = ANY(CAST(:ids AS uuid[]))")


async def check_file_owners(conn: AsyncConnection, refs: Sequence[tuple[int, str, uuid.UUID]]) -> None:
    """Every file id a job's input names must be a file of the job's owner — admins' jobs included: a
    job only reads its owner's files. ``refs`` is ``[(owner user id, field path, file id)]``. Another
    user's file gets the same answer as an unknown id (case C20).

    Raises:
        BadInput: ``input_data.<field>`` (or ``…[i]``) → "no such file (<id>); upload it first".
    """
    if not refs:
        return
    wanted = sorted({fid for _, _, fid in refs}, key=str)
    owners = {r[0]: r[1] for r in (await conn.execute(FILE_OWNERS, {"ids": wanted})).all()}
    errors = {
        path: f"no such file ({fid}); upload it first" for uid, path, fid in refs if owners.get(fid) != uid
    }
    if errors:
        first, message = next(iter(errors.items()))
        raise BadInput(f"{first}: {message}", errors=errors)


LINK_FILES = _sql(
    """
    UPDATE files f SET job_id = l.job_id
    FROM (SELECT DISTINCT ON (file_id) * FROM unnest(CAST(:jobs AS uuid[]), CAST(:files AS uuid[])) AS t(job_id, file_id)
          ORDER BY file_id, job_id) l
    WHERE f.id = l.file_id AND f.job_id IS NULL
    """
)


async def _link_files(conn: AsyncConnection, pairs: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Attach each still-unattached upload to the first new job that names it, so retention deletes it
    with that job (issue 6 §6); uploads no job ever used are deleted by :func:`prune` after retention."""
    if pairs:
        await conn.execute(LINK_FILES, {"jobs": [j for j, _ in pairs], "files": [f for _, f in pairs]})


async def _check_files(conn: AsyncConnection, prepared: Sequence[dict[str, Any]]) -> None:
    await check_file_owners(conn, [(p["user_id"], path, fid) for p in prepared for path, fid in p["files"]])


INSERT_JOB = _sql(
    f"""
    WITH ins AS (
        INSERT INTO jobs (id, type, user_id, input_data, priority, run_at, max_attempts, idempotency_key, title,
                          request_id, pipeline_id, step_key, requires_approval, created_by_job, pending_parents)
        VALUES (:id, :type, :user_id, CAST(CAST(:input AS text) AS jsonb), :priority, COALESCE(:run_at, now()),
                :max_attempts, :idempotency_key, :title, :request_id, :pipeline_id, :step_key, :requires_approval,
                :created_by_job, :pending_parents)
        ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING {JOB_COLUMNS}
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, to_status, actor, data)
        SELECT id, pipeline_id, 'enqueued', 'queued', :actor, CAST(CAST(:event_data AS text) AS jsonb) FROM ins
    ), notify AS (
        SELECT pg_notify('{JOBS_CHANNEL}', '') FROM ins WHERE pending_parents = 0 LIMIT 1
    )
    SELECT ins.*, (SELECT count(*) FROM notify) AS notified FROM ins
    """
)
GET_BY_IDEMPOTENCY_KEY = _sql(
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = :user_id AND idempotency_key = :key"
)


async def enqueue(
    db: AsyncConnection | AsyncSession, job: NewJob, settings: Settings, *, actor: str | None = None
) -> Enqueued:
    """Insert one job (status ``queued``) with its ``enqueued`` event; NOTIFY idle workers on commit
    (also for a job due later, so that they shorten their sleep to its ``run_at``).

    An ``idempotency_key`` is unique per owner: a repeat returns the existing row untouched with
    ``created=False``, and concurrent repeats create exactly one row (``INSERT … ON CONFLICT``).
    ``depends_on`` ids must exist, be visible to the owner and not create a cycle (case C09).

    Raises:
        BadInput: see :func:`prepare`; also unknown/foreign dependency ids (422 "unknown dependency").
        TooLarge: input above ``JOB_MAX_INPUT_BYTES``.
    """
    conn = await _conn(db)
    params = prepare(job, settings)
    await _check_files(conn, [params])
    file_refs_ = params.pop("files")
    pending = 0
    if job.depends_on:
        pending = await _lock_parents(conn, job.user_id, list(job.depends_on), owner_is_admin=False)
    row = (
        (
            await conn.execute(
                INSERT_JOB,
                {
                    **params,
                    "pending_parents": pending,
                    "actor": actor or f"user:{job.user_id}",
                    "event_data": json_text({"attempts_allowed": params["max_attempts"]}),
                },
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        existing = (
            (await conn.execute(GET_BY_IDEMPOTENCY_KEY, {"user_id": job.user_id, "key": job.idempotency_key}))
            .mappings()
            .first()
        )
        assert existing is not None, "ON CONFLICT without an existing row"
        return Enqueued(job=existing, created=False)
    if job.depends_on:
        await _insert_edges(conn, [(job.id, d) for d in job.depends_on])
        if pending == 0:
            await notify_jobs(conn)
    await _link_files(conn, [(job.id, fid) for _, fid in file_refs_])
    return Enqueued(job=row, created=True)


LOCK_PARENTS = _sql(
    "SELECT id, user_id, status FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR SHARE"
)


async def _lock_parents(
    conn: AsyncConnection, user_id: int, ids: list[uuid.UUID], *, owner_is_admin: bool
) -> int:
    """Lock the parent rows (``FOR SHARE``) so none can finish while the child's edges are being
    written, and return how many have not completed. A parent's completion then waits for this
    transaction and, in its own next statement, sees the new edges (no lost decrement).

    Raises:
        BadInput: an id that does not exist, belongs to another user, or has failed/been cancelled —
            without saying which of the first two (case C09 (d)).
    """
    unique = sorted(set(ids), key=str)
    rows = (await conn.execute(LOCK_PARENTS, {"ids": unique})).mappings().all()
    found = {r["id"]: r for r in rows if owner_is_admin or r["user_id"] == user_id}
    for dep in unique:
        if dep not in found:
            raise BadInput.field("dependent_on_jobs", f"unknown dependency {dep}")
        if found[dep]["status"] in (Status.FAILED, Status.CANCELLED):
            raise BadInput.field(
                "dependent_on_jobs", f"dependency {dep} has {found[dep]['status']} and can never complete"
            )
    return sum(1 for r in found.values() if r["status"] != Status.COMPLETED)


INSERT_EDGES = _sql(
    "INSERT INTO job_dependencies (job_id, depends_on) "
    "SELECT * FROM unnest(CAST(:children AS uuid[]), CAST(:parents AS uuid[])) ON CONFLICT DO NOTHING"
)


async def _insert_edges(conn: AsyncConnection, edges: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
    if edges:
        await conn.execute(
            INSERT_EDGES, {"children": [c for c, _ in edges], "parents": [p for _, p in edges]}
        )


async def notify_jobs(conn: AsyncConnection) -> None:
    """NOTIFY the jobs channel; delivered to listening workers when the transaction commits."""
    await conn.execute(text(f"SELECT pg_notify('{JOBS_CHANNEL}', '')"))


INSERT_MANY = _sql(
    f"""
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
        ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, pipeline_id, user_id, run_at, pending_parents
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, to_status, actor)
        SELECT id, pipeline_id, 'enqueued', 'queued', COALESCE(:actor, 'user:' || user_id) FROM ins
    ), notify AS (
        SELECT pg_notify('{JOBS_CHANNEL}', '') FROM ins WHERE pending_parents = 0 LIMIT 1
    )
    SELECT ins.id, (SELECT count(*) FROM notify) AS notified FROM ins
    """
)


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
    """Insert many jobs in one statement (bulk enqueue, issue 3 §2); all are validated first, so a bad
    one rejects the whole batch (all or nothing). Returns the ids actually inserted (idempotent repeats
    are skipped). ``pending`` and ``edges`` are used by pipelines, whose jobs depend on each other
    (:mod:`app.pipelines` validates the graph and the inputs, and passes ``skip_schema``); plain callers
    leave them empty.

    Raises:
        BadInput: with the index of the bad job in the field path (``jobs[3].input_data.seconds``).
        TooLarge: an input above ``JOB_MAX_INPUT_BYTES``.
    """
    conn = await _conn(db)
    if not jobs:
        return []
    prepared = [
        prepare(j, settings, field_prefix=f"jobs[{i}].", skip_schema=skip_schema) for i, j in enumerate(jobs)
    ]
    await _check_files(conn, prepared)
    pending = pending or {}
    params = {
        "ids": [p["id"] for p in prepared],
        "types": [p["type"] for p in prepared],
        "user_ids": [p["user_id"] for p in prepared],
        "inputs": [p["input"] for p in prepared],
        "priorities": [p["priority"] for p in prepared],
        "run_ats": [p["run_at"] for p in prepared],
        "max_attempts": [p["max_attempts"] for p in prepared],
        "keys": [p["idempotency_key"] for p in prepared],
        "titles": [p["title"] for p in prepared],
        "pipeline_ids": [p["pipeline_id"] for p in prepared],
        "step_keys": [p["step_key"] for p in prepared],
        "approvals": [p["requires_approval"] for p in prepared],
        "created_by": [p["created_by_job"] for p in prepared],
        "pending": [pending.get(p["id"], 0) for p in prepared],
        "request_ids": [p["request_id"] for p in prepared],
        "actor": actor,
    }
    inserted = [r[0] for r in (await conn.execute(INSERT_MANY, params)).all()]
    created = set(inserted)
    await _link_files(conn, [(p["id"], fid) for p in prepared if p["id"] in created for _, fid in p["files"]])
    if edges:
        await _insert_edges(conn, list(edges))
    return inserted


# --- claim --------------------------------------------------------------------------------------

# The claimable predicate, in one place (issue 3 §3): due, queued, not cancelled, no unfinished
# dependency (issue 5), and its type not paused or limited (issue 11; limited types are claimed by
# CLAIM_LIMITED under the type's control-row lock so that no worker overshoots).
CLAIMABLE = """
    status = 'queued' AND is_active AND pending_parents = 0 AND run_at <= now()
"""
# Written as an uncorrelated check of the '*' row (one InitPlan per claim) and a per-candidate lookup of the
# type's own row kept as a SubPlan (``OFFSET 0`` stops PostgreSQL from turning it into an anti-join), not
# as one correlated NOT EXISTS: the planner cannot estimate an anti-join against the small, rarely
# analysed controls table (an empty table is assumed to hold ~500 rows), and with that misestimate it
# read every due row and sorted them on each claim (or planned a parallel scan) instead of reading the
# first few in claim order from ix_jobs_claim: a claim whose cost grew with the backlog (case C17; found
# by the EXPLAIN tests on seeded tables in tests/test_ops.py). Same rows either way.
NOT_CONTROLLED = """
    AND NOT EXISTS (SELECT 1 FROM job_type_controls a WHERE a.type = '*' AND a.paused)
    AND NOT EXISTS (
        SELECT 1 FROM job_type_controls c
        WHERE c.type = jobs.type
          AND (c.paused OR (c.type <> '*' AND (c.max_running IS NOT NULL OR c.max_per_minute IS NOT NULL)))
        OFFSET 0
    )
"""

_CLAIM_UPDATE = f"""
    claimed AS (
        UPDATE jobs j
        SET status = 'in_progress', attempts = j.attempts + 1, locked_by = :worker,
            lease_expires_at = now() + make_interval(secs => :lease), started_at = now(), updated_at = now(),
            progress = NULL, progress_message = NULL
        WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.status = 'queued'  -- primary-key lookups
        RETURNING {", ".join("j." + c.strip() for c in CLAIM_COLUMNS.split(","))}
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, data)
        SELECT id, pipeline_id, 'claimed', 'queued', 'in_progress', :actor, jsonb_build_object('attempt', attempts)
        FROM claimed
    )
    SELECT claimed.*, (
        SELECT jsonb_object_agg(COALESCE(p.step_key, p.id::text), p.result_data)
        FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on WHERE d.job_id = claimed.id
    ) AS parents
    FROM claimed ORDER BY priority DESC, run_at, id
"""

CLAIM = _sql(
    f"""
    WITH picked AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE {CLAIMABLE} {NOT_CONTROLLED}
        ORDER BY priority DESC, run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), {_CLAIM_UPDATE}
    """
)

CLAIM_LIMITED = _sql(
    f"""
    WITH picked AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE {CLAIMABLE} AND type = :type
        ORDER BY priority DESC, run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), {_CLAIM_UPDATE}
    """
)

LIMITED_TYPES = _sql(
    """
    SELECT type, max_running, max_per_minute FROM job_type_controls
    WHERE type <> '*' AND NOT paused AND (max_running IS NOT NULL OR max_per_minute IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM job_type_controls a WHERE a.type = '*' AND a.paused)
    ORDER BY type
    """
)
LOCK_CONTROL = _sql(
    """
    SELECT type, max_running, max_per_minute, paused,
           CASE WHEN window_start IS NULL OR window_start <= now() - interval '1 minute' THEN 0 ELSE window_count END
               AS window_count
    FROM job_type_controls WHERE type = :type FOR UPDATE
    """
)
COUNT_RUNNING_OF_TYPE = _sql("SELECT count(*) FROM jobs WHERE status = 'in_progress' AND type = :type")
BUMP_WINDOW = _sql(
    """
    UPDATE job_type_controls
    SET window_start = CASE WHEN window_start IS NULL OR window_start <= now() - interval '1 minute'
                            THEN now() ELSE window_start END,
        window_count = CASE WHEN window_start IS NULL OR window_start <= now() - interval '1 minute'
                            THEN :n ELSE window_count + :n END
    WHERE type = :type
    """
)


async def claim(conn: AsyncConnection, worker_id: str, limit: int, lease_secs: float) -> list[RowMapping]:
    """Claim up to ``limit`` due jobs for ``worker_id`` in one statement (issue 3 §3).

    ``queued`` → ``in_progress``: ``attempts + 1``, lease until ``now() + lease_secs``, ``started_at``;
    ordered ``priority DESC, run_at, id`` (seed 002); ``FOR UPDATE SKIP LOCKED`` so concurrent claimers
    never take the same row. Job types with a concurrency or rate limit (issue 11 §4) are claimed by
    :func:`claim_limited` instead. Returns the claimed rows (:data:`CLAIM_COLUMNS`).
    """
    if limit <= 0:
        return []
    params = {"worker": worker_id, "limit": limit, "lease": float(lease_secs), "actor": f"worker:{worker_id}"}
    return await _rows(conn, CLAIM, params)


async def limited_types(conn: AsyncConnection) -> list[RowMapping]:
    """Job types that have a concurrency or rate limit and are not paused (issue 11 §4)."""
    return list((await conn.execute(LIMITED_TYPES)).mappings().all())


async def claim_limited(
    conn: AsyncConnection, worker_id: str, job_type: str, limit: int, lease_secs: float
) -> list[RowMapping]:
    """Claim up to ``limit`` jobs of a limited ``job_type`` without exceeding its limits.

    Holds the type's ``job_type_controls`` row lock (``FOR UPDATE``) for the rest of the caller's
    transaction, so claimers of that type are serialised and the count of running jobs they see is
    exact: at most ``max_running`` run at once across all workers, and at most ``max_per_minute`` start
    per rolling minute (issue 11 §4). The caller must commit promptly.
    """
    control = (await conn.execute(LOCK_CONTROL, {"type": job_type})).mappings().first()
    if control is None or control["paused"] or limit <= 0:
        return []
    allowance = limit
    if control["max_running"] is not None:
        running = (await conn.execute(COUNT_RUNNING_OF_TYPE, {"type": job_type})).scalar_one()
        allowance = min(allowance, control["max_running"] - running)
    if control["max_per_minute"] is not None:
        allowance = min(allowance, control["max_per_minute"] - control["window_count"])
    if allowance <= 0:
        return []
    params = {
        "worker": worker_id,
        "limit": allowance,
        "lease": float(lease_secs),
        "actor": f"worker:{worker_id}",
        "type": job_type,
    }
    rows = await _rows(conn, CLAIM_LIMITED, params)
    if rows and control["max_per_minute"] is not None:
        await conn.execute(BUMP_WINDOW, {"type": job_type, "n": len(rows)})
    return rows


NEXT_DUE = _sql(
    "SELECT EXTRACT(EPOCH FROM (min(run_at) - now())) FROM jobs WHERE status = 'queued' AND run_at > now()"
)


async def seconds_until_next_due(conn: AsyncConnection) -> float | None:
    """Seconds until the earliest future ``run_at`` of a queued job, or ``None`` if there is none.

    The worker sleeps at most this long, so scheduled jobs and backed-off retries start on time
    without a separate scheduler (issue 4 §3).
    """
    row = (await conn.execute(NEXT_DUE)).scalar()
    return float(row) if row is not None else None


# --- lease --------------------------------------------------------------------------------------

RENEW_LEASES = _sql(
    """
    UPDATE jobs SET lease_expires_at = now() + make_interval(secs => :lease)
    WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker
    RETURNING id, is_active
    """
)


@dataclass(frozen=True)
class LeaseReport:
    """Outcome of a heartbeat: ``renewed`` ids, ``cancelled`` ids (renewed, but a cancel was requested)
    and ``lost`` ids (no longer ours: rescued or finished elsewhere — stop without writing)."""

    renewed: frozenset[uuid.UUID]
    cancelled: frozenset[uuid.UUID]
    lost: frozenset[uuid.UUID]


async def heartbeat(
    conn: AsyncConnection, worker_id: str, job_ids: Iterable[uuid.UUID], lease_secs: float
) -> LeaseReport:
    """Renew the lease of every job ``worker_id`` is running (one statement; issue 4 §4).

    Only ``lease_expires_at`` changes — an unindexed column — so renewals are HOT updates (case C18).
    The returned ``is_active`` doubles as the durable cancel check (issue 4 §5).
    """
    ids = list(job_ids)
    if not ids:
        return LeaseReport(frozenset(), frozenset(), frozenset())
    rows = (
        await conn.execute(RENEW_LEASES, {"ids": ids, "lease": float(lease_secs), "worker": worker_id})
    ).all()
    renewed = frozenset(r[0] for r in rows)
    return LeaseReport(
        renewed=renewed,
        cancelled=frozenset(r[0] for r in rows if not r[1]),
        lost=frozenset(ids) - renewed,
    )


KEEP_LEASES = _sql(
    """
    WITH mine AS (
        SELECT id FROM jobs
        WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker
        FOR UPDATE SKIP LOCKED
    )
    UPDATE jobs SET lease_expires_at = now() + make_interval(secs => :lease)
    FROM mine WHERE jobs.id = mine.id
    RETURNING jobs.id, jobs.is_active
    """
)
STILL_MINE = _sql(
    "SELECT id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker"
)


async def keep_leases(
    conn: AsyncConnection, worker_id: str, job_ids: Iterable[uuid.UUID], lease_secs: float
) -> LeaseReport:
    """:func:`heartbeat` for a renewal that must never wait for a row lock: the worker's lease keeper
    thread, whose worker may hold a job's row in a transaction its stalled event loop cannot finish (an
    outcome or a progress report being written). Such a job is neither renewed nor lost this time."""
    ids = list(job_ids)
    if not ids:
        return LeaseReport(frozenset(), frozenset(), frozenset())
    params = {"ids": ids, "lease": float(lease_secs), "worker": worker_id}
    rows = (await conn.execute(KEEP_LEASES, params)).all()
    renewed = frozenset(r[0] for r in rows)
    mine = set((await conn.execute(STILL_MINE, {"ids": ids, "worker": worker_id})).scalars())
    return LeaseReport(
        renewed=renewed,
        cancelled=frozenset(r[0] for r in rows if not r[1]),
        lost=frozenset(ids) - renewed - mine,
    )


CANCEL_REQUESTED = _sql(
    "SELECT id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND locked_by = :worker "
    "AND NOT is_active"
)


async def cancel_requested(
    conn: AsyncConnection, worker_id: str, job_ids: Iterable[uuid.UUID]
) -> set[uuid.UUID]:
    """Ids among ``job_ids`` whose cancel was requested: the durable check behind NOTIFY (issue 4 §5)."""
    ids = list(job_ids)
    if not ids:
        return set()
    return set((await conn.execute(CANCEL_REQUESTED, {"ids": ids, "worker": worker_id})).scalars())


SET_PROGRESS = _sql(
    """
    UPDATE jobs SET progress = :fraction, progress_message = :message, updated_at = now()
    WHERE id = :id AND status = 'in_progress' AND locked_by = :worker
    """
)


async def set_progress(
    conn: AsyncConnection, worker_id: str, job_id: uuid.UUID, fraction: float | None, message: str | None
) -> bool:
    """Record a running job's progress (0..1) and message; ``False`` if the job is no longer ours."""
    if fraction is not None:
        fraction = min(max(float(fraction), 0.0), 1.0)
    result = await conn.execute(
        SET_PROGRESS,
        {"id": job_id, "worker": worker_id, "fraction": fraction, "message": cap_text(message, 1000)},
    )
    return result.rowcount == 1


# --- finishing (worker) ---------------------------------------------------------------------------


@dataclass
class Outcome:
    """A worker's result for one job it holds.

    ``kind``: ``completed`` (``result`` = JSON text of result_data), ``failed`` (``error``; retried after
    ``delay`` seconds while attempts remain unless ``permanent``), ``cancelled`` (the worker stopped it
    after a cancel request), or ``released`` (shutdown: back to ``queued`` without counting the attempt).
    ``next_jobs`` (:class:`app.processors.NextJob`) are jobs a processor asked for (issue 5 §2), created by
    :func:`app.pipelines.insert_next_jobs` only if the completion wins.
    """

    job_id: uuid.UUID
    kind: str
    result: str | None = None
    error: str | None = None
    permanent: bool = False
    delay: float = 0.0
    message: str | None = None
    next_jobs: list[Any] = field(default_factory=list)
    pipeline_id: uuid.UUID | None = None
    attempt: int | None = None
    """The attempt (``attempts`` when it was claimed) this outcome belongs to: a fencing token. When set,
    a completion or failure is applied only if the job is still at that attempt, so the late outcome of
    an attempt whose lease was lost cannot finish a newer attempt of the same job — even one the same
    worker claimed again."""


@dataclass
class FinishReport:
    """What :func:`finish` did: final status per job id, and ``lost`` ids whose write lost its race
    (rescued, or finished by someone else). For a completion that lost to a cancel request, the job is
    moved to ``cancelled`` instead and reported as such (case C06)."""

    status: dict[uuid.UUID, str] = field(default_factory=dict)
    lost: set[uuid.UUID] = field(default_factory=set)
    notify: bool = False


COMPLETE_MANY = _sql(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:results AS text[]), CAST(:attempts AS int[]))
            AS t(id, result, attempt)
    ), upd AS (
        UPDATE jobs j
        SET status = CASE WHEN j.requires_approval THEN 'waiting_approval' ELSE 'completed' END,
            result_data = input.result::jsonb,
            completed_at = CASE WHEN j.requires_approval THEN NULL ELSE now() END,
            updated_at = now(), locked_by = NULL, lease_expires_at = NULL, progress = 1, error_message = NULL
        FROM input
        WHERE j.id = input.id AND j.status = 'in_progress' AND j.locked_by = :worker AND j.is_active
          AND (input.attempt IS NULL OR j.attempts = input.attempt)
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor)
        SELECT id, pipeline_id, status, 'in_progress', status, :actor FROM upd
    )
    SELECT id, pipeline_id, status, type, user_id, title, step_key FROM upd
    """
)

FAIL_MANY = _sql(
    """
    WITH input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:errors AS text[]), CAST(:permanent AS boolean[]),
                             CAST(:delays AS float8[]), CAST(:attempts AS int[])) AS t(id, error, permanent, delay, attempt)
    ), upd AS (
        UPDATE jobs j
        SET status = CASE WHEN input.permanent OR j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
            run_at = CASE WHEN input.permanent OR j.attempts >= j.max_attempts THEN j.run_at
                          ELSE now() + make_interval(secs => input.delay) END,
            completed_at = CASE WHEN input.permanent OR j.attempts >= j.max_attempts THEN now() ELSE NULL END,
            error_message = input.error, updated_at = now(), locked_by = NULL, lease_expires_at = NULL
        FROM input
        WHERE j.id = input.id AND j.status = 'in_progress' AND j.locked_by = :worker AND j.is_active
          AND (input.attempt IS NULL OR j.attempts = input.attempt)
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key, j.attempts, j.max_attempts,
                  j.run_at, j.error_message
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, CASE WHEN status = 'failed' THEN 'failed' ELSE 'retry_scheduled' END,
               'in_progress', status, :actor, error_message,
               jsonb_build_object('attempt', attempts, 'max_attempts', max_attempts,
                                  'next_run_at', CASE WHEN status = 'queued' THEN run_at END)
        FROM upd
    )
    SELECT * FROM upd
    """
)

CANCEL_ACK_MANY = _sql(
    """
    WITH upd AS (
        UPDATE jobs j
        SET status = 'cancelled', completed_at = now(), updated_at = now(), locked_by = NULL,
            lease_expires_at = NULL, error_message = COALESCE(:message, j.error_message)
        WHERE j.id = ANY(CAST(:ids AS uuid[])) AND j.status = 'in_progress' AND j.locked_by = :worker
          AND (NOT CAST(:only_inactive AS boolean) OR NOT j.is_active)
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message)
        SELECT id, pipeline_id, 'cancelled', 'in_progress', 'cancelled', :actor, :message FROM upd
    )
    SELECT * FROM upd
    """
)

RELEASE_MANY = _sql(
    f"""
    WITH upd AS (
        UPDATE jobs j
        SET status = 'queued', attempts = GREATEST(j.attempts - 1, 0), run_at = now(), updated_at = now(),
            locked_by = NULL, lease_expires_at = NULL
        WHERE j.id = ANY(CAST(:ids AS uuid[])) AND j.status = 'in_progress' AND j.locked_by = :worker
        RETURNING j.id, j.pipeline_id, j.status
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message)
        SELECT id, pipeline_id, 'released', 'in_progress', 'queued', :actor, :message FROM upd
    ), notify AS (SELECT pg_notify('{JOBS_CHANNEL}', '') FROM upd LIMIT 1)
    SELECT upd.*, (SELECT count(*) FROM notify) AS notified FROM upd
    """
)

LOCK_PIPELINES = _sql("SELECT id FROM pipelines WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE")


async def lock_pipelines(conn: AsyncConnection, pipeline_ids: Iterable[uuid.UUID | None]) -> None:
    """Lock pipeline rows in id order before changing their jobs, so concurrent transitions in one
    pipeline derive its status one at a time and never deadlock each other."""
    ids = sorted({p for p in pipeline_ids if p is not None}, key=str)
    if ids:
        await conn.execute(LOCK_PIPELINES, {"ids": ids})


async def finish(
    conn: AsyncConnection, worker_id: str, outcomes: Sequence[Outcome], settings: Settings
) -> FinishReport:
    """Apply a batch of a worker's outcomes in the caller's transaction (issue 3 §4, issue 10 batching).

    Each write is guarded by ``status = 'in_progress' AND locked_by = worker_id`` (a rescued job's
    stale worker changes nothing), and completions/failures also by ``is_active``: once a cancel is
    accepted, a late success or failure cannot overwrite it — the job goes to ``cancelled`` instead
    (case C06). Consequences run in the same transaction: dependents released (issue 5 §3) or cancelled
    (§4), processor-created next jobs inserted, pipeline status derived, alerts recorded (issue 8).
    """
    report = FinishReport()
    if not outcomes:
        return report
    actor = f"worker:{worker_id}"
    await lock_pipelines(conn, (o.pipeline_id for o in outcomes))
    by_kind: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_kind.setdefault(o.kind, []).append(o)
    changed: list[RowMapping | dict[str, Any]] = []
    cancel_instead: list[uuid.UUID] = []
    extra_pipelines: set[uuid.UUID] = set()

    done = by_kind.get("completed", [])
    if done:
        rows = await _rows(
            conn,
            COMPLETE_MANY,
            {
                "ids": [o.job_id for o in done],
                "results": [o.result or "null" for o in done],
                "attempts": [o.attempt for o in done],
                "worker": worker_id,
                "actor": actor,
            },
        )
        won = {r["id"]: r for r in rows}
        changed.extend(rows)
        cancel_instead.extend(o.job_id for o in done if o.job_id not in won)
        for o in done:
            if o.job_id in won and o.next_jobs:
                from app import pipelines

                extra_pipelines.add(
                    await pipelines.insert_next_jobs(conn, won[o.job_id], o.next_jobs, settings)
                )

    failed = by_kind.get("failed", [])
    if failed:
        rows = await _rows(
            conn,
            FAIL_MANY,
            {
                "ids": [o.job_id for o in failed],
                "errors": [cap_text(o.error) or "failed" for o in failed],
                "permanent": [o.permanent for o in failed],
                "delays": [max(0.0, float(o.delay)) for o in failed],
                "attempts": [o.attempt for o in failed],
                "worker": worker_id,
                "actor": actor,
            },
        )
        won = {r["id"] for r in rows}
        changed.extend(rows)
        cancel_instead.extend(o.job_id for o in failed if o.job_id not in won)

    # Cancel acknowledgements; a completion or failure that lost its write is turned into one only when
    # a cancel request is what it lost to (not a newer attempt, not another owner).
    messages = {o.job_id: o.message for o in by_kind.get("cancelled", [])}
    for ids, only_inactive in (
        ([o.job_id for o in by_kind.get("cancelled", [])], False),
        (cancel_instead, True),
    ):
        if not ids:
            continue
        message = next((m for m in messages.values() if m), None) or "cancelled while running"
        rows = (
            (
                await conn.execute(
                    CANCEL_ACK_MANY,
                    {
                        "ids": ids,
                        "worker": worker_id,
                        "actor": actor,
                        "message": message,
                        "only_inactive": only_inactive,
                    },
                )
            )
            .mappings()
            .all()
        )
        changed.extend(rows)

    released = by_kind.get("released", [])
    if released:
        message = released[0].message or "released: worker shutting down"
        rows = (
            (
                await conn.execute(
                    RELEASE_MANY,
                    {
                        "ids": [o.job_id for o in released],
                        "worker": worker_id,
                        "actor": actor,
                        "message": message,
                    },
                )
            )
            .mappings()
            .all()
        )
        changed.extend(rows)
        report.notify = report.notify or bool(rows)

    for r in changed:
        report.status[r["id"]] = r["status"]
    report.lost = {o.job_id for o in outcomes} - set(report.status)
    report.notify = await _consequences(conn, changed, actor, extra_pipelines) or report.notify
    return report


# --- consequences: dependents, pipelines, alerts ---------------------------------------------------

RELEASE_DEPENDENTS = _sql(
    """
    WITH d AS (
        SELECT job_id, count(*) AS n FROM job_dependencies WHERE depends_on = ANY(CAST(:ids AS uuid[])) GROUP BY job_id
    )
    UPDATE jobs c SET pending_parents = c.pending_parents - d.n, updated_at = now()
    FROM d WHERE c.id = d.job_id AND c.status = 'queued' AND c.pending_parents > 0
    RETURNING c.id, c.pending_parents, c.run_at <= now() AS due
    """
)

CASCADE_CANCEL = _sql(
    """
    WITH RECURSIVE down(id) AS (
        SELECT job_id FROM job_dependencies WHERE depends_on = ANY(CAST(:ids AS uuid[]))
        UNION
        SELECT d.job_id FROM job_dependencies d JOIN down ON d.depends_on = down.id
    ), cause AS (
        SELECT DISTINCT ON (dd.id) dd.id AS job_id, p.id AS cause_id, p.type AS cause_type, p.status AS cause_status
        FROM down dd
        JOIN LATERAL (
            WITH RECURSIVE up(id) AS (
                SELECT depends_on FROM job_dependencies WHERE job_id = dd.id
                UNION
                SELECT d.depends_on FROM job_dependencies d JOIN up ON d.job_id = up.id
            )
            SELECT j.id, j.type, j.status FROM jobs j JOIN up ON up.id = j.id WHERE j.id = ANY(CAST(:ids AS uuid[]))
        ) p ON true
        ORDER BY dd.id, p.id
    ), upd AS (
        UPDATE jobs j
        SET status = 'cancelled', completed_at = now(), updated_at = now(), blocked_by = cause.cause_id,
            error_message = 'upstream ' || cause.cause_type || ' ' || cause.cause_id || ' ' ||
                            CASE WHEN cause.cause_status = 'cancelled' THEN 'was cancelled'
                                 WHEN cause.cause_status = 'failed' THEN 'failed'
                                 ELSE 'was removed' END
        FROM cause
        WHERE j.id = cause.job_id AND j.status = 'queued'
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key, j.error_message,
                  cause.cause_id
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'cancelled', 'queued', 'cancelled', :actor, error_message,
               jsonb_build_object('upstream', cause_id)
        FROM upd
    )
    SELECT * FROM upd
    """
)


async def _consequences(
    conn: AsyncConnection,
    changed: Sequence[RowMapping | dict[str, Any]],
    actor: str,
    extra_pipelines: set[uuid.UUID] | None = None,
) -> bool:
    """Release or cancel dependents, derive pipeline statuses and record alerts for ``changed`` rows
    (each with ``id``, ``status``, ``pipeline_id``). Returns whether a NOTIFY was sent."""
    notified = False
    completed = [r["id"] for r in changed if r["status"] == Status.COMPLETED]
    dead = [r["id"] for r in changed if r["status"] in (Status.FAILED, Status.CANCELLED)]
    pipelines = {r["pipeline_id"] for r in changed if r.get("pipeline_id") is not None} | (
        extra_pipelines or set()
    )
    if completed:
        released = await _rows(conn, RELEASE_DEPENDENTS, {"ids": completed})
        if any(r["pending_parents"] == 0 and r["due"] for r in released):
            await notify_jobs(conn)
            notified = True
    if dead:
        cascaded = (
            (await conn.execute(CASCADE_CANCEL, {"ids": dead, "actor": "system:pipeline"})).mappings().all()
        )
        pipelines |= {r["pipeline_id"] for r in cascaded if r["pipeline_id"] is not None}
    failed_standalone = [r for r in changed if r["status"] == Status.FAILED and r.get("pipeline_id") is None]
    if failed_standalone:
        await outbox.record_job_failures(conn, failed_standalone)
    approvals = [r for r in changed if r["status"] == Status.WAITING_APPROVAL]
    if approvals:
        await outbox.record_approvals(conn, approvals)
    if pipelines:
        await refresh_pipelines(conn, pipelines)
    return notified


PIPELINE_COUNTS = _sql(
    """
    SELECT p.id, p.status AS old_status,
           count(*) FILTER (WHERE j.status = 'completed') AS completed,
           count(*) FILTER (WHERE j.status = 'failed') AS failed,
           count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE j.status = 'waiting_approval') AS waiting_approval,
           count(*) FILTER (WHERE j.status IN ('queued', 'in_progress')) AS active,
           count(j.id) AS total
    FROM pipelines p LEFT JOIN jobs j ON j.pipeline_id = p.id
    WHERE p.id = ANY(CAST(:ids AS uuid[]))
    GROUP BY p.id
    """
)
SET_PIPELINE_STATUS = _sql(
    """
    UPDATE pipelines SET status = :status, updated_at = now(),
        finished_at = CASE WHEN :finished THEN COALESCE(finished_at, now()) ELSE NULL END
    WHERE id = :id
    RETURNING id, name, template, user_id, status
    """
)


def derive_pipeline_status(counts: dict[str, int]) -> tuple[str, bool]:
    """``(status, finished)`` of a pipeline from its jobs' status counts (issue 5 §6).

    ``failed`` as soon as any step failed (the pipeline can no longer complete; independent steps may
    still be finishing); ``finished`` once no step is live.
    """
    live = counts["active"] + counts["waiting_approval"]
    if counts["failed"]:
        return "failed", live == 0
    if live == 0:
        if counts["total"] and counts["completed"] == counts["total"]:
            return "completed", True
        if counts["cancelled"]:
            return "cancelled", True
        return "completed", True
    if counts["waiting_approval"]:
        return "waiting_approval", False
    return "running", False


async def refresh_pipelines(conn: AsyncConnection, pipeline_ids: Iterable[uuid.UUID]) -> None:
    """Re-derive the status of each pipeline (rows must already be locked by :func:`lock_pipelines`
    or be new); record one ``pipeline_failed`` alert when a pipeline turns failed (issue 8 §2)."""
    ids = sorted(set(pipeline_ids), key=str)
    if not ids:
        return
    rows = (await conn.execute(PIPELINE_COUNTS, {"ids": ids})).mappings().all()
    for r in rows:
        status, finished = derive_pipeline_status(dict(r))
        updated = (
            (await conn.execute(SET_PIPELINE_STATUS, {"id": r["id"], "status": status, "finished": finished}))
            .mappings()
            .first()
        )
        if updated and status == "failed" and r["old_status"] != "failed":
            await outbox.record_pipeline_failure(conn, updated)


# --- people's actions -------------------------------------------------------------------------------

CANCEL_QUEUED = _sql(
    """
    UPDATE jobs SET status = 'cancelled', is_active = false, completed_at = now(), updated_at = now(),
        error_message = :message
    WHERE id = :id AND status = ANY(CAST(:from AS text[]))
    RETURNING id, pipeline_id, status, type, user_id, title, step_key
    """
)
REQUEST_CANCEL = _sql(
    """
    UPDATE jobs SET is_active = false, updated_at = now()
    WHERE id = :id AND status = 'in_progress' AND is_active
    RETURNING id, pipeline_id, status, locked_by
    """
)


def _terminal_conflict(row: RowMapping, action: str) -> Conflict:
    words = {"completed": "already completed", "failed": "already failed", "cancelled": "already cancelled"}
    state = words.get(row["status"], f"{row['status']}")
    return Conflict(f"Cannot {action} job {row['id']}: it has {state}.", extra={"status": row["status"]})


async def cancel(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal, *, reason: str | None = None
) -> RowMapping:
    """Cancel a job (owner or admin; issue 3 §6, case C06).

    ``queued``/``waiting_approval`` → ``cancelled`` at once (dependents cancelled too). ``in_progress`` →
    ``is_active = false`` ("Cancelling…") and a NOTIFY to its worker, which stops it and records
    ``cancelled``; from then on the worker's completion can no longer win. Returns the job row after.

    Raises:
        NotFound: unknown or another user's job.
        Conflict: the job is already finished ("already completed"), or a cancel is already pending.
    """
    conn = await _conn(db)
    row = await _lock_job(conn, job_id, principal)
    actor = _actor(principal)
    message = (
        f"cancelled by {'an admin' if principal.is_admin and row['user_id'] != principal.id else 'its owner'}"
    )
    if reason:
        message += f": {reason}"
    if row["status"] == Status.IN_PROGRESS:
        if not row["is_active"]:
            raise Conflict(f"Job {row['id']} is already being cancelled.", extra={"status": "cancelling"})
        await conn.execute(REQUEST_CANCEL, {"id": row["id"]})
        await add_event(conn, row, "cancel_requested", actor, message=message)
        await conn.execute(text(f"SELECT pg_notify('{CANCEL_CHANNEL}', :id)"), {"id": str(row["id"])})
        return await get_job(conn, row["id"])
    allowed = [s.value for s in sources(Status.CANCELLED, Actor.ADMIN if principal.is_admin else Actor.OWNER)]
    if row["status"] not in allowed:
        raise _terminal_conflict(row, "cancel")
    await lock_pipelines(conn, [row["pipeline_id"]])
    changed = (
        (await conn.execute(CANCEL_QUEUED, {"id": row["id"], "from": allowed, "message": cap_text(message)}))
        .mappings()
        .all()
    )
    for r in changed:
        await add_event(
            conn, r, "cancelled", actor, from_status=row["status"], to_status="cancelled", message=message
        )
    await _consequences(conn, changed, actor)
    return await get_job(conn, row["id"])


RETRY_FAILED = _sql(
    f"""
    UPDATE jobs SET status = 'queued', attempts = 0, run_at = now(), completed_at = NULL, updated_at = now(),
        is_active = true, error_message = NULL, result_data = NULL, progress = NULL, progress_message = NULL
    WHERE id = :id AND status = 'failed'
    RETURNING {JOB_COLUMNS}
    """
)
REOPEN_BLOCKED = _sql(
    """
    WITH reopened AS (
        UPDATE jobs c
        SET status = 'queued', completed_at = NULL, blocked_by = NULL, error_message = NULL, attempts = 0,
            is_active = true, run_at = now(), updated_at = now(),
            pending_parents = (
                SELECT count(*) FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
                WHERE d.job_id = c.id AND p.status <> 'completed'
            )
        WHERE c.blocked_by = :id AND c.status = 'cancelled'
        RETURNING c.id, c.pipeline_id, c.pending_parents
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'reopened', 'cancelled', 'queued', :actor,
               'upstream job retried; waiting for it again', jsonb_build_object('upstream', CAST(:id AS uuid))
        FROM reopened
    )
    SELECT * FROM reopened
    """
)


async def retry(db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal) -> RowMapping:
    """Manually retry a ``failed`` job (admins; issue 3 §7, case C23).

    Rule: the job goes back to ``queued`` with ``attempts = 0`` — a fresh budget of ``max_attempts`` —
    so the processor really runs again; its earlier attempts and errors stay in its event history. Jobs
    that were cancelled because this one failed (``blocked_by``) are re-opened and wait for it again
    (case C08; README "Pipelines"). A double click retries once: the second gets 409 "not failed".

    Raises:
        NotFound: unknown id, or another user's job for a non-admin.
        Forbidden: the owner is not an admin.
        Conflict: the job is not ``failed`` (names its status).
    """
    conn = await _conn(db)
    row = await _lock_job(conn, job_id, principal)
    if not principal.is_admin:
        raise Forbidden("Only an admin can retry a failed job.")
    if row["status"] != Status.FAILED:
        raise Conflict(
            f"Cannot retry job {row['id']}: it is {row['status']}, not failed.",
            extra={"status": row["status"]},
        )
    await lock_pipelines(conn, [row["pipeline_id"]])
    updated = (await conn.execute(RETRY_FAILED, {"id": row["id"]})).mappings().first()
    if updated is None:  # lost a race with another retry
        raise Conflict(f"Cannot retry job {row['id']}: it is no longer failed.")
    actor = _actor(principal)
    await add_event(
        conn,
        updated,
        "retried",
        actor,
        from_status="failed",
        to_status="queued",
        message="manual retry with a fresh attempt budget",
        data={"previous_attempts": row["attempts"], "previous_error": cap_text(row["error_message"], 2000)},
    )
    await conn.execute(REOPEN_BLOCKED, {"id": row["id"], "actor": actor})
    await notify_jobs(conn)
    if row["pipeline_id"]:
        await refresh_pipelines(conn, [row["pipeline_id"]])
    return await get_job(conn, row["id"])


async def run_again(
    db: AsyncConnection | AsyncSession,
    job_id: Any,
    principal: Principal,
    settings: Settings,
    *,
    request_id: str | None = None,
) -> Enqueued:
    """A new job with the same type and input as ``job_id`` ("Run again", owner or admin; issue 3 §7).
    The new job belongs to the original owner and starts with a fresh attempt budget.

    Raises:
        NotFound: unknown or another user's job.
        BadInput: the type is no longer registered or the input no longer validates.
    """
    conn = await _conn(db)
    row = await get_job(conn, job_id, principal)
    result = await enqueue(
        conn,
        NewJob(
            type=row["type"],
            input_data=row["input_data"],
            user_id=row["user_id"],
            priority=row["priority"],
            max_attempts=row["max_attempts"],
            title=row["title"],
            request_id=request_id,
        ),
        settings,
        actor=_actor(principal),
    )
    await add_event(
        conn,
        row,
        "run_again",
        _actor(principal),
        message=f"run again as job {result.job['id']}",
        data={"new_job": str(result.job["id"])},
    )
    return result


APPROVE = _sql(
    f"""
    UPDATE jobs SET status = 'completed', completed_at = now(), updated_at = now()
    WHERE id = :id AND status = 'waiting_approval'
    RETURNING {JOB_COLUMNS}
    """
)
REJECT = _sql(
    f"""
    UPDATE jobs SET status = 'failed', completed_at = now(), updated_at = now(), error_message = :message
    WHERE id = :id AND status = 'waiting_approval'
    RETURNING {JOB_COLUMNS}
    """
)
RERUN = _sql(
    f"""
    UPDATE jobs SET status = 'queued', run_at = now(), attempts = 0, updated_at = now(), result_data = NULL,
        progress = NULL, progress_message = NULL
    WHERE id = :id AND status = 'waiting_approval'
    RETURNING {JOB_COLUMNS}
    """
)
LAST_DECISION = _sql(
    "SELECT kind, actor, at FROM job_events WHERE job_id = :id AND kind IN ('approved', 'rejected', 'rerun_requested') "
    "ORDER BY id DESC LIMIT 1"
)


async def _decision_conflict(conn: AsyncConnection, row: RowMapping, action: str) -> Conflict:
    last = (await conn.execute(LAST_DECISION, {"id": row["id"]})).mappings().first()
    if last:
        who = last["actor"]
        return Conflict(
            f"Cannot {action} job {row['id']}: it was already {last['kind'].replace('_requested', '')} by {who} "
            f"at {last['at']:%Y-%m-%d %H:%M:%S %Z}.",
            extra={"status": row["status"], "decision": last["kind"]},
        )
    return Conflict(
        f"Cannot {action} job {row['id']}: it is {row['status']}, not waiting for approval.",
        extra={"status": row["status"]},
    )


async def _decide(conn: AsyncConnection, job_id: Any, principal: Principal, action: str) -> RowMapping:
    row = await _lock_job(conn, job_id, principal)
    if not principal.is_admin:
        raise Forbidden(f"Only an admin can {action} a step.")
    if row["status"] != Status.WAITING_APPROVAL:
        raise await _decision_conflict(conn, row, action)
    await lock_pipelines(conn, [row["pipeline_id"]])
    return row


async def approve(db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal) -> RowMapping:
    """Approve a step waiting for approval: → ``completed``, dependents released (issue 5 §5).

    Raises:
        NotFound / Forbidden: not visible / not an admin.
        Conflict: not ``waiting_approval``; names the earlier decision and who made it.
    """
    conn = await _conn(db)
    row = await _decide(conn, job_id, principal, "approve")
    updated = (await conn.execute(APPROVE, {"id": row["id"]})).mappings().first()
    assert updated is not None
    await add_event(
        conn, updated, "approved", _actor(principal), from_status="waiting_approval", to_status="completed"
    )
    await _consequences(conn, [updated], _actor(principal))
    return updated


REJECT_REASON_MAX = 2000
"""A rejection's reason is shown to the owner; the form's field allows as much."""


async def reject(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal, reason: str
) -> RowMapping:
    """Reject a step waiting for approval: → ``failed`` with the reason; dependents cancelled.

    Raises:
        BadInput: empty reason, or longer than :data:`REJECT_REASON_MAX` characters (the form's limit).
        NotFound / Forbidden / Conflict: as :func:`approve`.
    """
    reason = (reason or "").strip()
    if not reason:
        raise BadInput.field("reason", "say why the result is rejected")
    if len(reason) > REJECT_REASON_MAX:
        raise BadInput.field(
            "reason", f"must be at most {REJECT_REASON_MAX:,} characters (it has {len(reason):,})"
        )
    conn = await _conn(db)
    row = await _decide(conn, job_id, principal, "reject")
    message = cap_text(f"rejected: {reason}")
    updated = (await conn.execute(REJECT, {"id": row["id"], "message": message})).mappings().first()
    assert updated is not None
    await add_event(
        conn,
        updated,
        "rejected",
        _actor(principal),
        from_status="waiting_approval",
        to_status="failed",
        message=message,
    )
    await _consequences(conn, [updated], _actor(principal))
    return updated


async def rerun(db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal) -> RowMapping:
    """Ask for a fresh run of a step waiting for approval: → ``queued`` (that step only; issue 5 §5).

    Raises:
        NotFound / Forbidden / Conflict: as :func:`approve`.
    """
    conn = await _conn(db)
    row = await _decide(conn, job_id, principal, "rerun")
    updated = (await conn.execute(RERUN, {"id": row["id"]})).mappings().first()
    assert updated is not None
    await add_event(
        conn,
        updated,
        "rerun_requested",
        _actor(principal),
        from_status="waiting_approval",
        to_status="queued",
    )
    await notify_jobs(conn)
    if row["pipeline_id"]:
        await refresh_pipelines(conn, [row["pipeline_id"]])
    return updated


RESCHEDULE = _sql(
    f"""
    UPDATE jobs SET run_at = COALESCE(:run_at, now()), updated_at = now()
    WHERE id = :id AND status = 'queued'
    RETURNING {JOB_COLUMNS}
    """
)


async def reschedule(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal, run_at: datetime | None
) -> RowMapping:
    """Move a waiting job's due time (``None`` = run now; issue 11 §1). Admins only.

    Raises:
        BadInput: ``run_at`` without a UTC offset. NotFound / Forbidden. Conflict: the job is not waiting.
    """
    if run_at is not None and run_at.utcoffset() is None:
        raise BadInput.field("run_at", "needs a UTC offset or time zone")
    conn = await _conn(db)
    row = await _lock_job(conn, job_id, principal)
    if not principal.is_admin:
        raise Forbidden("Only an admin can reschedule a job.")
    if row["status"] != Status.QUEUED:
        raise Conflict(f"Cannot reschedule job {row['id']}: it is {row['status']}, not waiting.")
    updated = (await conn.execute(RESCHEDULE, {"id": row["id"], "run_at": run_at})).mappings().first()
    assert updated is not None
    await add_event(
        conn,
        updated,
        "rescheduled",
        _actor(principal),
        message="run now" if run_at is None else f"run at {run_at.isoformat()}",
        data={"from": row["run_at"].isoformat(), "to": updated["run_at"].isoformat()},
    )
    await notify_jobs(conn)
    return updated


DELETE_JOB = _sql("DELETE FROM jobs WHERE id = :id RETURNING id")


async def delete(db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal) -> None:
    """Delete a job that is not running (admins): its dependents are cancelled first with the reason
    "upstream … was removed", so nothing waits on a missing job (case C08).

    Raises:
        NotFound / Forbidden. Conflict: the job is running (cancel it first).
    """
    conn = await _conn(db)
    row = await _lock_job(conn, job_id, principal)
    if not principal.is_admin:
        raise Forbidden("Only an admin can delete a job.")
    if row["status"] == Status.IN_PROGRESS:
        raise Conflict(f"Cannot delete job {row['id']}: it is running; cancel it first.")
    await lock_pipelines(conn, [row["pipeline_id"]])
    # Mark it as gone for the cascade's reason, then cascade, then delete.
    await conn.execute(CASCADE_CANCEL_REMOVED, {"id": row["id"], "actor": _actor(principal)})
    await conn.execute(DELETE_JOB, {"id": row["id"]})
    if row["pipeline_id"]:
        await refresh_pipelines(conn, [row["pipeline_id"]])


CASCADE_CANCEL_REMOVED = _sql(
    """
    WITH RECURSIVE down(id) AS (
        SELECT job_id FROM job_dependencies WHERE depends_on = :id
        UNION
        SELECT d.job_id FROM job_dependencies d JOIN down ON d.depends_on = down.id
    ), gone AS (SELECT type FROM jobs WHERE id = :id), upd AS (
        UPDATE jobs j
        SET status = 'cancelled', completed_at = now(), updated_at = now(), blocked_by = :id,
            error_message = 'upstream ' || (SELECT type FROM gone) || ' ' || :id || ' was removed'
        FROM down
        WHERE j.id = down.id AND j.status = 'queued'
        RETURNING j.id, j.pipeline_id, j.error_message
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'cancelled', 'queued', 'cancelled', :actor, error_message,
               jsonb_build_object('upstream', CAST(:id AS uuid))
        FROM upd
    )
    SELECT count(*) FROM upd
    """
)


# --- rescue sweep ---------------------------------------------------------------------------------

EXPIRED = _sql(
    """
    SELECT id, pipeline_id FROM jobs
    WHERE status = 'in_progress' AND lease_expires_at < now()
    ORDER BY lease_expires_at LIMIT :limit
    """
)
RESCUE = _sql(
    """
    WITH expired AS MATERIALIZED (
        SELECT id FROM jobs
        WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'in_progress' AND lease_expires_at < now()
        FOR UPDATE SKIP LOCKED
    ), input AS (
        SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:delays AS float8[])) AS t(id, delay)
    ), upd AS (
        UPDATE jobs j
        SET status = CASE WHEN NOT j.is_active THEN 'cancelled'
                          WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
            run_at = CASE WHEN j.is_active AND j.attempts < j.max_attempts
                          THEN now() + make_interval(secs => input.delay) ELSE j.run_at END,
            completed_at = CASE WHEN NOT j.is_active OR j.attempts >= j.max_attempts THEN now() END,
            error_message = CASE WHEN NOT j.is_active THEN 'cancelled; its worker was lost before it stopped'
                                 ELSE 'lease expired: worker lost (' || j.locked_by || ')' END,
            locked_by = NULL, lease_expires_at = NULL, updated_at = now()
        FROM expired JOIN input ON input.id = expired.id
        WHERE j.id = expired.id AND j.status = 'in_progress'
        RETURNING j.id, j.pipeline_id, j.status, j.type, j.user_id, j.title, j.step_key, j.attempts, j.max_attempts,
                  j.error_message, j.run_at
    ), ev AS (
        INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data)
        SELECT id, pipeline_id, 'rescued', 'in_progress', status, :actor, error_message,
               jsonb_build_object('attempt', attempts, 'max_attempts', max_attempts)
        FROM upd
    )
    SELECT * FROM upd
    """
)


async def rescue_expired(
    conn: AsyncConnection, *, delays: dict[str, Any] | None = None, limit: int = 500
) -> list[RowMapping]:
    """The rescue sweep (issue 3 §8; cases C01, C03): ``in_progress`` jobs whose lease expired.

    Runs under a transaction-level advisory lock, so one process sweeps at a time (others return ``[]``).
    Each job goes back to ``queued`` with the lost attempt counted and the error "lease expired: worker
    lost (<worker id>)", or to ``failed`` when no attempts remain (with one ``rescued`` alert), or to
    ``cancelled`` if a cancel was pending. ``delays`` maps a job type to a :class:`~app.jobs.backoff.
    RetryPolicy`-like callable ``(attempt) -> seconds``; default: due at once. The update repeats the
    ``lease_expires_at < now()`` guard under the row lock, so a lease renewed meanwhile wins.
    """
    got = (await conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": RESCUE_LOCK_KEY})).scalar()
    if not got:
        return []
    candidates = (await conn.execute(EXPIRED, {"limit": limit})).mappings().all()
    if not candidates:
        return []
    await lock_pipelines(conn, (c["pipeline_id"] for c in candidates))
    ids = [c["id"] for c in candidates]
    delay_values = [0.0] * len(ids)
    if delays:
        meta = (
            (
                await conn.execute(
                    _sql("SELECT id, type, attempts FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))"),
                    {"ids": ids},
                )
            )
            .mappings()
            .all()
        )
        by_id = {m["id"]: m for m in meta}
        for i, jid in enumerate(ids):
            m = by_id.get(jid)
            fn = delays.get(m["type"]) if m else None
            if fn is not None:
                delay_values[i] = float(fn(m["attempts"]))
    rows = (
        (await conn.execute(RESCUE, {"ids": ids, "delays": delay_values, "actor": "system:sweep"}))
        .mappings()
        .all()
    )
    if rows:
        await _consequences(conn, [r for r in rows if r["status"] != Status.FAILED], "system:sweep")
        dead = [r for r in rows if r["status"] == Status.FAILED]
        if dead:
            await outbox.record_rescue_failures(conn, dead)
            await _consequences_without_job_alerts(conn, dead)
        if any(r["status"] == Status.QUEUED for r in rows):
            await notify_jobs(conn)
    return list(rows)


async def _consequences_without_job_alerts(conn: AsyncConnection, rows: Sequence[RowMapping]) -> None:
    """Dependents and pipelines for jobs failed by the sweep, whose alert is the ``rescued`` kind."""
    dead = [r["id"] for r in rows]
    pipelines = {r["pipeline_id"] for r in rows if r["pipeline_id"] is not None}
    cascaded = (
        (await conn.execute(CASCADE_CANCEL, {"ids": dead, "actor": "system:pipeline"})).mappings().all()
    )
    pipelines |= {r["pipeline_id"] for r in cascaded if r["pipeline_id"] is not None}
    if pipelines:
        await refresh_pipelines(conn, pipelines)


# --- retention --------------------------------------------------------------------------------------

PRUNE_JOBS = _sql(
    """
    WITH doomed AS (
        SELECT id FROM jobs
        WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < now() - make_interval(days => :days)
          AND pipeline_id IS NULL
          AND NOT EXISTS (
              SELECT 1 FROM job_dependencies d JOIN jobs c ON c.id = d.job_id
              WHERE d.depends_on = jobs.id AND c.status NOT IN ('completed', 'failed', 'cancelled')
          )
        ORDER BY completed_at LIMIT :batch
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM jobs WHERE id IN (SELECT id FROM doomed) RETURNING id
    """
)
PRUNE_PIPELINES = _sql(
    """
    WITH doomed AS (
        SELECT id FROM pipelines
        WHERE finished_at < now() - make_interval(days => :days)
        ORDER BY finished_at LIMIT :batch
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM pipelines WHERE id IN (SELECT id FROM doomed) RETURNING id
    """
)
PRUNE_ORPHAN_FILES = _sql(
    """
    DELETE FROM files WHERE id IN (
        SELECT id FROM files WHERE job_id IS NULL AND created_at < now() - make_interval(days => :days)
        ORDER BY created_at LIMIT :batch
    )
    RETURNING id
    """
)


async def prune(conn: AsyncConnection, retention_days: float, *, batch: int = PRUNE_BATCH) -> dict[str, Any]:
    """Delete one small batch of finished jobs older than ``retention_days`` (issue 3 §9).

    Standalone jobs go individually (with their events, by cascade); a pipeline's jobs go only with the
    whole pipeline, once it has finished — never from under a running one. Files then left without a
    job and older than the retention (those of deleted jobs, and uploads no job ever used) are deleted
    too. Returns ``{"jobs": n, "pipelines": n, "files": [deleted file ids]}``; the caller removes those
    files' bytes after commit (:meth:`app.files.FileStore.remove`).
    """
    days = float(retention_days)
    job_ids = list((await conn.execute(PRUNE_JOBS, {"days": days, "batch": batch})).scalars())
    pipeline_ids = list(
        (await conn.execute(PRUNE_PIPELINES, {"days": days, "batch": max(1, batch // 10)})).scalars()
    )
    file_ids = list((await conn.execute(PRUNE_ORPHAN_FILES, {"days": days, "batch": batch})).scalars())
    return {"jobs": len(job_ids), "pipelines": len(pipeline_ids), "files": file_ids}


# --- invariants (tests and health checks) -----------------------------------------------------------

STUCK_DEPENDENTS = _sql(
    """
    SELECT c.id FROM jobs c
    WHERE c.status = 'queued' AND c.pending_parents > 0 AND (
        EXISTS (
            SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
            WHERE d.job_id = c.id AND p.status IN ('failed', 'cancelled')
        )
        OR c.pending_parents > (
            SELECT count(*) FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
            WHERE d.job_id = c.id AND p.status <> 'completed'
        )
    )
    """
)


async def stuck_dependents(conn: AsyncConnection) -> list[uuid.UUID]:
    """Jobs waiting on a dependency that is failed, cancelled or missing — must always be empty
    (case C08's invariant query)."""
    return list((await conn.execute(STUCK_DEPENDENTS)).scalars())


# --- worker registry (issue 4 §8) ------------------------------------------------------------------

REGISTER_WORKER = _sql(
    """
    INSERT INTO workers (id, hostname, pid, concurrency, version, listener_connected)
    VALUES (:id, :hostname, :pid, :concurrency, :version, false)
    ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stopping = false
    """
)
TOUCH_WORKER = _sql(
    """
    UPDATE workers SET last_seen_at = now(), running = :running, stopping = :stopping,
        listener_connected = :listener_connected
    WHERE id = :id
    """
)
RECORD_THROUGHPUT = _sql(
    """
    INSERT INTO throughput_samples (minute, worker_id, completed, failed)
    VALUES (date_trunc('minute', now()), :id, :completed, :failed)
    ON CONFLICT (minute, worker_id) DO UPDATE
    SET completed = throughput_samples.completed + EXCLUDED.completed,
        failed = throughput_samples.failed + EXCLUDED.failed
    """
)
UNREGISTER_WORKER = _sql("DELETE FROM workers WHERE id = :id")
FORGET_OLD = _sql(
    """
    WITH w AS (DELETE FROM workers WHERE last_seen_at < now() - interval '1 day' RETURNING 1),
         t AS (DELETE FROM throughput_samples WHERE minute < now() - interval '1 day' RETURNING 1)
    SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM t)
    """
)


async def register_worker(
    conn: AsyncConnection, *, worker_id: str, hostname: str, pid: int, concurrency: int, version: str
) -> None:
    """Insert this worker's row, listed by the admin health page while it is seen recently."""
    await conn.execute(
        REGISTER_WORKER,
        {"id": worker_id, "hostname": hostname, "pid": pid, "concurrency": concurrency, "version": version},
    )


async def touch_worker(
    conn: AsyncConnection,
    worker_id: str,
    *,
    running: int,
    stopping: bool,
    listener_connected: bool,
    completed: int = 0,
    failed: int = 0,
) -> None:
    """Refresh the worker's row (its heartbeat) and add finished counts to this minute's sample."""
    await conn.execute(
        TOUCH_WORKER,
        {"id": worker_id, "running": running, "stopping": stopping, "listener_connected": listener_connected},
    )
    if completed or failed:
        await conn.execute(RECORD_THROUGHPUT, {"id": worker_id, "completed": completed, "failed": failed})


SET_WORKER_HEALTH = _sql("UPDATE workers SET health = CAST(:health AS jsonb) WHERE id = :id")


async def set_worker_health(conn: AsyncConnection, worker_id: str, health: str) -> None:
    """Store what the worker reports about itself besides its counts (JSON text: event loop stalls,
    lingering processor tasks, failing lease renewal), for the admin health page."""
    await conn.execute(SET_WORKER_HEALTH, {"id": worker_id, "health": health})


async def unregister_worker(conn: AsyncConnection, worker_id: str) -> None:
    await conn.execute(UNREGISTER_WORKER, {"id": worker_id})


async def forget_old(conn: AsyncConnection) -> None:
    """Housekeeping: worker rows and throughput samples older than a day."""
    await conn.execute(FORGET_OLD)
