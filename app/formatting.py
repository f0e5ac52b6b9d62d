"""What people read besides error messages: sizes in words and times in a person's own zone, with its
abbreviation. Used by the pages and by messages built below the web layer (limits, approvals).
"""

from __future__ import annotations

import functools
import zoneinfo
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: Offered first by every zone picker: the zones most people here live in, west to east.
COMMON_ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Dublin",
    "Europe/Lisbon",
    "Europe/Paris",
    "Europe/Brussels",
    "Europe/Amsterdam",
    "Europe/Berlin",
    "Europe/Copenhagen",
    "Europe/Oslo",
    "Europe/Stockholm",
    "Europe/Madrid",
    "Europe/Rome",
    "Europe/Vienna",
    "Europe/Zurich",
    "Europe/Warsaw",
    "Europe/Helsinki",
    "Europe/Athens",
    "Europe/Istanbul",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Toronto",
    "America/Sao_Paulo",
    "Africa/Johannesburg",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
)


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


#: Files in the zone database that are no place a person lives in.
_NOT_PLACES = frozenset({"localtime", "Factory", "posixrules"})


@functools.lru_cache(maxsize=1)
def zone_names() -> tuple[str, ...]:
    """Every IANA zone name for a picker: :data:`COMMON_ZONES` first, then all the others sorted (without
    the ``posix/`` and ``right/`` copies). Nothing is left out."""
    known = {
        n
        for n in zoneinfo.available_timezones()
        if not n.startswith(("posix/", "right/")) and n not in _NOT_PLACES
    }
    known.add("UTC")
    common = [n for n in COMMON_ZONES if n in known]
    return (*common, *sorted(known - set(common)))


def known_zone(name: str | None) -> str | None:
    """``name`` when it is one of the IANA zones every picker offers (:func:`zone_names`), else ``None``:
    for zone names that come from outside (a browser, a form), which may be junk — including names
    zoneinfo would open but that are no zone a person lives in (``localtime``, ``posix/…``)."""
    if not name or len(name) > 64:
        return None
    return name if name in _zone_set() else None


@functools.lru_cache(maxsize=1)
def _zone_set() -> frozenset[str]:
    return frozenset(zone_names())


def format_localtime(value: datetime | None, tz: tzinfo, *, seconds: bool = False) -> str:
    """``29 Nov 2026, 20:25 CET`` (with ``:05`` seconds when asked) — the pages' way of showing a time,
    also in messages built below the web layer; ``""`` for ``None``."""
    if value is None:
        return ""
    local = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(tz)
    # built by hand rather than with strftime (a list page formats three times per row): the same
    # English month abbreviations as strftime's %b in the C locale, whatever the server's locale
    clock = f"{local.hour:02d}:{local.minute:02d}" + (f":{local.second:02d}" if seconds else "")
    return f"{local.day} {_MONTHS[local.month - 1]} {local.year}, {clock} {local.tzname() or ''}"


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
