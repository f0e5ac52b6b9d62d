"""Stored tags in Unicode's composed form (NFC), the form every new tag and every ``?tag=`` filter is
read in since (:func:`app.jobs.tags.read_tag`).

``café`` typed with a precomposed ``é`` and with ``e`` and a combining accent look the same and were two
tags: ``?tag=café`` found the jobs of one spelling only. Each tag with a character outside ASCII is
rewritten to its NFC form (an ASCII tag is its own); a job that had both spellings keeps one tag. Case is
kept, as the tag rule keeps it (``Nightly`` and ``nightly`` stay two tags).

The downgrade leaves the tags as they are: the decomposed spellings are not kept, and the earlier code
lists and filters the composed ones as it did before.

Revision ID: 0028
Revises: 0027
"""

from __future__ import annotations

import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

NOT_ASCII = "!~ '^[\\x01-\\x7f]*$'"
"""A PostgreSQL condition: the text holds a character outside ASCII."""


def _form(tag: str) -> str:
    """The rule of :func:`app.jobs.tags.read_tag` as this migration applies it (copied: a migration keeps
    the rule of its time, whatever the module later says)."""
    return unicodedata.normalize("NFC", tag).strip()


def upgrade() -> None:
    conn = op.get_bind()
    found = [t for (t,) in conn.execute(sa.text(f"SELECT DISTINCT tag FROM job_tags WHERE tag {NOT_ASCII}"))]
    for old in found:
        new = _form(old)
        if new == old:
            continue
        conn.execute(
            sa.text(
                "INSERT INTO job_tags (tag, job_id) SELECT :new, job_id FROM job_tags WHERE tag = :old "
                "ON CONFLICT DO NOTHING"
            ),
            {"new": new, "old": old},
        )
        conn.execute(sa.text("DELETE FROM job_tags WHERE tag = :old"), {"old": old})


def downgrade() -> None:
    pass
