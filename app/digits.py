"""Numbers read from text: whole numbers from text that is not a form's (a cron field, a port, a signed
link, a path in a ``$ref``, a file name: :func:`whole`), ASCII digits only, and not too many of them; and
the numbers a person types (:func:`signed`, :func:`decimal`).

``str.isdigit`` is true for characters ``int`` cannot read ("²", "①"): checked with it, such text went
on to ``int`` and raised ``ValueError``, a 500 or a job failing on an error nobody could act on. And
``int`` refuses more than 4,300 digits with the same error.

A number a person typed (a form's field, a spreadsheet's cell) is read by :func:`signed` and
:func:`decimal`: ASCII digits with an optional sign and decimal point, nothing else. ``int``, ``float``
and ``Decimal`` also read ``1_0`` and full-width ``１０`` as 10 (and ``float`` ``nan`` and ``inf``): what
looks like something else to the person who typed it, or what they did not mean as a number, was taken
without a word. The form readers (:mod:`app.web.form_values`) add only their own layout (spaces between
digits, a decimal comma)."""

from __future__ import annotations

import re
from decimal import Decimal

MOST_DIGITS = 30
"""More digits than any count, port, index or time Jobdesk reads, and far fewer than ``int``'s limit."""


def whole(text: str, *, most: int = MOST_DIGITS) -> int | None:
    """``text`` as a whole number when it is 1 to ``most`` ASCII digits (no sign, no spaces), else ``None``."""
    if not 0 < len(text) <= most or not text.isascii() or not text.isdigit():
        return None
    return int(text)


MOST_CHARS = 100
"""More characters than any number a person types, and far fewer than ``int``'s limit."""
_SIGNED = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
_SCIENTIFIC = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)


def signed(text: str, *, most: int = MOST_DIGITS) -> int | None:
    """``text`` as a whole number when it is 1 to ``most`` ASCII digits after an optional ``+`` or ``-``
    (no spaces, no ``_``), else ``None``."""
    if len(text) > most + 1 or not _SIGNED.fullmatch(text):
        return None
    return int(text)


def decimal(text: str, *, exponent: bool = False) -> Decimal | None:
    """``text`` as a number when it is ASCII digits with an optional sign and decimal point (``-2.5``,
    ``.5``, ``3.``), and with ``exponent`` an ``e`` and at most three digits after it (``1.5E+11``, as a
    spreadsheet program writes a large number in a CSV), else ``None``: no spaces, ``_``, digits of other
    scripts, ``nan`` or ``inf``."""
    pattern = _SCIENTIFIC if exponent else _DECIMAL
    if len(text) > MOST_CHARS or not pattern.fullmatch(text):
        return None
    return Decimal(text)
