"""Whether a job's owner, as they are now, may have its work put in the queue again.

Retry (one job, many by a filter, a batch's failed rows), run again and a step's rerun all put work in
its owner's queue, whoever asks: each goes through :func:`check_owner_may_have` with the job row locked,
so that the rule (:func:`app.jobs.types.owner_refusal`, the one a schedule's firing applies too) is
asked once, in the queue, whatever the path. The owner's admin flag is read at that moment: someone
demoted since they submitted an admins-only job may no longer set it going again.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from app.errors import Forbidden
from app.jobs.queue.common import Principal, sql
from app.jobs.rows import JobRow
from app.jobs.types import admins_only, is_internal, owner_refusal, registry

OWNER_IS_ADMIN = sql("SELECT is_admin FROM users WHERE id = :id")
FROM_TEMPLATE = sql("SELECT template IS NOT NULL FROM pipelines WHERE id = :id")


async def owner_is_admin(conn: AsyncConnection, row: JobRow, principal: Principal) -> bool:
    """The job owner's admin flag now (the acting person's own, when they are the owner)."""
    if row["user_id"] == principal.id:
        return bool(principal.is_admin)
    return bool((await conn.execute(OWNER_IS_ADMIN, {"id": row["user_id"]})).scalar())


async def _coded(conn: AsyncConnection, row: JobRow) -> bool:
    """Whether code chose the job's type: a processor's next job, or a step of a template's pipeline."""
    if row["created_by_job"] is not None:
        return True
    if row["pipeline_id"] is None:
        return False
    return bool((await conn.execute(FROM_TEMPLATE, {"id": row["pipeline_id"]})).scalar())


async def check_owner_may_have(
    conn: AsyncConnection, row: JobRow, principal: Principal, done: str, *, in_place: bool = True
) -> None:
    """Refuse to have the job ``done`` ("retried", "run again", "rerun") when its owner may not have
    work of its type now (:func:`app.jobs.types.owner_refusal`); ``in_place``: the job itself goes back
    in the queue (a new job on its own is never a template's step).

    Raises:
        Forbidden: the type is for admins and the owner is not one (any more).
    """
    spec = registry.get(row["type"])
    if spec is None or not admins_only(spec):
        return
    is_admin = await owner_is_admin(conn, row, principal)
    coded = in_place and is_internal(spec) and await _coded(conn, row)
    refused = owner_refusal(is_admin, spec, coded=coded)
    if refused is not None:
        if row["user_id"] == principal.id:
            raise Forbidden(
                f"You are not an admin, so this job cannot be {done}: {refused}.", extra={"rule": refused}
            )
        raise Forbidden(
            f"This job cannot be {done}: it is its owner's work, and its owner, who is not an admin, may not"
            f" have it: {refused}.",
            extra={"rule": refused},
        )
