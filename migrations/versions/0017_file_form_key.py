"""A stored upload's form key: a form sent again (a reload, the back button, a double click) with the
same file stores it once.

``files.form_key`` is the one-time key of the form the file came with (the spreadsheet form's "read"
step, a job or pipeline form's file field); a repeat of the key by the same person with the same bytes
and name is answered with the file stored the first time (:func:`app.actions.files.store_upload`), so
it neither fills their storage nor counts against their limit twice. The unique index makes "one file
per person, key, name and content" hold whatever reaches the table; files stored without a form (the
API, a job's outputs) have none.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("files", sa.Column("form_key", sa.Text(), nullable=True))
    op.create_index(
        "uq_files_user_id_form_key",
        "files",
        ["user_id", "form_key", "sha256", "name"],
        unique=True,
        postgresql_where=sa.text("form_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_files_user_id_form_key",
        table_name="files",
        postgresql_where=sa.text("form_key IS NOT NULL"),
    )
    op.drop_column("files", "form_key")
