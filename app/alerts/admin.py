"""What the admin alerts page needs: a test send to one channel, and the latest deliveries and counts.

A test alert is sent straight from the web process (it has no outbox row) and waits for the channel's
answer, at most :data:`TEST_SEND_TIMEOUT_SECS`; it is logged in ``alert_deliveries`` like any delivery.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.alerts.channels import configured_channels
from app.alerts.delivery import log_attempt, new_client
from app.alerts.messages import Message, describe, one_line
from app.alerts.queries import PENDING_COUNTS, RECENT_DELIVERIES
from app.alerts.rendering import render
from app.alerts.sending import Attempt, send
from app.dbclock import db_time
from app.settings import Settings

TEST_SEND_TIMEOUT_SECS = 5.0
"""Hard limit on a test alert sent from the admin page, which waits for the answer."""


async def send_test(settings: Settings, channel_name: str, *, admin_email: str) -> tuple[Attempt, Message]:
    """Send a test alert to one channel straight from the web process, waiting at most
    :data:`TEST_SEND_TIMEOUT_SECS`. Returns the outcome and the message (its summary goes in the log).

    Raises:
        LookupError: ``channel_name`` is not a configured channel.
    """
    channel = next((c for c in configured_channels(settings) if c.name == channel_name), None)
    if channel is None:
        raise LookupError(channel_name)
    now = db_time()  # the database's clock, as every other alert's time: not this host's
    payload = {"admin": admin_email}
    message = describe("test", payload, created_at=now, owner_email=None, base_url=settings.jobdesk_base_url)
    body = render(channel, message, alert_id=None, payload=payload, created_at=now)
    async with new_client() as client:
        attempt = await send(client, channel, body, limit_secs=TEST_SEND_TIMEOUT_SECS)
    return attempt, message


async def record_test(
    db: AsyncConnection | AsyncSession, attempt: Attempt, message: Message, admin_email: str
) -> None:
    """Log a test send in ``alert_deliveries`` (no outbox row)."""
    await log_attempt(db, None, attempt, one_line(f"Test alert sent by {admin_email}", 200))


async def recent_deliveries(
    db: AsyncConnection | AsyncSession, limit: int = 50, before: int | None = None
) -> list[Any]:
    """The newest delivery attempts (``alert_deliveries`` by id), with their alert's kind and status;
    those older than attempt ``before`` when given (keyset pages)."""
    params = {"limit": limit, "before": before}
    return list((await db.execute(RECENT_DELIVERIES, params)).mappings().all())


async def pending_counts(db: AsyncConnection | AsyncSession) -> dict[str, int]:
    """``{"pending": alerts waiting to be sent or retried, "windows": grouping windows still open}``."""
    row = (await db.execute(PENDING_COUNTS)).mappings().one()
    return {"pending": int(row["pending"] or 0), "windows": int(row["windows"] or 0)}
