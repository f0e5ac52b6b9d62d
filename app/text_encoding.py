"""Which Unicode encoding an uploaded text file is in, told from its first bytes: one rule for every
reader of a person's text file (a batch's spreadsheet, the CSV jobs, a file's preview on a job's page,
the type stored with an upload).

* A byte-order mark decides: UTF-8, UTF-16 (LE, BE) or UTF-32 (LE, BE). UTF-32 LE's mark begins with
  UTF-16 LE's (``FF FE 00 00``), so the longer marks are looked at first: a UTF-32 file was read as
  UTF-16, a NUL after every character.
* Without one, NUL bytes are what UTF-16 and UTF-32 text is full of (every ASCII letter, comma and line
  end has one or three) and what no 8-bit text holds. Such bytes are not guessed at (which byte order,
  which width): :func:`unmarked_wide` names the encoding they look like, for a refusal that says how to
  save the file instead; any other NUL is a file that is not text.
* Bytes with neither are left to the reader's own choice (UTF-8, then an 8-bit code page).
"""

from __future__ import annotations

import codecs

BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
"""Each byte-order mark and the codec of the text after it, a longer mark before one it begins with."""

SAMPLE_BYTES = 16_384
"""How much of a file's start is looked at for NUL bytes."""

_WIDE: tuple[tuple[str, int, int], ...] = (
    ("UTF-32", 4, 0),
    ("UTF-32", 4, 3),
    ("UTF-16", 2, 0),
    ("UTF-16", 2, 1),
)
"""``(name, unit size, the byte of a unit that holds an ASCII character)`` of each encoding and byte order
told by where its NULs are; UTF-32 first, as its NULs are also where UTF-16's would be."""


def bom(data: bytes) -> tuple[str, int] | None:
    """``(codec, length of the mark)`` when ``data`` starts with a byte-order mark."""
    for mark, codec in BOMS:
        if data.startswith(mark):
            return codec, len(mark)
    return None


def is_wide(data: bytes) -> bool:
    """``data`` starts with the byte-order mark of UTF-16 or UTF-32: text, though it holds NUL bytes."""
    found = bom(data)
    return found is not None and found[0] != "utf-8"


def unmarked_wide(data: bytes) -> str | None:
    """``"UTF-16"`` or ``"UTF-32"`` when ``data`` (with no byte-order mark) looks like text in it: NULs in
    at least a third of the characters' units, none where a character's low byte is."""
    sample = data[:SAMPLE_BYTES]
    for name, unit, low in _WIDE:
        units = len(sample) // unit
        if units < 2:
            continue
        places = [sample[i::unit][:units].count(0) for i in range(unit)]
        if places[low] == 0 and all(places[i] * 3 >= units for i in range(unit) if i != low):
            return name
    return None


def decode(data: bytes, errors: str = "strict") -> tuple[str, str] | None:
    """``(text, codec)`` of ``data`` with a byte-order mark, the mark left out; ``None`` without one."""
    found = bom(data)
    if found is None:
        return None
    codec, skip = found
    return data[skip:].decode(codec, errors), codec
