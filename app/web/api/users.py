"""``/api/users``: account administration through the API (admins only).

* ``POST /api/users/{id}/unlock`` — lift the sign-in limits on an account at once: its failed sign-ins
  are forgotten (:mod:`app.signin`), with an audit entry and an admin notice. Answers
  ``{"id", "email", "failures_cleared"}``; 404 for an unknown id.
* ``POST /api/users/{id}/reset-password`` — a one-time password (in this answer only) that the user must
  change at their next sign-in; their browser sessions end. Answers ``{"id", "email", "password",
  "sessions_ended"}``; 409 for your own account.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, post
from litestar.params import FromPath

from app.actions import users as user_actions
from app.auth import requires_admin
from app.errors import Conflict
from app.web import DbSession
from app.web.openapi import errors


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

    @post(
        "/{user_id:int}/reset-password",
        name="api.users.reset_password",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def reset_password(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> dict[str, Any]:
        """Give the user a one-time password, returned in this answer only; they must choose a new one at
        their next sign-in. Their browser sessions end; their API tokens keep working."""
        client = request.client.host if request.client else None
        try:
            done = await user_actions.reset_password(db_session, request.user, user_id, ip=client)
        except Conflict:
            await db_session.commit()  # keeps the refusal's audit entry: a 409 is rolled back otherwise
            raise
        return {
            "id": done.user_id,
            "email": done.email,
            "password": done.password,
            "sessions_ended": done.sessions_ended,
        }
