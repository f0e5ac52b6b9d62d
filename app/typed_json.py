"""JSON that a person typed into a field (a request's body, a spreadsheet cell): read so that text nested
deeper than Python's parser goes is refused like any other text that is not JSON.

``json.loads`` raises ``RecursionError``, not ``ValueError``, for ``[[[[…`` a few thousand levels deep:
a field check that caught only ``ValueError`` let it out of pydantic's validation, a 500 at submission,
and out of a processor, a job retried as if the next attempt could read it."""

from __future__ import annotations

import json
from typing import Any

TOO_DEEP = "it is nested too deeply to read; flatten it"


def parse(text: str | bytes) -> Any:
    """``text`` read as JSON.

    Raises:
        ValueError: it is not JSON (a :class:`json.JSONDecodeError`), or is nested deeper than the
            parser goes (:data:`TOO_DEEP`).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
