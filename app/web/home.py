"""The home page ``/``: first-run instructions, or the catalogue of what a signed-in user can start

The catalogue lists registered job types grouped by their ``group`` and the pipeline templates, each with
its title, one-line description and a link to its form. Diagnostic types and templates (``noop``,
``sleep``, ``fail``, …) are shown to admins only: :mod:`app.actions.access` decides, as for every path
that starts work.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any
from urllib.parse import quote

from litestar import Controller, Request, get
from litestar.response import Redirect, Template

from app.actions import access
from app.actions.pipelines import startable_templates
from app.auth import any_user_exists, login_url
from app.web import DbSession, current_user, render
from app.web.deps import settings_of

FIRST_ADMIN_COMMAND = "jobdesk create-user you@example.com --admin"
DIAGNOSTIC_GROUP = "Diagnostics"


def catalogue(user: Any) -> list[dict[str, Any]]:
    """``[{"name": group, "diagnostic": bool, "entries": [{"title", "description", "url", "kind"}]}]``:
    job types by group (alphabetical, diagnostic groups last), then pipeline templates by group."""
    groups: dict[tuple[bool, str], list[dict[str, Any]]] = {}
    for spec in access.submittable_types(user):
        group = spec.group if not spec.diagnostic or spec.group != "General" else DIAGNOSTIC_GROUP
        groups.setdefault((spec.diagnostic, group), []).append(
            {
                "title": spec.title,
                "description": spec.description,
                "url": "/jobs/new/" + quote(spec.type, safe=""),
                "kind": "job",
                "diagnostic": spec.diagnostic,
            }
        )
    for tpl in startable_templates(user):
        groups.setdefault((tpl.diagnostic, tpl.group), []).append(
            {
                "title": tpl.title,
                "description": tpl.description,
                "url": "/pipelines/new/" + quote(tpl.name, safe=""),
                "kind": "pipeline",
                "steps": len(tpl.steps),
                "steps_note": tpl.steps_note,
                "diagnostic": tpl.diagnostic,
            }
        )
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1].lower()))
    return [
        {
            "name": name,
            "diagnostic": diagnostic,
            "entries": sorted(entries, key=lambda e: (e["kind"] != "job", e["title"].lower())),
        }
        for (diagnostic, name), entries in ordered
    ]


class HomeController(Controller):
    """``GET /``."""

    include_in_schema = False

    @get("/", name="home")
    async def home(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Signed in: the "Start a job" catalogue. Signed out: the sign-in page — unless no user exists
        yet, in which case the page says exactly how to create the first administrator."""
        user = current_user(request)
        if user is None:
            if await any_user_exists(db_session):
                return Redirect(login_url("/"), status_code=303)
            # A server on DATABASE_URL: the command without it creates the account in the embedded
            # database, and signing in here then fails. The address itself is not shown (no one is
            # signed in to see it).
            own_database = bool(settings_of(request).database_url)
            return render(
                request,
                "home.html",
                {"first_run": True, "command": FIRST_ADMIN_COMMAND, "own_database": own_database},
            )
        return render(request, "home.html", {"first_run": False, "groups": catalogue(user)})
