"""Idempotency keys for ``POST /api/pipelines`` and ``POST /api/batches``, as ``POST /api/jobs`` has.

A client whose request got no answer (a timeout, a 503 saying the change may or may not have been
made) sends it again with the same key and is answered with the pipeline or batch the first one made.
``idempotency_key`` is the key the client sent, one per person (the unique index decides between
concurrent first requests); ``request_digest`` is the SHA-256 of the request as it was sent (canonical
JSON, without the key), what a repeat is compared with (:mod:`app.request_keys`). The key has its own
column, apart from ``form_key``, so that an API key and a form's key never answer for each other.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

TABLES = ("pipelines", "batches")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("idempotency_key", sa.Text(), nullable=True))
        op.add_column(table, sa.Column("request_digest", sa.Text(), nullable=True))
        op.create_index(
            f"uq_{table}_user_id_idempotency_key",
            table,
            ["user_id", "idempotency_key"],
            unique=True,
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        )


def downgrade() -> None:
    for table in TABLES:
        op.drop_index(
            f"uq_{table}_user_id_idempotency_key",
            table_name=table,
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        )
        op.drop_column(table, "request_digest")
        op.drop_column(table, "idempotency_key")
