"""One rule for telling e-mail addresses apart, for every account path: creating one (the admins' page and
``jobdesk create-user``), signing in and its limits, and every lookup by address
(the command line, a schedule's owner, a step's approvers, the jobs filter, the demo).

An address is compared, and stored, as its *key*: Unicode NFKC (compatibility forms become their plain
letters, so fullwidth ``ａｌｉｃｅ`` is ``alice`` and ``＠`` is ``@``), then case-folded as a whole
(``Alice`` is ``alice``, ``STRASSE`` and ``straße`` are one), NFKC again (a fold may leave a letter
decomposed), lower-cased (the database's ``email = lower(email)`` check; a few folds give capitals), and
stripped. The whole address, local part included: RFC 5321 lets a mail server tell ``Alice`` from
``alice``, but no service people use does, and two accounts that look alike on every page are a way to
pose as someone. The key is what is stored and shown, so a person who typed ``Straße@…`` reads
``strasse@…`` from then on.
"""

from __future__ import annotations

import re
import unicodedata

MAX_LENGTH = 254
"""The longest address (RFC 5321's path limit less its angle brackets)."""

NOT_TYPABLE = re.compile("[\x00\ud800-\udfff]")
"""A NUL or a lone surrogate (a command-line argument's byte that is not UTF-8): PostgreSQL stores neither."""


def folded(email: str) -> str:
    """``email`` by the rule above (nothing refused, nothing cut)."""
    value = unicodedata.normalize("NFKC", email)
    value = unicodedata.normalize("NFKC", value.casefold())
    return value.lower().strip()


def email_key(email: str | None) -> str:
    """``email`` as an account is looked up by it: :func:`folded`, at most :data:`MAX_LENGTH` characters,
    a NUL or a lone surrogate replaced by U+FFFD. No stored address holds either, so such a lookup finds
    nobody instead of failing."""
    return NOT_TYPABLE.sub("\ufffd", folded(email or ""))[:MAX_LENGTH]
