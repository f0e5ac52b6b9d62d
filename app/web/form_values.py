"""Submitted form strings turned into schema values, one converter per kind of control, each answering
``(value, None)`` or ``(None, message in plain words)``.

Also the one reading of a local date and time in a time zone that every form uses ("Run later",
reschedule, datetime fields: :func:`read_local`): a time the clocks skip is an error that says so, and a
time that happens twice is read as the first one, with a note the page shows.

Only standard types and :mod:`app.localtime` (standard library only) here, so :mod:`app.web.forms` can
use it without a cycle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from app import digits, localtime, typed_json
from app.formatting import isolated, known_zone, zone

TYPED_MAX = 1_000
"""The most of a value a form reads where it only looks something up or shows a preview (the schedule
form's target, its fire times as the admin types). A value a form shows again beside its error is
never cut (:func:`typed_values`)."""


def typed_values(form: Any, names: Iterable[str]) -> dict[str, str]:
    """The form's ``names`` as typed, whole, for a form that shows them again beside its errors (the
    schedule forms, the new-user form, the token forms, a type's limits): a value refused for its length
    comes back as it was sent, the error names its real length, and a second press is refused the same
    way. Cut to a bound here, a 1,500-character token name was refused as "it has 1,500", came back
    holding its first 1,000, and the second press was refused as "it has 1,000", about a value nobody
    typed. (The body's own size limit bounds what a form can send.)"""
    return {name: str(form.get(name) or "") for name in names}


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


def _without_spaces(raw: str) -> str:
    """A typed number without the spaces around and between its digits (``1 000``, a no-break space)."""
    return raw.strip().replace(" ", "").replace("\u00a0", "")


def parse_decimal(raw: str) -> Decimal | None:
    """A number as typed in a form: ASCII digits with an optional sign and a decimal point or comma
    (``2,5``), spaces between digits allowed; ``None`` for anything else (``1_0``, ``１０``, ``1e3``,
    ``nan``: see :mod:`app.digits`)."""
    text = _without_spaces(raw)
    if text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    return digits.decimal(text)


def _zone_name(tz: ZoneInfo) -> str:
    return tz.key or str(tz)


def _gap_error(found: localtime.WallTime, tz: ZoneInfo) -> str:
    assert found.gap_end is not None
    end = found.gap_end.astimezone(tz)
    start = (found.gap_end - timedelta(seconds=1)).astimezone(tz) + timedelta(seconds=1)
    return (
        f"{found.wall:%H:%M} does not exist on {found.wall:%Y-%m-%d} in {_zone_name(tz)}: the clocks jump "
        f"from {start:%H:%M} to {end:%H:%M} {end.tzname()}. Choose a time outside that gap."
    )


def _repeat_note(found: localtime.WallTime, tz: ZoneInfo) -> str:
    first, second = found.instants[0], found.instants[-1]
    return (
        f"{found.wall:%H:%M} on {found.wall:%Y-%m-%d} happens twice in {_zone_name(tz)} (the clocks go back); "
        f"the first was used: {localtime.describe(first, tz)}, not {localtime.describe(second, tz)}."
    )


@dataclass(frozen=True)
class LocalReading:
    """A local date and time read in a zone: the moment (``None`` with an ``error``), and a ``note``
    for a time that happens twice (the first is used)."""

    when: datetime | None
    error: str | None = None
    note: str | None = None


def read_local(wall: datetime, tz: ZoneInfo) -> LocalReading:
    """``wall`` (naive) in ``tz``: an error for a time the clocks skip (02:30 on the day they jump from
    02:00 to 03:00), the first of the two for a time that happens twice, with a note saying so. An aware
    ``wall`` is taken as it is."""
    if wall.tzinfo is not None:
        return LocalReading(wall)
    found = localtime.resolve(wall, tz)
    if found.skipped:
        return LocalReading(None, _gap_error(found, tz))
    when = found.instants[0].astimezone(tz)
    return LocalReading(when, note=_repeat_note(found, tz) if found.repeated else None)


def parse_local_datetime(raw: str, tz: ZoneInfo) -> LocalReading:
    """``2026-12-01T09:30`` (as ``<input type=datetime-local>`` sends it) in ``tz``; an error when it is
    not a date and time, or names a time the clocks skip (see :func:`read_local`)."""
    try:
        dt = datetime.fromisoformat(raw.strip())
    except ValueError:
        return LocalReading(None, "Enter a date and a time.")
    if not 1970 <= dt.year <= 9000:
        return LocalReading(None, "Enter a date and a time.")
    return read_local(dt, tz)


def datetime_notes(fields: Any, form: Any, tz: ZoneInfo) -> list[str]:
    """The notes of a form's datetime fields whose time happens twice (see :func:`read_local`)."""
    notes = []
    for f in fields:
        raw = form.get(f.name) if f.kind == "datetime" else None
        if isinstance(raw, str) and raw.strip():
            note = parse_local_datetime(raw, tz).note
            if note:
                notes.append(f"{f.label}: {note}")
    return notes


def parse_run_at(date_raw: str | None, time_raw: str | None, tz_name: str | None) -> LocalReading:
    """The job form's optional "Run at" and the reschedule form: ``when`` is ``None`` without an
    ``error`` when both fields are empty (run now).

    A date without a time (or the reverse), an unknown time zone or a time the clocks skip is an
    error. Whether the moment has passed is decided by the action, on the database's clock, the same
    check the JSON API gets."""
    d = (date_raw or "").strip()
    t = (time_raw or "").strip()
    if not d and not t:
        return LocalReading(None)
    if not d:
        return LocalReading(None, "Choose a date as well as a time, or leave both empty to start now.")
    if not t:
        return LocalReading(None, "Choose a time as well as a date, or leave both empty to start now.")
    # The zones the picker offers, as for schedules and the account (formatting.known_zone): zoneinfo
    # also opens "localtime" (whichever zone the web host is set to), "Factory", posix/ and right/ copies
    # (the latter count leap seconds, so their times are off by 27 s).
    name = (tz_name or "UTC").strip() or "UTC"
    if known_zone(name) is None:
        return LocalReading(None, f"Choose a time zone from the list: {name[:60]!r} is not one.")
    tz = zone(name)
    try:
        day = date.fromisoformat(d)
        clock = time.fromisoformat(t)
    except ValueError:
        return LocalReading(None, "Enter a date like 2026-12-31 and a time like 09:30.")
    if not 1970 <= day.year <= 9000:
        return LocalReading(None, "Choose a date between 1970 and 9000.")
    return read_local(datetime.combine(day, clock.replace(tzinfo=None)), tz)


Converted = tuple[Any, str | None]


def whole_number(raw: str) -> int | None:
    """A whole number as typed in a form (spaces between its digits allowed), or ``None`` when it is not
    one. Every form's whole number is read here: ASCII digits with an optional sign (:func:`app.digits.signed`),
    so neither ``1_0`` nor a full-width ``１０`` is read as 10; ``str.isdigit`` also accepts digits ``int``
    cannot read ("²"), and ``int`` refuses more than 4,300 digits — either was a 500."""
    return digits.signed(_without_spaces(raw))


TICKED = frozenset({"true", "on", "1", "yes"})
"""What a ticked checkbox sends: the generated forms' boxes send ``true``, a box without a value ``on``."""
NOT_TICKED = frozenset({"", "false", "off", "0", "no"})
NOT_A_CHECKBOX = "Tick the box or leave it empty."


def checkbox(raw: Any) -> bool | None:
    """A checkbox as sent: ``True`` ticked, ``False`` not sent (or sent as an explicit no), ``None`` for
    any other value (``urgent=maybe``), which a box never sends: an error, not a guess. Every form's
    checkbox is read here."""
    if raw is None:
        return False
    value = raw.strip().lower() if isinstance(raw, str) else None
    if value in TICKED:
        return True
    if value in NOT_TICKED:
        return False
    return None


def count(raw: Any) -> int | None:
    """A count a form carries back (how many jobs a confirmation showed): ``None`` when not sent.

    Raises:
        ValueError: sent but not a whole number of at least 0.
    """
    text = raw if isinstance(raw, str) else ""
    if raw is None or not text.strip():
        return None
    value = whole_number(text)
    if value is None or value < 0:
        raise ValueError(text)
    return value


def _integer(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    value = whole_number(raw)
    if value is None:
        return None, "Enter a whole number, like 42."
    return value, None


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
    reading = parse_local_datetime(raw, tz)
    if reading.when is None:
        return None, reading.error
    return reading.when.isoformat(), None


def _lines(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    return [line.strip() for line in raw.split("\n") if line.strip()], None


def _numbers(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    numbers: list[int | float] = []
    whole = f.kind == "integers"
    for part in re.split(r"[\s,;]+", raw.strip()):
        if not part:
            continue
        number = digits.signed(part) if whole else digits.decimal(part)
        if number is None:
            example = "160, 640" if whole else "0.5, 2.5"
            kind = "whole number" if whole else "number"
            return (
                None,
                f"“{isolated(part[:20])}” is not a {kind}. Separate the numbers with commas, like {example}.",
            )
        numbers.append(number if isinstance(number, int) else float(number))
    return numbers, None


def _json(f: Control, raw: str, tz: ZoneInfo) -> Converted:
    try:
        return typed_json.parse(raw), None
    except typed_json.DuplicateKey as exc:
        return None, str(exc)
    except ValueError as exc:
        if str(exc) == typed_json.TOO_DEEP:  # the person's input, not a server fault
            return None, "This must be valid JSON, nested less deeply."
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
