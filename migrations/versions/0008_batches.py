"""Batches: many jobs of one type started together (a spreadsheet's rows, many files), and jobs.batch_id.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("form_key", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_batches_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
    )
    op.create_index("ix_batches_user_id_id", "batches", ["user_id", sa.text("id DESC")], unique=False)
    op.create_index(
        "uq_batches_user_id_form_key",
        "batches",
        ["user_id", "form_key"],
        unique=True,
        postgresql_where=sa.text("form_key IS NOT NULL"),
    )
    op.add_column("jobs", sa.Column("batch_id", postgresql.UUID(as_uuid=True), nullable=True))
    op.create_foreign_key(
        op.f("fk_jobs_batch_id_batches"), "jobs", "batches", ["batch_id"], ["id"], ondelete="SET NULL"
    )
    op.create_index(
        "ix_jobs_batch_id_status",
        "jobs",
        ["batch_id", "status"],
        unique=False,
        postgresql_where=sa.text("batch_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_jobs_batch_id_status", table_name="jobs", postgresql_where=sa.text("batch_id IS NOT NULL")
    )
    op.drop_constraint(op.f("fk_jobs_batch_id_batches"), "jobs", type_="foreignkey")
    op.drop_column("jobs", "batch_id")
    op.drop_index(
        "uq_batches_user_id_form_key", table_name="batches", postgresql_where=sa.text("form_key IS NOT NULL")
    )
    op.drop_index("ix_batches_user_id_id", table_name="batches")
    op.drop_table("batches")
