"""What runs around the jobs: notices to owners, the audit log, alert outbox and deliveries, stored files,
schedules, per-type controls, workers and throughput samples."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Text,
    text,
)
from sqlalchemy import text as _sql  # for tables with a column named ``text``
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, now_column


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
    at: Mapped[datetime] = now_column()
    read_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    email_due: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=_sql("false"))
    emailed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        Index("ix_notifications_user_id_id", "user_id", "id"),
        Index("ix_notifications_unread", "user_id", postgresql_where=_sql("read_at IS NULL")),
        Index("ix_notifications_email_due", "id", postgresql_where=_sql("email_due")),
    )


class AuditEntry(Base):
    """An admin action or control change: who, what, which jobs, when, outcome."""

    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = now_column()
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
    created_at: Mapped[datetime] = now_column()
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    fingerprint: Mapped[str] = mapped_column(Text, nullable=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = now_column()
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
    at: Mapped[datetime] = now_column()
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
    created_at: Mapped[datetime] = now_column()
    form_key: Mapped[str | None] = mapped_column(Text)
    """The one-time key of the form the file was uploaded with: a repeat of the form stores it once."""
    __table_args__ = (
        Index("ix_files_job_id", "job_id", postgresql_where=text("job_id IS NOT NULL")),
        Index(
            "uq_files_user_id_form_key",
            "user_id",
            "form_key",
            "sha256",
            "name",
            unique=True,
            postgresql_where=text("form_key IS NOT NULL"),
        ),
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
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()
    __table_args__ = (
        CheckConstraint("(job_type IS NULL) <> (template IS NULL)", name="one_target"),
        CheckConstraint("source IN ('code', 'ui', 'api')", name="source_known"),
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
    updated_at: Mapped[datetime] = now_column()
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


class CountedRetry(Base):
    """A person's own retry (of a failed job, or of a batch's failed rows: one row per action), kept a few
    minutes: it counts as one submission against ``USER_MAX_JOBS_PER_MINUTE``, as a new job does
    (:mod:`app.quotas`; migration 0019). A retry makes no new job row for the window to count."""

    __tablename__ = "counted_retries"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    at: Mapped[datetime] = now_column()
    __table_args__ = (Index("ix_counted_retries_user_id_at", "user_id", "at"),)


class WorkerRow(Base):
    """A live worker process, refreshed on every heartbeat; the admin health page lists
    rows seen recently. ``id`` is ``host-pid-random``."""

    __tablename__ = "workers"
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    hostname: Mapped[str] = mapped_column(Text, nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    concurrency: Mapped[int] = mapped_column(Integer, nullable=False)
    running: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    started_at: Mapped[datetime] = now_column()
    last_seen_at: Mapped[datetime] = now_column()
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
