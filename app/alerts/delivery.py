"""The delivery loop that runs beside every worker: claim due alerts, send them, record the outcome.

:func:`delivery_loop` runs one :class:`Deliverer` per worker process. Each round claims due rows
(:func:`app.alerts.claiming.claim`, committed before any request), sends each message to every
configured channel at once, and records every request in ``alert_deliveries``. A channel that already
took a message is never sent it again (``payload._channels``); one that failed in a way worth retrying
is retried with backoff up to :data:`MAX_ATTEMPTS` rounds. A row ends ``sent`` (every channel took it)
or ``failed`` (``last_error`` says which channel refused and why) — and a failed delivery is only
logged, never alerted about. Rows older than ``JOB_RETENTION_DAYS`` are deleted along the way.

Delivery is at least once: a process killed between a channel's answer and recording it resends that
message after the lease.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.alerts.channels import CHANNEL_NAMES, Channel, configured_channels
from app.alerts.claiming import DELIVER_PER_ROUND, Claimed, claim
from app.alerts.messages import Message, describe
from app.alerts.queries import FINISH_ROW, INSERT_DELIVERY, PRUNE_DELIVERIES, PRUNE_OUTBOX
from app.alerts.rendering import render
from app.alerts.sending import Attempt, backoff_secs, send
from app.db import is_transient
from app.jobs.payload import cap_text, json_text
from app.settings import Settings
from app.silence import answered_within

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger("jobdesk.alerts")

HTTP_TIMEOUT_SECS = 5.0
"""httpx's per-phase timeout (seconds) for channel requests: reading, writing, waiting for a connection."""
HTTP_CONNECT_TIMEOUT_SECS = 3.0
"""The same for connecting."""
MAX_ATTEMPTS = 10
"""Delivery rounds per alert before it is given up as ``failed`` (about 15 minutes of retrying)."""
POLL_SECS = 1.0
"""Idle wait between looks at the outbox."""
RETENTION_EVERY_SECS = 600.0


def new_client() -> httpx.AsyncClient:
    """The HTTP client for channels: short timeouts, no redirects (a webhook that redirects is misconfigured).

    httpx is imported here, when the first alert is due: every worker imports this module as it starts,
    and importing httpx cost that start 30-50 ms (``python -X importtime``) before its first claim.
    """
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(HTTP_TIMEOUT_SECS, connect=HTTP_CONNECT_TIMEOUT_SECS),
        follow_redirects=False,
        headers={"user-agent": "Jobdesk alerts"},
        limits=httpx.Limits(max_connections=DELIVER_PER_ROUND * len(CHANNEL_NAMES)),
    )


async def deliver(
    client: httpx.AsyncClient, channels: Sequence[Channel], item: Claimed, settings: Settings
) -> tuple[Message, list[Attempt]]:
    """Send ``item`` to each channel that has not taken it yet, all at once; no database access."""
    message = describe(
        item.kind,
        item.payload,
        created_at=item.created_at,
        owner_email=item.owner_email,
        base_url=settings.jobdesk_base_url,
        link_secret=settings.resolved_secret_key(),
    )
    todo = [c for c in channels if item.channels.get(c.name) not in ("sent", "gave_up")]
    attempts = await asyncio.gather(
        *(
            send(
                client,
                c,
                render(c, message, alert_id=item.id, payload=item.payload, created_at=item.created_at),
            )
            for c in todo
        )
    )
    return message, list(attempts)


async def log_attempt(
    db: AsyncConnection | AsyncSession, alert_id: int | None, attempt: Attempt, summary: str
) -> None:
    """One row of ``alert_deliveries``: a request to a channel and its outcome (``alert_id`` is
    ``None`` for a test send, which has no outbox row)."""
    await db.execute(
        INSERT_DELIVERY,
        {
            "alert_id": alert_id,
            "channel": attempt.channel,
            "ok": attempt.ok,
            "status_code": attempt.status_code,
            "error": cap_text(attempt.error, 2000),
            "summary": summary,
        },
    )


async def record(
    conn: AsyncConnection,
    item: Claimed,
    message: Message,
    attempts: Sequence[Attempt],
    *,
    rng: random.Random | None = None,
) -> str:
    """Log each request in ``alert_deliveries`` and move the row on: ``sent`` when every channel took it,
    ``failed`` when a channel refused for good or :data:`MAX_ATTEMPTS` rounds are used up, else
    ``pending`` again after :func:`~app.alerts.sending.backoff_secs`. Returns the new status. A row
    re-claimed by another process meanwhile (its lease ran out) is left to that process."""
    summary = message.summary()
    state = dict(item.channels)
    errors = dict(item.errors)
    for a in attempts:
        await log_attempt(conn, item.id, a, summary)
        if a.ok:
            state[a.channel] = "sent"
        elif not a.retryable:
            state[a.channel] = "gave_up"
            errors[a.channel] = a.error or "refused"
        elif item.attempts >= MAX_ATTEMPTS:
            state[a.channel] = "gave_up"
            errors[a.channel] = f"gave up after {item.attempts} attempts: {a.error}"
    failures = [a for a in attempts if not a.ok]
    retry = [a for a in failures if state.get(a.channel) not in ("sent", "gave_up")]
    if retry:
        status = "pending"
        last_error = "; ".join(f"{a.channel}: {a.error}" for a in failures)
        waits = [a.retry_after for a in retry if a.retry_after is not None]
        delay = backoff_secs(item.attempts, max(waits) if waits else None, rng=rng)
    else:
        delay = 0.0
        gave_up = [c for c, s in state.items() if s == "gave_up"]
        status = "failed" if gave_up else "sent"
        last_error = "; ".join(f"{c}: {errors.get(c, 'refused')}" for c in gave_up)
    await conn.execute(
        FINISH_ROW,
        {
            "id": item.id,
            "attempts": item.attempts,
            "status": status,
            "last_error": last_error[:2000] or None,
            "delay": delay,
            "any_sent": any(s == "sent" for s in state.values()),
            "channels": json_text(state),
            "errors": json_text(errors),
        },
    )
    return status


async def prune(conn: AsyncConnection, retention_days: float, *, batch: int = 1000) -> int:
    """Delete one batch of alerts and delivery records older than ``retention_days`` (``JOB_RETENTION_DAYS``)."""
    days = float(retention_days)
    a = (await conn.execute(PRUNE_OUTBOX, {"days": days, "batch": batch})).rowcount
    b = (await conn.execute(PRUNE_DELIVERIES, {"days": days, "batch": batch})).rowcount
    return (a or 0) + (b or 0)


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]


class Deliverer:
    """The delivery loop of one process (:func:`delivery_loop`); :meth:`run_once` is one round, which
    tests call directly. ``engine`` is a pooled engine (the processors' pool: the worker's own claim,
    lease and completer connections are never used here)."""

    def __init__(self, engine: AsyncEngine, settings: Settings, *, logger: Any = None) -> None:
        self.engine = engine
        self.settings = settings
        self.channels = configured_channels(settings)
        self.log = logger or log
        self._client: httpx.AsyncClient | None = None
        self.answer_secs = settings.heartbeat_secs
        """How long each transaction waits for its answer, its commit included, before its connection is
        closed (:func:`app.silence.answered_within`): on a connection gone silent (a pooler or a proxy in
        between keeps the TCP connection alive) delivery waited for ever and no alert went out again."""

    def _http(self) -> httpx.AsyncClient:
        """The loop's HTTP client, made when the first alert is due rather than when the worker starts:
        making one loads the system's CA certificates, which blocked the worker's event loop for 50-150 ms
        (measured) just as it sent its first claim."""
        if self._client is None:
            self._client = new_client()
        return self._client

    async def run_once(self, client: httpx.AsyncClient | None = None) -> int:
        """Claim, send (no transaction open), record. Returns how many rows were handled (0 = idle).
        ``client`` defaults to the loop's own."""
        async with answered_within(self.engine.begin(), self.answer_secs) as conn:
            claimed, handled = await claim(conn, self.settings)
        if not claimed:
            return handled
        client = client or self._http()
        results = await asyncio.gather(*(deliver(client, self.channels, c, self.settings) for c in claimed))
        await self._record_all(list(zip(claimed, results, strict=True)))
        return handled

    async def _record_all(self, done: list[tuple[Claimed, tuple[Message, list[Attempt]]]]) -> None:
        delay = 0.2
        while True:
            try:
                async with answered_within(self.engine.begin(), self.answer_secs) as conn:
                    statuses = [await record(conn, item, msg, attempts) for item, (msg, attempts) in done]
                break
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.log.warning("could not record alert deliveries: database unavailable", error=_short(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        for (item, (_, attempts)), status in zip(done, statuses, strict=True):
            failures = [f"{a.channel}: {a.error}" for a in attempts if not a.ok]
            if status == "failed":
                self.log.warning(
                    "alert not delivered; giving up", alert_id=item.id, kind=item.kind, errors=failures
                )
            elif failures:
                self.log.info(
                    "alert delivery failed; will retry",
                    alert_id=item.id,
                    attempt=item.attempts,
                    errors=failures,
                )

    async def run(self) -> None:
        """Run until cancelled. Database blips are logged and waited out; only a bug ends the loop."""
        last_prune = time.monotonic() - RETENTION_EVERY_SECS + 60.0  # first pass a minute after start
        error_delay = POLL_SECS
        try:
            while True:
                busy = 0
                try:
                    if self.channels:
                        busy = await self.run_once()
                    if time.monotonic() - last_prune >= RETENTION_EVERY_SECS:
                        last_prune = time.monotonic()
                        async with answered_within(self.engine.begin(), self.answer_secs) as conn:
                            await prune(conn, self.settings.job_retention_days)
                    error_delay = POLL_SECS
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    self.log.warning("alert delivery paused: database unavailable", error=_short(exc))
                    await asyncio.sleep(error_delay)
                    error_delay = min(error_delay * 2, 30.0)
                    continue
                if not busy:
                    await asyncio.sleep(POLL_SECS)
        finally:
            client, self._client = self._client, None
            if client is not None:
                await client.aclose()


class Host(Protocol):
    """What :func:`delivery_loop` needs of the process it runs in (the worker), and nothing more."""

    @property
    def app_engine(self) -> AsyncEngine | None:
        """The pooled engine processors use; set once the worker runs."""

    @property
    def settings(self) -> Settings: ...

    @property
    def log(self) -> Any:
        """A structlog logger (``bind`` is used)."""


async def delivery_loop(host: Host) -> None:
    """The worker's ``alerts`` side task: :class:`Deliverer` on the worker's processor pool."""
    if host.app_engine is None:
        raise RuntimeError("the alerts delivery loop needs the worker's engine: start it from Worker.run")
    await Deliverer(host.app_engine, host.settings, logger=host.log.bind(task="alerts")).run()
