"""The database's clock as this process sees it, and ids made on it.

Job ids are UUIDv7: they carry the moment they were made, and lists, the per-minute limit and the admin
page's created-from filter read that moment from the id (the id is indexed, ``created_at`` is not). Made
on the process's own clock, a web host whose clock is ten minutes slow makes ids ten minutes old: its
jobs sort below older ones and drop out of every other host's per-minute count. So each process keeps
the offset between the database's ``now()`` and its own clock, measured each time it opens a
connection (:func:`observe`; connections are replaced every half hour, so a host clock that was stepped
is caught up with), and :func:`new_id` makes ids on the database's clock.

An offset below :data:`IGNORED_NS` is left alone: a round trip's uncertainty is of that order, and
the library's generator, used then, is faster and strictly increasing by itself.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime

from uuid_utils.compat import uuid7

IGNORED_NS = 1_000_000_000
"""Offsets smaller than this (one second) are not corrected."""

_offset_ns = 0
"""The database's clock minus this process's, when at least :data:`IGNORED_NS` apart; else 0."""
_last = 0
_lock = threading.Lock()


def observe(db_now: datetime, sent_ns: int, received_ns: int) -> None:
    """Record the database's ``now()`` read by a statement sent at ``sent_ns`` and answered at
    ``received_ns`` (``time.time_ns()``): the database read it about halfway between."""
    global _offset_ns
    offset = round(db_now.timestamp() * 1e6) * 1000 - (sent_ns + received_ns) // 2
    _offset_ns = offset if abs(offset) >= IGNORED_NS else 0


def offset_ns() -> int:
    """The correction in use: the database's clock minus this process's (0 when they agree)."""
    return _offset_ns


def db_time() -> datetime:
    """Now, by the database's clock (as last measured)."""
    return datetime.fromtimestamp((time.time_ns() + _offset_ns) / 1e9, UTC)


def new_id() -> uuid.UUID:
    """A UUIDv7 of this moment on the database's clock, greater than every id this process made before
    (so that ``id`` breaks ties in creation order)."""
    global _last
    offset = _offset_ns
    if not offset:
        return uuid7()
    with _lock:
        made = uuid7(nanoseconds=time.time_ns() + offset).int
        _last = made if made > _last else _last + 1
        return uuid.UUID(int=_last)
