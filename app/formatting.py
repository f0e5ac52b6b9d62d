"""What people read besides error messages: sizes in words and times in a person's own zone, with its
abbreviation. Used by the pages and by messages built below the web layer (limits, approvals).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def format_bytes(n: int) -> str:
    """``1048576`` → ``"1 MiB"``, ``1536`` → ``"1.5 KiB"``: sizes in words for limit messages."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            if unit == "bytes":
                return f"{int(value)} bytes"
            return f"{value:.1f}".rstrip("0").rstrip(".") + f" {unit}"
        value /= 1024
    return f"{n} bytes"


@functools.lru_cache(maxsize=256)
def zone(name: str | None) -> ZoneInfo:
    """``ZoneInfo(name)``; UTC for an empty or unknown name."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def format_localtime(value: datetime | None, tz: tzinfo, *, seconds: bool = False) -> str:
    """``29 Nov 2026, 20:25 CET`` (with ``:05`` seconds when asked) — the pages' way of showing a time,
    also in messages built below the web layer; ``""`` for ``None``."""
    if value is None:
        return ""
    local = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(tz)
    clock = "%H:%M:%S" if seconds else "%H:%M"
    return f"{local.day} {local.strftime('%b %Y, ' + clock + ' %Z')}"
