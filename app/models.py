"""Every table of Jobdesk, as SQLAlchemy models; Alembic's ``target_metadata``.

Reading rows is open to any module; writing ``jobs.status`` is reserved to :mod:`app.jobs.queue`
(the state machine), so every status change is a compare-and-set recorded with its event. CHECK
constraints hold each row's shape for its status: a queued row has no lock, a running row has an owner
and a lease deadline, a terminal row has a finish time and no lock. Every time column is ``timestamptz``,
so times mean the same whatever the server's or the session's time zone.
"""

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
    MetaData,
    SmallInteger,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy import text as _sql  # for tables with a column named ``text``
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

STATUSES = ("queued", "in_progress", "completed", "failed", "cancelled", "waiting_approval")
PIPELINE_STATUSES = ("running", "waiting_approval", "completed", "failed", "cancelled")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class User(Base):
    """A person who signs in. ``email`` is stored lower-cased; ``is_active = false`` disables sign-in."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, Identity(), primary_key=True)
    email: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    password_hash: Mapped[str] = mapped_column(Text, nullable=False)
    is_admin: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    is_active: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    timezone: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'UTC'"))
    email_notifications: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    """Whether notices about their own jobs are also e-mailed (when SMTP is set)."""
    created_at: Mapped[datetime] = _now()
    theme: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'auto'"))
    must_change_password: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    last_sign_in_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        CheckConstraint("email = lower(email)", name="email_lower"),
        CheckConstraint("theme IN ('auto', 'light', 'dark')", name="theme_known"),
    )


class ApiToken(Base):
    """A bearer token for the JSON API. Only its SHA-256 is stored; ``prefix`` is shown to people."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, Identity(), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    )
    name: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("''"))
    prefix: Mapped[str] = mapped_column(Text, nullable=False)
    token_hash: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    created_at: Mapped[datetime] = _now()
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WebSession(Base):
    """A browser sign-in. The cookie holds a random token; the row holds its SHA-256, so deleting the
    row signs the browser out server-side and a stolen database dump holds no usable cookie."""

    __tablename__ = "web_sessions"
    id_hash: Mapped[str] = mapped_column(Text, primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    )
    created_at: Mapped[datetime] = _now()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ip: Mapped[str | None] = mapped_column(Text)
    user_agent: Mapped[str | None] = mapped_column(Text)


class LoginAttempt(Base):
    """One sign-in attempt, kept for rate limiting per account and per address (password guessing)."""

    __tablename__ = "login_attempts"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    email: Mapped[str] = mapped_column(Text, nullable=False)
    ip: Mapped[str] = mapped_column(Text, nullable=False)
    ok: Mapped[bool] = mapped_column(Boolean, nullable=False)
    at: Mapped[datetime] = _now()
    __table_args__ = (
        Index("ix_login_attempts_email_at", "email", "at"),
        Index("ix_login_attempts_ip_at", "ip", "at"),
    )


class Pipeline(Base):
    """A DAG of jobs. ``status`` is derived from its jobs and kept current by
    :mod:`app.jobs.queue` in the transaction that changes them."""

    __tablename__ = "pipelines"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    template: Mapped[str | None] = mapped_column(Text)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'running'"))
    input_data: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        CheckConstraint(_in("status", PIPELINE_STATUSES), name="status_known"),
        # A pipeline turns "failed" as soon as a step fails, while independent steps may still finish;
        # finished_at is set once no step is live (app.jobs.queue.derive_pipeline_status).
        CheckConstraint(
            "finished_at IS NULL OR status IN ('completed', 'failed', 'cancelled')",
            name="finished_only_when_terminal",
        ),
        Index("ix_pipelines_user_id_id", "user_id", text("id DESC")),
        Index("ix_pipelines_finished_at", "finished_at", postgresql_where=text("finished_at IS NOT NULL")),
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
    created_at: Mapped[datetime] = _now()
    __table_args__ = (
        Index("ix_batches_user_id_id", "user_id", text("id DESC")),
        Index(
            "uq_batches_user_id_form_key",
            "user_id",
            "form_key",
            unique=True,
            postgresql_where=text("form_key IS NOT NULL"),
        ),
    )


class Job(Base):
    """One unit of work: a job of a registered type, with its input, status, attempts, lease and result.

    ``attempts`` counts claims since the last manual retry; ``run_at`` is when the job is due;
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
    run_at: Mapped[datetime] = _now()
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False)
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
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint(_in("status", STATUSES), name="status_known"),
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
    next_at: Mapped[datetime] = _now()
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
    """

    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False)
    pipeline_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    at: Mapped[datetime] = _now()
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
        Index("ix_job_events_at", "at"),
    )


class JobLog(Base):
    """One line a processor logged while its job ran (:mod:`app.worker.joblog`). Bounded per job: the
    oldest lines are cut, leaving one ``level = 'cut'`` marker row whose ``cut`` counts them."""

    __tablename__ = "job_logs"
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False)
    at: Mapped[datetime] = _now()
    level: Mapped[str] = mapped_column(Text, nullable=False)
    text: Mapped[str] = mapped_column(Text, nullable=False)
    cut: Mapped[int] = mapped_column(Integer, nullable=False, server_default=_sql("0"))
    __table_args__ = (Index("ix_job_logs_job_id_seq", "job_id", "seq"),)


class Notification(Base):
    """A notice to a person about their own job or pipeline (:mod:`app.jobs.notices`), written with the
    transition that causes it; ``count`` folds many alike notices of a short window into one row, and
    ``email_due`` marks rows the e-mail outbox still has to send."""

    __tablename__ = "notifications"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    pipeline_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    text: Mapped[str] = mapped_column(Text, nullable=False)
    count: Mapped[int] = mapped_column(Integer, nullable=False, server_default=_sql("1"))
    at: Mapped[datetime] = _now()
    read_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    email_due: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=_sql("false"))
    emailed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        Index("ix_notifications_user_id_id", "user_id", "id"),
        Index("ix_notifications_unread", "user_id", postgresql_where=_sql("read_at IS NULL")),
        Index("ix_notifications_email_due", "id", postgresql_where=_sql("email_due")),
    )


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
    at: Mapped[datetime] = _now()
    __table_args__ = (
        CheckConstraint("decision IN ('approved', 'rejected')", name="decision_known"),
        UniqueConstraint("job_id", "user_id"),
    )


class AuditEntry(Base):
    """An admin action or control change: who, what, which jobs, when, outcome."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = _now()
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    user_email: Mapped[str] = mapped_column(Text, nullable=False)
    action: Mapped[str] = mapped_column(Text, nullable=False)
    target_type: Mapped[str | None] = mapped_column(Text)
    target_ids: Mapped[list[str] | None] = mapped_column(JSONB)
    count: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    outcome: Mapped[str] = mapped_column(Text, nullable=False)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    ip: Mapped[str | None] = mapped_column(Text)
    __table_args__ = (Index("ix_audit_log_id_desc", text("id DESC")),)


class AlertOutbox(Base):
    """An alert to deliver, written in the transaction of the transition that caused it, so an alert is
    neither lost when the process dies nor sent for a change that rolled back.

    ``status``: ``pending`` → ``sent`` | ``failed`` (gave up) | ``suppressed`` (throttled into a summary).
    """

    __tablename__ = "alert_outbox"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    created_at: Mapped[datetime] = _now()
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    fingerprint: Mapped[str] = mapped_column(Text, nullable=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = _now()
    last_error: Mapped[str | None] = mapped_column(Text)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        Index("ix_alert_outbox_pending", "next_attempt_at", postgresql_where=text("status = 'pending'")),
        Index("ix_alert_outbox_fingerprint_created_at", "fingerprint", "created_at"),
    )


class AlertDelivery(Base):
    """One delivery attempt of an alert to one channel, for the admin alerts page."""

    __tablename__ = "alert_deliveries"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    alert_id: Mapped[int | None] = mapped_column(ForeignKey("alert_outbox.id", ondelete="CASCADE"))
    channel: Mapped[str] = mapped_column(Text, nullable=False)
    at: Mapped[datetime] = _now()
    ok: Mapped[bool] = mapped_column(Boolean, nullable=False)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    __table_args__ = (Index("ix_alert_deliveries_id_desc", text("id DESC")),)


class StoredFile(Base):
    """An uploaded or produced file; bytes live under ``JOBDESK_DATA_DIR/files/<id>``."""

    __tablename__ = "files"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    )
    job_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    name: Mapped[str] = mapped_column(Text, nullable=False)
    content_type: Mapped[str] = mapped_column(Text, nullable=False)
    size: Mapped[int] = mapped_column(BigInteger, nullable=False)
    sha256: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()
    __table_args__ = (
        Index("ix_files_job_id", "job_id", postgresql_where=text("job_id IS NOT NULL")),
        # Retention deletes uploads that no job took up; this finds them without a scan.
        Index("ix_files_unattached", "created_at", postgresql_where=text("job_id IS NULL")),
    )


class Schedule(Base):
    """A periodic job or pipeline. Each fire enqueues with the idempotency key
    ``schedule:<id>:<fire time>``, so a fire happens once however many workers see it due."""

    __tablename__ = "schedules"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    cron: Mapped[str] = mapped_column(Text, nullable=False)
    timezone: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'UTC'"))
    job_type: Mapped[str | None] = mapped_column(Text)
    template: Mapped[str | None] = mapped_column(Text)
    input_data: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=text("'{}'"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    catch_up: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    source: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'ui'"))
    next_fire_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_fire_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_job_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    last_pipeline_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    __table_args__ = (
        CheckConstraint("(job_type IS NULL) <> (template IS NULL)", name="one_target"),
        CheckConstraint("source IN ('code', 'ui')", name="source_known"),
        Index("ix_schedules_next_fire_at", "next_fire_at", postgresql_where=text("enabled")),
    )


class JobTypeControl(Base):
    """Operator controls of one job type (pause, concurrency and rate limits); the row ``type = '*'`` pauses every type.

    ``max_running``: at most this many ``in_progress`` across all workers; ``max_running_per_user``: at
    most this many of one person's. ``max_per_minute``: at most
    this many starts in any 60 seconds, counted in :class:`JobTypeStart` (``window_start`` and
    ``window_count`` are no longer written: they held a fixed window, which let twice the limit start
    around its edge).
    """

    __tablename__ = "job_type_controls"
    type: Mapped[str] = mapped_column(Text, primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    paused_by: Mapped[str | None] = mapped_column(Text)
    paused_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    max_running: Mapped[int | None] = mapped_column(Integer)
    max_per_minute: Mapped[int | None] = mapped_column(Integer)
    max_running_per_user: Mapped[int | None] = mapped_column(Integer)
    window_start: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    window_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    updated_at: Mapped[datetime] = _now()
    updated_by: Mapped[str | None] = mapped_column(Text)
    __table_args__ = (
        CheckConstraint("max_running IS NULL OR max_running >= 0", name="max_running_non_negative"),
        CheckConstraint("max_per_minute IS NULL OR max_per_minute >= 0", name="max_per_minute_non_negative"),
        CheckConstraint(
            "max_running_per_user IS NULL OR max_running_per_user >= 0",
            name="max_running_per_user_non_negative",
        ),
    )


class JobTypeStart(Base):
    """Starts of a rate-limited job type (``n`` jobs claimed at ``at``, the claim statement's time), kept
    for one minute: the claim counts them to start at most ``max_per_minute`` in any 60 seconds."""

    __tablename__ = "job_type_starts"
    type: Mapped[str] = mapped_column(Text, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    n: Mapped[int] = mapped_column(Integer, nullable=False)


class WorkerRow(Base):
    """A live worker process, refreshed on every heartbeat; the admin health page lists
    rows seen recently. ``id`` is ``host-pid-random``."""

    __tablename__ = "workers"
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    hostname: Mapped[str] = mapped_column(Text, nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    concurrency: Mapped[int] = mapped_column(Integer, nullable=False)
    running: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    started_at: Mapped[datetime] = _now()
    last_seen_at: Mapped[datetime] = _now()
    stopping: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    listener_connected: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    version: Mapped[str] = mapped_column(Text, nullable=False)
    health: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    """What the worker reports about itself: event loop stalls (now, last, count), processor tasks
    lingering after their job was stopped, and how long lease renewal has been failing."""
    types: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    """The job types this worker runs (it claims no others); ``NULL``: a worker of an earlier version,
    which claims every type."""
    __table_args__ = (Index("ix_workers_last_seen_at", "last_seen_at"),)


class ThroughputSample(Base):
    """Jobs finished per worker per minute, for the admin health chart without scanning ``jobs``.
    One row per (minute, worker), upserted by the worker's heartbeat."""

    __tablename__ = "throughput_samples"
    minute: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    worker_id: Mapped[str] = mapped_column(Text, primary_key=True)
    completed: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    failed: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
