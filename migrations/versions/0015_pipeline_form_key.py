"""A pipeline's form key: the pipeline form sent twice (a double click, the browser sending it again)
starts one pipeline, as the job form and the batch form do.

``pipelines.form_key`` is the key the template page put in the form; a repeat of it by the same person
is answered with the pipeline it started (:func:`app.actions.pipelines.submit_template`). The unique
index makes "one pipeline per person and key" hold whatever reaches the table; pipelines started
without a form (the API, schedules, a processor's next jobs) have none.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("pipelines", sa.Column("form_key", sa.Text(), nullable=True))
    op.create_index(
        "uq_pipelines_user_id_form_key",
        "pipelines",
        ["user_id", "form_key"],
        unique=True,
        postgresql_where=sa.text("form_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_pipelines_user_id_form_key",
        table_name="pipelines",
        postgresql_where=sa.text("form_key IS NOT NULL"),
    )
    op.drop_column("pipelines", "form_key")
