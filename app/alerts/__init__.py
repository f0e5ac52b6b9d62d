"""Failure alerts and admin-action notices: recorded in an outbox, delivered to Slack, Telegram and a
generic JSON webhook by a loop that runs beside every worker.

**Recording.** :mod:`app.jobs.outbox` writes an ``alert_outbox`` row in the same transaction as the
transition that causes an alert, so an alert exists if and only if its transition committed, and
nothing on the worker's path ever waits for a channel.

What alerts: a standalone job reaching ``failed`` after its last attempt or a permanent error
(``failed``); a pipeline turning failed — one alert naming the failed step, instead of a job alert plus
one per cancelled step (``pipeline_failed``); a job rescued from a lost worker with no attempts left
(``failed``, marked ``worker_lost``); a step waiting for approval (``approval_needed``); admin actions
taken in the browser (``admin_action``). Attempts that will be retried never alert.

**The package**, in the order an alert goes through it:

* :mod:`~app.alerts.claiming` — claiming due rows, suppressing what must not be sent, and grouping
  repeats of one failure into a summary per window;
* :mod:`~app.alerts.messages` — :func:`describe`: what an alert says, channel-neutral;
* :mod:`~app.alerts.rendering` — the request body of each channel: escaping and cutting to its limit;
* :mod:`~app.alerts.sending` — one request to one channel, what its answer means, and the backoff;
* :mod:`~app.alerts.delivery` — the loop: claim, send, record, retry, prune;
* :mod:`~app.alerts.channels` — which channels are configured, and their secrets masked;
* :mod:`~app.alerts.admin` — the admin page's test send and its lists;
* :mod:`~app.alerts.queries` — the SQL of all of the above.

Every name is re-exported here (``from app import alerts; alerts.describe(...)``). The limits are read
where they are defined, so a test that changes one patches that module (``alerts.delivery.POLL_SECS``),
not this one.
"""

from app.alerts.admin import TEST_SEND_TIMEOUT_SECS, pending_counts, recent_deliveries, record_test, send_test
from app.alerts.channels import (
    CHANNEL_NAMES,
    Channel,
    channel_overview,
    configured_channels,
    mask_secret,
    mask_url,
)
from app.alerts.claiming import (
    CLAIM_BATCH,
    CLAIM_LEASE_SECS,
    DELIVER_PER_ROUND,
    STALE_AFTER_SECS,
    Claimed,
    claim,
)
from app.alerts.delivery import (
    HTTP_CONNECT_TIMEOUT_SECS,
    HTTP_TIMEOUT_SECS,
    MAX_ATTEMPTS,
    POLL_SECS,
    RETENTION_EVERY_SECS,
    Deliverer,
    Host,
    deliver,
    delivery_loop,
    log_attempt,
    new_client,
    prune,
    record,
)
from app.alerts.messages import FACT_LIMIT, Fact, Message, describe, one_line
from app.alerts.rendering import (
    SLACK_TEXT_LIMIT,
    TELEGRAM_TEXT_LIMIT,
    WEBHOOK_ERROR_LIMIT,
    cut_error,
    plain_text,
    render,
    slack_body,
    slack_code,
    slack_plain,
    telegram_body,
    webhook_body,
)
from app.alerts.sending import (
    BACKOFF_BASE_SECS,
    BACKOFF_CAP_SECS,
    MAX_RETRY_AFTER_SECS,
    SEND_TIMEOUT_SECS,
    Attempt,
    backoff_secs,
    judge,
    send,
)

__all__ = [
    "BACKOFF_BASE_SECS",
    "BACKOFF_CAP_SECS",
    "CHANNEL_NAMES",
    "CLAIM_BATCH",
    "CLAIM_LEASE_SECS",
    "DELIVER_PER_ROUND",
    "FACT_LIMIT",
    "HTTP_CONNECT_TIMEOUT_SECS",
    "HTTP_TIMEOUT_SECS",
    "MAX_ATTEMPTS",
    "MAX_RETRY_AFTER_SECS",
    "POLL_SECS",
    "RETENTION_EVERY_SECS",
    "SEND_TIMEOUT_SECS",
    "SLACK_TEXT_LIMIT",
    "STALE_AFTER_SECS",
    "TELEGRAM_TEXT_LIMIT",
    "TEST_SEND_TIMEOUT_SECS",
    "WEBHOOK_ERROR_LIMIT",
    "Attempt",
    "Channel",
    "Claimed",
    "Deliverer",
    "Fact",
    "Host",
    "Message",
    "backoff_secs",
    "channel_overview",
    "claim",
    "configured_channels",
    "cut_error",
    "deliver",
    "delivery_loop",
    "describe",
    "judge",
    "log_attempt",
    "mask_secret",
    "mask_url",
    "new_client",
    "one_line",
    "pending_counts",
    "plain_text",
    "prune",
    "record",
    "record_test",
    "recent_deliveries",
    "render",
    "send",
    "send_test",
    "slack_body",
    "slack_code",
    "slack_plain",
    "telegram_body",
    "webhook_body",
]
