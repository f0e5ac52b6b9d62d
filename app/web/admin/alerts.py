"""The admin alerts page ``/admin/alerts``: which channels are configured (secrets masked),
a "Send test alert" button per channel whose result appears in place, what is sent, and the latest
delivery attempts with their outcome.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Template

from app import audit
from app.alerts.admin import pending_counts, recent_deliveries, record_test
from app.alerts.admin import send_test as send_test_alert
from app.alerts.channels import channel_overview
from app.auth import requires_admin
from app.errors import Conflict, NotFound
from app.web import DbSession, current_user, is_htmx, render

KIND_WORDS = {
    "failed": "Job failed",
    "pipeline_failed": "Pipeline failed",
    "approval_needed": "Waiting for approval",
    "admin_action": "Admin action",
    "summary": "Summary of grouped alerts",
    None: "Test alert",
}
"""How each ``alert_outbox.kind`` is named on the page (``None``: a test send, which has no outbox row)."""


async def _context(request: Request[Any, Any, Any], db_session: Any) -> dict[str, Any]:
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
        "deliveries": await recent_deliveries(db_session, limit=50),
        "kind_words": KIND_WORDS,
        "results": {},
    }


class AlertsAdminController(Controller):
    """``GET /admin/alerts`` and ``POST /admin/alerts/test/{channel}``; admins only (403 for others)."""

    path = "/admin/alerts"
    guards = [requires_admin]
    include_in_schema = False

    @get("/", name="admin.alerts")
    async def page(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """The page."""
        return render(request, "admin/alerts.html", await _context(request, db_session))

    @post("/test/{channel:str}", name="admin.alerts.test", status_code=200)
    async def send_test(
        self, request: Request[Any, Any, Any], db_session: DbSession, channel: FromPath[str]
    ) -> Template:
        """Send a test alert to ``channel`` (``slack``, ``telegram`` or ``webhook``) from this process,
        waiting at most :data:`app.alerts.admin.TEST_SEND_TIMEOUT_SECS`; log it in the deliveries and the audit
        trail. htmx gets the result fragment; a plain form post gets the page with the result in place.
        A channel that refuses is a normal outcome (200 with the reason), not an error.

        Raises:
            NotFound: no such channel.
            Conflict: the channel is not configured (says which variables to set).
        """
        settings = request.app.state.settings
        overview = {c["name"]: c for c in channel_overview(settings)}
        if channel not in overview:
            raise NotFound("There is no such alert channel: choose Slack, Telegram or Webhook.")
        user = current_user(request)
        try:
            attempt, message = await send_test_alert(settings, channel, admin_email=user.email)
        except LookupError:
            raise Conflict(
                f"{overview[channel]['label']} is not configured. {overview[channel]['hint']}"
            ) from None
        await record_test(db_session, attempt, message, user.email)
        await audit.record(
            db_session,
            user=user,
            action="alerts.test",
            target_type="alert_channel",
            count=0,
            outcome="ok" if attempt.ok else "failed",
            detail={"channel": channel, "status_code": attempt.status_code, "error": attempt.error},
        )
        result = {"label": overview[channel]["label"], "attempt": attempt}
        if is_htmx(request):  # the result in place, and the deliveries list refreshed out of band
            await db_session.flush()
            return render(
                request,
                "admin/_alert_test_result.html",
                {
                    "result": result,
                    "refresh_deliveries": True,
                    "deliveries": await recent_deliveries(db_session, limit=50),
                    "kind_words": KIND_WORDS,
                },
            )
        ctx = await _context(request, db_session)
        ctx["results"] = {channel: result}
        return render(request, "admin/alerts.html", ctx)
