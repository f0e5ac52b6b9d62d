"""``/admin/approvals``: the inbox of every step waiting for a decision, oldest first — what to look at
(the step's result), who is waiting (its owner) and for how long, an Approve button and reject with a
reason per row (htmx: the row goes away once decided; the forms post to
:class:`app.web.approvals.ApprovalsController`). A step whose approvers do not include this admin
says who may decide it instead of offering buttons.

Reads ``ix_jobs_waiting_approval`` in keyset order (``?after=``), so a page costs the same on a table of
a million jobs.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, get
from litestar.params import FromQuery
from litestar.response import Template

from app.actions import approvals
from app.auth import requires_admin
from app.web import DbSession, render
from app.web.approvals import page_links, with_result


class ApprovalsInboxController(Controller):
    """``/admin/approvals``; admins only."""

    path = "/admin/approvals"
    guards = [requires_admin]
    include_in_schema = False

    @get("/", name="admin.approvals")
    async def inbox(
        self, request: Request[Any, Any, Any], db_session: DbSession, after: FromQuery[str | None] = None
    ) -> Template:
        """Every waiting step, oldest first, 25 to a page."""
        page = await approvals.inbox(db_session, request.user, after=after)
        rows = [with_result(r) for r in page.rows]
        total = await approvals.waiting_count(db_session)
        ctx = {"rows": rows, "total": total, **page_links("/admin/approvals", after, page.after)}
        return render(request, "admin/approvals.html", ctx)
