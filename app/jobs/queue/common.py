"""What every part of the queue shares: channels, columns, ids, who is acting, reading and locking a job,
job events, NOTIFY, and pipeline row locks."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.db import fetch_dicts
from app.dbclock import new_id as new_id  # re-exported: jobs get ids on the database clock
from app.errors import NotFound
from app.jobs.payload import cap_text, json_text
from app.jobs.rows import JOB_FIELDS, Fetched, JobRow, job_row

JOBS_CHANNEL = "jobdesk_jobs"
"""NOTIFY channel: a job may have become claimable (enqueue, retry, rescue, released dependents)."""
CANCEL_CHANNEL = "jobdesk_cancel"
"""NOTIFY channel: payload is the id of a running job whose cancel was requested."""

JOB_COLUMNS = ", ".join(JOB_FIELDS)
"""Columns returned to callers: the API's job shape, minus the derived ``dependent_on_jobs``."""

fetch_rows = fetch_dicts
"""The worker's hot path runs straight on asyncpg (see :mod:`app.db`, "Hot paths straight on asyncpg")."""


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


def actor_of(principal: Principal) -> str:
    """The ``actor`` written in job events for a person's action."""
    return f"user:{principal.id}"


async def conn_of(db: AsyncConnection | AsyncSession) -> AsyncConnection:
    """The connection behind ``db`` (the caller's transaction either way)."""
    if isinstance(db, AsyncSession):
        return await db.connection()
    return db


def sql(statement: str) -> Any:
    """A SQL statement (``text()``), typed loosely so that tests can swap one for a variant."""
    return text(statement)


# --- reading ------------------------------------------------------------------------------------

GET_JOB = sql(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id")
GET_JOB_FOR_UPDATE = sql(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id FOR UPDATE")


def parse_job_id(value: Any, what: str = "job id") -> uuid.UUID:
    """``value`` as a UUID.

    Raises:
        NotFound: a malformed id (the same answer as an unknown one).
    """
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(f"No {what.split()[0]} with id {str(value)[:64]!r}.") from None


def may_see(row: Any, principal: Principal) -> bool:
    """Whether ``principal`` may see the job ``row`` (with its ``user_id``): its owner, or an admin."""
    return principal.is_admin or row["user_id"] == principal.id


async def get_job(
    db: AsyncConnection | AsyncSession, job_id: Any, principal: Principal | None = None
) -> JobRow:
    """The job row, checked against ``principal`` (owner or admin).

    Raises:
        NotFound: unknown id, malformed id, or another user's job — the same answer, so that ids of
            other people's jobs cannot be probed.
    """
    conn = await conn_of(db)
    jid = parse_job_id(job_id)
    row = (await conn.execute(GET_JOB, {"id": jid})).mappings().first()
    if row is None or (principal is not None and not may_see(row, principal)):
        raise NotFound(f"No job with id {jid}.")
    return job_row(row)


async def read_job(
    db: AsyncConnection | AsyncSession, statement: Any, job_id: Any, principal: Principal
) -> dict:
    """One job as ``statement`` reads it (by ``:id``; it must return ``user_id``), in ``db``'s transaction
    straight on asyncpg, checked like :func:`get_job`: for a page that shows more than :data:`JOB_FIELDS`
    in one round trip.

    Raises:
        NotFound: unknown id, malformed id, or another user's job — the same answer.
    """
    jid = parse_job_id(job_id)
    rows = await fetch_rows(await conn_of(db), statement, {"id": jid})
    if not rows or not may_see(rows[0], principal):
        raise NotFound(f"No job with id {jid}.")
    return rows[0]


PIPELINE_OF = sql("SELECT pipeline_id FROM jobs WHERE id = :id")


async def lock_job_row(conn: AsyncConnection, job_id: uuid.UUID) -> Any:
    """The job's row locked ``FOR UPDATE`` (``None`` for an unknown id), its pipeline's row locked first.

    A worker's outcome, the rescue and a pipeline's cancel lock the pipeline and then change its jobs (a
    parent's completion releases its dependents); an action that locked a step and then its pipeline
    waited for one of them while it waited for the step: a deadlock, which PostgreSQL broke by failing
    one of the two. So every lock of one job takes its pipeline first. A job's pipeline is set once (a
    job outside pipelines gets one only as it completes with next jobs), so the pipeline read before
    the job's lock is the one it has, but for that one case, where the pipeline is new and is locked
    after."""
    await lock_pipelines(conn, [(await conn.execute(PIPELINE_OF, {"id": job_id})).scalar()])
    row = (await conn.execute(GET_JOB_FOR_UPDATE, {"id": job_id})).mappings().first()
    if row is not None:
        await lock_pipelines(conn, [row["pipeline_id"]])
    return row


async def lock_job(conn: AsyncConnection, job_id: Any, principal: Principal) -> JobRow:
    """The job row locked ``FOR UPDATE`` for a person's action (its pipeline's first:
    :func:`lock_job_row`); checked like :func:`get_job`."""
    jid = parse_job_id(job_id)
    row = await lock_job_row(conn, jid)
    if row is None or not may_see(row, principal):
        raise NotFound(f"No job with id {jid}.")
    return job_row(row)


DEPENDENCIES_OF = sql("SELECT depends_on FROM job_dependencies WHERE job_id = :id ORDER BY depends_on")


async def dependencies_of(db: AsyncConnection | AsyncSession, job_id: uuid.UUID) -> list[uuid.UUID]:
    """Ids of the jobs ``job_id`` waits for (``dependent_on_jobs`` in the API)."""
    conn = await conn_of(db)
    return list((await conn.execute(DEPENDENCIES_OF, {"id": job_id})).scalars())


# --- events and notifications -----------------------------------------------------------------------

INSERT_EVENT = sql(
    "INSERT INTO job_events (job_id, pipeline_id, kind, from_status, to_status, actor, message, data) "
    "VALUES (:job_id, :pipeline_id, :kind, :from_status, :to_status, :actor, :message, CAST(CAST(:data AS text) AS jsonb))"
)


async def add_event(
    conn: AsyncConnection,
    job: Fetched,
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
            "pipeline_id": job.get("pipeline_id"),
            "kind": kind,
            "from_status": from_status,
            "to_status": to_status,
            "actor": actor,
            "message": cap_text(message),
            "data": json_text(data) if data is not None else None,
        },
    )


async def notify_jobs(conn: AsyncConnection) -> None:
    """NOTIFY the jobs channel; delivered to listening workers when the transaction commits."""
    await conn.execute(text(f"SELECT pg_notify('{JOBS_CHANNEL}', '')"))


async def notify_cancel(conn: AsyncConnection, job_id: uuid.UUID) -> None:
    """NOTIFY the worker running ``job_id`` that its cancel was requested (on commit)."""
    await conn.execute(text(f"SELECT pg_notify('{CANCEL_CHANNEL}', :id)"), {"id": str(job_id)})


# --- pipeline locks -----------------------------------------------------------------------------------

LOCK_PIPELINES = sql("SELECT id FROM pipelines WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE")


async def lock_pipelines(conn: AsyncConnection, pipeline_ids: Iterable[uuid.UUID | None]) -> None:
    """Lock pipeline rows in id order before changing their jobs, so concurrent transitions in one
    pipeline derive its status one at a time and never deadlock each other."""
    ids = sorted({p for p in pipeline_ids if p is not None}, key=str)
    if ids:
        await conn.execute(LOCK_PIPELINES, {"ids": ids})


PIPELINES_OF = sql(
    "SELECT DISTINCT pipeline_id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND pipeline_id IS NOT NULL"
)


async def lock_pipelines_of(db: AsyncConnection | AsyncSession, job_ids: Sequence[uuid.UUID]) -> None:
    """Lock the pipelines of all ``job_ids``, in id order, before one transaction acts on the jobs one by
    one (a bulk action): each action would lock its job's pipeline as it comes to it, in the order of the
    list, and a worker's outcomes for steps of two of those pipelines, locking them in id order, could
    hold the one the list reaches later while waiting for the other."""
    if job_ids:
        conn = await conn_of(db)
        await lock_pipelines(conn, (await conn.execute(PIPELINES_OF, {"ids": list(job_ids)})).scalars())
