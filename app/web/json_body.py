"""JSON request bodies with text that cannot be stored: a 422 naming the field, before any handler.

The JSON decoder refuses an escaped lone surrogate (``"\\ud800"``) with a message about the body being
"truncated" (a 400 that names nothing), and accepts an escaped NUL (``"\\u0000"``) that no ``text`` or
``jsonb`` column can hold. :class:`JsonBodyRequest` (the app's request class) looks again at such a
body — only when its bytes show one of those escapes, so an ordinary body costs one scan — and refuses
it with :class:`~app.errors.BadInput` naming the path of the offending value or key
(``input_data.name``, ``steps[1].input_data.items[0]``), found by the same walk that checks job input
(:func:`app.jobs.payload.find_problem`). A number the decoder refuses as out of its range (a whole
number of thousands of digits, or ``1e400``: a 400 naming ``$[...]``) is refused the same way, naming its path. The domain refuses the same input again on every other path
(pipelines, schedules, next jobs, the Python API); query strings and forms are checked by
:mod:`app.web.input_guard`. A body is then held against the fields its route declares
(:mod:`app.web.body_fields`): an unknown field, or text where a number or a flag belongs, is a 422. An
object giving a key twice, which the decoder reads as its last value, is a 422 naming the key and its
path (:func:`app.typed_json.duplicate_key`).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from litestar import Request
from litestar.exceptions import SerializationException

from app import typed_json
from app.errors import AppError, BadInput
from app.jobs.payload import find_problem
from app.web.body_fields import refuse_mismatch

_FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")
_SUSPECT = re.compile(rb"\\u0000|\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""An escaped NUL, an escaped surrogate (a valid pair matches too, and passes the second look), or a
surrogate written as (invalid) UTF-8."""


def refuse_unstorable(value: Any) -> None:
    """Raises:
    BadInput: ``value`` (a decoded JSON body) holds a NUL or a lone surrogate, naming its path.
    """
    found = find_problem(value)
    if found is not None:
        raise BadInput.field(*found)


class _Huge(str):
    """A number the JSON decoder refuses as out of range, as its text, found again by :func:`_huge_number`:
    a whole number of more digits than Python turns into an int (``sys.get_int_max_str_digits()``,
    4,300), or one beyond the largest float (``1e400``)."""


def _whole(text: str) -> int | _Huge:
    try:
        return int(text)
    except ValueError:
        return _Huge(text)


def _real(text: str) -> float | _Huge:
    value = float(text)
    return value if math.isfinite(value) else _Huge(text)


def _huge_number(value: Any, path: str) -> tuple[str, str] | None:
    """The path of the first number in ``value`` the decoder refuses (``input_data.n``) and its text."""
    if isinstance(value, _Huge):
        return path or "body", str(value)
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for p, v in items if (found := _huge_number(v, p)) is not None), None)


def _refuse_huge_numbers(body: bytes) -> None:
    """A body the decoder refused for a number out of its range, decoded again by the standard library
    (which keeps them, marked): refused naming the number's path.

    Raises:
        BadInput: on the number's path, saying what range numbers have.
    """
    try:
        value = json.loads(body, parse_int=_whole, parse_float=_real)
    except (ValueError, RecursionError):
        return  # malformed for another reason: the decoder's own answer stands
    found = _huge_number(value, "")
    if found is None:
        return
    path, text = found
    shown = text if len(text) <= 24 else f"{text[:12]}…{text[-6:]} ({len(text):,} characters)"
    if any(c in text for c in ".eE"):
        why = "numbers go up to about 1.8e308"
    else:
        why = f"a whole number has at most {sys.get_int_max_str_digits():,} digits"
    raise BadInput.field(path, f"the number {shown} is out of range: {why} (send a larger one as text)")


def _refuse_undecodable(body: bytes) -> None:
    """A body the JSON decoder refused, decoded again by the standard library, which keeps lone
    surrogates: refused naming the path when that is what was wrong with it.

    Raises:
        BadInput: see :func:`refuse_unstorable`.
    """
    try:
        value = json.loads(body.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return  # malformed for another reason: the decoder's own answer stands
    refuse_unstorable(value)


BOM = b"\xef\xbb\xbf"
"""UTF-8's byte order mark, which some editors and Windows tools write before JSON text; RFC 8259 lets a
reader ignore it, and the decoder refused it as "invalid character (byte 0)"."""

MALFORMED = "the body is not valid JSON ({why}); send a JSON object (Content-Type: application/json)"


def _malformed(exc: SerializationException) -> AppError:
    """A 400 in words for a body the decoder could not read (its own "JSON is malformed: …" kept as the
    reason)."""
    why = str(exc.detail or "").removeprefix("JSON is malformed: ") or "it could not be read"
    return AppError(MALFORMED.format(why=why[:200]))


class JsonBodyRequest(Request[Any, Any, Any]):
    """The request class: :meth:`json` refuses unstorable text as described in the module docstring, and a
    body that does not fit the route's body type (:func:`app.web.body_fields.refuse_mismatch`); a byte
    order mark before a body that is not a form is dropped (:data:`BOM`), and a body that is not JSON is
    a 400 saying to send JSON."""

    async def body(self) -> bytes:
        body = await super().body()
        if body.startswith(BOM) and self.content_type[0] not in _FORMS:
            return body[len(BOM) :]
        return body

    async def json(self) -> Any:
        try:
            value = await super().json()
        except SerializationException as exc:
            body = await self.body()
            if _SUSPECT.search(body):
                _refuse_undecodable(body)
            if "out of range" in str(exc.detail):
                _refuse_huge_numbers(body)
            raise _malformed(exc) from None
        if b"\\u0000" in await self.body():
            refuse_unstorable(value)
        # The decoder keeps the last of a key given twice without a word: read again to find one.
        repeated = typed_json.duplicate_key(await self.body())
        if repeated is not None:
            raise BadInput.field(repeated.path, str(repeated))
        handler = self.scope.get("route_handler")
        field = handler.parsed_data_field if handler is not None else None
        if field is not None:
            # an empty body decodes as None too: only one that is there is refused for it
            refuse_mismatch(
                value, field.annotation, sent=value is not None or bool((await self.body()).strip())
            )
        return value
