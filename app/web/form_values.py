"""Submitted form strings turned into schema values, one converter per kind of control, each answering
``(value, None)`` or ``(None, message in plain words)``.

Only standard types here (no app imports), so :mod:`app.web.forms` can use it without a cycle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol
from zoneinfo import ZoneInfo

_INT_RE = re.compile(r"^[+-]?\d{1,30}$")


class Control(Protocol):
    """What a converter needs of a form field."""

    @property
    def kind(self) -> str: ...

    @property
    def python_type(self) -> Any: ...

    @property
    def choice_values(self) -> tuple[Any, ...]: ...


def is_subclass(tp: Any, base: type) -> bool:
    return isinstance(tp, type) and issubclass(tp, base)


def parse_decimal(raw: str) -> Decimal | None:
    text = raw.strip().replace(" ", "").replace("\u00a0", "")
    if text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def parse_local_datetime(raw: str, tz: ZoneInfo) -> datetime | None:
    """``2026-12-01T09:30`` (as ``<input type=datetime-local>`` sends it) in ``tz``, made aware;
    ``None`` when it is not a date and time."""
    try:
        dt = datetime.fromisoformat(raw.strip())
    except ValueError:
        return None
    if not 1970 <= dt.year <= 9000:
        return None
    return dt.replace(tzinfo=tz) if dt.tzinfo is None else dt


Converted = tuple[Any, str | None]


def _integer(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    cleaned = raw.strip().replace(" ", "").replace("\u00a0", "")
    if not _INT_RE.match(cleaned):
        return None, "Enter a whole number, like 42."
    return int(cleaned), None


def _decimal(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    value = parse_decimal(raw.strip())
    if value is None:
        return None, "Enter a number, like 2.5."
    return (str(value) if is_subclass(f.python_type, Decimal) else float(value)), None


def _choice(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    for v in f.choice_values:
        if str(v) == raw.strip():
            return v, None
    return None, "Choose one of the options."


def _date(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    try:
        return date.fromisoformat(raw.strip()).isoformat(), None
    except ValueError:
        return None, "Enter a date, like 2026-12-31."


def _time(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    try:
        return time.fromisoformat(raw.strip()).isoformat(), None
    except ValueError:
        return None, "Enter a time, like 09:30."


def _datetime(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    dt = parse_local_datetime(raw.strip(), tz)
    if dt is None:
        return None, "Enter a date and a time."
    return dt.isoformat(), None


def _lines(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    return [line.strip() for line in raw.split("\n") if line.strip()], None


def _numbers(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    numbers: list[int | float] = []
    whole = f.kind == "integers"
    for part in re.split(r"[\s,;]+", raw.strip()):
        if not part:
            continue
        try:
            numbers.append(int(part) if whole else float(part.replace("_", "")))
        except ValueError:
            example = "160, 640" if whole else "0.5, 2.5"
            kind = "whole number" if whole else "number"
            return None, f"“{part[:20]}” is not a {kind}. Separate the numbers with commas, like {example}."
    return numbers, None


def _json(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    try:
        return json.loads(raw), None
    except ValueError:
        return None, "This must be valid JSON."


_CONVERTERS: dict[str, Callable[[Control, str, ZoneInfo], Converted]] = {
    "integer": _integer,
    "decimal": _decimal,
    "choice": _choice,
    "date": _date,
    "time": _time,
    "datetime": _datetime,
    "list": _lines,
    "integers": _numbers,
    "decimals": _numbers,
    "json": _json,
}


def convert(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    """``(value for the schema, None)`` or ``(None, message)``; text kinds keep the raw string."""
    convert = _CONVERTERS.get(f.kind)
    return convert(f, raw, tz) if convert is not None else (raw, None)
