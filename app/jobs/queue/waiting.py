"""The per-person waiting limit (``USER_MAX_WAITING_JOBS``) in the core: the one rule every path that
creates jobs is held to, and its check for the jobs the queue itself creates from a finished parent.

The rule (:func:`over_limit`): jobs may be added while the owner's ``queued`` jobs, with them, stay
within the limit; 0 turns it off, admins are exempt, adding nothing is never refused. A person's
submission meets it under their lock, refused with a 429 (:mod:`app.quotas`, :mod:`app.actions.quotas`);
a schedule's firing is skipped by it. The jobs a finished parent adds — a ``for_each`` step's instances
(:mod:`.fanouts`) and a processor's next jobs (:mod:`.pipelines`) — meet it through
:func:`refusal_from_result`: nobody is there to answer, so a refused job is never silently dropped but
recorded as failed, with its event and the limit in words, and the steps that wait for it are cancelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.payload import cap_text, json_text
from app.jobs.queue.common import sql
from app.jobs.types import registry

OWNER_WAITING = sql(
    """
    SELECT u.is_admin, (SELECT count(*) FROM jobs j WHERE j.user_id = u.id AND j.status = 'queued') AS waiting
    FROM users u WHERE u.id = :user_id
    """
)


def over_limit(limit: int, waiting: int, adding: int) -> bool:
    """Whether adding ``adding`` jobs to an owner with ``waiting`` jobs waiting passes ``limit`` (0: off)."""
    return bool(limit) and adding > 0 and waiting + adding > limit


def words(limit: int, waiting: int, adding: int, what: str) -> str:
    """Why ``adding`` jobs (``what``: "its list has 3 items") are not created."""
    return (
        f"{what}, and with them its owner would have {waiting + adding:,} jobs waiting; the limit is "
        f"{limit:,} per person"
    )


async def refusal_from_result(
    conn: AsyncConnection, user_id: int, adding: int, settings: Any, what: str
) -> str | None:
    """Why the ``adding`` jobs a finished parent of ``user_id``'s asks for may not be created (the
    limit in words, :func:`words`), or ``None``. Counted without the person's lock, which a submission
    takes before it locks the jobs it depends on: taken here, in the transaction that has just completed
    such a job, the two could wait for each other. So a submission of the owner's committing at this
    very moment and these jobs do not see each other, and together may pass the limit by that much."""
    limit = int(settings.user_max_waiting_jobs or 0)
    if not limit or adding <= 0:
        return None
    row = (await conn.execute(OWNER_WAITING, {"user_id": user_id})).mappings().one()
    if row["is_admin"] or not over_limit(limit, int(row["waiting"]), adding):
        return None
    return words(limit, int(row["waiting"]), adding, what)


INSERT_REFUSED = sql(
    """
    WITH ins AS (
        INSERT INTO jobs (id, type, user_id, input_data, max_attempts, title, pipeline_id, step_key, priority,
                          requires_approval, created_by_job, status, error_message, completed_at)
        SELECT r.id, r.type, :user_id, CAST(r.input AS jsonb), r.max_attempts, r.title, :pipeline_id, r.step_key, r.priority,
               r.requires_approval, :created_by, 'failed', :message, now()
        FROM unnest(CAST(:ids AS uuid[]), CAST(:types AS text[]), CAST(:inputs AS text[]), CAST(:titles AS text[]),
                    CAST(:step_keys AS text[]), CAST(:priorities AS int[]), CAST(:approvals AS boolean[]),
                    CAST(:max_attempts AS int[]))
             AS r(id, type, input, title, step_key, priority, requires_approval, max_attempts)
        RETURNING id, pipeline_id
    )
    INSERT INTO job_events (job_id, pipeline_id, kind, to_status, actor, message)
    SELECT id, pipeline_id, 'failed', 'failed', 'system:pipeline', :message FROM ins
    """
)


def _attempts(job: Any, settings: Any) -> int:
    """The attempts the job would have had (a person's retry of it gets a fresh budget of them)."""
    spec = registry.get(job.type)
    return int(
        job.max_attempts or (spec.max_attempts if spec is not None else 0) or settings.default_max_attempts
    )


async def insert_refused_jobs(
    conn: AsyncConnection, jobs: Sequence[Any], message: str, settings: Any
) -> None:
    """Record jobs a finished parent asked for and the limit refused (``NewJob``\\ s of one owner, one
    pipeline and one creator) as ``failed`` from the start, each with its ``failed`` event and
    ``message``: the owner sees what was not run and why, and the pipeline is failed."""
    if not jobs:
        return
    first = jobs[0]
    await conn.execute(
        INSERT_REFUSED,
        {
            "user_id": first.user_id,
            "pipeline_id": first.pipeline_id,
            "created_by": first.created_by_job,
            "message": cap_text(message, 2000),
            "ids": [j.id for j in jobs],
            "types": [j.type for j in jobs],
            "inputs": [json_text(j.input_data) for j in jobs],
            "titles": [j.title for j in jobs],
            "step_keys": [j.step_key for j in jobs],
            "priorities": [j.priority for j in jobs],
            "approvals": [j.requires_approval for j in jobs],
            "max_attempts": [_attempts(j, settings) for j in jobs],
        },
    )
