"""Typed job rows: what the queue hands out.

They are ``TypedDict``s, not classes with attributes, because a processor reads its claimed job as
``ctx.job["id"]`` (part of the processor API) and templates and the JSON API read job rows by key;
a ``TypedDict`` is a plain ``dict`` at run time and lets the type checker catch a misspelt column.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict, cast

Fetched = Mapping[Any, Any]
"""A fetched row: a SQLAlchemy ``RowMapping`` (whose keys may also be columns) or a plain dict."""

JOB_FIELDS = (
    "id",
    "type",
    "status",
    "is_active",
    "user_id",
    "pipeline_id",
    "step_key",
    "title",
    "input_data",
    "result_data",
    "error_message",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "locked_by",
    "lease_expires_at",
    "idempotency_key",
    "requires_approval",
    "pending_parents",
    "blocked_by",
    "created_by_job",
    "progress",
    "progress_message",
    "request_id",
    "created_at",
    "updated_at",
    "started_at",
    "completed_at",
)
"""The columns of :class:`JobRow`, in the order the queue selects them."""

CLAIM_FIELDS = (
    "id",
    "type",
    "user_id",
    "pipeline_id",
    "step_key",
    "title",
    "input_data",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "claims",
    "requires_approval",
    "request_id",
    "created_at",
    "lease_expires_at",
)
"""The job columns of :class:`ClaimedJob` (it also has ``parents``)."""


class JobRow(TypedDict):
    """A row of ``jobs`` as the queue returns it (``get_job``, ``cancel``, ``approve``…, ``Enqueued.job``).

    The API adds the derived ``dependent_on_jobs`` itself (:func:`app.jobs.queue.dependencies_of`).
    """

    id: uuid.UUID
    type: str
    status: str
    is_active: bool
    user_id: int
    pipeline_id: uuid.UUID | None
    step_key: str | None
    title: str | None
    input_data: dict[str, Any]
    result_data: Any
    error_message: str | None
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    locked_by: str | None
    lease_expires_at: datetime | None
    idempotency_key: str | None
    requires_approval: bool
    pending_parents: int
    blocked_by: uuid.UUID | None
    created_by_job: uuid.UUID | None
    progress: float | None
    progress_message: str | None
    request_id: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    completed_at: datetime | None


class ClaimedJob(TypedDict):
    """A job a worker has just claimed (``in_progress``, leased to it): what its processor sees as
    ``ctx.job``. ``attempts`` already counts this attempt; ``claims`` counts every claim of the job ever,
    this one included (never reset, unlike ``attempts``: the fencing token the worker's reports carry);
    ``parents`` maps each dependency's step key
    (or id) to its ``result_data`` (``None`` for a job without dependencies)."""

    id: uuid.UUID
    type: str
    user_id: int
    pipeline_id: uuid.UUID | None
    step_key: str | None
    title: str | None
    input_data: dict[str, Any]
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    claims: int
    requires_approval: bool
    request_id: str | None
    created_at: datetime
    lease_expires_at: datetime
    parents: dict[str, Any] | None


def job_row(row: Fetched) -> JobRow:
    """A fetched ``jobs`` row (a SQLAlchemy ``RowMapping`` or a dict with at least :data:`JOB_FIELDS`)
    as a :class:`JobRow`; extra columns a statement returned are left out."""
    return cast(JobRow, {k: row[k] for k in JOB_FIELDS})


def claimed_jobs(rows: list[dict[str, Any]]) -> list[ClaimedJob]:
    """Rows of the claim statement (:data:`CLAIM_FIELDS` and ``parents``) as :class:`ClaimedJob`."""
    return cast(list[ClaimedJob], rows)
