"""Cron times in a time zone, free of any clock: a cron expression (croniter) names wall-clock times in
the schedule's zone, and :func:`next_fire` says when each really fires across daylight-saving changes.
The schedules themselves are :mod:`app.schedules` (rows) and :mod:`app.schedule_firing`; "now" is always
given by the caller, read from the database's clock.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app import localtime
from app.digits import whole
from app.errors import BadInput
from app.formatting import isolated_within, known_zone

if TYPE_CHECKING:
    from croniter import croniter

MAX_CATCH_UP = 100
"""At most this many missed fire times are back-filled at once for a ``catch_up`` schedule."""


def zone(name: str) -> ZoneInfo:
    """Raises BadInput for an unknown IANA time-zone name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name longer than a file name
        raise BadInput.field(
            "timezone", f"unknown time zone {name[:60]!r}; use a name like Europe/Berlin or UTC"
        ) from None


def check_zone(name: str) -> ZoneInfo:
    """The zone a new or changed schedule is read in: one of the IANA zones the pickers offer
    (:func:`app.formatting.known_zone`). zoneinfo also opens files of the zone database that are no
    place (``localtime``, the host's own zone, which differs between the hosts that fire schedules;
    ``right/…``, whose clocks count leap seconds and fire 27 seconds early; ``posix/…``, ``Factory``).
    Schedules already stored are read with :func:`zone`.

    Raises:
        BadInput: (``timezone``) any other name.
    """
    if known_zone(name) is None:
        raise BadInput.field(
            "timezone", f"unknown time zone {name[:60]!r}; use a name like Europe/Berlin or UTC"
        )
    return zone(name)


_CRON_ERRORS = (ValueError, KeyError)
"""What croniter raises for an expression it cannot read (its own errors are ValueErrors)."""
MAX_WALL_STEPS = 10_000
"""At most this many cron times are looked at for one next fire (the repeated hour of a schedule that
fires every second is skipped in one jump, so this is never reached by a valid schedule)."""


NEVER_RUNS = "this schedule would never run: no date matches its day, month and weekday fields"


def _bad_cron(cron: str) -> BadInput:
    """An expression croniter cannot read (or finds no date for), in our words, never croniter's own
    (``[61 * * * *] is not acceptable, out of range``, ``Exactly 5, 6 or 7 columns has to be specified
    for iterator expression.``): what :func:`check_cron` would say of it, whether it is being saved or was
    stored before a rule existed (or written by SQL) and read again by a page, the API or a firing."""
    normal = " ".join(cron.split())
    return BadInput.field("cron", _rule_problem(normal) or _out_of_range(normal) or _unreadable(normal))


def _unreadable(cron: str) -> str:
    return (
        f"{cron[:60]!r} cannot be read as a cron expression; write five fields: minute hour day month "
        "weekday, e.g. '*/15 * * * *'"
    )


def _walls(cron: str, start: datetime) -> croniter:
    """croniter over naive wall-clock times (no zone: croniter's own handling of daylight saving time
    fires a repeated 01:30 twice; the zone is applied by :func:`next_fire`)."""
    # Imported here: every worker imports this module as it starts, and croniter (with dateutil) was a
    # fiftieth of that start, for schedules an idle worker may never fire (python -X importtime).
    from croniter import croniter

    try:
        return croniter(cron, start)
    except _CRON_ERRORS:
        raise _bad_cron(cron) from None


def next_fire(cron: str, tz: str, after: datetime) -> datetime:
    """The first fire time of ``cron`` in zone ``tz`` strictly after ``after``, as UTC.

    The cron expression names wall-clock times in ``tz``, and each wall-clock time fires at most once:

    * a time that happens twice (clocks go back) fires at its first occurrence only, so ``30 1 * * *``
      in America/New_York fires at 01:30 EDT on the fall-back day, not again at 01:30 EST, and
      ``*/15 * * * *`` fires 01:00–01:45 once (in summer time), then 02:00;
    * a time that does not happen (clocks go forward) fires once at the moment the clocks jump to
      (03:00 EDT for ``30 2 * * *`` in New York), together with any other skipped times of the same gap,
      so a daily job still runs that day, once.

    Raises:
        BadInput: an invalid cron expression (the message shows the expected form).
    """
    where = zone(tz)
    after = after.astimezone(UTC)
    walls = _walls(cron, after.astimezone(where).replace(tzinfo=None))
    try:
        for _ in range(MAX_WALL_STEPS):
            wall = walls.get_next(datetime)
            local = localtime.resolve(wall, where)
            if local.first > after:
                return local.first
            if local.repeated:
                # the rest of the repeated hour fired the first time round: go on after it
                walls = _walls(cron, localtime.repeat_end(wall, where) - timedelta(seconds=1))
    except _CRON_ERRORS as exc:
        if "failed to find next date" in str(exc):  # croniter's words for a date no month has
            raise BadInput.field("cron", NEVER_RUNS) from None
        raise _bad_cron(cron) from None
    raise BadInput.field("cron", NEVER_RUNS)


def fired_title(name: str, at: datetime) -> str:
    """The title of the job a schedule starts: its name and the due time, the name shortened so that the
    title stays within the 200 characters a job title may have (a trial found a 190-character name
    accepted, then every firing refused and the schedule disabled), and set apart in its own direction,
    so that a name holding U+202E cannot reverse the time after it."""
    suffix = f" ({at:%Y-%m-%d %H:%M} UTC)"
    return isolated_within(name, 200 - len(suffix)) + suffix


_CHECK_FROM = datetime(2000, 1, 1, tzinfo=UTC)
"""Where :func:`check_cron` looks for a first fire time (any instant does; no clock is read)."""


MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The usual crontab shorthands, stored as the five fields they stand for (``@reboot`` names no time)."""


def check_cron(cron: str) -> str:
    """A normalised cron expression, or BadInput with a message that shows the expected form.
    Five fields (minute hour day month weekday), as the README documents, or a shorthand of
    :data:`MACROS`. croniter also reads a sixth field as seconds (``* * * * * *`` fires every second):
    refused, on every path (pages, API, schedules defined in code), since it is no crontab a reader
    knows and a schedule that fires that often floods the queue. A row stored before this rule still
    fires as written (:func:`next_fire` reads it)."""
    cron = " ".join((cron or "").split())
    if not cron:
        raise BadInput.field("cron", "give a cron expression, e.g. '0 9 * * 1-5' (weekdays at 9:00)")
    if cron.startswith("@") and cron.lower() in MACROS:
        return MACROS[cron.lower()]
    problem = _rule_problem(cron) or _out_of_range(cron)
    if problem is not None:
        raise BadInput.field("cron", problem)
    next_fire(cron, "UTC", _CHECK_FROM)  # what croniter still refuses, in our words (_bad_cron)
    return cron


def _rule_problem(cron: str) -> str | None:
    """What :func:`check_cron`'s own rules find wrong with ``cron`` (spaces made single), if anything."""
    if cron.startswith("@"):
        if cron.lower() in MACROS:
            return None
        return (
            f"{cron[:20]!r} is not a time; use {', '.join(MACROS)} or five fields: minute hour day "
            "month weekday, e.g. '0 9 * * 1-5'"
        )
    fields = len(cron.split())
    if fields != 5:
        return (
            f"a cron expression has five fields: minute hour day month weekday, e.g. '*/15 * * * *'; "
            f"this one has {fields}"
            + (
                " (a sixth field for seconds is not taken: a schedule fires at most once a minute)"
                if fields == 6
                else ""
            )
        )
    backwards = _backward_range(cron)
    if backwards is not None:
        backwards = (
            f"{backwards[:20]!r} runs backwards; write a range low to high, or two ranges (hours around "
            "midnight: '22-23,0-2')"
        )
    return (
        _foreign_word(cron) or backwards or _absurd_step(cron) or _never_fires(cron) or _odd_character(cron)
    )


_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
"""The values each field takes (a weekday's 7 is Sunday, as its 0)."""
_NUMBER = re.compile(r"\d+")


def _out_of_range(cron: str) -> str | None:
    """The first number of a five-field ``cron`` outside its field's values (``61 * * * *``), in words."""
    fields = cron.split()
    if len(fields) != 5:
        return None
    for index, field in enumerate(fields):
        name = _FIELDS[index][0]
        low, high = _RANGES[index]
        for item in field.split(","):
            for number in _NUMBER.findall(item.split("/", 1)[0]):
                value = whole(number)  # None for digits of other scripts, or too many to read
                if value is None or not low <= value <= high:
                    return (
                        f"{item[:20]!r} in the {name} field is out of range: {name}s run from {low} to {high}"
                    )
    return None


_FIELDS = (("minute", 60), ("hour", 24), ("day", 31), ("month", 12), ("weekday", 7))
"""Each field's name and how many values it has: a step (``*/15``) is at most that."""
_MONTHS = "January February March April May June July August September October November December".split()
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _absurd_step(cron: str) -> str | None:
    """What is wrong with the first step (after ``/``) that is not a whole number from 1 to its field's
    number of values (``0-59/99999999999999999999``, ``*/0``), if any: croniter took a step of any size."""
    for (name, count), field in zip(_FIELDS, cron.split(), strict=False):
        for item in field.split(","):
            if "/" not in item:
                continue
            step = item.split("/", 1)[1]
            number = whole(step)
            if number is None or not 1 <= number <= count:
                return (
                    f"{item[:30]!r}: the step after '/' in the {name} field must be a whole number "
                    f"from 1 to {count}"
                )
    return None


_WORDS = re.compile(r"[A-Za-z]+")
_MARKS = frozenset({"l", "w"})
_PLAIN = re.compile(r"[0-9A-Za-z*,/-]+")
"""What a field of the five plain fields holds: numbers, names, ``*``, lists, ranges and steps."""


def _foreign_word(cron: str) -> str | None:
    """Why a field holds a word or mark no plain crontab has, if one does. croniter reads ``R`` as a
    random value, drawn again each time the next fire is computed, so ``0 R * * *`` fired at another hour
    each day (twice on some days, on none on others) and never at the times its preview showed; ``H`` (a
    hashed value) it refuses in words about a ``hash_id``. Quartz's ``L`` (last), ``W`` (nearest weekday)
    and ``#`` (the nth weekday of the month) are refused too, and so is its ``?`` ("no specific value"),
    which croniter reads as ``*``: the README documents five plain fields, a crontab has none of them, and
    one written to a crontab or read by someone who knows crontabs does not mean what croniter makes of
    it. Numbers, ``*``, ranges, steps, and month and weekday names are what a crontab takes."""
    for index, field in enumerate(cron.split()):
        name = _FIELDS[index][0]
        if "?" in field:
            return (
                f"{field[:20]!r} in the {name} field: '?' is not taken; Jobdesk reads five plain crontab "
                "fields, without '?' (no specific value): write '*' for every value"
            )
        allowed = _NAMES.get(index, {}).keys()
        marks = [w for w in _WORDS.findall(field) if set(w.lower()) <= _MARKS and w.lower() not in allowed]
        if "#" in field or marks:
            mark = "#" if "#" in field else marks[0][0]
            return (
                f"{field[:20]!r} in the {name} field: {mark!r} is not taken; Jobdesk reads five plain "
                "crontab fields, without 'L' (last), 'W' (nearest weekday) or '#' (nth weekday of the month): "
                "for the last day of the month, run on days 28-31 and check the date in the job"
            )
        for word in _WORDS.findall(field):
            if word.lower() not in allowed:
                return (
                    f"{word[:10]!r} in the {name} field is not a cron value; write numbers, "
                    "'*', ranges and steps ('0 9 * * 1-5'), and names of months ('jan') in the month field "
                    "and of weekdays ('mon') in the weekday field"
                )
    return None


def _odd_character(cron: str) -> str | None:
    """Why a field holds a character no plain field has (``%``, a digit of another script), if one does."""
    for index, field in enumerate(cron.split()):
        if not _PLAIN.fullmatch(field):
            odd = next(c for c in field if not _PLAIN.fullmatch(c))
            return (
                f"{field[:20]!r} in the {_FIELDS[index][0]} field: {odd!r} is not a cron value; write "
                "numbers, '*', ranges and steps ('0 9 * * 1-5'), and names of months and weekdays"
            )
    return None


def _numbers(field: str, names: dict[str, int]) -> set[int] | None:
    """The values a day or month field of plain numbers, names and ranges names; ``None`` for any other."""
    found: set[int] = set()
    for item in field.split(","):
        bounds = [names.get(b.lower(), b) for b in item.split("-")]
        numbers = [n for b in bounds if (n := b if isinstance(b, int) else whole(b)) is not None]
        if len(bounds) > 2 or len(numbers) != len(bounds):
            return None
        low, high = numbers[0], numbers[-1]
        found.update(range(low, high + 1))
    return found


def _never_fires(cron: str) -> str | None:
    """Why a schedule whose days of the month no month it names has never fires (``0 0 31 2 *``), in
    words; ``None`` when it does fire, or when its weekday field is set (a day fires on either)."""
    _, _, day, month, weekday = cron.split()
    if weekday != "*":
        return None
    days = _numbers(day, {})
    months = _numbers(month, _NAMES[3]) if month != "*" else set(range(1, 13))
    if not days or not months or any(m < 1 or m > 12 for m in months):
        return None
    if min(days) <= max(_MONTH_DAYS[m - 1] for m in months):
        return None
    # every month named (at most five have fewer than 31 days), so none is left out without a word
    names = [_MONTHS[m - 1] for m in sorted(months)]
    named = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return (
        f"never fires: {named} {'has' if len(months) == 1 else 'have'} no day {min(days)}; "
        "this schedule would never run"
    )


_NAMES = {
    3: {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())},
    4: {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())},
}
"""Month and weekday names (fields 4 and 5) as their numbers."""


def _backward_range(cron: str) -> str | None:
    """The first range of ``cron`` whose start is after its end (``1-0``), if any. croniter reads one as
    running round the end of the field (``22-2``: 22, 23, 0, 1, 2), crontab refuses it, and either way
    the schedule would not fire when its reader expects."""
    for index, field in enumerate(cron.split()):
        for item in field.split(","):
            bounds = item.split("/", 1)[0].split("-")
            if len(bounds) != 2:
                continue
            names = _NAMES.get(index, {})
            low, high = (names.get(b.lower(), b) for b in bounds)
            first, last = whole(str(low)), whole(str(high))
            if first is not None and last is not None and first > last:
                return item
    return None


def upcoming(cron: str, tz: str, after: datetime, count: int = 5) -> list[datetime]:
    """The next ``count`` fire times of ``cron`` in ``tz`` after ``after`` (UTC), each as :func:`next_fire`
    finds it, so a preview across a daylight-saving change shows what will really happen.

    Raises:
        BadInput: an invalid cron expression or time zone.
    """
    cron = check_cron(cron)  # a preview shows what saving would keep, so the same expressions only
    times: list[datetime] = []
    at = after
    for _ in range(count):
        at = next_fire(cron, tz, at)
        times.append(at)
    return times


def fire_times(
    cron: str, tz: str, due: datetime, now: datetime, catch_up: bool
) -> tuple[list[datetime], datetime]:
    """The fire times to run now and the next one after ``now``.

    Without ``catch_up`` only the latest due time fires (no burst after downtime); with it, every missed
    time (at most :data:`MAX_CATCH_UP`, the most recent ones).

    Only the times that fire are looked at: a window ending at ``now`` grows until it holds them (or
    reaches back to ``due``), never a walk over every time missed since ``due``. A schedule that fires
    every minute and was due a year ago (a server left off, a database restored from an old backup) would
    otherwise take half a minute of the worker's event loop on every sweep, past the database's idle
    transaction timeout, so the sweep never committed and no schedule fired again.
    """
    wanted = MAX_CATCH_UP if catch_up else 1
    span = timedelta(seconds=2 * wanted)
    while True:
        start = now - span
        if start <= due:
            times = _walk(cron, tz, due, now, include_start=True)
            break
        times = _walk(cron, tz, start, now, include_start=False)
        if len(times) >= wanted:
            break
        span *= 2
    nxt = next_fire(cron, tz, max(times[-1], now))
    return times[-wanted:], nxt


def _walk(cron: str, tz: str, start: datetime, now: datetime, *, include_start: bool) -> list[datetime]:
    """The fire times after ``start`` up to ``now`` (with ``start`` itself first when asked)."""
    times = [start] if include_start else []
    at = start
    while True:
        at = next_fire(cron, tz, at)
        if at > now:
            return times
        times.append(at)
