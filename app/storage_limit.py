"""The storage rule every file stored for a person goes through (uploads on every path, jobs' outputs):
their files together stay within ``USER_MAX_UPLOAD_BYTES``, counted under the person's limits lock
so that concurrent saves cannot together pass it (:func:`check_room`)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

OWNER_LOCK_NAMESPACE = 0x51_07A5
"""First key of the two-key advisory lock on a person's limits (the second is the user id): the lock
:mod:`app.quotas` takes for submissions and uploads, taken here too before a file is counted in."""
OWNER_LOCK = text("SELECT pg_advisory_xact_lock(:ns, :user_id)")
STORED_BY = text("SELECT COALESCE(sum(size), 0) FROM files WHERE user_id = :user_id")


class StorageFull(Exception):
    """Storing ``adding`` more bytes would take the person's files (``stored`` now) above ``limit``
    (``USER_MAX_UPLOAD_BYTES``)."""

    def __init__(self, stored: int, adding: int, limit: int) -> None:
        super().__init__(f"{stored} + {adding} bytes stored would be above the limit of {limit}")
        self.stored, self.adding, self.limit = stored, adding, limit


async def stored_bytes(conn: AsyncConnection, user_id: int) -> int:
    """Bytes of every file the person owns (uploads and results), as ``conn`` sees them."""
    return int((await conn.execute(STORED_BY, {"user_id": user_id})).scalar_one())


async def check_room(conn: AsyncConnection, user_id: int, adding: int, limit: int) -> None:
    """The storage rule, for every file stored for a person (uploads, jobs' results): take the person's
    limits lock for ``conn``'s transaction, so that concurrent saves cannot together pass the limit, then
    refuse ``adding`` bytes that would take their files above ``limit`` (0: no limit).

    Raises:
        StorageFull: with what is stored, what was asked for and the limit.
    """
    if not limit:
        return
    await conn.execute(OWNER_LOCK, {"ns": OWNER_LOCK_NAMESPACE, "user_id": user_id})
    stored = await stored_bytes(conn, user_id)
    if stored + adding > limit:
        raise StorageFull(stored, adding, limit)
