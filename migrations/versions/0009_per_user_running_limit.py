"""Fair limits per person: at most this many of a job type's jobs running at once for one person.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job_type_controls", sa.Column("max_running_per_user", sa.Integer(), nullable=True))
    op.create_check_constraint(
        op.f("ck_job_type_controls_max_running_per_user_non_negative"),
        "job_type_controls",
        "max_running_per_user IS NULL OR max_running_per_user >= 0",
    )


def downgrade() -> None:
    op.drop_constraint(
        op.f("ck_job_type_controls_max_running_per_user_non_negative"), "job_type_controls", type_="check"
    )
    op.drop_column("job_type_controls", "max_running_per_user")
