"""What a job's error says to whoever reads it: all of it for admins, the message in words for its
owner (a traceback cut, file paths blanked). The one rule for the pages, the API and callbacks."""

from __future__ import annotations

import re
from typing import Any

_TRACEBACK_START = re.compile(
    r'^[ \t|+]*(?:Exception Group )?Traceback \(most recent call last\):|^[ \t|+]*File "', re.MULTILINE
)
_QUOTED_PATH = re.compile(r"""(['"])(?:/|~/|[A-Za-z]:\\)[^'"\n]*\1""")
UNEXPECTED_ERROR = "It stopped on an unexpected error; an administrator can read the details."


def _is_admin(viewer: Any) -> bool:
    return bool(getattr(viewer, "is_admin", False))


def error_text_for(message: str | None, viewer: Any) -> str | None:
    """A stored error text as ``viewer`` may read it — the one rule for job pages, their fragments and
    the API. Admins read all of it. Anyone else (a job's owner) reads the message in words: when the
    text carries a traceback (an unexpected exception, not a message a processor wrote for people), the
    traceback is cut — its file paths and source lines describe the server, not the job — and quoted
    file paths in the exception's own message become ``'…'``."""
    if not message or _is_admin(viewer):
        return message
    cut = _TRACEBACK_START.search(message)
    if cut is None:
        return message
    head = _QUOTED_PATH.sub(lambda m: m.group(1) + "…" + m.group(1), message[: cut.start()].strip())
    return head or UNEXPECTED_ERROR
