"""E-mail addresses stored as their key: NFKC, case-folded as a whole (:mod:`app.emails`).

Until now an address was stored lower-cased only, so ``ａｌｉｃｅ@example.com`` (fullwidth) and
``alice@example.com`` could be two accounts. Every path now creates, signs in and looks up by the key,
so a stored address that is not its own key could no longer be found; this rewrites each to its key.

Only addresses with a character outside ASCII can change (an ASCII address, lower-cased by the
``email_lower`` check, is its own key). When the key is taken — another account already has it, or an
earlier one of the rewritten addresses took it (the lowest id first) — the account keeps its address as
it is, so the migration never fails on a database that holds two accounts that now collide, and deletes
nothing: both are kept, each is named in a warning, and an administrator decides (disable the one that
should go). Until then the one left as it was cannot be signed in to by its address, whose key is the
other account's; its jobs, files and audit entries stay as they are.

The downgrade leaves the addresses as they are: the forms they had are not kept, and the keys satisfy
the earlier rule (lower-cased, unique) as well.

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

import logging
import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

log = logging.getLogger("alembic.runtime.migration")


def _key(email: str) -> str:
    """The rule of :func:`app.emails.folded` as this migration applies it (copied: a migration keeps the
    rule of its time, whatever the module later says)."""
    value = unicodedata.normalize("NFKC", email)
    value = unicodedata.normalize("NFKC", value.casefold())
    return value.lower().strip()


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.text("SELECT id, email FROM users WHERE email !~ '^[\\x01-\\x7f]*$' ORDER BY id")
    ).all()
    for user_id, email in rows:
        key = _key(email)
        if key == email:
            continue
        if len(key) > 254:
            log.warning(
                "User %s keeps the e-mail address %r: its key is over 254 characters.", user_id, email
            )
            continue
        holder = conn.execute(sa.text("SELECT id, email FROM users WHERE email = :k"), {"k": key}).first()
        if holder is not None:
            log.warning(
                "Two accounts now share one e-mail address: user %s (%r) keeps its address; user %s has "
                "%r. Both are kept: disable the one that should go on /admin/users.",
                user_id,
                email,
                holder[0],
                holder[1],
            )
            continue
        # the table's check compares with PostgreSQL's lower(), which may differ from Python's for a
        # rare letter: such a row stays as it is, named
        changed = conn.execute(
            sa.text(
                "UPDATE users SET email = :k WHERE id = :id AND lower(CAST(:k AS text)) = CAST(:k AS text)"
            ),
            {"k": key, "id": user_id},
        ).rowcount
        if not changed:
            log.warning(
                "User %s keeps the e-mail address %r: its key %r cannot be stored.", user_id, email, key
            )


def downgrade() -> None:
    pass
