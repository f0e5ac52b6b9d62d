"""``GET /api/me``: who the bearer token belongs to.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, get

from app.auth import requires_user


@dataclass
class Me:
    """The token's owner."""

    id: int
    email: str
    is_admin: bool


class AccountApiController(Controller):
    """``/api/me``."""

    path = "/api"
    guards = [requires_user]
    tags = ["account"]

    @get("/me", name="api.me")
    async def me(self, request: Request[Any, Any, Any]) -> Me:
        """The user the bearer token belongs to. 401 ``{"detail": …}`` without a valid token."""
        user = request.user
        return Me(id=user.id, email=user.email, is_admin=user.is_admin)
