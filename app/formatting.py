"""What people read besides error messages: sizes, durations and field names in words, and times in a
person's own zone, with its abbreviation. Used by the pages and by messages built below the web layer
(limits, approvals).
"""

from __future__ import annotations

import functools
import re
import unicodedata
import zoneinfo
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo
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


def plural(n: object, word: str) -> str:
    """``plural(1, "row")`` → ``"1 row"``, ``plural(3, "row")`` → ``"3 rows"``: a count and its noun,
    which agree (the noun takes an ``s``; every noun counted so far does); ``1,500 rows`` with the
    thousands separator every number in a message has."""
    said = f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else str(n)
    return f"{said} {word}" if n == 1 else f"{said} {word}s"


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


def format_sizes(size: int, limit: int) -> tuple[str, str]:
    """``size`` and the ``limit`` it is measured against, in words that tell them apart: rounded as
    :func:`format_bytes` rounds, unless that makes two different sizes read the same ("1 KiB; the limit
    is 1 KiB" for 1,025 bytes against 1,024), when both are given in exact bytes."""
    said, most = format_bytes(size), format_bytes(limit)
    if said == most and size != limit:
        return f"{size:,} bytes", f"{limit:,} bytes"
    return said, most


def format_duration(value: float | timedelta | None) -> str:
    """Seconds (or a timedelta) as ``850 ms`` / ``1.2 s`` / ``42 s`` / ``3 min 5 s`` / ``2 h 10 min`` /
    ``3 days 4 h`` / ``about 5 months`` (:func:`span_words`); ``""`` for None."""
    if value is None:
        return ""
    secs = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if secs < 1:
        return f"{round(secs * 1000)} ms"
    if secs < 60:
        return f"{secs:.0f} s" if secs >= 10 else f"{secs:.1f} s".replace(".0 s", " s")
    minutes, s = divmod(round(secs), 60)
    if minutes < 60:
        return f"{minutes} min {s} s" if s else f"{minutes} min"
    hours, m = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {m} min" if m else f"{hours} h"
    days, h = divmod(hours, 24)
    if days < MONTHS_FROM_DAYS:
        return f"{days} days {h} h" if h else f"{days} days"
    return span_words(secs / 86400)


MONTHS_FROM_DAYS = 60
"""From this many days on, a span is told in months (then years), as a person would say it."""
YEARS_FROM_DAYS = 548
"""From about a year and a half on, a span is told in years."""


def span_words(days: float) -> str:
    """A span of ``days`` days (at least about one) in the words a person uses for it: ``5 days``, ``about
    3 months``, ``about 6,974 years`` — never ``2547226 days``. Used by every wording of a far time, past
    or future (:func:`format_duration`, ``app.web.format_ago``)."""
    if days < MONTHS_FROM_DAYS:
        return plural(max(1, round(days)), "day")
    if days < YEARS_FROM_DAYS:
        return f"about {round(days / 30.436875)} months"
    return f"about {round(days / 365.2425):,} years"


def url_host(host: str) -> str:
    """``host`` as a URL writes it, for a message: an IPv6 literal in brackets (``[fe80::1]``), so that a
    port after it (``[fe80::1]:8080``) is not read as part of the address; a name or an IPv4 address as
    it is."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def host_port(host: str, port: object) -> str:
    """``host:port`` for a message, with :func:`url_host`'s brackets (``[::1]:8080``, ``mail.example:25``)."""
    return f"{url_host(host)}:{port}"


ACRONYMS = frozenset(
    "api cpu csv dns gif html http https id ip jpeg jpg json ok pdf png smtp sql svg tls uri url utc uuid xml zip".split()
)
"""Words a label writes in capitals: ``final_url`` reads "Final URL", not "Final url"."""

_WORD_SPLIT = re.compile(r"[_\-\s]+")


def label_words(name: str) -> str:
    """A field name in words: ``max_items`` → "Max items", ``final_url`` → "Final URL", ``ok`` → "OK",
    ``csv_rows`` → "CSV rows". Other words keep their case."""
    words = [w.upper() if w.lower() in ACRONYMS else w for w in _WORD_SPLIT.split(name.strip()) if w]
    if not words:
        return name
    return " ".join([words[0][:1].upper() + words[0][1:], *words[1:]])


_UNITS = (("_ms", 0.001), ("_msecs", 0.001), ("_secs", 1.0), ("_seconds", 1.0), ("_bytes", None))
"""Name endings that give a number's unit, and the factor to seconds (``None``: bytes)."""


def _unit(key: str) -> tuple[str, float | None] | None:
    if key == "bytes":
        return "", None
    for suffix, factor in _UNITS:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)], factor
    return None


def unit_label(key: str) -> str | None:
    """The label of a ``snake_case`` field whose name ends in its unit, without the unit (the value says
    it, :func:`unit_value`): ``elapsed_ms`` → "Elapsed", ``timeout_secs`` → "Timeout", ``body_bytes``
    → "Body size", ``bytes`` → "Size"; ``None`` for any other name."""
    unit = _unit(key)
    if unit is None:
        return None
    stem, factor = unit
    if factor is not None:
        return label_words(stem)
    return label_words(f"{stem}_size") if stem and not stem.endswith("size") else label_words(stem or "size")


def unit_value(key: str, value: object) -> str | None:
    """A number in its field's unit (:func:`unit_label`), in words: ``elapsed_ms=1234`` → "1.2 s",
    ``body_bytes=1536`` → "1.5 KiB"; ``None`` when ``key`` names no unit or ``value`` is no number."""
    unit = _unit(key)
    if unit is None or isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    factor = unit[1]
    return format_duration(value * factor) if factor is not None else format_bytes(int(value))


_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")


def key_label(key: str) -> str:
    """A result key as a label: a processor's ``snake_case`` field in words (``status_code`` → "Status
    code", ``final_url`` → "Final URL", ``elapsed_ms`` → "Elapsed", its value then saying "1.2 s");
    anything else exactly as written (an HTTP header ``X-Request-Id`` stays ``X-Request-Id``, not
    "X Request Id")."""
    if not _SNAKE.match(key):
        return key
    return unit_label(key) or label_words(key)


def key_labels(keys: Sequence[str]) -> dict[str, str]:
    """:func:`key_label` of each of an object's keys; a unit-less label that two keys would share
    (``bytes`` and ``size`` both reading "Size") keeps the unit's word instead."""
    labels = {k: key_label(k) for k in keys}
    taken = [label.lower() for label in labels.values()]
    return {
        k: label_words(k) if taken.count(label.lower()) > 1 and _SNAKE.match(k) else label
        for k, label in labels.items()
    }


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


def in_zone(value: datetime, tz: tzinfo) -> datetime:
    """``value`` (naive: UTC) as ``tz``'s clock reads it — the one way every page, message and form
    converts a time for a person to read. Near the ends of the calendar the zone's clock may be past
    them (9999-12-31T23:59:59Z is already year 10000 in Berlin), which ``datetime`` cannot hold: such a
    moment is given in UTC, or as it was written when even UTC is past them (``…-14:00``), rather than
    failing the page it is on."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    for target in (tz, UTC):
        try:
            return aware.astimezone(target)
        except (OverflowError, ValueError):
            continue
    return aware


def format_localtime(value: datetime | None, tz: tzinfo, *, seconds: bool = False) -> str:
    """``29 Nov 2026, 20:25 CET`` (with ``:05`` seconds when asked) — the pages' way of showing a time,
    also in messages built below the web layer; ``""`` for ``None``."""
    if value is None:
        return ""
    local = in_zone(value, tz)
    # built by hand rather than with strftime (a list page formats three times per row): the same
    # English month abbreviations as strftime's %b in the C locale, whatever the server's locale
    clock = f"{local.hour:02d}:{local.minute:02d}" + (f":{local.second:02d}" if seconds else "")
    return f"{local.day} {_MONTHS[local.month - 1]} {local.year}, {clock} {local.tzname() or ''}"


_ISO_MOMENT = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})")
"""A moment as ISO 8601 text with its offset, as the queue writes one into an event's message."""


def local_moments(text: str, tz: tzinfo) -> str:
    """``text`` with each ISO moment in it said as :func:`format_localtime` says it in ``tz``
    (``run at 2027-11-07T01:30:00-04:00`` → ``run at 7 Nov 2027, 06:30 CET``)."""

    def local(m: re.Match[str]) -> str:
        try:
            moment = datetime.fromisoformat(m.group(0).replace("Z", "+00:00"))
        except ValueError:
            return m.group(0)
        return format_localtime(moment, tz).strip()

    return _ISO_MOMENT.sub(local, text) if "T" in text else text


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


# --- text direction -----------------------------------------------------------------------------------
# A name, a file name or an error can hold Unicode's directional formatting characters. Left open, an
# override (U+202E) reverses everything after it up to the end of the line or block — the label beside
# a job name, the rest of an alert's line — which lets a name pose as other words. The rule, for every
# place that shows such text: what a value opens is closed at its end, and a closer it did not open is
# dropped (:func:`balanced`, idempotent; a form's own fields show what was typed instead, ``as_typed`` in
# :mod:`app.web`, since a field shows its value in its own box and sends it back), and where
# the output is plain text the value is also set apart with FSI … PDI (:func:`isolated`), as ``<bdi>``
# or ``unicode-bidi: isolate`` set it apart on a page.

_EMBEDDINGS = "\u202a\u202b\u202d\u202e"  # LRE RLE LRO RLO, closed by PDF
_PDF = "\u202c"
_ISOLATES = "\u2066\u2067\u2068"  # LRI RLI FSI, closed by PDI
_PDI = "\u2069"
_DIRECTIONAL = re.compile(f"[{_EMBEDDINGS}{_PDF}{_ISOLATES}{_PDI}]")
FSI = "\u2068"
PDI = _PDI


def balanced(value: str) -> str:
    """``value`` with every directional embedding, override and isolate it opens closed at its end, and
    every PDF or PDI that closes nothing it opened removed — so it cannot change the direction of text
    after it. Follows the Unicode bidi algorithm's matching: a PDI closes the innermost open isolate
    together with the embeddings opened inside it; a PDF closes an embedding only within the same
    isolate."""
    if value.isascii() or _DIRECTIONAL.search(value) is None:
        return value
    out: list[str] = []
    stack: list[str] = []  # "e" for an embedding or override, "i" for an isolate
    # Counted apart, not looked for in the stack: a value of many embeddings followed by many PDIs
    # searched the whole stack at each PDI, and one job input of a few hundred KB took the page (and the
    # event loop it renders on) tens of seconds.
    isolates = 0
    for ch in value:
        if ch in _EMBEDDINGS:
            stack.append("e")
        elif ch in _ISOLATES:
            stack.append("i")
            isolates += 1
        elif ch == _PDF:
            if not stack or stack[-1] != "e":
                continue
            stack.pop()
        elif ch == _PDI:
            if not isolates:
                continue
            while stack.pop() != "i":
                pass
            isolates -= 1
        out.append(ch)
    out.extend(_PDI if kind == "i" else _PDF for kind in reversed(stack))
    return "".join(out)


_TURNING = frozenset({"R", "AL", "AN", "LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})


def isolated(value: str) -> str:
    """``value`` for plain text beside other words (an alert's line, an e-mail): :func:`balanced` and set
    apart with FSI … PDI, so its direction is its own and neither leaks out nor is changed by its
    neighbours. Text with no right-to-left letter and no direction control is returned as it is: it
    cannot turn anything, and stays byte for byte what was typed."""
    if value.isascii() or not any(unicodedata.bidirectional(ch) in _TURNING for ch in value):
        return value
    return f"{FSI}{balanced(value)}{PDI}"


def isolated_within(value: str, limit: int, mark: str = "…") -> str:
    """:func:`isolated` ``value`` in at most ``limit`` characters, for a name stored beside our words (a
    job's title "<batch name> · row 3"): when it does not fit, ``value`` is cut and ends in ``mark``
    inside the isolate. A name with no right-to-left letter or control reads as ``value[: limit - 1] +
    mark`` did before, byte for byte."""
    shown = isolated(value)
    if len(shown) <= limit:
        return shown
    cut = value[: limit - len(mark)]
    while len(shown := isolated(cut + mark)) > limit:  # closers and FSI … PDI take room too
        cut = cut[: len(cut) - (len(shown) - limit)]
    return shown


#: :func:`read_turning_class` for the Unicode data it was read from (:data:`_TURNING_CLASS_DATA`): reading
#: it walks every code point and takes about 0.2 s, which a worker would otherwise spend on its first
#: completion, in the middle of its first jobs.
_TURNING_CLASS = (
    "[\u05be\u05c0\u05c3\u05c6\u05d0-\u05ea\u05ef-\u05f4\u0600-\u0605\u0608\u060b\u060d\u061b-\u064a"
    "\u0660-\u0669\u066b-\u066f\u0671-\u06d5\u06dd\u06e5-\u06e6\u06ee-\u06ef\u06fa-\u070d\u070f-"
    "\u0710\u0712-\u072f\u074d-\u07a5\u07b1\u07c0-\u07ea\u07f4-\u07f5\u07fa\u07fe-\u0815\u081a\u0824"
    "\u0828\u0830-\u083e\u0840-\u0858\u085e\u0860-\u086a\u0870-\u088e\u0890-\u0891\u08a0-\u08c9\u08e2"
    "\u200f\u202a-\u202e\u2066-\u2069\ufb1d\ufb1f-\ufb28\ufb2a-\ufb36\ufb38-\ufb3c\ufb3e\ufb40-\ufb41"
    "\ufb43-\ufb44\ufb46-\ufbc2\ufbd3-\ufd3d\ufd50-\ufd8f\ufd92-\ufdc7\ufdf0-\ufdfc\ufe70-\ufe74"
    "\ufe76-\ufefc\U00010800-\U00010805\U00010808\U0001080a-\U00010835\U00010837-\U00010838\U0001083c"
    "\U0001083f-\U00010855\U00010857-\U0001089e\U000108a7-\U000108af\U000108e0-\U000108f2\U000108f4-"
    "\U000108f5\U000108fb-\U0001091b\U00010920-\U00010939\U0001093f\U00010980-\U000109b7\U000109bc-"
    "\U000109cf\U000109d2-\U00010a00\U00010a10-\U00010a13\U00010a15-\U00010a17\U00010a19-\U00010a35"
    "\U00010a40-\U00010a48\U00010a50-\U00010a58\U00010a60-\U00010a9f\U00010ac0-\U00010ae4\U00010aeb-"
    "\U00010af6\U00010b00-\U00010b35\U00010b40-\U00010b55\U00010b58-\U00010b72\U00010b78-\U00010b91"
    "\U00010b99-\U00010b9c\U00010ba9-\U00010baf\U00010c00-\U00010c48\U00010c80-\U00010cb2\U00010cc0-"
    "\U00010cf2\U00010cfa-\U00010d23\U00010d30-\U00010d39\U00010e60-\U00010e7e\U00010e80-\U00010ea9"
    "\U00010ead\U00010eb0-\U00010eb1\U00010f00-\U00010f27\U00010f30-\U00010f45\U00010f51-\U00010f59"
    "\U00010f70-\U00010f81\U00010f86-\U00010f89\U00010fb0-\U00010fcb\U00010fe0-\U00010ff6\U0001e800-"
    "\U0001e8c4\U0001e8c7-\U0001e8cf\U0001e900-\U0001e943\U0001e94b\U0001e950-\U0001e959\U0001e95e-"
    "\U0001e95f\U0001ec71-\U0001ecb4\U0001ed01-\U0001ed3d\U0001ee00-\U0001ee03\U0001ee05-\U0001ee1f"
    "\U0001ee21-\U0001ee22\U0001ee24\U0001ee27\U0001ee29-\U0001ee32\U0001ee34-\U0001ee37\U0001ee39"
    "\U0001ee3b\U0001ee42\U0001ee47\U0001ee49\U0001ee4b\U0001ee4d-\U0001ee4f\U0001ee51-\U0001ee52"
    "\U0001ee54\U0001ee57\U0001ee59\U0001ee5b\U0001ee5d\U0001ee5f\U0001ee61-\U0001ee62\U0001ee64"
    "\U0001ee67-\U0001ee6a\U0001ee6c-\U0001ee72\U0001ee74-\U0001ee77\U0001ee79-\U0001ee7c\U0001ee7e"
    "\U0001ee80-\U0001ee89\U0001ee8b-\U0001ee9b\U0001eea1-\U0001eea3\U0001eea5-\U0001eea9\U0001eeab-"
    "\U0001eebb]"
)
_TURNING_CLASS_DATA = "14.0.0"


@functools.cache
def turning_class() -> str:
    """A regular-expression bracket of every character :func:`isolated` counts as turning (a right-to-left
    letter, an Arabic number or a direction control) by this Python's Unicode data: for a statement that
    sets user text apart in SQL (``jobdesk_isolated``, migration 0023), so that it isolates exactly what
    :func:`isolated` does. Every such character is outside ASCII, so none is special in a bracket, for
    PostgreSQL's regular expressions as for :mod:`re`. The bracket kept for this Python's Unicode data when
    there is one, else read from the data."""
    if unicodedata.unidata_version == _TURNING_CLASS_DATA:
        return _TURNING_CLASS
    return read_turning_class()


def read_turning_class() -> str:
    """:func:`turning_class` read from this Python's Unicode data, one code point after another."""
    ranges: list[str] = []
    start: int | None = None
    for code in range(0x80, 0x110001):
        turning = code <= 0x10FFFF and unicodedata.bidirectional(chr(code)) in _TURNING
        if turning and start is None:
            start = code
        elif not turning and start is not None:
            end = code - 1
            ranges.append(chr(start) if start == end else f"{chr(start)}-{chr(end)}")
            start = None
    return f"[{''.join(ranges)}]"
