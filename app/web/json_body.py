"""JSON request bodies with text that cannot be stored: a 422 naming the field, before any handler.

The JSON decoder refuses an escaped lone surrogate (``"\\ud800"``) with a message about the body being
"truncated" (a 400 that names nothing), and accepts an escaped NUL (``"\\u0000"``) that no ``text`` or
``jsonb`` column can hold. :class:`JsonBodyRequest` (the app's request class) looks again at such a
body — only when its bytes show one of those escapes, so an ordinary body costs one scan — and refuses
it with :class:`~app.errors.BadInput` naming the path of the offending value or key
(``input_data.name``, ``steps[1].input_data.items[0]``), found by the same walk that checks job input
(:func:`app.jobs.payload.find_problem`). The domain refuses the same input again on every other path
(pipelines, schedules, next jobs, the Python API); query strings and forms are checked by
:mod:`app.web.input_guard`. A body is then held against the fields its route declares
(:mod:`app.web.body_fields`): an unknown field, or text where a number or a flag belongs, is a 422.
"""

from __future__ import annotations

import json
import re
from typing import Any

from litestar import Request
from litestar.exceptions import SerializationException

from app.errors import BadInput
from app.jobs.payload import find_problem
from app.web.body_fields import refuse_mismatch

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


class JsonBodyRequest(Request[Any, Any, Any]):
    """The request class: :meth:`json` refuses unstorable text as described in the module docstring, and a
    body that does not fit the route's body type (:func:`app.web.body_fields.refuse_mismatch`)."""

    async def json(self) -> Any:
        try:
            value = await super().json()
        except SerializationException:
            body = await self.body()
            if _SUSPECT.search(body):
                _refuse_undecodable(body)
            raise
        if b"\\u0000" in await self.body():
            refuse_unstorable(value)
        handler = self.scope.get("route_handler")
        field = handler.parsed_data_field if handler is not None else None
        if field is not None:
            refuse_mismatch(value, field.annotation)
        return value
