"""The home page ``/``: first-run instructions, or the catalogue of things a signed-in user can start
(issue 2 §7–8; the catalogue itself comes with issue 6).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, get
from litestar.response import Redirect, Template

from app.auth import any_user_exists, login_url
from app.web import DbSession, current_user, render

FIRST_ADMIN_COMMAND = "jobdesk create-user you@example.com --admin"


class HomeController(Controller):
    """``GET /``."""

    include_in_schema = False

    @get("/", name="home")
    async def home(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Signed in: the "Start a job" page. Signed out: the sign-in page — unless no user exists yet,
        in which case the page says exactly how to create the first administrator."""
        if current_user(request) is None:
            if await any_user_exists(db_session):
                return Redirect(login_url("/"), status_code=303)
            return render(request, "home.html", {"first_run": True, "command": FIRST_ADMIN_COMMAND})
        return render(request, "home.html", {"first_run": False})
