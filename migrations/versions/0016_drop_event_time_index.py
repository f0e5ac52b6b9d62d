"""Drop ``ix_job_events_at``: no query reads events by time (every read is one job's or one pipeline's
history, by ``ix_job_events_job_id_id`` and ``ix_job_events_pipeline_id_id``, and events go with their
jobs, not by age), and each event written — one for every enqueue, claim and outcome — paid for an entry
in it: 10–20 % of an event's insert.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_job_events_at", table_name="job_events")


def downgrade() -> None:
    op.create_index("ix_job_events_at", "job_events", ["at"], unique=False)
