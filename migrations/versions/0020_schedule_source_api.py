"""A schedule made through the JSON API is recorded as such: ``schedules.source`` may be ``'api'``.

``source`` said where a schedule came from, ``'code'`` (synced at a worker's start) or ``'ui'``, and a
schedule created with ``POST /api/schedules`` was stored as ``'ui'``. Rows made before this revision
keep ``'ui'``: nothing recorded which of them came through the API. A downgrade turns ``'api'`` rows
into ``'ui'``, the closest value the older check allows.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint(op.f("ck_schedules_source_known"), "schedules", type_="check")
    op.create_check_constraint(
        op.f("ck_schedules_source_known"), "schedules", "source IN ('code', 'ui', 'api')"
    )


def downgrade() -> None:
    op.execute("UPDATE schedules SET source = 'ui' WHERE source = 'api'")
    op.drop_constraint(op.f("ck_schedules_source_known"), "schedules", type_="check")
    op.create_check_constraint(op.f("ck_schedules_source_known"), "schedules", "source IN ('code', 'ui')")
