"""``/api/users``: account administration through the API (admins only).

* ``POST /api/users/{id}/unlock`` — lift the sign-in limits on an account at once: its failed sign-ins
  are forgotten (:mod:`app.signin`), with an audit entry and an admin notice. Answers
  ``{"id", "email", "failures_cleared"}``; 404 for an unknown id, 409 "Nothing changed" when it has no failed
  sign-ins to forget (audited as refused, as every no-op of an admin action is).
* ``POST /api/users/{id}/reset-password`` — answers 403 saying where to do it: a one-time password is a
  credential for another account, so it is handed out only to an admin signed in with their password
  (**Reset password** on ``/admin/users``; :func:`app.tokens.require_signed_in_browser`). A stolen token
  could otherwise take over any account, an admin's too, for longer than the token lives. The route
  keeps its path so that a script that used it reads why.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, post
from litestar.params import FromPath

from app.actions import users as user_actions
from app.auth import requires_admin
from app.web import DbSession
from app.web.openapi import errors


class UsersApiController(Controller):
    """Admin actions on accounts, for scripts and the command line's peers."""

    path = "/api/users"
    guards = [requires_admin]
    tags = ["users"]

    @post(
        "/{user_id:int}/unlock",
        name="api.users.unlock",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
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
        responses=errors(401, 403, 404),
        status_code=200,
    )
    async def reset_password(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> dict[str, Any]:
        """Refused (403) with a token, which every API request is: reset a password on the users page
        (/admin/users), signed in with your password. A one-time password is a credential for another
        account, so a stolen token must not be able to obtain one."""
        client = request.client.host if request.client else None
        done = await user_actions.reset_password(db_session, request.user, user_id, ip=client)
        return {
            "id": done.user_id,
            "email": done.email,
            "password": done.password,
            "sessions_ended": done.sessions_ended,
        }
