"""A pipeline remembers that a person cancelled it: ``pipelines.cancelled_at`` and ``cancelled_by``.

A cancelled pipeline's status was derived from its steps alone: one cancelled while a step had already
failed read ``failed``, with nothing saying that someone stopped it, and a retry of that failed step (or a
rerun of a step) put the pipeline back to running as if it had never been cancelled. The cancel now
writes when (the database's clock) and who (an event's ``actor``, ``user:3``); the queue refuses to
revive a step of such a pipeline. A pipeline cancelled before this revision gets its marker from its
history: the first event of a step stopped by the whole pipeline's cancel (its message ends "the whole
pipeline was cancelled") gives when and who; without one it stays unmarked.

Revision ID: 0029
Revises: 0028
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("pipelines", sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("pipelines", sa.Column("cancelled_by", sa.Text(), nullable=True))
    op.execute(
        """
        UPDATE pipelines p SET cancelled_at = e.at, cancelled_by = e.actor
        FROM (
            SELECT DISTINCT ON (pipeline_id) pipeline_id, at, actor FROM job_events
            WHERE pipeline_id IS NOT NULL AND kind IN ('cancelled', 'cancel_requested')
              AND message LIKE '%: the whole pipeline was cancelled'
            ORDER BY pipeline_id, id
        ) e
        WHERE p.id = e.pipeline_id
        """
    )


def downgrade() -> None:
    op.drop_column("pipelines", "cancelled_by")
    op.drop_column("pipelines", "cancelled_at")
