"""Whether a failed job failed for good: the worker's permanent error (``PermanentError``, a refused plan
of next jobs) is recorded with the job's last move to ``failed`` (its ``job_events`` row's
``data.permanent``); the job row keeps no trace of it. The one reading of it for the pages' "Retry
anyway", the bulk retries' questions, the API's ``failed_permanently`` and a callback's body."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

#: The last move of each job to ``failed``, and whether a worker's permanent error made it.
LAST_FAILURE = text(
    """
    SELECT DISTINCT ON (job_id) job_id, kind = 'failed' AND coalesce((data->>'permanent')::boolean, false)
           AS permanent
    FROM job_events WHERE job_id = ANY(CAST(:ids AS uuid[])) AND to_status = 'failed'
    ORDER BY job_id, id DESC
    """
)


async def permanent_among(db: AsyncSession | AsyncConnection, failed_ids: Iterable[Any]) -> set[str]:
    """The ids (as text) among ``failed_ids`` — ids of jobs that are failed now — whose last failure
    was a permanent error."""
    ids = [str(i) for i in failed_ids]
    if not ids:
        return set()
    found = (await db.execute(LAST_FAILURE, {"ids": ids})).mappings().all()
    return {str(r["job_id"]) for r in found if r["permanent"]}


def failed_permanently(row: Any, permanent: set[str]) -> bool | None:
    """The API's ``failed_permanently`` of a job ``row``: ``None`` unless it is failed, else whether
    its id is among ``permanent`` (:func:`permanent_among`)."""
    if row["status"] != "failed":
        return None
    return str(row["id"]) in permanent
