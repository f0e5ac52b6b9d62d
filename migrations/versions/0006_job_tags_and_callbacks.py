"""Tags on jobs, and the callback a job's submitter asked for when it ends.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

DUE = "delivered_at IS NULL AND given_up_at IS NULL"


def upgrade() -> None:
    op.create_table(
        "job_tags",
        sa.Column("tag", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_tags_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tag", "job_id", name=op.f("pk_job_tags")),
    )
    op.create_index("ix_job_tags_job_id", "job_tags", ["job_id"])
    op.create_table(
        "job_callbacks",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("given_up_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_callbacks_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_callbacks")),
    )
    op.create_index("ix_job_callbacks_due", "job_callbacks", ["next_at"], postgresql_where=sa.text(DUE))


def downgrade() -> None:
    op.drop_index("ix_job_callbacks_due", table_name="job_callbacks", postgresql_where=sa.text(DUE))
    op.drop_table("job_callbacks")
    op.drop_index("ix_job_tags_job_id", table_name="job_tags")
    op.drop_table("job_tags")
