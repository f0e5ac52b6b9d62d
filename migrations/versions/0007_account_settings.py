"""Account settings: a colour theme per person, a password an admin reset (to be changed at the next
sign-in), the last sign-in, and API tokens that expire.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("theme", sa.Text(), server_default=sa.text("'auto'"), nullable=False))
    op.create_check_constraint(op.f("ck_users_theme_known"), "users", "theme IN ('auto', 'light', 'dark')")
    op.add_column(
        "users",
        sa.Column("must_change_password", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.add_column("users", sa.Column("last_sign_in_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("api_tokens", "expires_at")
    op.drop_column("users", "last_sign_in_at")
    op.drop_column("users", "must_change_password")
    op.drop_constraint(op.f("ck_users_theme_known"), "users", type_="check")
    op.drop_column("users", "theme")
