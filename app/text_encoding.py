"""Which Unicode encoding an uploaded text file is in, told from its first bytes: one rule for every
reader of a person's text file (a batch's spreadsheet, the CSV jobs, a file's preview on a job's page,
the type stored with an upload).

* A byte-order mark decides: UTF-8, UTF-16 (LE, BE) or UTF-32 (LE, BE). UTF-32 LE's mark begins with
  UTF-16 LE's (``FF FE 00 00``), so the longer marks are looked at first: a UTF-32 file was read as
  UTF-16, a NUL after every character.
* Without one, NUL bytes are what UTF-16 and UTF-32 text is full of (every ASCII letter, comma and line
  end has one or three) and what no 8-bit text holds. Where they are tells the width and the byte order
  (:func:`unmarked_codec`), but "Find out automatically" does not read such a file on that guess alone:
  its refusal (:func:`unmarked_words`) names what was found, and a reader with an encoding choice reads
  it once the person chooses that width (:func:`chosen_codec`); any other NUL is a file that is not text.
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

_WIDE: tuple[tuple[str, int, int, str], ...] = (
    ("UTF-32", 4, 0, "utf-32-le"),
    ("UTF-32", 4, 3, "utf-32-be"),
    ("UTF-16", 2, 0, "utf-16-le"),
    ("UTF-16", 2, 1, "utf-16-be"),
)
"""``(name, unit size, the byte of a unit that holds an ASCII character, codec)`` of each encoding and byte
order told by where its NULs are; UTF-32 first, as its NULs are also where UTF-16's would be."""

CHOICES: dict[str, str] = {
    "auto": "Find out automatically",
    "utf-8": "UTF-8",
    "utf-8-sig": "UTF-8 with BOM",
    "utf-16": "UTF-16",
    "utf-32": "UTF-32",
    "cp1252": "Windows (cp1252)",
    "latin-1": "Latin-1 (ISO 8859-1)",
}
"""The "Text encoding" choices every reader of a person's text file offers (the CSV jobs, a batch's
spreadsheet), each in words; the values are codecs Python reads ("auto": :func:`bom`, then the reader's
own guesses)."""

ORDER_WORDS = {"le": "little-endian, low byte first", "be": "big-endian, high byte first"}
"""A byte order in words, by the end of its codec's name."""


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


def unmarked_codec(data: bytes) -> str | None:
    """The codec (``"utf-16-le"``, ``"utf-32-be"``…) of text ``data`` (with no byte-order mark) looks like
    it is in: NULs in at least a third of the characters' units, none where a character's low byte is."""
    sample = data[:SAMPLE_BYTES]
    for _name, unit, low, codec in _WIDE:
        units = len(sample) // unit
        if units < 2:
            continue
        places = [sample[i::unit][:units].count(0) for i in range(unit)]
        if places[low] == 0 and all(places[i] * 3 >= units for i in range(unit) if i != low):
            return codec
    return None


def unmarked_words(codec: str) -> str:
    """What an unmarked file in ``codec`` (:func:`unmarked_codec`) was found to be, in words: ``UTF-16
    text (little-endian, low byte first) without a byte-order mark``."""
    return f"{codec[:6].upper()} text ({ORDER_WORDS[codec[-2:]]}) without a byte-order mark"


def chosen_codec(data: bytes, chosen: str) -> str:
    """The codec that reads ``data`` for a person who chose ``chosen`` (``"utf-16"`` or ``"utf-32"``, or
    any other codec, returned as it is): with no byte-order mark, the byte order where ``data``'s NULs
    are, when they fit that width; else ``chosen`` (Python's own reading: the mark, or this machine's
    order). So choosing "UTF-16" reads a big-endian file without a mark too, not as Chinese-looking
    text."""
    if chosen not in ("utf-16", "utf-32") or bom(data) is not None:
        return chosen
    codec = unmarked_codec(data)
    return codec if codec is not None and codec.startswith(chosen) else chosen


def decode(data: bytes, errors: str = "strict") -> tuple[str, str] | None:
    """``(text, codec)`` of ``data`` with a byte-order mark, the mark left out; ``None`` without one."""
    found = bom(data)
    if found is None:
        return None
    codec, skip = found
    return data[skip:].decode(codec, errors), codec


def decode_as(data: bytes, chosen: str) -> str:
    """``data`` read as the person chose (a key of :data:`CHOICES` other than ``auto``), its byte-order
    mark left out: UTF-16 or UTF-32 in the byte order its NULs show (:func:`chosen_codec`).

    Raises:
        UnicodeDecodeError: ``data`` is not text in that encoding.
    """
    text = data.decode(chosen_codec(data, chosen))
    return text.removeprefix("\ufeff")
