"""``/admin/schedules``: periodic jobs and pipelines (admins only).

* ``GET /admin/schedules`` — every schedule (made here, through the API, or defined in code) with its
  next and last runs, and the picker of a job type or template for a new one (the create and edit forms
  are :mod:`app.web.admin.schedule_form`);
* ``POST /admin/schedules/{id}/{enable,disable,delete}`` — a schedule defined in code cannot be deleted
  while it is enabled or the code declares it (409: disable it instead, or remove it from the code); one
  whose owner's account is disabled cannot be enabled (409), and one already enabled (disabled) is not
  enabled (disabled) again (409 "Nothing changed", audited as refused).

The changes themselves, their audit entries and admin notices are :mod:`app.actions.schedules`.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from app import auth
from app.actions import schedules as schedule_actions
from app.errors import Conflict
from app.web import DbSession, flash, render
from app.web.admin.schedule_form import refused, schedules_context
from app.web.deps import client_ip


class SchedulesController(Controller):
    """``/admin/schedules`` (see the module docstring); admins only."""

    path = "/admin/schedules"
    guards = [auth.requires_admin]
    include_in_schema = False

    @get("/", name="admin.schedules")
    async def schedules_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
    ) -> Template:
        """Schedules (code and UI) with next and last runs, and the picker that opens the create form."""
        ctx = await schedules_context(db_session)
        return render(request, "admin/schedules.html", ctx)

    @post(
        ["/{schedule_id:str}/enable", "/{schedule_id:str}/disable"],
        name="admin.schedules.enable",
        status_code=303,
    )
    async def enable_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template | Redirect:
        """Enable (next run computed from now, no back-fill) or disable a schedule; enabling one whose
        owner's account is disabled, or one already as asked, answers 409 with the reason on the list."""
        enabled = request.url.path.rstrip("/").endswith("/enable")
        try:
            row = await schedule_actions.set_enabled(
                db_session, request.user, schedule_id, enabled, ip=client_ip(request)
            )
        except Conflict as exc:
            return await refused(db_session, request, exc)
        state = "enabled" if enabled else "disabled"
        return flash.redirect(request, "/admin/schedules", f"Schedule {row['name']!r} {state}.")

    @post("/{schedule_id:str}/delete", name="admin.schedules.delete", status_code=303)
    async def delete_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template | Redirect:
        """Delete a UI schedule; a code-defined one answers 409 with the rule (disable it instead)."""
        try:
            row = await schedule_actions.delete_schedule(
                db_session, request.user, schedule_id, ip=client_ip(request)
            )
        except Conflict as exc:
            return await refused(db_session, request, exc)
        return flash.redirect(request, "/admin/schedules", f"Schedule {row['name']!r} deleted.")
