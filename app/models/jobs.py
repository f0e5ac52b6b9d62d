"""Jobs and what hangs off them: pipelines, batches, dependencies, for_each fan-outs, tags, callbacks,
events, logs and approval rules and decisions."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    SmallInteger,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy import text as _sql  # for tables with a column named ``text``
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import PIPELINE_STATUSES, STATUSES, Base, in_list, now_column


class Pipeline(Base):
    """A DAG of jobs. ``status`` is derived from its jobs and kept current by
    :mod:`app.jobs.queue` in the transaction that changes them. ``form_key`` makes a double-clicked
    template form start one pipeline."""

    __tablename__ = "pipelines"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    template: Mapped[str | None] = mapped_column(Text)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'running'"))
    input_data: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    form_key: Mapped[str | None] = mapped_column(Text)
    # POST /api/pipelines's key and the digest of the request that first sent it (app.request_keys).
    idempotency_key: Mapped[str | None] = mapped_column(Text)
    request_digest: Mapped[str | None] = mapped_column(Text)
    # An admin deleted a step of it before that step completed: it can no longer be "completed".
    removed_unfinished: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    # An admin deleted a failed step of it: it had a failed step, so it is "failed" however the rest end.
    removed_failed: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    # A person cancelled it (when, on the database's clock, and who: an event's actor): it stays
    # cancelled, whatever its steps say, and none of its steps may be retried or rerun.
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_by: Mapped[str | None] = mapped_column(Text)
    __table_args__ = (
        CheckConstraint(in_list("status", PIPELINE_STATUSES), name="status_known"),
        # A pipeline turns "failed" as soon as a step fails, while independent steps may still finish;
        # finished_at is set once no step is live (app.jobs.queue.derive_pipeline_status).
        CheckConstraint(
            "finished_at IS NULL OR status IN ('completed', 'failed', 'cancelled')",
            name="finished_only_when_terminal",
        ),
        Index("ix_pipelines_user_id_id", "user_id", text("id DESC")),
        Index("ix_pipelines_finished_at", "finished_at", postgresql_where=text("finished_at IS NOT NULL")),
        Index(
            "uq_pipelines_user_id_form_key",
            "user_id",
            "form_key",
            unique=True,
            postgresql_where=text("form_key IS NOT NULL"),
        ),
        Index(
            "uq_pipelines_user_id_idempotency_key",
            "user_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
    )


class Batch(Base):
    """Many jobs of one type started together: the rows of a spreadsheet, many files, or
    ``POST /api/batches``. Its status is derived from its jobs when read (:mod:`app.batches`);
    ``form_key`` makes a double-clicked form create one batch."""

    __tablename__ = "batches"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    type: Mapped[str] = mapped_column(Text, nullable=False)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)
    total: Mapped[int] = mapped_column(Integer, nullable=False)
    form_key: Mapped[str | None] = mapped_column(Text)
    # POST /api/batches's key and the digest of the request that first sent it (app.request_keys).
    idempotency_key: Mapped[str | None] = mapped_column(Text)
    request_digest: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()
    __table_args__ = (
        Index("ix_batches_user_id_id", "user_id", text("id DESC")),
        Index(
            "uq_batches_user_id_form_key",
            "user_id",
            "form_key",
            unique=True,
            postgresql_where=text("form_key IS NOT NULL"),
        ),
        Index(
            "uq_batches_user_id_idempotency_key",
            "user_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
    )


class Job(Base):
    """One unit of work: a job of a registered type, with its input, status, attempts, lease and result.

    ``attempts`` counts claims since the last manual retry (what people see); ``claims`` counts every
    claim ever and is never reset: the fencing token of the worker's reports; ``run_at`` is when the job is due;
    ``pending_parents`` counts dependencies that have not completed (a job with a non-zero count stays
    ``queued`` and is not claimable); ``blocked_by`` names the upstream job whose failure
    cancelled this one, so a manual retry of that job can re-open it instead of leaving it waiting forever.

    Storage parameters (``JOBS_STORAGE`` below, set by the migration since SQLAlchemy has no table-level
    ``WITH``): a fillfactor that leaves room for HOT updates of lease renewals and progress, and
    autovacuum settings that vacuum this high-churn table early, before dead rows slow the claim down.
    """

    __tablename__ = "jobs"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    type: Mapped[str] = mapped_column(Text, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'queued'"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    pipeline_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("pipelines.id", ondelete="CASCADE"))
    step_key: Mapped[str | None] = mapped_column(Text)
    batch_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("batches.id", ondelete="SET NULL"))
    title: Mapped[str | None] = mapped_column(Text)
    input_data: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    result_data: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error_message: Mapped[str | None] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(SmallInteger, nullable=False, server_default=text("0"))
    run_at: Mapped[datetime] = now_column()
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False)
    claims: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    locked_by: Mapped[str | None] = mapped_column(Text)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    idempotency_key: Mapped[str | None] = mapped_column(Text)
    is_active: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    requires_approval: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    pending_parents: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    blocked_by: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_by_job: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    progress: Mapped[float | None] = mapped_column(Float)
    progress_message: Mapped[str | None] = mapped_column(Text)
    request_id: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(in_list("status", STATUSES), name="status_known"),
        CheckConstraint("attempts >= 0", name="attempts_non_negative"),
        CheckConstraint("max_attempts >= 1", name="max_attempts_positive"),
        CheckConstraint("pending_parents >= 0", name="pending_parents_non_negative"),
        CheckConstraint("progress IS NULL OR (progress >= 0 AND progress <= 1)", name="progress_fraction"),
        # Row shape per status: what a queued, running and finished row must (not) have.
        CheckConstraint(
            "status <> 'in_progress' OR (locked_by IS NOT NULL AND lease_expires_at IS NOT NULL"
            " AND started_at IS NOT NULL AND completed_at IS NULL)",
            name="running_has_lease",
        ),
        CheckConstraint(
            "status = 'in_progress' OR (locked_by IS NULL AND lease_expires_at IS NULL)",
            name="only_running_has_lease",
        ),
        CheckConstraint(
            "(completed_at IS NOT NULL) = (status IN ('completed', 'failed', 'cancelled'))",
            name="finished_iff_terminal",
        ),
        # The claim query's index: due, claimable rows in claim order, so a claim reads a few index
        # entries however many finished jobs the table holds.
        Index(
            "ix_jobs_claim",
            text("priority DESC"),
            "run_at",
            "id",
            postgresql_where=text("status = 'queued' AND is_active AND pending_parents = 0"),
        ),
        # The same rows by type: a limited type's next jobs within its room, however many jobs of other
        # types come first in claim order.
        Index(
            "ix_jobs_claim_by_type",
            "type",
            text("priority DESC"),
            "run_at",
            "id",
            postgresql_where=text("status = 'queued' AND is_active AND pending_parents = 0"),
        ),
        # Earliest future due time, so an idle worker wakes when the next scheduled job is due.
        Index("ix_jobs_queued_run_at", "run_at", postgresql_where=text("status = 'queued'")),
        # Running jobs per worker: heartbeats, the rescue sweep and the admin's worker list. Keyed on
        # locked_by only (not lease_expires_at), so lease renewals stay HOT updates and leave no dead
        # index entries behind.
        Index("ix_jobs_running", "locked_by", postgresql_where=text("status = 'in_progress'")),
        # Live counts per status and type for the admin console: small partial index, no full-table COUNT.
        Index(
            "ix_jobs_live",
            "status",
            "type",
            postgresql_where=text("status IN ('queued', 'in_progress', 'waiting_approval')"),
        ),
        # Jobs waiting for an earlier step, counted on /admin.
        Index(
            "ix_jobs_waiting_parents",
            "id",
            postgresql_where=text("status = 'queued' AND pending_parents > 0"),
        ),
        # Steps waiting for a decision, oldest first: the approvals inbox pages through these by keyset.
        Index(
            "ix_jobs_waiting_approval",
            "updated_at",
            "id",
            postgresql_where=text("status = 'waiting_approval'"),
        ),
        Index("ix_jobs_user_id_id", "user_id", text("id DESC")),
        # Waiting jobs per owner, for the per-user waiting limit: counted on every submission.
        Index("ix_jobs_user_waiting", "user_id", postgresql_where=text("status = 'queued'")),
        Index("ix_jobs_status_id", "status", text("id DESC")),
        Index("ix_jobs_type_id", "type", text("id DESC")),
        Index("ix_jobs_pipeline_id", "pipeline_id", postgresql_where=text("pipeline_id IS NOT NULL")),
        # A batch's counts by status, read by every poll of its page.
        Index("ix_jobs_batch_id_status", "batch_id", "status", postgresql_where=text("batch_id IS NOT NULL")),
        Index("ix_jobs_blocked_by", "blocked_by", postgresql_where=text("blocked_by IS NOT NULL")),
        Index(
            "ix_jobs_created_by_job", "created_by_job", postgresql_where=text("created_by_job IS NOT NULL")
        ),
        Index(
            "ix_jobs_finished",
            "completed_at",
            postgresql_where=text("status IN ('completed', 'failed', 'cancelled')"),
        ),
        # Admin search by idempotency key across all users.
        Index(
            "ix_jobs_idempotency_key",
            "idempotency_key",
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(
            "uq_jobs_user_id_idempotency_key",
            "user_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
    )


JOBS_STORAGE = {
    "fillfactor": 80,
    "autovacuum_vacuum_scale_factor": 0.02,
    "autovacuum_vacuum_threshold": 1000,
    "autovacuum_analyze_scale_factor": 0.02,
    "autovacuum_vacuum_cost_delay": 1,
}
JOB_EVENTS_STORAGE = {"autovacuum_vacuum_scale_factor": 0.05, "autovacuum_analyze_scale_factor": 0.05}


class JobDependency(Base):
    """Edge of a pipeline DAG: ``job_id`` waits for ``depends_on`` to complete."""

    __tablename__ = "job_dependencies"
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    depends_on: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    __table_args__ = (
        CheckConstraint("job_id <> depends_on", name="no_self_loop"),
        Index("ix_job_dependencies_depends_on", "depends_on"),
    )


class PipelineFanout(Base):
    """A ``for_each`` step whose list is in a parent's result: expanded into its instances in the
    transaction that completes its last parent (``pending`` reaches 0). ``dependents`` are the jobs that
    wait for every instance (each holds one extra pending parent until then)."""

    __tablename__ = "pipeline_fanouts"
    pipeline_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("pipelines.id", ondelete="CASCADE"), primary_key=True
    )
    step_key: Mapped[str] = mapped_column(Text, primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    parents: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID(as_uuid=True)), nullable=False)
    pending: Mapped[int] = mapped_column(Integer, nullable=False)
    dependents: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID(as_uuid=True)), nullable=False)
    expanded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    instances: Mapped[int | None] = mapped_column(Integer)
    __table_args__ = (
        Index(
            "ix_pipeline_fanouts_parents",
            "parents",
            postgresql_using="gin",
            postgresql_where=text("expanded_at IS NULL"),
        ),
    )


class JobTag(Base):
    """A short label on a job (``tags`` of ``POST /api/jobs``), for ``?tag=`` filters."""

    __tablename__ = "job_tags"
    tag: Mapped[str] = mapped_column(Text, primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    __table_args__ = (Index("ix_job_tags_job_id", "job_id"),)


class JobCallback(Base):
    """The ``callback_url`` a job's submitter gave: POSTed the job's JSON once the job has ended,
    retried with backoff until ``delivered_at`` or ``given_up_at`` (see :mod:`app.callbacks`)."""

    __tablename__ = "job_callbacks"
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    url: Mapped[str] = mapped_column(Text, nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    next_at: Mapped[datetime] = now_column()
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    given_up_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    __table_args__ = (
        Index(
            "ix_job_callbacks_due",
            "next_at",
            postgresql_where=text("delivered_at IS NULL AND given_up_at IS NULL"),
        ),
    )


class JobEvent(Base):
    """One line of a job's history: every status change, plus cancel requests, admin actions, etc.

    Written only by :mod:`app.jobs.queue`, in the same transaction as the change it records, so the
    history never misses or invents a change.
    ``actor`` is ``user:<id>``, ``worker:<id>`` or ``system:<task>``.

    ``job_id`` has no foreign key: the writer holds the job's row already, and a key checked that again
    for every event (three per job, on the hot path). Triggers on ``jobs`` delete a job's events with it
    (migration 0013).
    """

    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    pipeline_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    at: Mapped[datetime] = now_column()
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    from_status: Mapped[str | None] = mapped_column(Text)
    to_status: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(Text, nullable=False)
    message: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    __table_args__ = (
        Index("ix_job_events_job_id_id", "job_id", "id"),
        Index(
            "ix_job_events_pipeline_id_id",
            "pipeline_id",
            "id",
            postgresql_where=text("pipeline_id IS NOT NULL"),
        ),
    )


class JobLog(Base):
    """One line a processor logged while its job ran (:mod:`app.worker.joblog`). Bounded per job: the
    oldest lines are cut, leaving one ``level = 'cut'`` marker row whose ``cut`` counts them."""

    __tablename__ = "job_logs"
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False)
    at: Mapped[datetime] = now_column()
    level: Mapped[str] = mapped_column(Text, nullable=False)
    text: Mapped[str] = mapped_column(Text, nullable=False)
    cut: Mapped[int] = mapped_column(Integer, nullable=False, server_default=_sql("0"))
    __table_args__ = (Index("ix_job_logs_job_id_seq", "job_id", "seq"),)


class JobApprovalRule(Base):
    """Who may decide a step that requires approval, made with the pipeline: named people
    (``user_ids``, resolved from the e-mails in ``approvers``), any admin (``admins``), the submitter
    (``owner``); how many approvals it needs; and what happens after ``timeout_seconds`` without a
    decision (``on_timeout``: ``reject`` or ``remind``; ``reminded_at`` is the last reminder). A step
    without a row is decided by any admin, as before approvers could be named."""

    __tablename__ = "job_approval_rules"
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    approvers: Mapped[list[str]] = mapped_column(JSONB, nullable=False)
    user_ids: Mapped[list[int]] = mapped_column(ARRAY(Integer), nullable=False, server_default=text("'{}'"))
    admins: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    owner: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    approvals_needed: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("1"))
    timeout_seconds: Mapped[int | None] = mapped_column(Integer)
    on_timeout: Mapped[str | None] = mapped_column(Text)
    reminded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        CheckConstraint("approvals_needed >= 1", name="needed_positive"),
        CheckConstraint("on_timeout IS NULL OR on_timeout IN ('reject', 'remind')", name="on_timeout_known"),
    )


class JobApproval(Base):
    """One person's decision on a step: ``approved`` or ``rejected``, when, and an optional comment (a
    rejection's reason). One per person and step, so nobody counts twice."""

    __tablename__ = "job_approvals"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    decision: Mapped[str] = mapped_column(Text, nullable=False)
    comment: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = now_column()
    __table_args__ = (
        CheckConstraint("decision IN ('approved', 'rejected')", name="decision_known"),
        UniqueConstraint("job_id", "user_id"),
    )
