"""Approvals by named people: each step's approval rule, each person's decision; indexes of the steps
waiting for a decision and of the jobs waiting for an earlier step.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

WAITING = "status = 'waiting_approval'"
PARENTS = "status = 'queued' AND pending_parents > 0"


def upgrade() -> None:
    op.create_table(
        "job_approval_rules",
        sa.Column("job_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("approvers", postgresql.JSONB(), nullable=False),
        sa.Column("user_ids", postgresql.ARRAY(sa.Integer()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("admins", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("owner", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("approvals_needed", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("timeout_seconds", sa.Integer(), nullable=True),
        sa.Column("on_timeout", sa.Text(), nullable=True),
        sa.Column("reminded_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("approvals_needed >= 1", name=op.f("ck_job_approval_rules_needed_positive")),
        sa.CheckConstraint(
            "on_timeout IS NULL OR on_timeout IN ('reject', 'remind')",
            name=op.f("ck_job_approval_rules_on_timeout_known"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_approval_rules_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_approval_rules")),
    )
    op.create_table(
        "job_approvals",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("job_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("decision", sa.Text(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "decision IN ('approved', 'rejected')", name=op.f("ck_job_approvals_decision_known")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_approvals_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_job_approvals_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_approvals")),
        sa.UniqueConstraint("job_id", "user_id", name=op.f("uq_job_approvals_job_id_user_id")),
    )
    op.create_index(
        "ix_jobs_waiting_approval",
        "jobs",
        ["updated_at", "id"],
        unique=False,
        postgresql_where=sa.text(WAITING),
    )
    op.create_index(
        "ix_jobs_waiting_parents", "jobs", ["id"], unique=False, postgresql_where=sa.text(PARENTS)
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_waiting_parents", table_name="jobs", postgresql_where=sa.text(PARENTS))
    op.drop_index("ix_jobs_waiting_approval", table_name="jobs", postgresql_where=sa.text(WAITING))
    op.drop_table("job_approvals")
    op.drop_table("job_approval_rules")
