"""Waiting jobs per owner: the index the per-user waiting limit counts with.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_jobs_user_waiting",
        "jobs",
        ["user_id"],
        unique=False,
        postgresql_where=sa.text("status = 'queued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_user_waiting", table_name="jobs", postgresql_where=sa.text("status = 'queued'"))
