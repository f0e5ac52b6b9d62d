"""``/api/users``: account administration through the API (admins only).

* ``POST /api/users/{id}/unlock`` — lift the sign-in limits on an account at once: its failed sign-ins
  are forgotten (:mod:`app.signin`), with an audit entry and an admin notice. Answers
  ``{"id", "email", "failures_cleared"}``; 404 for an unknown id.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, post
from litestar.params import FromPath

from app.actions import users as user_actions
from app.auth import requires_admin
from app.web import DbSession
from app.web.api.openapi import errors


class UsersApiController(Controller):
    """Admin actions on accounts, for scripts and the command line's peers."""

    path = "/api/users"
    guards = [requires_admin]
    tags = ["users"]

    @post("/{user_id:int}/unlock", name="api.users.unlock", responses=errors(401, 403, 404), status_code=200)
    async def unlock(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> dict[str, Any]:
        """Let the user sign in again at once: forget their recent failed sign-ins from every address."""
        client = request.client.host if request.client else None
        done = await user_actions.unlock_sign_in(db_session, request.user, user_id, ip=client)
        return {"id": done.user_id, "email": done.email, "failures_cleared": done.cleared}
