"""A :class:`~app.alerts.messages.Message` as the request body of each channel, within its size limit.

Text that comes from users or processors (labels, names, e-mails, errors) is always shown as code —
Slack applies no formatting inside code, and ``&``, ``<`` and ``>`` are escaped so it cannot form a
mention (``<!channel>``) or a link; backticks in it are replaced by ``ˋ`` so it cannot close the code
span. Our own words get the same escapes, with Slack's formatting characters swapped for look-alikes.
Telegram text is HTML-escaped (``parse_mode=HTML``).

Text direction: a user's value in a line (every ``literal`` fact, and a job type's title or name in a
headline, set apart by :mod:`app.alerts.messages`) is set apart with Unicode's FSI … PDI and its own
direction controls closed (:func:`app.formatting.isolated`), so a name holding U+202E (right-to-left
override) cannot reverse the rest of its line. The error stands on lines of its own at the
end, so its controls reach nothing but itself, and it keeps the channel's size budget. The webhook's
``facts``, ``error`` and ``data`` are the values as recorded (data for a program); its ``text`` is set
apart like the other channels.

An error longer than the channel allows is cut with a ``…[truncated, N bytes]`` marker, N being the full
error's size — also when the error was already cut when it was recorded, whose marker is replaced.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from app.alerts.channels import Channel
from app.alerts.messages import Fact, Message, one_line
from app.formatting import isolated
from app.jobs.outbox import error_size

SLACK_TEXT_LIMIT = 3900
"""Characters per Slack message (Slack shortens longer ``text``; its advice is at most 4,000)."""
TELEGRAM_TEXT_LIMIT = 4096
"""Telegram's ``sendMessage`` limit, counted here in UTF-16 units of the raw HTML (never more than
Telegram's count after entity parsing)."""
WEBHOOK_ERROR_LIMIT = 16_000
"""Characters of error text in a generic webhook's JSON body."""

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
    swapped for ``ˋ`` (cannot close the span), set apart in its own text direction. Empty → ``—``."""
    line = one_line(value)
    return f"`{isolated(line).translate(_SLACK_CODE)}`" if line else "—"


def _slack_unit(ch: str) -> int:
    return len(_SLACK_ESCAPES.get(ch, ch))


def _telegram_unit(ch: str) -> int:
    if ch in _SLACK_ESCAPES:
        return len(_SLACK_ESCAPES[ch])
    return 2 if ord(ch) > 0xFFFF else 1


def _plain_unit(ch: str) -> int:
    return 1


def _utf16(value: str) -> int:
    return len(value.encode("utf-16-le")) // 2


def cut_error(message: Message, room: int, unit: Callable[[str], int]) -> tuple[str, bool]:
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


def _shown(fact: Fact) -> str:
    """A fact's value as a line shows it: a user's value (``literal``) set apart in its own direction."""
    return isolated(fact.value) if fact.style == "literal" else fact.value


def plain_text(message: Message, error_limit: int = WEBHOOK_ERROR_LIMIT) -> str:
    """The whole message as plain text (the generic webhook's ``text``)."""
    lines = [f"{message.icon} {message.headline}"]
    lines += [f"{f.label}: {_shown(f)}" + (f" <{f.url}>" if f.url else "") for f in message.facts]
    if message.note:
        lines.append(message.note)
    if message.error:
        lines.append("Error:")
        lines.append(cut_error(message, error_limit, _plain_unit)[0])
    return "\n".join(lines)


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
        error, _ = cut_error(message, room, _slack_unit)
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
            value = f"<code>{esc(isolated(one_line(f.value)), quote=False)}</code>"
        else:
            value = esc(f.value, quote=False)
        lines.append(f"<b>{esc(f.label, quote=False)}:</b> {value}")
    if message.note:
        lines.append(esc(message.note, quote=False))
    text_ = "\n".join(lines)
    if message.error:
        head = f"{text_}\n<b>Error:</b>\n<pre>"
        room = TELEGRAM_TEXT_LIMIT - _utf16(head) - len("</pre>")
        error, _ = cut_error(message, room, _telegram_unit)
        text_ = f"{head}{esc(error, quote=False)}</pre>"
    return {"chat_id": chat_id, "text": text_, "parse_mode": "HTML", "disable_web_page_preview": True}


def webhook_body(
    message: Message, *, alert_id: int | None, payload: dict[str, Any], created_at: datetime | None
) -> dict[str, Any]:
    """The generic webhook's JSON body: ``alert_id``, ``kind``, ``headline``, ``text`` (the whole message in
    plain text), ``url``, ``created_at`` (ISO 8601), ``facts`` (label → value), ``error`` (at most
    :data:`WEBHOOK_ERROR_LIMIT` characters, with the marker) and ``data`` (the alert's recorded payload)."""
    error = cut_error(message, WEBHOOK_ERROR_LIMIT, _plain_unit)[0] if message.error else None
    return {
        "alert_id": alert_id,
        "kind": message.kind,
        "headline": message.headline,
        "text": plain_text(message),
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
