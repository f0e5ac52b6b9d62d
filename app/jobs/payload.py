"""Limits of job data: what may go into ``jsonb``/``text`` columns, and the one shared sanitiser.

PostgreSQL ``jsonb`` and ``text`` cannot hold U+0000, and an unbounded error text or payload can make
the very write that records a job's outcome fail — so the job never finishes. Rules:

* input is checked before insert: a NUL anywhere (value or key, at any depth) → 422 naming the field path
  (``input_data.items[2].name``); non-finite numbers and absurd nesting → 422; more than
  ``JOB_MAX_INPUT_BYTES`` of JSON → 413 with the limit in the message;
* output (result data, error text, progress messages) is never refused: :func:`sanitize` replaces each NUL
  with U+FFFD and non-finite numbers with ``null``, and :func:`cap_text` truncates text to a fixed cap
  with a ``…[truncated, N bytes]`` marker, so the status transition itself cannot fail because of data.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from app.errors import BadInput, TooLarge, format_bytes

NUL = "\x00"
REPLACEMENT = "\ufffd"
ERROR_CAP_BYTES = 64 * 1024
"""``error_message`` is cut to this many UTF-8 bytes."""
RESULT_CAP_BYTES = 4 * 1024 * 1024
"""A ``result_data`` larger than this is replaced by a note saying so."""
MAX_DEPTH = 64
"""Deepest nesting accepted in ``input_data``."""


def json_text(value: Any) -> str:
    """Compact JSON text, as stored in ``jsonb`` parameters."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _path(base: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)


def _find_problem(value: Any, path: str, depth: int) -> tuple[str, str] | None:
    if depth > MAX_DEPTH:
        return path, f"is nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, str):
        if NUL in value:
            return path, "contains a NUL character (U+0000), which cannot be stored"
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return path, "must be a finite number"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return path, "has a key that is not text"
            if NUL in k:
                return _path(path, k.replace(NUL, "\\u0000")), "has a NUL character (U+0000) in its name"
            found = _find_problem(v, _path(path, k), depth + 1)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _find_problem(v, _path(path, i), depth + 1)
            if found:
                return found
        return None
    if value is None or isinstance(value, bool | int):
        return None
    return path, f"has a value of type {type(value).__name__}, which is not JSON"


def check_input(input_data: Any, max_bytes: int, *, field: str = "input_data") -> str:
    """Validate ``input_data`` for storage and return its JSON text.

    Raises:
        BadInput: not an object, a NUL character, a non-finite number, or nesting deeper than
            :data:`MAX_DEPTH`; the message and ``errors`` name the field path.
        TooLarge: the JSON text is larger than ``max_bytes`` (``JOB_MAX_INPUT_BYTES``).
    """
    if not isinstance(input_data, dict):
        raise BadInput.field(field, "must be a JSON object")
    problem = _find_problem(input_data, field, 0)
    if problem:
        raise BadInput.field(*problem)
    text = json_text(input_data)
    size = len(text.encode())
    if size > max_bytes:
        raise TooLarge(
            f"{field} is {format_bytes(size)}; the limit is {format_bytes(max_bytes)} (JOB_MAX_INPUT_BYTES). "
            "Upload large data as a file and pass its id instead."
        )
    return text


def sanitize(value: Any) -> Any:
    """``value`` made storable: NUL → U+FFFD in every string and key, non-finite floats → ``None``,
    tuples → lists, anything else that is not JSON → its ``str()``. Never raises."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT) if NUL in value else value
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {sanitize(str(k)): sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    return sanitize(str(value))


def result_json(result: Any) -> str:
    """JSON text for ``result_data``: sanitised, and replaced by a note past :data:`RESULT_CAP_BYTES`."""
    try:
        text = json_text(result)
        if "\\u0000" in text:  # a real NUL (or the escaped text; sanitize() only changes real ones)
            text = json_text(sanitize(result))
    except (TypeError, ValueError, RecursionError):
        try:
            text = json_text(sanitize(result))
        except RecursionError:
            text = json_text({"error": "the result was nested too deeply to store"})
    size = len(text.encode())
    if size > RESULT_CAP_BYTES:
        text = json_text(
            {
                "truncated": True,
                "note": f"the result was {format_bytes(size)}; results above "
                f"{format_bytes(RESULT_CAP_BYTES)} are not stored — save large output as a file",
            }
        )
    return text


_MARKER = re.compile(r"…\[truncated, (\d+) bytes\]$")


def cap_text(text: str | None, limit: int = ERROR_CAP_BYTES) -> str | None:
    """``text`` without NUL characters and at most ``limit`` UTF-8 bytes plus a marker
    ``…[truncated, N bytes]`` (N = the original size in bytes). ``None`` stays ``None``. Capping an
    already capped text keeps the first marker's N (the worker and the queue both cap an error)."""
    if text is None:
        return None
    if NUL in text:
        text = text.replace(NUL, REPLACEMENT)
    if len(text) * 4 <= limit:  # fast path: cannot exceed the limit
        return text
    raw = text.encode("utf-8", errors="replace")
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
