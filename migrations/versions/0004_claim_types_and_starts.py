"""Claims by type: the job types each worker runs, starts of rate-limited types, a per-type claim index.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

CLAIMABLE = "status = 'queued' AND is_active AND pending_parents = 0"


def upgrade() -> None:
    op.add_column("workers", sa.Column("types", postgresql.ARRAY(sa.Text()), nullable=True))
    op.create_table(
        "job_type_starts",
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("type", "at", name=op.f("pk_job_type_starts")),
    )
    op.create_index(
        "ix_jobs_claim_by_type",
        "jobs",
        ["type", sa.text("priority DESC"), "run_at", "id"],
        unique=False,
        postgresql_where=sa.text(CLAIMABLE),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_claim_by_type", table_name="jobs", postgresql_where=sa.text(CLAIMABLE))
    op.drop_table("job_type_starts")
    op.drop_column("workers", "types")
