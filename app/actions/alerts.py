"""Admin actions on the alert channels: a test alert.

:func:`send_test` checks that the actor is an admin and that the channel exists and is configured, sends
a test alert from this process (waiting at most :data:`app.alerts.admin.TEST_SEND_TIMEOUT_SECS`), logs the
attempt in the deliveries and writes its audit entry (``alerts.test``, outcome ``ok`` or ``failed``), in
the caller's transaction. A channel that refuses the alert is a normal outcome, not an error. A refusal
(not an admin, no such channel, a channel not configured) is audited as refused, as every admin action's.

Errors: :class:`~app.errors.Forbidden` (403), :class:`~app.errors.NotFound` (no such channel, 404),
:class:`~app.errors.Conflict` (the channel is not configured; says which variables to set, 409).
"""

from __future__ import annotations

from typing import Any

from app import audit
from app.actions.trail import Db, acting, auditing_refusals, require_admin
from app.alerts.admin import record_test
from app.alerts.admin import send_test as send_test_alert
from app.alerts.channels import channel_overview
from app.alerts.sending import Attempt
from app.errors import Conflict, NotFound
from app.settings import Settings


async def send_test(db: Db, actor: Any, settings: Settings, channel: str) -> tuple[str, Attempt]:
    """Send a test alert to ``channel`` (``slack``, ``telegram`` or ``webhook``); returns the channel's
    label and the attempt. ``actor``: an :class:`~app.actions.trail.Actor` or the signed-in user."""
    who = acting(actor)
    async with auditing_refusals(
        db, who, "alerts.test", target_type="alert_channel", target_ids=[channel[:100]]
    ):
        require_admin(who, "send test alerts")
        overview = {c["name"]: c for c in channel_overview(settings)}
        if channel not in overview:
            raise NotFound("There is no such alert channel: choose Slack, Telegram or Webhook.")
        try:
            attempt, message = await send_test_alert(settings, channel, admin_email=who.user.email)
        except LookupError:
            raise Conflict(
                f"{overview[channel]['label']} is not configured. {overview[channel]['hint']}"
            ) from None
    await record_test(db, attempt, message, who.user.email)
    await audit.record(
        db,
        user=who.user,
        action="alerts.test",
        target_type="alert_channel",
        target_ids=[channel],
        count=0,
        outcome="ok" if attempt.ok else "failed",
        detail={"channel": channel, "status_code": attempt.status_code, "error": attempt.error},
        ip=who.ip,
    )
    return str(overview[channel]["label"]), attempt
