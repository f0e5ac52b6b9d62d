"""Whether a job's owner, as they are now, may have its work put in the queue again.

Retry (one job, many by a filter, a batch's failed rows), run again and a step's rerun all put work in
its owner's queue, whoever asks: each goes through :func:`check_owner_may_have` with the job row locked,
so that the rule (:func:`app.jobs.types.owner_refusal`, the one a schedule's firing applies too) is
asked once, in the queue, whatever the path. The owner's admin flag is read at that moment: someone
demoted since they submitted an admins-only job may no longer set it going again.

A retry also re-opens the steps its failure cancelled (``blocked_by``): each of them goes back in the
queue too, so each is asked the same rule, and one refused refuses the whole retry
(:func:`check_reopened_may_have`). :func:`requeue_refusal` answers without raising, for the buttons a
page offers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.errors import Forbidden
from app.jobs.queue.cancelled import cancelled_refusal
from app.jobs.queue.common import Principal, sql
from app.jobs.rows import JobRow
from app.jobs.types import admins_only, is_internal, owner_refusal, registry

OWNER_IS_ADMIN = sql("SELECT is_admin FROM users WHERE id = :id")
FROM_TEMPLATE = sql("SELECT template IS NOT NULL FROM pipelines WHERE id = :id")
REOPENED_ADMINS_ONLY = sql(
    """
    SELECT id, type, step_key, user_id, pipeline_id, created_by_job FROM jobs
    WHERE blocked_by = :id AND status = 'cancelled' AND type = ANY(CAST(:types AS text[]))
    ORDER BY step_key NULLS LAST, id
    """
)
"""The admins-only steps a retry of job ``:id`` would re-open (the same rows the retry's re-open takes)."""


async def owner_is_admin(conn: AsyncConnection, row: Mapping[Any, Any], principal: Principal) -> bool:
    """The job owner's admin flag now (the acting person's own, when they are the owner)."""
    if row["user_id"] == principal.id:
        return bool(principal.is_admin)
    return bool((await conn.execute(OWNER_IS_ADMIN, {"id": row["user_id"]})).scalar())


async def _coded(conn: AsyncConnection, row: Mapping[Any, Any]) -> bool:
    """Whether code chose the job's type: a processor's next job, or a step of a template's pipeline."""
    if row["created_by_job"] is not None:
        return True
    if row["pipeline_id"] is None:
        return False
    return bool((await conn.execute(FROM_TEMPLATE, {"id": row["pipeline_id"]})).scalar())


async def _refusal(
    conn: AsyncConnection, row: Mapping[Any, Any], principal: Principal, *, in_place: bool
) -> str | None:
    """:func:`app.jobs.types.owner_refusal` for the job ``row``'s owner as they are now."""
    spec = registry.get(row["type"])
    if spec is None or not admins_only(spec):
        return None
    is_admin = await owner_is_admin(conn, row, principal)
    coded = in_place and is_internal(spec) and await _coded(conn, row)
    return owner_refusal(is_admin, spec, coded=coded)


async def _reopened_refused(
    conn: AsyncConnection, row: Mapping[Any, Any], principal: Principal
) -> tuple[Mapping[Any, Any], str] | None:
    """The first step a retry of ``row`` would re-open whose owner may not have it now, with why."""
    types = [spec.type for spec in registry.all() if admins_only(spec)]
    found = (await conn.execute(REOPENED_ADMINS_ONLY, {"id": row["id"], "types": types})).mappings().all()
    for step in found:
        refused = await _refusal(conn, step, principal, in_place=True)
        if refused is not None:
            return step, refused
    return None


def _step_words(step: Mapping[Any, Any]) -> str:
    what = f"step {step['step_key']!r}" if step["step_key"] else f"job {step['id']}"
    return f"{what} (type {step['type']!r})"


async def requeue_refusal(
    conn: AsyncConnection,
    row: Mapping[Any, Any],
    principal: Principal,
    *,
    in_place: bool = True,
    reopens: bool = False,
) -> str | None:
    """Why :func:`check_owner_may_have` would refuse, in plain words, or ``None``: for the buttons a page
    offers, so that they ask the rule the action asks. A step put back in the queue ``in_place`` (a retry,
    a rerun) is also refused when its pipeline was cancelled (:mod:`app.jobs.queue.cancelled`), as those
    actions refuse it."""
    if in_place and (cancelled := await cancelled_refusal(conn, row)) is not None:
        return cancelled
    refused = await _refusal(conn, row, principal, in_place=in_place)
    if refused is not None or not reopens:
        return refused
    reopened = await _reopened_refused(conn, row, principal)
    return None if reopened is None else f"it would re-open {_step_words(reopened[0])}: {reopened[1]}"


async def check_owner_may_have(
    conn: AsyncConnection, row: JobRow, principal: Principal, done: str, *, in_place: bool = True
) -> None:
    """Refuse to have the job ``done`` ("retried", "run again", "rerun") when its owner may not have
    work of its type now (:func:`app.jobs.types.owner_refusal`); ``in_place``: the job itself goes back
    in the queue (a new job on its own is never a template's step).

    Raises:
        Forbidden: the type is for admins and the owner is not one (any more).
    """
    refused = await _refusal(conn, row, principal, in_place=in_place)
    if refused is None:
        return
    if row["user_id"] == principal.id:
        raise Forbidden(
            f"You are not an admin, so this job cannot be {done}: {refused}.", extra={"rule": refused}
        )
    raise Forbidden(
        f"This job cannot be {done}: it is its owner's work, and its owner, who is not an admin, may not"
        f" have it: {refused}.",
        extra={"rule": refused},
    )


async def check_reopened_may_have(conn: AsyncConnection, row: JobRow, principal: Principal) -> None:
    """Refuse a retry of ``row`` when a step it would re-open (one its failure cancelled) is of a type
    its owner may not have in the queue now: a public step followed by a diagnostic one would otherwise
    put the diagnostic step back in a demoted admin's queue. Asked before the retry changes anything.

    Raises:
        Forbidden: naming the step, its type and the rule.
    """
    found = await _reopened_refused(conn, row, principal)
    if found is None:
        return
    step, refused = found
    what = _step_words(step)
    extra = {"rule": refused, "reopens": what, "step": step["step_key"], "type": step["type"]}
    if step["user_id"] == principal.id:
        raise Forbidden(
            f"You are not an admin, so this job cannot be retried: a retry would re-open {what}, which its"
            f" failure cancelled: {refused}.",
            extra=extra,
        )
    raise Forbidden(
        f"This job cannot be retried: a retry would re-open {what}, which its failure cancelled; it is its"
        f" owner's work, and its owner, who is not an admin, may not have it: {refused}.",
        extra=extra,
    )
