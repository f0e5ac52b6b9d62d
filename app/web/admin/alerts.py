"""The admin alerts page ``/admin/alerts``: which channels are configured (secrets masked),
a "Send test alert" button per channel whose result appears in place, what is sent, and the latest
delivery attempts with their outcome.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Template

from app.actions import alerts as alert_actions
from app.alerts.admin import pending_counts, recent_deliveries
from app.alerts.channels import channel_overview
from app.auth import requires_admin
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import DbSession, is_htmx, render
from app.web.deps import actor_of

KIND_WORDS = {
    "failed": "Job failed",
    "pipeline_failed": "Pipeline failed",
    "approval_needed": "Waiting for approval",
    "admin_action": "Admin action",
    "summary": "Summary of grouped alerts",
    None: "Test alert",
}
"""How each ``alert_outbox.kind`` is named on the page (``None``: a test send, which has no outbox row)."""
DELIVERIES_PAGE = 50
"""Delivery attempts a page; older ones behind the Older link (``?before=``)."""


async def deliveries_view(db: Any, before: str | None = None) -> dict[str, Any]:
    """A page of delivery attempts, newest first, with its Older and Newest links (the attempts are kept
    as long as finished jobs, ``JOB_RETENTION_DAYS``: far more than one page)."""
    before_id = read_cursor(before, Cursor.ENTRY, field="before")  # one it did not give is a 422
    rows = await recent_deliveries(db, limit=DELIVERIES_PAGE + 1, before=before_id)
    page, older = page_of(rows, DELIVERIES_PAGE, lambda r: r["id"])
    return {
        "deliveries": page,
        "deliveries_older_url": f"/admin/alerts?before={older}#deliveries-heading" if older else None,
        "deliveries_newest_url": "/admin/alerts#deliveries-heading" if before_id else None,
        "deliveries_paged": bool(before_id),
    }


async def _context(
    request: Request[Any, Any, Any], db_session: Any, before: str | None = None
) -> dict[str, Any]:
    settings = request.app.state.settings
    channels = channel_overview(settings)
    # without a channel nothing is ever sent, so no row is "waiting": say so instead of counting them
    any_channel = any(c["configured"] for c in channels)
    return {
        "channels": channels,
        "any_channel": any_channel,
        "alert_on": settings.alert_on,
        "throttle_secs": settings.alert_throttle_secs,
        "base_url": settings.jobdesk_base_url,
        "counts": await pending_counts(db_session) if any_channel else {},
        **await deliveries_view(db_session, before),
        "kind_words": KIND_WORDS,
        "results": {},
    }


class AlertsAdminController(Controller):
    """``GET /admin/alerts`` and ``POST /admin/alerts/test/{channel}``; admins only (403 for others)."""

    path = "/admin/alerts"
    guards = [requires_admin]
    include_in_schema = False

    @get("/", name="admin.alerts")
    async def page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        before: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The page; ``before`` pages the delivery attempts (their Older link)."""
        return render(request, "admin/alerts.html", await _context(request, db_session, before))

    @post("/test/{channel:str}", name="admin.alerts.test", status_code=200)
    async def send_test(
        self, request: Request[Any, Any, Any], db_session: DbSession, channel: FromPath[str]
    ) -> Template:
        """Send a test alert to ``channel`` (:func:`app.actions.alerts.send_test`: logged in the deliveries
        and the audit trail). htmx gets the result fragment; a plain form post gets the page with the
        result in place. A channel that refuses is a normal outcome (200 with the reason), not an error.
        """
        label, attempt = await alert_actions.send_test(
            db_session, actor_of(request), request.app.state.settings, channel
        )
        result = {"label": label, "attempt": attempt}
        if is_htmx(request):  # the result in place, and the deliveries list refreshed out of band
            await db_session.flush()
            return render(
                request,
                "admin/_alert_test_result.html",
                {
                    "result": result,
                    "refresh_deliveries": True,
                    **await deliveries_view(db_session),
                    "kind_words": KIND_WORDS,
                },
            )
        ctx = await _context(request, db_session)
        ctx["results"] = {channel: result}
        return render(request, "admin/alerts.html", ctx)
