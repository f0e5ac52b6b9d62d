"""``jobs.claims``: how many times the job was ever claimed, the fencing token of a worker's reports.

A worker's report (completion, failure, cancel acknowledgement, release, lease renewal, progress) was
fenced by ``locked_by`` and ``attempts``. But ``attempts`` is the person-visible count since the last
manual retry: a retry, a step's rerun, the re-opening of dependents set it back to 0, and a hand-back
takes the attempt back. The same worker claiming the job again then had the same attempt number as an
earlier claim of it, whose late report (a lingering task, a write retried after its answer was lost)
was taken for the new claim's. ``claims`` only ever grows: each claim adds one, nothing resets it.

Adding a column with a constant default rewrites no row. Rows claimed before this revision start at 0;
a worker of this version fences by ``claims`` only what it claimed itself (the claim returns it).

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("claims", sa.Integer(), nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    op.drop_column("jobs", "claims")
