"""``POST /admin/users/{id}/release-jobs`` and ``/cancel-jobs``: the buttons on ``/admin/users`` for the
jobs held when an account was disabled (the action is :mod:`app.actions.held_jobs`).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, post
from litestar.params import FromPath
from litestar.response import Redirect

from app import auth
from app.actions.held_jobs import ACTIONS, act_on_held
from app.errors import Conflict
from app.web import DbSession, flash
from app.web.deps import client_ip


class HeldJobsController(Controller):
    """Release or cancel a person's held jobs; answers with ``/admin/users`` and a notice."""

    path = "/admin/users"
    guards = [auth.requires_admin]
    include_in_schema = False

    @post([f"/{{user_id:int}}/{a}" for a in ACTIONS], name="admin.users.held", status_code=200)
    async def held(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> Redirect:
        """Release (they run) or cancel every held job of the user; nothing held → the page says so."""
        name = request.url.path.rstrip("/").rsplit("/", 1)[1]
        try:
            done = await act_on_held(db_session, request.user, user_id, name, ip=client_ip(request))
        except Conflict as exc:
            return flash.redirect(request, "/admin/users", exc.detail, ok=False)
        return flash.redirect(request, "/admin/users", done.message)
