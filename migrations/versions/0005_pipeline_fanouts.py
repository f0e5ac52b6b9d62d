"""Steps that run once per item of a list in a parent's result, waiting to be expanded.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipeline_fanouts",
        sa.Column("pipeline_id", sa.Uuid(), nullable=False),
        sa.Column("step_key", sa.Text(), nullable=False),
        sa.Column("spec", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("parents", postgresql.ARRAY(sa.Uuid()), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.Column("dependents", postgresql.ARRAY(sa.Uuid()), nullable=False),
        sa.Column("expanded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("instances", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["pipeline_id"],
            ["pipelines.id"],
            name=op.f("fk_pipeline_fanouts_pipeline_id_pipelines"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pipeline_id", "step_key", name=op.f("pk_pipeline_fanouts")),
    )
    op.create_index(
        "ix_pipeline_fanouts_parents",
        "pipeline_fanouts",
        ["parents"],
        postgresql_using="gin",
        postgresql_where=sa.text("expanded_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_pipeline_fanouts_parents", table_name="pipeline_fanouts")
    op.drop_table("pipeline_fanouts")
