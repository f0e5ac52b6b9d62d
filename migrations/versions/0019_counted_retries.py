"""A person's own retries count against their per-minute limit: ``counted_retries`` (one row per retry
action, kept a few minutes) and ``jobdesk_submission_state`` counting them with the jobs they submitted.

A retry puts a failed job back in the queue without making a job row, and the per-minute window counted
only job rows: nine retries and seven "Retry failed rows" within a minute all passed a limit of five,
and a new job right after too. Each row here is one submission, like a job, a pipeline or a batch.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# 0014's function, with the person's counted retries in the window as submissions of their own.
SUBMISSION_STATE = """
CREATE OR REPLACE FUNCTION jobdesk_submission_state(
    lock_ns int, person int, count_waiting boolean, per_minute boolean, since_id uuid, window_secs float8,
    skip bigint
) RETURNS TABLE (waiting bigint, first timestamptz, db_now timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_ns, person);
    IF count_waiting THEN
        SELECT count(*) INTO waiting FROM jobs j WHERE j.user_id = person AND j.status = 'queued';
    END IF;
    IF per_minute AND (
        SELECT count(*) FROM (
            SELECT FROM jobs j
            WHERE j.user_id = person AND j.id >= since_id AND j.created_by_job IS NULL
              AND j.created_at > now() - make_interval(secs => window_secs)
            LIMIT skip + 1
        ) AS w
    ) + (
        SELECT count(*) FROM (
            SELECT FROM counted_retries r
            WHERE r.user_id = person AND r.at > now() - make_interval(secs => window_secs)
            LIMIT skip + 1
        ) AS r
    ) > skip THEN
        SELECT s.at INTO first FROM (
            SELECT min(j.created_at) AS at FROM jobs j
            WHERE j.user_id = person AND j.id >= since_id AND j.created_by_job IS NULL
              AND j.created_at > now() - make_interval(secs => window_secs)
            GROUP BY COALESCE(j.pipeline_id, j.batch_id, j.id)
            UNION ALL
            SELECT r.at FROM counted_retries r
            WHERE r.user_id = person AND r.at > now() - make_interval(secs => window_secs)
        ) AS s ORDER BY 1 DESC OFFSET skip LIMIT 1;
    END IF;
    db_now := now();
    RETURN NEXT;
END
$$
"""

OLD_SUBMISSION_STATE = """
CREATE OR REPLACE FUNCTION jobdesk_submission_state(
    lock_ns int, person int, count_waiting boolean, per_minute boolean, since_id uuid, window_secs float8,
    skip bigint
) RETURNS TABLE (waiting bigint, first timestamptz, db_now timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_ns, person);
    IF count_waiting THEN
        SELECT count(*) INTO waiting FROM jobs j WHERE j.user_id = person AND j.status = 'queued';
    END IF;
    IF per_minute AND (
        SELECT count(*) FROM (
            SELECT FROM jobs j
            WHERE j.user_id = person AND j.id >= since_id AND j.created_by_job IS NULL
              AND j.created_at > now() - make_interval(secs => window_secs)
            LIMIT skip + 1
        ) AS w
    ) > skip THEN
        SELECT min(j.created_at) INTO first FROM jobs j
        WHERE j.user_id = person AND j.id >= since_id AND j.created_by_job IS NULL
          AND j.created_at > now() - make_interval(secs => window_secs)
        GROUP BY COALESCE(j.pipeline_id, j.batch_id, j.id) ORDER BY 1 DESC OFFSET skip LIMIT 1;
    END IF;
    db_now := now();
    RETURN NEXT;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "counted_retries",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_counted_retries_user_id_at", "counted_retries", ["user_id", "at"])
    op.execute(SUBMISSION_STATE)


def downgrade() -> None:
    op.execute(OLD_SUBMISSION_STATE)
    op.drop_index("ix_counted_retries_user_id_at", table_name="counted_retries")
    op.drop_table("counted_retries")
