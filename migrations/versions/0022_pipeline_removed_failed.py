"""A pipeline remembers that an admin deleted one of its failed steps: ``pipelines.removed_failed``.

A pipeline with a failed step is failed, but its status is derived from the steps it still has: once
the failed step was deleted while others still ran, it read "running", and "cancelled" when they ended
(the deleted job's events go with it, so nothing else records the failure). Rows made before this
revision start at ``false``.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "pipelines",
        sa.Column("removed_failed", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("pipelines", "removed_failed")
