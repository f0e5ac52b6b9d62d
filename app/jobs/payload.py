"""Limits of job data, and the one function that makes any text or JSON value storable in PostgreSQL.

PostgreSQL ``text`` and ``jsonb`` cannot hold U+0000, the UTF-8 the driver sends cannot encode a lone
UTF-16 surrogate (U+D800–U+DFFF without its partner, which Python strings and JSON escapes such as
``"\\ud800"`` can carry), ``jsonb`` refuses the escapes ``\\u0000`` and a lone ``\\udXXX``, and JSON has
no NaN or Infinity. One such character in a processor's result, error or progress message used to make
the very write that records the job's outcome fail. Rules:

* **input** is checked before it is stored: a NUL or a lone surrogate anywhere (value or key, at any
  depth), a non-finite number or absurd nesting → 422 naming the field path
  (``input_data.items[2].name``); more than ``JOB_MAX_INPUT_BYTES`` of JSON → 413 with the limit;
* **everything else** (results, errors, progress, event data, audit details, outbox payloads) is never
  refused: every write goes through :func:`storable` — directly, or through :func:`json_text`,
  :func:`storable_json`, :func:`result_json` and :func:`cap_text`, which use it — so the status
  transition itself cannot fail because of data. NUL and lone surrogates become U+FFFD (the Unicode
  replacement character, which is what a reader sees for text that could not be kept), also in keys;
  non-finite numbers and integers too long for JSON become ``null``; anything else that is not JSON
  becomes its ``str()``.
"""

from __future__ import annotations

import json
import math
import re
import sys
import unicodedata
from typing import Any

from app.errors import BadInput, TooLarge
from app.formatting import format_sizes

NUL = "\x00"
REPLACEMENT = "\ufffd"
ERROR_CAP_BYTES = 64 * 1024
"""``error_message`` is cut to this many UTF-8 bytes."""
RESULT_CAP_BYTES = 4 * 1024 * 1024
"""A ``result_data`` larger than this is replaced by a note saying so."""
MAX_DEPTH = 64
"""Deepest nesting accepted in ``input_data``."""
STORABLE_MAX_DEPTH = 200
"""Deeper values (or a structure that contains itself) are stored as a note: JSON encoding recurses once
per level, and an unbounded depth would make the write that records an outcome fail."""
MAX_INT_BITS = 14_000
"""Larger integers have more digits than Python writes as JSON (4,300): they are stored as ``null``."""

NUL_PROBLEM = "contains a NUL character (U+0000), which cannot be stored"
SURROGATE_PROBLEM = "contains a lone surrogate (U+D800 to U+DFFF), which is not valid text"
_IN_NAME = {
    NUL_PROBLEM: "has a NUL character (U+0000) in its name, which cannot be stored",
    SURROGATE_PROBLEM: "has a lone surrogate (U+D800 to U+DFFF) in its name, which is not valid text",
}

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_BAD = re.compile(r"\\u0000|\\u[dD][89a-fA-F]")
_TOO_DEEP = "[nested too deeply to store]"


def _unstorable_json(text: str) -> bool:
    """Whether JSON text may hold what ``jsonb`` refuses: a raw or escaped NUL or surrogate, NaN or
    Infinity. A match inside an innocent string only costs a second look; substring tests first, as a
    regular expression over a large result is several times slower."""
    if "\\u" in text and _ESCAPED_BAD.search(text) is not None:
        return True
    if "NaN" in text or "Infinity" in text or NUL in text:
        return True
    return not text.isascii() and _BAD_CHAR.search(text) is not None


unstorable_json = _unstorable_json
"""For callers that have JSON text from elsewhere (pydantic's own encoder) and must check it."""


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as it is (:data:`NUL_PROBLEM`, :data:`SURROGATE_PROBLEM`), or
    ``None`` — for checks that refuse input with a message naming the field."""
    bad = _BAD_CHAR.search(text)
    if bad is None:
        return None
    return NUL_PROBLEM if bad.group() == NUL else SURROGATE_PROBLEM


_BLANK_LOOKING = frozenset("\u034f\u115f\u1160\u2800\u3164\uffa0")
"""Characters that are neither spaces nor format characters yet show nothing: the combining grapheme
joiner, the Hangul fillers, the blank Braille pattern."""


def blank(text: str) -> bool:
    """Whether ``text`` shows nothing: only spaces, control and invisible format characters (a zero-width
    space U+200B, a direction override U+202E, a byte-order mark U+FEFF, …), variation selectors and
    :data:`_BLANK_LOOKING`. A tag or a rejection's reason made of them read as empty where it is shown, yet
    was taken as given: every check that refuses an empty one asks this, with the empty one's words."""
    return all(
        ch.isspace()
        or unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp")
        or ch in _BLANK_LOOKING
        or "\ufe00" <= ch <= "\ufe0f"
        or "\U000e0100" <= ch <= "\U000e01ef"
        for ch in text
    )


def storable_text(text: str) -> str:
    """``text`` with each NUL and each lone surrogate replaced by U+FFFD; a surrogate pair held as two
    code points becomes its one character. Unchanged (the same object) when there is nothing to do."""
    if text.isascii():
        return text.replace(NUL, REPLACEMENT) if NUL in text else text
    if _BAD_CHAR.search(text) is None:
        return text
    text = text.replace(NUL, REPLACEMENT)
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def storable(value: Any, _depth: int = 0) -> Any:
    """``value`` made storable in PostgreSQL (``text`` or ``jsonb``), recursively for JSON: every string
    and key through :func:`storable_text`, non-finite floats and integers too long for JSON → ``None``,
    tuples → lists, keys that are not strings → their ``str()``, anything else → its ``str()``.
    Never raises."""
    if isinstance(value, str):
        return storable_text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= MAX_INT_BITS else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if _depth >= STORABLE_MAX_DEPTH:
        return _TOO_DEEP
    if isinstance(value, dict):
        return {storable_text(str(k)): storable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v, _depth + 1) for v in value]
    try:
        shown = str(value)
    except Exception:  # a broken __str__ must not stop the write
        shown = f"<{type(value).__name__}>"
    return storable_text(shown)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None where the C accelerator is missing
_C_ENCODE = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def _dumps(value: Any) -> str:
    """Compact JSON text of ``value``; raises for NaN, Infinity and types JSON does not know. The C
    encoder is made once: ``json.dumps`` with options builds a new one on every call, which costs more
    than encoding a small input. It keeps no record of the containers it is in (that record is also
    rebuilt per call), so a structure that contains itself ends in ``RecursionError``, which every
    caller handles as it handles any value it cannot encode."""
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


def json_text(value: Any) -> str:
    """Compact JSON text of ``value`` for a ``jsonb`` parameter, always storable: a value that is not
    (NUL or lone surrogates, non-finite numbers, types JSON does not know) is passed through
    :func:`storable` first. The common case costs one encoding and one scan of the text."""
    try:
        text = _dumps(value)
    except (TypeError, ValueError, RecursionError):
        return _dumps(storable(value))
    if _unstorable_json(text):
        return _dumps(storable(value))
    return text


def storable_json(text: str | None) -> str | None:
    """JSON text made storable (see :func:`json_text`), for callers that hand JSON over as text: parsed
    and written again only when it holds something ``jsonb`` refuses; text that is not JSON at all is
    stored as a JSON string. ``None`` stays ``None``."""
    if text is None or not _unstorable_json(text):
        return text
    try:
        value = json.loads(text, strict=False)
    except (ValueError, RecursionError):
        value = text
    return json_text(value)


def _shown_key(key: str) -> str:
    """A key as it appears in a field path: a NUL or a lone surrogate written as its escape, so that the
    message naming it can itself be sent and stored."""
    return _BAD_CHAR.sub(lambda m: f"\\u{ord(m.group()):04x}", key)


def _path(base: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)


def _find_problem(value: Any, path: str, depth: int, max_depth: int = MAX_DEPTH) -> tuple[str, str] | None:
    if depth > max_depth:
        return path, f"is nested more than {max_depth} levels deep"
    if isinstance(value, str):
        return (path, problem) if (problem := text_problem(value)) else None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, "must be a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return path, "has a key that is not text"
            if problem := text_problem(k):
                return _path(path, _shown_key(k)), _IN_NAME[problem]
            found = _find_problem(v, _path(path, k), depth + 1, max_depth)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _find_problem(v, _path(path, i), depth + 1, max_depth)
            if found:
                return found
        return None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _long_int_problem(value, path)
    return path, f"has a value of type {type(value).__name__}, which is not JSON"


def _long_int_problem(value: int, path: str) -> tuple[str, str] | None:
    """A whole number Python will not write as JSON (more than ``sys.get_int_max_str_digits()`` digits):
    refused as the JSON API's decoder refuses it, never stored as ``null`` (:func:`storable`)."""
    if value.bit_length() <= MAX_INT_BITS:
        return None
    try:
        str(value)
    except ValueError:
        most = sys.get_int_max_str_digits()
        return (
            path,
            f"is a whole number of more than {most:,} digits, which cannot be stored (send it as text)",
        )
    return None


def find_problem(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first value or key in ``value`` that cannot be stored as it is, as ``(field path, why)``:
    a NUL or a lone surrogate, a non-finite number, a type JSON does not know; ``None`` if there is
    none. Used for job input (with its depth limit, by :func:`check_input`) and for whole request
    bodies (the web layer's JSON check)."""
    return _find_problem(value, path, 0, STORABLE_MAX_DEPTH)


def _plain_json(value: dict[str, Any]) -> str | None:
    """The JSON text of ``value`` when one encoding shows that the walk of :func:`_find_problem` could
    find nothing, else ``None`` (walk it). A bulk enqueue checks thousands of small inputs, and the
    encoding is needed anyway, for the size limit.

    Why that is enough: the encoder refuses NaN, Infinity and types JSON does not know; a NUL or a lone
    surrogate, in a value or a key, shows in the text (see :func:`_unstorable_json`); nesting cannot be
    deeper than the number of opening brackets; and a key that is not text, which the encoder would
    silently turn into text, can only be at the top level when the text has a single ``{``."""
    try:
        text = _dumps(value)
    except (TypeError, ValueError, RecursionError):
        return None
    if _unstorable_json(text) or text.count("{") != 1 or text.count("[") >= MAX_DEPTH:
        return None
    if not all(type(k) is str for k in value):
        return None
    return text


def check_input(input_data: Any, max_bytes: int, *, field: str = "input_data") -> str:
    """Validate ``input_data`` for storage and return its JSON text.

    Raises:
        BadInput: not an object, a NUL character or a lone surrogate (in a value or a key), a non-finite
            number, a whole number too long to write as JSON, or nesting deeper than :data:`MAX_DEPTH`;
            the message and ``errors`` name the field path.
        TooLarge: the JSON text is larger than ``max_bytes`` (``JOB_MAX_INPUT_BYTES``).
    """
    if not isinstance(input_data, dict):
        raise BadInput.field(field, "must be a JSON object")
    text = _plain_json(input_data)
    if text is None:
        problem = _find_problem(input_data, field, 0)
        if problem:
            raise BadInput.field(*problem)
        text = json_text(input_data)
    size = len(text.encode())
    if size > max_bytes:
        said, most = format_sizes(size, max_bytes)
        raise TooLarge(
            f"{field} is {said}; the limit is {most} (JOB_MAX_INPUT_BYTES). "
            "Upload large data as a file and pass its id instead.",
            field=field,
        )
    return text


def check_text(value: str | None, field: str) -> None:
    """Refuse a text field (a title, a name, a reason) that cannot be stored as it is.

    Raises:
        BadInput: a NUL character or a lone surrogate, naming ``field``.
    """
    if value is not None and (problem := text_problem(value)):
        raise BadInput.field(field, problem)


def result_json(result: Any) -> str:
    """JSON text for ``result_data``: storable, and replaced by a note past :data:`RESULT_CAP_BYTES`."""
    text = json_text(result)
    size = len(text.encode())
    if size > RESULT_CAP_BYTES:
        said, most = format_sizes(size, RESULT_CAP_BYTES)
        text = json_text(
            {
                "truncated": True,
                "note": f"the result was {said}; results above {most} are not stored — save large output "
                "as a file",
            }
        )
    return text


_MARKER = re.compile(r"…\[truncated, (\d+) bytes\]$")


def cap_text(text: str | None, limit: int = ERROR_CAP_BYTES) -> str | None:
    """``text`` made storable (:func:`storable_text`) and at most ``limit`` UTF-8 bytes plus a marker
    ``…[truncated, N bytes]`` (N = the original size in bytes). ``None`` stays ``None``. Capping an
    already capped text keeps the first marker's N (the worker and the queue both cap an error)."""
    if text is None:
        return None
    text = storable_text(str(text))
    if len(text) * 4 <= limit:  # fast path: cannot exceed the limit
        return text
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    original = len(raw)
    found = _MARKER.search(text[-64:])
    if found:
        original = int(found.group(1))
        raw = raw[: len(raw) - len(found.group(0).encode())]
        if len(raw) <= limit:
            return text
    head = raw[:limit].decode("utf-8", errors="ignore")
    return f"{head}…[truncated, {original} bytes]"
