"""A pipeline remembers that an admin deleted one of its steps before it completed:
``pipelines.removed_unfinished``.

A pipeline's status is derived from the steps it still has, so deleting its last unfinished step (the
others completed) made it ``completed`` as if every step had run; the deleted job's events go with it,
so nothing else records the loss. Rows made before this revision start at ``false``: nothing recorded
which of their steps were deleted.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "pipelines",
        sa.Column("removed_unfinished", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("pipelines", "removed_unfinished")
