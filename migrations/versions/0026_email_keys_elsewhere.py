"""The e-mail addresses kept outside ``users`` as their key too (:mod:`app.emails`, migration 0025).

Migration 0025 rewrote each account's address to its key (NFKC, case-folded as a whole), and every path
has looked addresses up by their key since. Two tables kept the forms they were written in:

* ``login_attempts.email``: a failed sign-in as ``ａｌｉｃｅ@example.com`` (fullwidth) or ``straße@…``
  was counted under that form, and the sign-in limits, which count by the key, did not see it: a
  guesser's earlier failures were forgotten at the upgrade, and ``jobdesk unlock-user`` left them.
* ``audit_log``: who acted (``user_email``), the account an entry is about (``detail.email``: created,
  disabled, unlocked, …) and a schedule's owner (``detail.owner``). ``/admin/audit``'s filter by address
  compares keys, so an admin's entries from before 0025 were missing from their own search.

Each becomes its key by the rule new writes follow (:func:`app.emails.email_key`: the key, a NUL or a
lone surrogate replaced by U+FFFD, at most 254 characters). In ``audit_log`` an address that an account
still has exactly is left as it is: that account kept it at 0025 because its key was another account's,
and its entries stay with it instead of being filed under the other account's address. A sign-in attempt
is counted by the key whatever it was (a sign-in looks the account up by the key).

Only values with a character outside ASCII can change (an ASCII address was stored lower-cased, which
is its own key); they are found with one scan of each table and rewritten value by value.

The downgrade leaves the values as they are, as 0025's does: the old forms are not kept, and the keys
were what the earlier code looked up as well for every ASCII address.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import re
import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

NOT_ASCII = "!~ '^[\\x01-\\x7f]*$'"
"""A PostgreSQL condition: the text holds a character outside ASCII."""
DETAIL_KEYS = ("email", "owner")
"""The keys of ``audit_log.detail`` whose value is an account's address."""
_NOT_TYPABLE = re.compile("[\x00\ud800-\udfff]")


def _key(email: str) -> str:
    """The rule of :func:`app.emails.email_key` as this migration applies it (copied: a migration keeps
    the rule of its time, whatever the module later says)."""
    value = unicodedata.normalize("NFKC", email)
    value = unicodedata.normalize("NFKC", value.casefold())
    return _NOT_TYPABLE.sub("\ufffd", value.lower().strip())[:254]


def _changes(conn: sa.Connection, select: str, keep: frozenset[str] = frozenset()) -> dict[str, str]:
    """``{value: its key}`` for each value ``select`` finds that is not its own key, except those in
    ``keep``."""
    found = (v for (v,) in conn.execute(sa.text(select)) if v is not None)
    return {v: k for v in found if v not in keep and (k := _key(v)) != v}


def upgrade() -> None:
    conn = op.get_bind()
    changes = _changes(conn, f"SELECT DISTINCT email FROM login_attempts WHERE email {NOT_ASCII}")
    for old, key in changes.items():
        conn.execute(sa.text("UPDATE login_attempts SET email = :k WHERE email = :o"), {"k": key, "o": old})

    kept = frozenset(e for (e,) in conn.execute(sa.text(f"SELECT email FROM users WHERE email {NOT_ASCII}")))
    changes = _changes(conn, f"SELECT DISTINCT user_email FROM audit_log WHERE user_email {NOT_ASCII}", kept)
    for old, key in changes.items():
        conn.execute(
            sa.text("UPDATE audit_log SET user_email = :k WHERE user_email = :o"), {"k": key, "o": old}
        )
    for name in DETAIL_KEYS:
        changes = _changes(
            conn,
            f"SELECT DISTINCT detail->>'{name}' FROM audit_log "
            f"WHERE jsonb_typeof(detail->'{name}') = 'string' AND detail->>'{name}' {NOT_ASCII}",
            kept,
        )
        for old, key in changes.items():
            conn.execute(
                sa.text(
                    f"UPDATE audit_log SET detail = jsonb_set(detail, '{{{name}}}', to_jsonb(CAST(:k AS text))) "
                    f"WHERE jsonb_typeof(detail->'{name}') = 'string' AND detail->>'{name}' = :o"
                ),
                {"k": key, "o": old},
            )


def downgrade() -> None:
    pass
