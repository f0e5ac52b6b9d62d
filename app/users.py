"""Account administration: the list of users with their live API tokens and sign-in locks, granting and
revoking admin rights, disabling and enabling an account. Credentials themselves (passwords, API tokens, browser
sessions, sign-in) live in :mod:`app.auth`.

Functions take an ``AsyncConnection`` or an ``AsyncSession`` and never commit: the caller's transaction
also holds the audit entry of the change, so both commit together or not at all.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping

from app.auth import Db
from app.errors import NotFound
from app.signin import locked_emails

USERS_LIMIT = 500
"""At most this many users are listed on one page (ordered by email); the next page starts after the
last email shown (keyset paging: any page costs one index range scan)."""
MAX_ID = 2**31 - 1
"""User and token ids are PostgreSQL ``integer``s: a larger number names no row (and cannot be sent)."""

USERS = text(
    """
    SELECT u.id, u.email, u.is_admin, u.is_active, u.created_at, u.last_sign_in_at, u.must_change_password,
           (SELECT count(*) FROM web_sessions s WHERE s.user_id = u.id AND s.expires_at > now()) AS sessions
    FROM users u WHERE u.email > :after ORDER BY u.email LIMIT :limit
    """
)
TOKENS = text(
    """
    SELECT id, user_id, name, prefix, created_at, last_used_at, expires_at FROM api_tokens
    WHERE revoked_at IS NULL AND user_id = ANY(CAST(:ids AS int[])) ORDER BY id
    """
)
USER_BY_ID = text("SELECT id, email, is_admin, is_active FROM users WHERE id = :id")
USER_BY_ID_LOCKED = text(f"{USER_BY_ID.text} FOR NO KEY UPDATE")
SET_ADMIN = text("UPDATE users SET is_admin = :v WHERE id = :id")
SET_ACTIVE = text("UPDATE users SET is_active = :v WHERE id = :id")
END_SESSIONS = text(
    "WITH ended AS (DELETE FROM web_sessions WHERE user_id = :id RETURNING 1) SELECT count(*) FROM ended"
)
TOKEN_OWNER = text("SELECT user_id FROM api_tokens WHERE id = :id AND revoked_at IS NULL")
EMAILS = text("SELECT id, email FROM users WHERE id = ANY(CAST(:ids AS int[]))")
DISABLED_AMONG = text("SELECT id FROM users WHERE id = ANY(CAST(:ids AS int[])) AND NOT is_active")


async def list_users(db: Db, limit: int = USERS_LIMIT, *, after: str = "") -> list[dict[str, Any]]:
    """Users by email (at most ``limit``, those whose email sorts after ``after``), each with
    ``last_sign_in_at``, ``must_change_password``, ``sessions`` (live browser sessions), ``tokens`` (their
    live API tokens, without secrets) and ``locked_failures`` (recent failed sign-ins when a limit now
    refuses the account, from every address or from one; else 0)."""
    params = {"limit": limit, "after": (after or "").replace("\x00", "")[:254]}
    users = [dict(r) for r in (await db.execute(USERS, params)).mappings().all()]
    tokens: dict[int, list[Any]] = {}
    locked: dict[str, int] = {}
    if users:
        for t in (await db.execute(TOKENS, {"ids": [u["id"] for u in users]})).mappings().all():
            tokens.setdefault(t["user_id"], []).append(t)
        locked = await locked_emails(db, [u["email"] for u in users])
    for u in users:
        u["tokens"] = tokens.get(u["id"], [])
        u["locked_failures"] = locked.get(u["email"], 0)
    return users


async def get_user(db: Db, user_id: int, *, lock: bool = False) -> RowMapping:
    """``id, email, is_admin, is_active`` of one user; with ``lock``, the row locked until the transaction
    ends, for a change decided on what it reads (the same change sent twice at once then sees the first
    one's outcome). ``NO KEY UPDATE``: the user's own submissions, which only point at the row, go on.

    Raises:
        NotFound: no such user.
    """
    row = None
    if 0 < user_id <= MAX_ID:
        query = USER_BY_ID_LOCKED if lock else USER_BY_ID
        row = (await db.execute(query, {"id": user_id})).mappings().first()
    if row is None:
        raise NotFound(f"No user with id {user_id}.")
    return row


async def emails_of(db: Db, user_ids: list[int]) -> dict[int, str]:
    """``{id: email}`` of the given users (unknown ids are left out)."""
    if not user_ids:
        return {}
    return {r["id"]: r["email"] for r in (await db.execute(EMAILS, {"ids": user_ids})).mappings()}


async def disabled_among(db: Db, user_ids: list[int]) -> set[int]:
    """The ids among ``user_ids`` whose accounts are disabled."""
    if not user_ids:
        return set()
    return set((await db.execute(DISABLED_AMONG, {"ids": user_ids})).scalars())


async def set_admin(db: Db, user_id: int, is_admin: bool) -> None:
    """Grant or revoke admin rights; they apply from the user's next request."""
    await db.execute(SET_ADMIN, {"v": is_admin, "id": user_id})


async def set_active(db: Db, user_id: int, active: bool) -> int:
    """Enable or disable an account; returns how many browser sessions ended. Disabling signs the user
    out everywhere at once (their sessions are deleted); sign-in and their API tokens are refused while
    disabled, because both lookups require ``is_active``."""
    await db.execute(SET_ACTIVE, {"v": active, "id": user_id})
    if active:
        return 0
    return int((await db.execute(END_SESSIONS, {"id": user_id})).scalar_one())


async def token_owner(db: Db, token_id: int) -> int | None:
    """The user id owning the live API token ``token_id``, or ``None``."""
    if not 0 < token_id <= MAX_ID:
        return None
    return (await db.execute(TOKEN_OWNER, {"id": token_id})).scalar()
