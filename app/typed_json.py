"""JSON that a person gave (a request's body, a form's JSON field, a spreadsheet cell): read so that text
nested deeper than Python's parser goes is refused like any other text that is not JSON, and so that an
object that gives the same key twice is refused naming the key.

``json.loads`` raises ``RecursionError``, not ``ValueError``, for ``[[[[…`` a few thousand levels deep:
a field check that caught only ``ValueError`` let it out of pydantic's validation, a 500 at submission,
and out of a processor, a job retried as if the next attempt could read it.

A number JSON cannot carry is refused in words, as the API's own bodies refuse one: ``NaN`` and
``Infinity`` (not JSON at all, which the standard library reads and writes back as they came, so an
``http.request`` sent them on to a server as its JSON body), a fraction past about 1.8e308 (read as
infinity, written back as ``Infinity``), and a whole number past Python's digit limit (refused with
Python's "use sys.set_int_max_str_digits()" as the reason a person was shown).

A key given twice (``{"to": "a@x.org", "to": "b@x.org"}``) is read by most decoders, msgspec's and the
standard library's alike, as its last value, without a word: the first value, which the person may have
meant, is dropped. RFC 8259 leaves such an object's meaning to the reader; Jobdesk refuses it
(:class:`DuplicateKey`), on every path that reads a person's JSON: this module's :func:`parse`, and
:func:`duplicate_key` for a request body the framework decoded itself."""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

TOO_DEEP = "it is nested too deeply to read; flatten it"
_SHOWN_MAX = 100
_UNSHOWN = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def _shown(key: str) -> str:
    """A key as the message writes it: a control character or lone surrogate as its escape (the message
    is itself sent and stored), a long key cut."""
    key = _UNSHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", key)
    return key if len(key) <= _SHOWN_MAX else f"{key[:_SHOWN_MAX]}…"


class DuplicateKey(ValueError):
    """An object in the JSON gives ``key`` twice. ``path`` is where that key is in the value read
    (``input_data.to``, ``rows[2].x``; the key itself at the top), in the form every field path has."""

    def __init__(self, key: str, path: str) -> None:
        self.key = key
        self.path = path
        super().__init__(f'The key "{_shown(key)}" is given twice.')


class _Repeated(dict[str, Any]):
    """An object whose text gave a key twice (:attr:`key`, the first repeated), marked while parsing so
    that its path can be found afterwards."""

    key = ""


def _path(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{_shown(key)}" if base else _shown(key)


def _first_repeated(value: Any, path: str) -> DuplicateKey | None:
    """The first object in document order marked :class:`_Repeated`, as the error naming it."""
    if isinstance(value, dict):
        if isinstance(value, _Repeated):
            return DuplicateKey(value.key, _path(path, value.key))
        items: Any = ((_path(path, k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((_path(path, i), v) for i, v in enumerate(value))
    else:
        return None
    return next((found for p, v in items if (found := _first_repeated(v, p)) is not None), None)


def _number_shown(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:12]}…{text[-6:]} ({len(text):,} characters)"


def _whole(text: str) -> int:
    limit = sys.get_int_max_str_digits()
    if limit and len(text.lstrip("-")) > limit:
        raise ValueError(
            f"the number {_number_shown(text)} is out of range: a whole number has at most {limit:,} "
            "digits (send a larger one as text)"
        )
    return int(text)


def _real(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(
            f"the number {_number_shown(text)} is out of range: numbers go up to about 1.8e308 "
            "(send a larger one as text)"
        )
    return value


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value: JSON has no NaN or Infinity; send a number, or null")


def _loads(text: str | bytes, **options: Any) -> Any:
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        value = dict(items)
        if len(value) == len(items):
            return value
        repeated = True
        marked = _Repeated(value)
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                marked.key = key
                break
            seen.add(key)
        return marked

    value = json.loads(
        text,
        object_pairs_hook=pairs,
        parse_int=_whole,
        parse_float=_real,
        parse_constant=_constant,
        **options,
    )
    if repeated:
        found = _first_repeated(value, "")
        if found is not None:
            raise found
    return value


def parse(text: str | bytes) -> Any:
    """``text`` read as JSON.

    Raises:
        DuplicateKey: an object in it gives a key twice (a :class:`ValueError` too).
        ValueError: it is not JSON (a :class:`json.JSONDecodeError`; ``NaN`` and ``Infinity`` included),
            holds a number out of range, or is nested deeper than the parser goes (:data:`TOO_DEEP`).
    """
    try:
        return _loads(text)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


def duplicate_key(body: bytes) -> DuplicateKey | None:
    """The first key given twice in a request ``body`` another decoder read already (Litestar's, msgspec,
    keeps the last value of a key without a word); ``None`` when there is none or the body is not JSON
    the standard library reads (the other decoder's answer stands)."""
    try:
        _loads(body)
    except DuplicateKey as exc:
        return exc
    except (ValueError, RecursionError):
        return None
    return None
