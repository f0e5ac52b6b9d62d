"""Whole numbers read from text that is not a form's (a cron field, a port, a signed link, a path in a
``$ref``, a file name): ASCII digits only, and not too many of them.

``str.isdigit`` is true for characters ``int`` cannot read ("²", "①"): checked with it, such text went
on to ``int`` and raised ``ValueError``, a 500 or a job failing on an error nobody could act on. And
``int`` refuses more than 4,300 digits with the same error. A form's number, typed by a person, is read
by :func:`app.web.form_values.whole_number`, which also takes the digits of other scripts ("５")."""

from __future__ import annotations

MOST_DIGITS = 30
"""More digits than any count, port, index or time Jobdesk reads, and far fewer than ``int``'s limit."""


def whole(text: str, *, most: int = MOST_DIGITS) -> int | None:
    """``text`` as a whole number when it is 1 to ``most`` ASCII digits (no sign, no spaces), else ``None``."""
    if not 0 < len(text) <= most or not text.isascii() or not text.isdigit():
        return None
    return int(text)
