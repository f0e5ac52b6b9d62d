"""List cursors: the one reader of the position every list pages from (keyset pagination).

A list hands out the position of its next page — the API's ``next``, a page's Older link — and takes it
back as ``?after=`` (``?before=`` on the audit trail, the alert deliveries and a history). Each list once read it its own way, and a value it
had not made was shown the first page on some (My jobs, the audit trail) as if it were the page asked
for, and was a 422 on others. :func:`read_cursor` reads every one of them: nothing (or an empty value) is
the first page, and anything the list could not have made is a :class:`~app.errors.BadInput` naming the
parameter, in one wording — a 422 in the API, and the 422 page (or the message beside the filter) a page
answers any value it cannot read with.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from app.errors import BadInput

T = TypeVar("T")

_WHOLE = re.compile(r"[0-9]{1,19}")
MAX_EMAIL = 254


def _id(text: str) -> uuid.UUID:
    return uuid.UUID(text)


_DECODED_PLUS = re.compile(r" ([0-9]{2}:?[0-9]{2})$")


def moment_cursor(at: datetime, rest: object) -> str:
    """``<at>|<rest>`` as a list hands it out in ``next``: the moment in UTC written with ``Z``, so the
    value holds no ``+`` and is passed back as it is pasted into an address (a query string reads ``+``
    as a space, and a ``next`` sent back unchanged was refused as "not a position this list gave")."""
    return f"{at.astimezone(UTC).isoformat().replace('+00:00', 'Z')}|{rest}"


def _moment(text: str) -> tuple[datetime, str]:
    """``<moment with a UTC offset>|<rest>``: the moment read, the rest as text. An offset's ``+`` that a
    query string read as a space (a cursor handed out before they were written with ``Z``) is a ``+``."""
    at, bar, rest = text.partition("|")
    at = _DECODED_PLUS.sub(r"+\1", at)
    since = datetime.fromisoformat(at)
    if not bar or since.tzinfo is None:
        raise ValueError(text)
    # A moment that is past year 9999 (or before year 1) in UTC, such as 9999-12-31T23:59:59-14:00, is
    # read by Python but overflows as the database driver sends it (a 422 that named nothing).
    since.astimezone(UTC)
    return since, rest


def _waiting(text: str) -> tuple[datetime, uuid.UUID]:
    since, jid = _moment(text)
    return since, uuid.UUID(jid)


def _notice(text: str) -> tuple[datetime, int]:
    at, nid = _moment(text)
    return at, _whole(nid, 1)


def _whole(text: str, least: int) -> int:
    if not _WHOLE.fullmatch(text) or not least <= int(text) < 2**63:
        raise ValueError(text)
    return int(text)


def _email(text: str) -> str:
    if len(text) > MAX_EMAIL:
        raise ValueError(text)
    return text


class Cursor(enum.Enum):
    """What a list's cursor is made of: its reader, and where a person finds a good one."""

    ID = "id"
    """Jobs, pipelines, batches (newest first): the id of the last row of the page before."""
    WAITING = "waiting"
    """Steps waiting for a decision (oldest first): ``<waiting since>|<id>``."""
    ENTRY = "entry"
    """The audit trail, the alert deliveries and a job's or pipeline's history (newest first, ``before``): an
    entry's (an event's) id."""
    SEQ = "seq"
    """A job's log: the seq of the last line read (0 or more)."""
    EMAIL = "email"
    """Users, by email: any text up to an email's length sorts among them."""
    NOTICE = "notice"
    """A person's notices (newest first, a folded one moved up to its latest time): ``<at>|<id>``."""


_READERS: dict[Cursor, Any] = {
    Cursor.ID: _id,
    Cursor.WAITING: _waiting,
    Cursor.ENTRY: lambda text: _whole(text, 1),
    Cursor.SEQ: lambda text: _whole(text, 0),
    Cursor.EMAIL: _email,
    Cursor.NOTICE: _notice,
}

_WHERE = {
    Cursor.SEQ: "the seq of the last line you have",
    Cursor.EMAIL: f"an email address (at most {MAX_EMAIL:,} characters)",
}
NOT_A_CURSOR = (
    "is not a position this list gave: pass back {where} unchanged, or leave it out for the first page"
)
"""The words of every refused cursor; ``where`` says where the list gives a good one."""


def cursor_words(kind: Cursor) -> str:
    """What is wrong with a cursor of ``kind`` that cannot be read, as a 422's field message."""
    where = _WHERE.get(kind, "the 'next' of the page before (on a page: its Older link)")
    return NOT_A_CURSOR.format(where=where)


def read_cursor(value: str | None, kind: Cursor, field: str = "after") -> Any:
    """``value`` (a query parameter) read as a cursor of ``kind``: ``None`` for nothing or an empty value
    (the first page); a UUID (``ID``), ``(datetime, UUID)`` (``WAITING``), ``(datetime, int)`` (``NOTICE``), an int (``ENTRY``, ``SEQ``) or
    the text (``EMAIL``).

    Raises:
        BadInput: naming ``field``, :func:`cursor_words`: a value the list could not have made.
    """
    if value is None or value == "":
        return None
    try:
        return _READERS[kind](value)
    except (ValueError, OverflowError):
        raise BadInput.field(field, cursor_words(kind)) from None


def page_of(rows: Sequence[T], limit: int, cursor: Callable[[T], Any]) -> tuple[list[T], Any]:
    """A list's page and the position of the next one, from ``rows`` fetched with ``limit + 1``: the first
    ``limit`` rows, and ``cursor`` of the last of them when a row beyond the page came back (else
    ``None``). The one row more is how a list knows there is a next page: a page that is merely full
    (``len(rows) == limit``) may be the last, and a ``next`` (an Older link) given for it leads to an empty
    page."""
    page = list(rows[:limit])
    return page, cursor(page[-1]) if len(rows) > limit and page else None
