"""Where alerts go: Slack, Telegram and a generic JSON webhook, each on when its settings are complete.

A channel's address contains secrets (Slack and webhook paths, the Telegram bot token): it is never
logged or shown. :meth:`Channel.redact` clears them from error texts, and :func:`mask_url` and
:func:`mask_secret` show just enough of a setting to recognise it on the admin page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from app.settings import Settings

CHANNEL_NAMES = ("slack", "telegram", "webhook")


@dataclass(frozen=True)
class Channel:
    """A configured destination. ``url`` contains secrets (Slack/webhook paths, the bot token): it is
    never logged or shown — :func:`mask_url` and :meth:`redact` exist for that."""

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
