"""A pipeline a person cancelled: its marker (``pipelines.cancelled_at``, ``cancelled_by``) and the rule
that none of its steps comes back.

The cancel (:func:`app.pipelines.cancel`) marks the pipeline, in its transaction and under its lock,
before it stops the steps, so that the status each stop derives again already sees it
(:func:`app.jobs.queue.pipelines.derive_pipeline_status`: ``cancelled`` once nothing is live, even with a
failed step). A retry or a rerun of one of its steps would re-open the pipeline and run it on as if no one
had stopped it, so every path that puts a step back in the queue in place — a retry of one job, a bulk
retry, a batch's failed rows, an approval's rerun — asks :func:`check_not_cancelled` with the step locked
(its pipeline is locked first, :func:`~app.jobs.queue.common.lock_job_row`, so a cancel cannot slip in
between). A new copy of a step on its own ("run again") or of the whole pipeline is not a revival and
stays allowed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.errors import Conflict
from app.jobs.queue.common import sql

MARK_CANCELLED = sql(
    """
    UPDATE pipelines SET cancelled_at = now(), cancelled_by = :actor
    WHERE id = :id AND cancelled_at IS NULL
    """
)
CANCELLED_AT = sql("SELECT cancelled_at FROM pipelines WHERE id = :id")
IN_CANCELLED_PIPELINE = (
    "EXISTS (SELECT 1 FROM pipelines cp WHERE cp.id = jobs.pipeline_id AND cp.cancelled_at IS NOT NULL)"
)
"""The rule of :func:`cancelled_refusal` as an SQL condition on a row of ``jobs`` (so named in its
``FROM``), for what is decided without locking each row: a list's column beside each job (its Retry
button, one primary-key probe per row in the list's own statement, not a query per row) and a bulk
retry's eligible jobs, which its confirm step counts. The retry itself asks again, locked."""

PIPELINE_CANCELLED = (
    "its pipeline was cancelled, so its steps cannot run again; start the pipeline again instead"
)
"""Why a step of a cancelled pipeline is not retried or rerun, in the words of the other refusals
(``Cannot retry job …: <this>.``), saying what to do instead."""
REFUSED_KIND = "pipeline_cancelled"
"""The refusal's ``retry_refused`` kind, by which a bulk retry counts the jobs it skipped for it."""


async def mark_cancelled(conn: AsyncConnection, pipeline_id: uuid.UUID, actor: str) -> None:
    """Record that ``actor`` cancelled the pipeline now (the database's clock), once: a second cancel
    while its steps stop keeps the first one's time and person. The pipeline must be locked."""
    await conn.execute(MARK_CANCELLED, {"id": pipeline_id, "actor": actor})


async def cancelled_refusal(conn: AsyncConnection, row: Mapping[Any, Any]) -> str | None:
    """:data:`PIPELINE_CANCELLED` when the job ``row`` is a step of a cancelled pipeline, else ``None``:
    for the buttons a page offers, and for :func:`check_not_cancelled`."""
    if row.get("pipeline_id") is None:
        return None
    found = (await conn.execute(CANCELLED_AT, {"id": row["pipeline_id"]})).scalar()
    return None if found is None else PIPELINE_CANCELLED


async def check_not_cancelled(conn: AsyncConnection, row: Mapping[Any, Any], action: str) -> None:
    """Refuse to ``action`` ("retry", "rerun") the job ``row``, locked, when its pipeline was cancelled.

    Raises:
        Conflict: ``Cannot retry job …: its pipeline was cancelled, …``.
    """
    refused = await cancelled_refusal(conn, row)
    if refused is not None:
        raise Conflict(
            f"Cannot {action} job {row['id']}: {refused}.",
            extra={"status": row["status"], "reason": refused, "retry_refused": REFUSED_KIND},
        )
