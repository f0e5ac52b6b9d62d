"""Failure alerts and admin-action notices (issue 8): recorded in an outbox, delivered to Slack, Telegram
and a generic JSON webhook by a loop that runs beside every worker.

**Recording.** :mod:`app.jobs.queue` calls the ``record_*`` functions in the same transaction as the
transition that causes an alert, which writes an ``alert_outbox`` row (issue 8 §4) — so an alert exists
if and only if its transition committed, and nothing here ever performs I/O on the worker's path.

What alerts (issue 8 §2, case C22): a standalone job reaching ``failed`` after its last attempt or a
permanent error (``failed``); a pipeline turning failed — one alert naming the failed step, instead of a
job alert plus one per cancelled step (``pipeline_failed``); a job rescued from a lost worker with no
attempts left (``failed``, marked ``worker_lost``); a step waiting for approval (``approval_needed``); admin actions taken in
the browser (``admin_action``). Attempts that will be retried never alert.

**Delivery** (:func:`delivery_loop`, one per worker process, started by :class:`app.worker.runner.Worker`):

* claims due ``pending`` rows with ``FOR UPDATE SKIP LOCKED`` in a short transaction and commits before
  any HTTP request, so no database connection or transaction is held while a channel answers slowly; a
  claimed row is leased by pushing its ``next_attempt_at`` :data:`CLAIM_LEASE_SECS` ahead, so a process
  that dies mid-delivery leaves it to another one;
* kinds missing from ``ALERT_ON`` become ``suppressed`` without a message;
* grouping (issue 8 §4, case C22): the first alert of a fingerprint (kind, job type, error's first line
  with numbers and ids blanked) is sent and opens a window of ``ALERT_THROTTLE_SECS``, stored as a
  ``summary`` row whose ``next_attempt_at`` is the window's end. Alerts of that fingerprint arriving
  inside the window are ``suppressed`` (``payload.grouped_into`` names the summary) and counted on it; when
  the window ends the summary is sent as one "…and N more like this" message (and opens the next window),
  or deleted if nothing joined it. Every decision is made under a transaction-level advisory lock per
  fingerprint, so several worker processes agree without any state in memory;
* sends to every configured channel at once, each request bounded by :data:`SEND_TIMEOUT_SECS`; a
  channel that answers 429, 408, 5xx or not at all is retried with exponential backoff and jitter
  (``Retry-After`` honoured) up to :data:`MAX_ATTEMPTS` rounds, other 4xx answers are final; a channel
  that already took the message is never sent it again (``payload._channels``). Every request is logged in
  ``alert_deliveries``. A row ends ``sent`` (every channel took it) or ``failed`` (``last_error`` says which
  channel refused and why) — and a failed delivery is only logged, never alerted about;
* rows still pending after :data:`STALE_AFTER_SECS` (no channel was configured) are dropped as
  ``suppressed`` instead of flooding a channel configured later; rows older than ``JOB_RETENTION_DAYS``
  are deleted.

Delivery is at least once: a process killed between a channel's answer and recording it resends that
message after the lease.

**Messages** (issue 8 §3; cases C13, C19): what happened in plain words, the job type's title, ids, owner,
attempts and time, the error cut to the channel's limit with a ``…[truncated, N bytes]`` marker (N = the
full error's size), and a link under ``JOBDESK_BASE_URL``. Text that comes from users or processors (labels,
names, e-mails, errors) is always shown as code — Slack applies no formatting inside code, and ``&``, ``<``
and ``>`` are escaped so it cannot form a mention (``<!channel>``) or a link; backticks in it are replaced by
``ˋ`` so it cannot close the code span. Telegram text is HTML-escaped (``parse_mode=HTML``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import html
import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import httpx
import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.db import is_transient
from app.jobs.outbox import error_size
from app.jobs.payload import cap_text, json_text
from app.settings import Settings

if TYPE_CHECKING:
    from app.worker.runner import Worker

log = structlog.get_logger("jobdesk.alerts")

# =====================================================================================================
# Delivery
# =====================================================================================================

SEND_TIMEOUT_SECS = 10.0
"""Hard limit on one request to one channel, however the server behaves (a slow drip included)."""
HTTP_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
"""httpx's per-phase timeouts (seconds) for channel requests."""
TEST_SEND_TIMEOUT_SECS = 5.0
"""Hard limit on a test alert sent from the admin page, which waits for the answer."""
MAX_ATTEMPTS = 10
"""Delivery rounds per alert before it is given up as ``failed`` (about 15 minutes of retrying)."""
BACKOFF_BASE_SECS = 2.0
"""Wait before the 2nd round; it doubles each round, with jitter, up to :data:`BACKOFF_CAP_SECS`."""
BACKOFF_CAP_SECS = 300.0
MAX_RETRY_AFTER_SECS = 3600.0
"""A channel's ``Retry-After`` is honoured up to this many seconds."""
CLAIM_LEASE_SECS = 60.0
"""A claimed alert is not claimed again for this long (a round takes at most :data:`SEND_TIMEOUT_SECS`)."""
CLAIM_BATCH = 200
"""Due rows looked at per round (grouping decisions are cheap; only a few are sent per round)."""
DELIVER_PER_ROUND = 8
"""Messages sent concurrently per round."""
POLL_SECS = 1.0
"""Idle wait between looks at the outbox."""
STALE_AFTER_SECS = 24 * 3600.0
"""An alert nobody could send for this long is dropped (``suppressed``) rather than sent late."""
RETENTION_EVERY_SECS = 600.0
SLACK_TEXT_LIMIT = 3900
"""Characters per Slack message (Slack shortens longer ``text``; its advice is at most 4,000)."""
TELEGRAM_TEXT_LIMIT = 4096
"""Telegram's ``sendMessage`` limit, counted here in UTF-16 units of the raw HTML (never more than
Telegram's count after entity parsing)."""
WEBHOOK_ERROR_LIMIT = 16_000
"""Characters of error text in a generic webhook's JSON body."""
FACT_LIMIT = 300
"""Characters of one user-supplied value (label, name, e-mail) in a message."""
CHANNEL_NAMES = ("slack", "telegram", "webhook")


# --- channels ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Channel:
    """A configured destination. ``url`` contains secrets (Slack/webhook paths, the bot token): it is
    never logged or shown — :attr:`masked` and :func:`redact` exist for that."""

    name: str
    """``slack``, ``telegram`` or ``webhook``."""
    label: str
    url: str
    secrets: tuple[str, ...]
    chat_id: str | None = None

    def redact(self, value: str) -> str:
        """``value`` with every secret of this channel replaced by ``••••``."""
        for secret in self.secrets:
            if secret:
                value = value.replace(secret, "••••")
        return value


def mask_url(url: str) -> str:
    """``https://hooks.slack.com/services/T0/B0/xyz`` → ``https://hooks.slack.com/••••/xyz``-style: scheme
    and host stay readable (which service, which server), the path is hidden but for its last 4 characters."""
    parts = urlsplit(url)
    rest = parts.path + (f"?{parts.query}" if parts.query else "")
    tail = rest[-4:] if len(rest) > 12 else ""
    return f"{parts.scheme}://{parts.netloc}/••••{tail}"


def mask_secret(secret: str) -> str:
    """``123456:ABCdef…wxyz`` → ``••••wxyz`` (only the last 4 characters, and only of a long secret)."""
    return f"••••{secret[-4:]}" if len(secret) > 12 else "••••"


def configured_channels(settings: Settings) -> list[Channel]:
    """Channels with complete settings, in a fixed order (Slack, Telegram, webhook)."""
    channels = []
    if settings.slack_webhook_url:
        url = settings.slack_webhook_url
        channels.append(Channel("slack", "Slack", url, (url, urlsplit(url).path)))
    if settings.telegram_bot_token and settings.telegram_chat_id:
        token = settings.telegram_bot_token
        url = f"{settings.telegram_api_base.rstrip('/')}/bot{token}/sendMessage"
        channels.append(Channel("telegram", "Telegram", url, (token,), chat_id=settings.telegram_chat_id))
    if settings.alert_webhook_url:
        url = settings.alert_webhook_url
        channels.append(Channel("webhook", "Webhook", url, (url, urlsplit(url).path)))
    return channels


def channel_overview(settings: Settings) -> list[dict[str, Any]]:
    """For the admin page: every channel with ``name``, ``label``, ``configured``, ``settings`` (list of
    ``(ENV_NAME, shown value)``, secrets masked) and ``hint`` (how to turn it on)."""
    s = settings
    return [
        {
            "name": "slack",
            "label": "Slack",
            "configured": bool(s.slack_webhook_url),
            "settings": [
                ("SLACK_WEBHOOK_URL", mask_url(s.slack_webhook_url) if s.slack_webhook_url else None)
            ],
            "hint": "Set SLACK_WEBHOOK_URL to an incoming-webhook address of your Slack workspace.",
        },
        {
            "name": "telegram",
            "label": "Telegram",
            "configured": bool(s.telegram_bot_token and s.telegram_chat_id),
            "settings": [
                ("TELEGRAM_BOT_TOKEN", mask_secret(s.telegram_bot_token) if s.telegram_bot_token else None),
                ("TELEGRAM_CHAT_ID", s.telegram_chat_id),
                ("TELEGRAM_API_BASE", s.telegram_api_base),
            ],
            "hint": "Set TELEGRAM_BOT_TOKEN (from @BotFather) and TELEGRAM_CHAT_ID (the chat to post in).",
        },
        {
            "name": "webhook",
            "label": "Webhook",
            "configured": bool(s.alert_webhook_url),
            "settings": [
                ("ALERT_WEBHOOK_URL", mask_url(s.alert_webhook_url) if s.alert_webhook_url else None)
            ],
            "hint": "Set ALERT_WEBHOOK_URL to an address that accepts a JSON POST per alert.",
        },
    ]


# --- messages ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """One ``label: value`` line. ``style``: ``words`` (our own text), ``literal`` (user or processor
    text, shown as code), ``link`` (``value`` is the link text of ``url``)."""

    label: str
    value: str
    style: str = "words"
    url: str | None = None


@dataclass(frozen=True)
class Message:
    """A channel-neutral alert: rendered by :func:`slack_body`, :func:`telegram_body`, :func:`webhook_body`."""

    kind: str
    icon: str
    headline: str
    """Plain words (our text and job type titles)."""
    facts: tuple[Fact, ...]
    error: str | None = None
    error_size: int | None = None
    """Bytes of the full error when ``error`` is already a cut-down copy."""
    note: str | None = None
    url: str | None = None
    """The page to open (job or pipeline)."""

    def summary(self) -> str:
        """One line for the deliveries list: the headline and the first fact."""
        first = f" — {self.facts[0].label}: {self.facts[0].value}" if self.facts else ""
        return _one_line(f"{self.headline}{first}", 200)

    def plain(self, error_limit: int = WEBHOOK_ERROR_LIMIT) -> str:
        """The whole message as plain text (generic webhook)."""
        lines = [f"{self.icon} {self.headline}"]
        lines += [f"{f.label}: {f.value}" + (f" <{f.url}>" if f.url else "") for f in self.facts]
        if self.note:
            lines.append(self.note)
        if self.error:
            lines.append("Error:")
            lines.append(_cut_error(self, error_limit, lambda ch: 1)[0])
        return "\n".join(lines)


_VERBS = {
    "cancel": "cancelled",
    "retry": "retried",
    "approve": "approved",
    "reject": "rejected",
    "delete": "deleted",
    "purge": "purged",
    "run_again": "ran again",
    "rerun": "re-ran",
    "run_now": "started now",
    "reschedule": "rescheduled",
    "run_at": "rescheduled",
    "pause": "paused",
    "resume": "resumed",
}


def _verb(action: str) -> str:
    last = action.rsplit(".", 1)[-1].removeprefix("bulk_")
    return _VERBS.get(last, last.replace("_", " "))


def _one_line(value: Any, limit: int = FACT_LIMIT) -> str:
    words = " ".join(str(value).split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


def _when(at: datetime | None) -> str:
    if at is None:
        return "unknown"
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _type_title(type_: str | None) -> str:
    if not type_:
        return "Unknown job type"
    from app.processors import registry

    spec = registry.get(type_)
    return spec.title if spec is not None and spec.title else type_


def _attempts(p: dict[str, Any]) -> str | None:
    if p.get("attempts") is None:
        return None
    if p.get("max_attempts"):
        return f"{p['attempts']} of {p['max_attempts']}"
    return str(p["attempts"])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def describe(
    kind: str,
    payload: dict[str, Any],
    *,
    created_at: datetime | None,
    owner_email: str | None,
    base_url: str,
) -> Message:
    """The message for one outbox row (any kind, including ``summary`` and ``test``). Never raises on a
    payload with missing or odd fields: what is missing is left out."""
    p = payload if isinstance(payload, dict) else {}
    base = base_url.rstrip("/")
    when = Fact("When", _when(created_at))
    owner = Fact("Owner", owner_email or f"user {p.get('user_id', '?')}", "literal")

    def job_facts(q: dict[str, Any]) -> list[Fact]:
        facts = []
        if q.get("job_id"):
            facts.append(Fact("Job", str(q["job_id"]), "link", f"{base}/jobs/{quote(str(q['job_id']))}"))
        if q.get("title"):
            facts.append(Fact("Label", _one_line(q["title"]), "literal"))
        if q.get("type"):
            facts.append(Fact("Type", str(q["type"]), "literal"))
        return facts

    if kind == "failed":
        title = _type_title(p.get("type"))
        facts = [*job_facts(p), owner]
        if _attempts(p):
            facts.append(Fact("Attempts", _attempts(p) or ""))
        facts.append(when)
        note = None
        if p.get("worker_lost"):
            note = "Its worker was lost (it crashed or was killed) during the last attempt."
        elif p.get("attempts") and p.get("max_attempts") and p["attempts"] < p["max_attempts"]:
            note = "Not retried: the error was marked permanent."
        return Message(
            kind,
            "❌",
            f"Job failed: {title}",
            tuple(facts),
            error=p.get("error"),
            error_size=p.get("error_size"),
            note=note,
            url=facts[0].url if facts and facts[0].url else None,
        )
    if kind == "pipeline_failed":
        step = p.get("step") if isinstance(p.get("step"), dict) else {}
        url = f"{base}/pipelines/{quote(str(p['pipeline_id']))}" if p.get("pipeline_id") else None
        facts = []
        if p.get("pipeline_id"):
            facts.append(Fact("Pipeline", str(p["pipeline_id"]), "link", url))
        if p.get("name"):
            facts.append(Fact("Name", _one_line(p["name"]), "literal"))
        if p.get("template"):
            facts.append(Fact("Template", str(p["template"]), "literal"))
        if step.get("key"):
            facts.append(Fact("Failed step", _one_line(step["key"]), "literal"))
        if step.get("job_id"):
            facts.append(
                Fact("Step job", str(step["job_id"]), "link", f"{base}/jobs/{quote(str(step['job_id']))}")
            )
        if step.get("type"):
            facts.append(Fact("Step type", f"{_type_title(step['type'])} ({step['type']})", "literal"))
        facts.append(owner)
        if _attempts(step):
            facts.append(Fact("Attempts", _attempts(step) or ""))
        facts.append(when)
        return Message(
            kind,
            "❌",
            "Pipeline failed" + (f": {_type_title(step['type'])} step failed" if step.get("type") else ""),
            tuple(facts),
            error=step.get("error"),
            error_size=step.get("error_size"),
            note="Its remaining steps were cancelled." if step else None,
            url=url,
        )
    if kind == "approval_needed":
        facts = job_facts(p)
        if p.get("pipeline_id"):
            facts.append(
                Fact(
                    "Pipeline",
                    str(p["pipeline_id"]),
                    "link",
                    f"{base}/pipelines/{quote(str(p['pipeline_id']))}",
                )
            )
        if p.get("step_key"):
            facts.append(Fact("Step", _one_line(p["step_key"]), "literal"))
        facts += [owner, when]
        return Message(
            kind,
            "✋",
            f"Waiting for approval: {_type_title(p.get('type'))}",
            tuple(facts),
            note="An admin can approve or reject it on the job's page.",
            url=facts[0].url if facts and facts[0].url else None,
        )
    if kind == "admin_action":
        count = int(p.get("count") or 0)
        ids = [str(i) for i in p.get("job_ids") or []]
        facts = [Fact("Admin", _one_line(p.get("admin") or "unknown"), "literal")]
        facts.append(Fact("Action", _one_line(p.get("action") or "unknown"), "literal"))
        facts.append(Fact("Jobs", str(count)))
        url = None
        if count == 1 and len(ids) == 1:
            url = f"{base}/jobs/{quote(ids[0])}"
            facts.append(Fact("Job", ids[0], "link", url))
        elif ids:
            shown = ", ".join(ids[:5]) + (f" and {count - 5} more" if count > 5 else "")
            facts.append(Fact("Job ids", _one_line(shown), "literal"))
        if p.get("outcome") and p["outcome"] != "ok":
            facts.append(Fact("Outcome", _one_line(p["outcome"]), "literal"))
        if p.get("detail"):
            facts.append(Fact("Details", _one_line(json_text(p["detail"])), "literal"))
        facts.append(when)
        return Message(
            kind,
            "🛠",
            f"Admin action: {_plural(count, 'job')} {_verb(str(p.get('action') or ''))}",
            tuple(facts),
            url=url,
        )
    if kind == "summary":
        of_kind = str(p.get("of_kind") or "failed")
        sample = describe(
            of_kind, p.get("sample") or {}, created_at=None, owner_email=owner_email, base_url=base_url
        )
        n = int(p.get("count") or 0)
        facts = [
            Fact(
                "Between",
                f"{_when(_parse_time(p.get('first_at')))} and {_when(_parse_time(p.get('last_at')))}",
            )
        ]
        if of_kind == "admin_action":
            facts.append(Fact("Jobs", str(int(p.get("jobs") or 0))))
        facts += [f for f in sample.facts if f.label in ("Type", "Step type", "Admin", "Action", "Template")]
        examples = [str(i) for i in p.get("examples") or []]
        url = None
        if examples and of_kind in ("failed", "approval_needed"):
            url = f"{base}/jobs/{quote(examples[-1])}"
            facts.append(Fact("Latest", examples[-1], "link", url))
        elif examples and of_kind == "pipeline_failed":
            url = f"{base}/pipelines/{quote(examples[-1])}"
            facts.append(Fact("Latest", examples[-1], "link", url))
        first_line = (sample.error or "").strip().splitlines()[0] if (sample.error or "").strip() else None
        return Message(
            kind,
            "🔁",
            f"…and {n} more like this: {sample.headline}",
            tuple(facts),
            error=first_line,
            note=f"Alerts like this are grouped: at most one message every {_span(p.get('window_secs'))}.",
            url=url,
        )
    if kind == "test":
        return Message(
            kind,
            "🔔",
            "Test alert from Jobdesk",
            (Fact("Sent by", _one_line(p.get("admin") or "an admin"), "literal"), when),
            note="If you can read this, Jobdesk's alerts reach this channel.",
            url=f"{base}/admin/alerts",
        )
    return Message(kind, "ℹ️", f"Jobdesk alert ({kind})", (when,), error=_one_line(json_text(p), 1000))


def _span(secs: Any) -> str:
    try:
        value = float(secs)
    except (TypeError, ValueError):
        return "few minutes"
    if value < 120:
        return f"{value:g} s"
    return f"{value / 60:.4g} min" if value < 7200 else f"{value / 3600:.4g} h"


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value)
    return None


# --- rendering -----------------------------------------------------------------------------------------

_SLACK_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SLACK_PLAIN = str.maketrans({**_SLACK_ESCAPES, "*": "∗", "_": "ˍ", "~": "∼", "`": "ˋ"})
_SLACK_CODE = str.maketrans({**_SLACK_ESCAPES, "`": "ˋ"})
_TRUNCATED = re.compile(r"…\[truncated, \d+ bytes\]$")


def slack_plain(value: str) -> str:
    """Our own words for Slack mrkdwn: ``&<>`` escaped, and ``* _ ~ ` `` swapped for look-alikes so even
    a job type title cannot start bold, italics, strike-through or code."""
    return value.translate(_SLACK_PLAIN)


def slack_code(value: str) -> str:
    """User text for Slack as inline code: one line, ``&<>`` escaped (no mention, no link), backticks
    swapped for ``ˋ`` (cannot close the span). Empty → ``—``."""
    line = _one_line(value)
    return f"`{line.translate(_SLACK_CODE)}`" if line else "—"


def _slack_unit(ch: str) -> int:
    return len(_SLACK_ESCAPES.get(ch, ch))


def _telegram_unit(ch: str) -> int:
    if ch in _SLACK_ESCAPES:
        return len(_SLACK_ESCAPES[ch])
    return 2 if ord(ch) > 0xFFFF else 1


def _utf16(value: str) -> int:
    return len(value.encode("utf-16-le")) // 2


def _cut_error(message: Message, room: int, unit: Callable[[str], int]) -> tuple[str, bool]:
    """The message's error cut so that its escaped size (``unit`` per character) fits ``room`` including
    a ``…[truncated, N bytes]`` marker (N = the full error's size); ``(text, cut)``. Cuts only between
    characters, never inside an escape."""
    raw = message.error or ""
    size = message.error_size or error_size(raw) or 0
    cut = bool(_TRUNCATED.search(raw[-64:]))
    if cut:
        raw = _TRUNCATED.sub("", raw)
    marker = f"…[truncated, {size} bytes]"
    if not cut and sum(unit(c) for c in raw) <= room:
        return raw, False
    budget = room - sum(unit(c) for c in marker)
    used = 0
    end = 0
    for end, ch in enumerate(raw):  # noqa: B007
        used += unit(ch)
        if used > budget:
            break
    else:
        end = len(raw)
    return raw[: max(0, end)] + marker, True


def slack_body(message: Message) -> dict[str, Any]:
    """The JSON body for a Slack incoming webhook: ``text`` in mrkdwn, at most :data:`SLACK_TEXT_LIMIT`
    characters; link previews off."""
    lines = [f"{message.icon} *{slack_plain(message.headline)}*"]
    for f in message.facts:
        if f.style == "link" and f.url:
            value = f"<{f.url.translate(_SLACK_CODE).replace('|', '%7C')}|{slack_plain(f.value)}>"
        elif f.style == "literal":
            value = slack_code(f.value)
        else:
            value = slack_plain(f.value)
        lines.append(f"*{slack_plain(f.label)}:* {value}")
    if message.note:
        lines.append(slack_plain(message.note))
    text_ = "\n".join(lines)
    if message.error:
        head = f"{text_}\n*Error:*\n```"
        room = SLACK_TEXT_LIMIT - len(head) - len("```")
        error, _ = _cut_error(message, room, _slack_unit)
        text_ = f"{head}{error.translate(_SLACK_CODE)}```"
    return {"text": text_, "unfurl_links": False, "unfurl_media": False}


def telegram_body(message: Message, chat_id: str) -> dict[str, Any]:
    """The JSON body for Telegram's ``sendMessage``: HTML-escaped text (``parse_mode=HTML``), at most
    :data:`TELEGRAM_TEXT_LIMIT` UTF-16 units, link previews off."""
    esc = html.escape
    lines = [f"{message.icon} <b>{esc(message.headline, quote=False)}</b>"]
    for f in message.facts:
        if f.style == "link" and f.url:
            value = f'<a href="{esc(f.url, quote=True)}">{esc(f.value, quote=False)}</a>'
        elif f.style == "literal":
            value = f"<code>{esc(_one_line(f.value), quote=False)}</code>"
        else:
            value = esc(f.value, quote=False)
        lines.append(f"<b>{esc(f.label, quote=False)}:</b> {value}")
    if message.note:
        lines.append(esc(message.note, quote=False))
    text_ = "\n".join(lines)
    if message.error:
        head = f"{text_}\n<b>Error:</b>\n<pre>"
        room = TELEGRAM_TEXT_LIMIT - _utf16(head) - len("</pre>")
        error, _ = _cut_error(message, room, _telegram_unit)
        text_ = f"{head}{esc(error, quote=False)}</pre>"
    return {"chat_id": chat_id, "text": text_, "parse_mode": "HTML", "disable_web_page_preview": True}


def webhook_body(
    message: Message, *, alert_id: int | None, payload: dict[str, Any], created_at: datetime | None
) -> dict[str, Any]:
    """The generic webhook's JSON body: ``alert_id``, ``kind``, ``headline``, ``text`` (the whole message in
    plain text), ``url``, ``created_at`` (ISO 8601), ``facts`` (label → value), ``error`` (at most
    :data:`WEBHOOK_ERROR_LIMIT` characters, with the marker) and ``data`` (the alert's recorded payload)."""
    error = _cut_error(message, WEBHOOK_ERROR_LIMIT, lambda ch: 1)[0] if message.error else None
    return {
        "alert_id": alert_id,
        "kind": message.kind,
        "headline": message.headline,
        "text": message.plain(),
        "url": message.url,
        "created_at": created_at.astimezone(UTC).isoformat() if created_at else None,
        "facts": {f.label: f.value for f in message.facts},
        "error": error,
        "data": {k: v for k, v in payload.items() if not k.startswith("_")},
    }


def render(
    channel: Channel,
    message: Message,
    *,
    alert_id: int | None,
    payload: dict[str, Any],
    created_at: datetime | None,
) -> dict[str, Any]:
    """The request body of ``message`` for ``channel``."""
    if channel.name == "slack":
        return slack_body(message)
    if channel.name == "telegram":
        return telegram_body(message, channel.chat_id or "")
    return webhook_body(message, alert_id=alert_id, payload=payload, created_at=created_at)


# --- sending -------------------------------------------------------------------------------------------


@dataclass
class Attempt:
    """The outcome of one request to one channel. ``retryable``: 429, 408, 5xx, a timeout or a network
    error; ``retry_after``: seconds the channel asked us to wait (``Retry-After``, or Telegram's
    ``parameters.retry_after``)."""

    channel: str
    ok: bool
    status_code: int | None = None
    error: str | None = None
    retryable: bool = False
    retry_after: float | None = None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    seconds: float | None = None
    if value:
        value = value.strip()
        if re.fullmatch(r"\d+(\.\d+)?", value):
            seconds = float(value)
        else:
            with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
                when = email.utils.parsedate_to_datetime(value)
                seconds = (when - datetime.now(UTC)).total_seconds()
    if seconds is None:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            seconds = float(response.json()["parameters"]["retry_after"])
    if seconds is None:
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_SECS)


def _judge(channel: Channel, response: httpx.Response) -> Attempt:
    code = response.status_code
    detail = ""
    with contextlib.suppress(Exception):
        detail = response.text[:300]
    with contextlib.suppress(Exception):
        data = response.json()
        if isinstance(data, dict) and data.get("description"):
            detail = str(data["description"])[:300]
        if 200 <= code < 300 and isinstance(data, dict) and data.get("ok") is False:
            return Attempt(channel.name, False, code, channel.redact(f"refused: {detail}"))
    if 200 <= code < 300:
        return Attempt(channel.name, True, code)
    error = channel.redact(f"HTTP {code}" + (f": {_one_line(detail, 300)}" if detail.strip() else ""))
    if code == 429 or code == 408 or code >= 500:
        return Attempt(channel.name, False, code, error, retryable=True, retry_after=_retry_after(response))
    return Attempt(channel.name, False, code, error)


async def send(
    client: httpx.AsyncClient, channel: Channel, body: dict[str, Any], limit_secs: float = SEND_TIMEOUT_SECS
) -> Attempt:
    """POST ``body`` as JSON to ``channel``; never raises for anything the network or the server does.

    Bounded by ``limit_secs`` seconds in all (on top of httpx's per-phase timeouts), so a channel that
    hangs, drips or black-holes costs this coroutine at most that long — and nothing else any time.
    """
    try:
        async with asyncio.timeout(limit_secs):
            response = await client.post(channel.url, json=body)
    except (TimeoutError, httpx.TimeoutException):
        return Attempt(channel.name, False, None, f"no answer within {limit_secs:g} s", retryable=True)
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return Attempt(channel.name, False, None, channel.redact(_one_line(reason, 300)), retryable=True)
    return _judge(channel, response)


def backoff_secs(
    attempts: int, retry_after: float | None = None, *, rng: random.Random | None = None
) -> float:
    """Seconds before delivery round ``attempts + 1``: ``BACKOFF_BASE_SECS · 2^(attempts-1)`` capped at
    :data:`BACKOFF_CAP_SECS`, then jittered into [50 %, 100 %] of that; never less than ``retry_after``."""
    rng = rng or random
    exp = min(max(attempts - 1, 0), 30)
    delay = min(BACKOFF_CAP_SECS, BACKOFF_BASE_SECS * (2**exp))
    delay *= 0.5 + rng.random() * 0.5
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay


def new_client() -> httpx.AsyncClient:
    """The HTTP client for channels: short timeouts, no redirects (a webhook that redirects is misconfigured)."""
    return httpx.AsyncClient(
        timeout=HTTP_TIMEOUT,
        follow_redirects=False,
        headers={"user-agent": "Jobdesk alerts"},
        limits=httpx.Limits(max_connections=DELIVER_PER_ROUND * len(CHANNEL_NAMES)),
    )


# --- the outbox ----------------------------------------------------------------------------------------

SELECT_DUE = text(
    """
    SELECT id, created_at, kind, fingerprint, payload, attempts FROM alert_outbox
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)
LOCK_FINGERPRINT = text("SELECT pg_advisory_xact_lock(:ns, hashtext(:fp))")
ALERT_LOCK_NS = 0x4A44_0008
"""First key of the per-fingerprint advisory locks (two-key locks never collide with one-key ones)."""
OPEN_WINDOW = text(
    """
    SELECT id, payload FROM alert_outbox
    WHERE fingerprint = :fp AND kind = 'summary' AND status = 'pending' AND attempts = 0
      AND next_attempt_at > clock_timestamp()
    ORDER BY id DESC LIMIT 1
    FOR UPDATE SKIP LOCKED
    """
)
"""The open grouping window of a fingerprint. Only the holder of the fingerprint's advisory lock looks
for it, so a lock held by someone else means another claim took the row because its window is over
(it is due): skipping it is right, and waiting for it could deadlock with that claim."""
INSERT_WINDOW = text(
    """
    INSERT INTO alert_outbox (kind, fingerprint, payload, next_attempt_at)
    VALUES ('summary', :fp, CAST(:payload AS jsonb), clock_timestamp() + make_interval(secs => :secs))
    RETURNING id
    """
)
SET_PAYLOAD = text("UPDATE alert_outbox SET payload = CAST(:payload AS jsonb) WHERE id = :id")
GROUP_INTO = text(
    """
    UPDATE alert_outbox SET status = 'suppressed', payload = payload || jsonb_build_object('grouped_into', CAST(:sid AS bigint))
    WHERE id = ANY(CAST(:ids AS bigint[]))
    """
)
SUPPRESS = text(
    "UPDATE alert_outbox SET status = 'suppressed', last_error = :reason WHERE id = ANY(CAST(:ids AS bigint[]))"
)
DELETE_ROWS = text("DELETE FROM alert_outbox WHERE id = ANY(CAST(:ids AS bigint[]))")
LEASE = text(
    """
    UPDATE alert_outbox SET attempts = attempts + 1,
        next_attempt_at = clock_timestamp() + make_interval(secs => :lease)
    WHERE id = ANY(CAST(:ids AS bigint[]))
    RETURNING id, attempts
    """
)
OWNERS = text("SELECT id, email FROM users WHERE id = ANY(CAST(:ids AS bigint[]))")
INSERT_DELIVERY = text(
    """
    INSERT INTO alert_deliveries (alert_id, channel, ok, status_code, error, summary)
    VALUES (:alert_id, :channel, :ok, :status_code, :error, :summary)
    """
)
FINISH_ROW = text(
    """
    UPDATE alert_outbox SET status = :status,
        last_error = CASE WHEN :status = 'sent' THEN NULL ELSE COALESCE(:last_error, last_error) END,
        next_attempt_at = clock_timestamp() + make_interval(secs => :delay),
        sent_at = CASE WHEN :any_sent THEN COALESCE(sent_at, now()) ELSE sent_at END,
        payload = payload || jsonb_build_object('_channels', CAST(:channels AS jsonb), '_errors', CAST(:errors AS jsonb))
    WHERE id = :id AND attempts = :attempts AND status = 'pending'
    """
)
PRUNE_OUTBOX = text(
    """
    DELETE FROM alert_outbox WHERE id IN (
        SELECT id FROM alert_outbox WHERE created_at < now() - make_interval(days => :days)
        ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED)
    """
)
PRUNE_DELIVERIES = text(
    """
    DELETE FROM alert_deliveries WHERE id IN (
        SELECT id FROM alert_deliveries WHERE at < now() - make_interval(days => :days)
        ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED)
    """
)


@dataclass
class Claimed:
    """An outbox row claimed for one delivery round (its lease is held until :data:`CLAIM_LEASE_SECS`)."""

    id: int
    kind: str
    payload: dict[str, Any]
    created_at: datetime
    attempts: int
    """Rounds including this one."""
    owner_email: str | None = None
    channels: dict[str, str] = field(default_factory=dict)
    """Channel → ``sent`` | ``gave_up`` from earlier rounds."""
    errors: dict[str, str] = field(default_factory=dict)
    """Channel → why it was given up."""


def _payload(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            loaded = json.loads(value)
            if isinstance(loaded, dict):
                return loaded
    return {}


def _example_ids(kind: str, payload: dict[str, Any]) -> list[str]:
    if kind == "pipeline_failed":
        return [str(payload["pipeline_id"])] if payload.get("pipeline_id") else []
    if kind == "admin_action":
        return [str(i) for i in (payload.get("job_ids") or [])[:1]]
    return [str(payload["job_id"])] if payload.get("job_id") else []


def _sample(payload: dict[str, Any]) -> dict[str, Any]:
    sample = {k: v for k, v in payload.items() if not k.startswith("_") and k != "grouped_into"}
    if isinstance(sample.get("error"), str):
        sample["error"] = sample["error"][:1000]
    if isinstance(sample.get("step"), dict) and isinstance(sample["step"].get("error"), str):
        sample["step"] = {**sample["step"], "error": sample["step"]["error"][:1000]}
    return sample


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


async def claim(
    conn: AsyncConnection, settings: Settings, *, limit: int = CLAIM_BATCH
) -> tuple[list[Claimed], int]:
    """One claiming transaction's work: look at up to ``limit`` due rows, suppress kinds not in
    ``ALERT_ON`` and stale rows, group repeats into the open window of their fingerprint, delete empty
    windows, and lease at most :data:`DELIVER_PER_ROUND` rows to send now. Returns ``(to send, rows
    handled)``. The caller commits before sending anything."""
    rows = (await conn.execute(SELECT_DUE, {"limit": limit})).mappings().all()
    if not rows:
        return [], 0
    window = float(settings.alert_throttle_secs)
    enabled = set(settings.alert_on)

    def base_fp(r: Any) -> str:
        return (
            str(r["fingerprint"]).removeprefix("summary:")
            if r["kind"] == "summary"
            else str(r["fingerprint"])
        )

    for fp in sorted({base_fp(r) for r in rows if r["attempts"] == 0}):
        await conn.execute(LOCK_FINGERPRINT, {"ns": ALERT_LOCK_NS, "fp": fp})
    now = (await conn.execute(text("SELECT clock_timestamp()"))).scalar_one()
    windows: dict[str, tuple[int, dict[str, Any]] | None] = {}
    changed: set[int] = set()
    grouped: dict[int, list[int]] = {}
    suppressed: dict[str, list[int]] = {}
    deleted: list[int] = []
    send_now: list[Any] = []
    handled = 0

    async def open_window(fp: str, lead_kind: str, lead_id: int, sample: dict[str, Any]) -> None:
        payload = {
            "of_kind": lead_kind,
            "of_fingerprint": fp,
            "lead_id": lead_id,
            "window_secs": window,
            "count": 0,
            "jobs": 0,
            "examples": [],
            "first_at": None,
            "last_at": None,
            "sample": sample,
        }
        sid = (
            await conn.execute(
                INSERT_WINDOW, {"fp": f"summary:{fp}", "payload": json_text(payload), "secs": window}
            )
        ).scalar_one()
        windows[fp] = (sid, payload)

    async def current_window(fp: str) -> tuple[int, dict[str, Any]] | None:
        if fp not in windows:
            found = (await conn.execute(OPEN_WINDOW, {"fp": f"summary:{fp}"})).mappings().first()
            windows[fp] = (found["id"], _payload(found["payload"])) if found else None
        return windows[fp]

    for r in rows:
        if len(send_now) >= DELIVER_PER_ROUND:
            break
        handled += 1
        payload = _payload(r["payload"])
        kind = str(r["kind"])
        of_kind = str(payload.get("of_kind") or "failed") if kind == "summary" else kind
        if of_kind not in enabled:
            suppressed.setdefault(f"not sent: ALERT_ON does not include {of_kind}", []).append(r["id"])
            continue
        if r["attempts"] > 0:  # a retry round (or a lease that ran out): keep going
            send_now.append(r)
            continue
        fp = base_fp(r)
        if kind == "summary":  # its window is over
            if not payload.get("count"):
                deleted.append(r["id"])
                continue
            send_now.append(r)
            if window > 0 and await current_window(fp) is None:  # repeats go on being grouped
                await open_window(fp, of_kind, r["id"], payload.get("sample") or {})
            continue
        if (now - r["created_at"]).total_seconds() > STALE_AFTER_SECS:
            suppressed.setdefault(
                f"not sent: no channel took it within {STALE_AFTER_SECS / 3600:g} h", []
            ).append(r["id"])
            continue
        if window <= 0:
            send_now.append(r)
            continue
        current = await current_window(fp)
        if current is None:  # the first of its kind: send it and open a window
            send_now.append(r)
            await open_window(fp, kind, r["id"], _sample(payload))
            continue
        sid, summary = current
        summary["count"] = int(summary.get("count") or 0) + 1
        summary["jobs"] = int(summary.get("jobs") or 0) + (
            int(payload.get("count") or 0) if kind == "admin_action" else 1
        )
        summary["examples"] = (list(summary.get("examples") or []) + _example_ids(kind, payload))[-5:]
        at = _iso(r["created_at"])
        summary["first_at"] = min(summary.get("first_at") or at, at)
        summary["last_at"] = max(summary.get("last_at") or at, at)
        changed.add(sid)
        grouped.setdefault(sid, []).append(r["id"])

    for reason, ids in suppressed.items():
        await conn.execute(SUPPRESS, {"reason": reason, "ids": ids})
    if deleted:
        await conn.execute(DELETE_ROWS, {"ids": deleted})
    for sid, ids in grouped.items():
        await conn.execute(GROUP_INTO, {"sid": sid, "ids": ids})
    for current in windows.values():
        if current is not None and current[0] in changed:
            await conn.execute(SET_PAYLOAD, {"id": current[0], "payload": json_text(current[1])})
    if not send_now:
        return [], handled
    leased = dict(
        (await conn.execute(LEASE, {"ids": [r["id"] for r in send_now], "lease": CLAIM_LEASE_SECS})).all()
    )
    claimed = []
    for r in send_now:
        payload = _payload(r["payload"])
        # a summary counted only rows decided before its window closed: the count is final here
        claimed.append(
            Claimed(
                id=r["id"],
                kind=str(r["kind"]),
                payload=payload,
                created_at=r["created_at"],
                attempts=leased[r["id"]],
                channels=dict(payload.get("_channels") or {}),
                errors=dict(payload.get("_errors") or {}),
            )
        )
    user_ids = set()
    for c in claimed:
        uid = c.payload.get("user_id") or (c.payload.get("sample") or {}).get("user_id")
        if isinstance(uid, int):
            user_ids.add(uid)
    if user_ids:
        emails = dict((await conn.execute(OWNERS, {"ids": sorted(user_ids)})).all())
        for c in claimed:
            uid = c.payload.get("user_id") or (c.payload.get("sample") or {}).get("user_id")
            c.owner_email = emails.get(uid)
    return claimed, handled


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
    ``pending`` again after :func:`backoff_secs`. Returns the new status. A row re-claimed by another
    process meanwhile (its lease ran out) is left to that process."""
    summary = message.summary()
    state = dict(item.channels)
    errors = dict(item.errors)
    for a in attempts:
        await conn.execute(
            INSERT_DELIVERY,
            {
                "alert_id": item.id,
                "channel": a.channel,
                "ok": a.ok,
                "status_code": a.status_code,
                "error": cap_text(a.error, 2000),
                "summary": summary,
            },
        )
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


class Deliverer:
    """The delivery loop of one process (:func:`delivery_loop`); :meth:`run_once` is one round, which
    tests call directly. ``engine`` is a pooled engine (the processors' pool: the worker's own claim,
    lease and completer connections are never used here)."""

    def __init__(self, engine: AsyncEngine, settings: Settings, *, logger: Any = None) -> None:
        self.engine = engine
        self.settings = settings
        self.channels = configured_channels(settings)
        self.log = logger or log

    async def run_once(self, client: httpx.AsyncClient) -> int:
        """Claim, send (no transaction open), record. Returns how many rows were handled (0 = idle)."""
        async with self.engine.begin() as conn:
            claimed, handled = await claim(conn, self.settings)
        if not claimed:
            return handled
        results = await asyncio.gather(*(deliver(client, self.channels, c, self.settings) for c in claimed))
        await self._record_all(list(zip(claimed, results, strict=True)))
        return handled

    async def _record_all(self, done: list[tuple[Claimed, tuple[Message, list[Attempt]]]]) -> None:
        delay = 0.2
        while True:
            try:
                async with self.engine.begin() as conn:
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
        async with new_client() as client:
            while True:
                busy = 0
                try:
                    if self.channels:
                        busy = await self.run_once(client)
                    if time.monotonic() - last_prune >= RETENTION_EVERY_SECS:
                        last_prune = time.monotonic()
                        async with self.engine.begin() as conn:
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


async def delivery_loop(worker: Worker) -> None:
    """The worker's ``alerts`` side task: :class:`Deliverer` on the worker's processor pool."""
    assert worker.app_engine is not None
    await Deliverer(worker.app_engine, worker.settings, logger=worker.log.bind(task="alerts")).run()


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]


# --- the admin page ------------------------------------------------------------------------------------


async def send_test(settings: Settings, channel_name: str, *, admin_email: str) -> tuple[Attempt, Message]:
    """Send a test alert to one channel straight from the web process, waiting at most
    :data:`TEST_SEND_TIMEOUT_SECS`. Returns the outcome and the message (its summary goes in the log).

    Raises:
        LookupError: ``channel_name`` is not a configured channel.
    """
    channel = next((c for c in configured_channels(settings) if c.name == channel_name), None)
    if channel is None:
        raise LookupError(channel_name)
    now = datetime.now(UTC)
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
    await db.execute(
        INSERT_DELIVERY,
        {
            "alert_id": None,
            "channel": attempt.channel,
            "ok": attempt.ok,
            "status_code": attempt.status_code,
            "error": cap_text(attempt.error, 2000),
            "summary": _one_line(f"Test alert sent by {admin_email}", 200),
        },
    )


RECENT_DELIVERIES = text(
    """
    SELECT d.id, d.at, d.channel, d.ok, d.status_code, d.error, d.summary, d.alert_id, o.kind, o.status
    FROM alert_deliveries d LEFT JOIN alert_outbox o ON o.id = d.alert_id
    ORDER BY d.id DESC LIMIT :limit
    """
)
PENDING_COUNTS = text(
    """
    SELECT count(*) FILTER (WHERE kind <> 'summary') AS pending,
           count(*) FILTER (WHERE kind = 'summary' AND attempts = 0) AS windows
    FROM alert_outbox WHERE status = 'pending'
    """
)


async def recent_deliveries(db: AsyncConnection | AsyncSession, limit: int = 50) -> list[Any]:
    """The newest delivery attempts (``alert_deliveries`` by id), with their alert's kind and status."""
    return list((await db.execute(RECENT_DELIVERIES, {"limit": limit})).mappings().all())


async def pending_counts(db: AsyncConnection | AsyncSession) -> dict[str, int]:
    """``{"pending": alerts waiting to be sent or retried, "windows": grouping windows still open}``."""
    row = (await db.execute(PENDING_COUNTS)).mappings().one()
    return {"pending": int(row["pending"] or 0), "windows": int(row["windows"] or 0)}
