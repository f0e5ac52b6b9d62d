"""Wall-clock times in a time zone, where daylight saving time makes some of them happen twice and
others not at all.

When clocks go back (Europe/Berlin, 2027-10-31 03:00 CEST → 02:00 CET) every wall time from 02:00 to
02:59 happens twice: first in summer time, then an hour later in winter time. When clocks go forward
(2027-03-28 02:00 CET → 03:00 CEST) the wall times from 02:00 to 02:59 do not happen at all. A zone
may move its clocks by other amounts (Australia/Lord_Howe: 30 minutes) or skip a whole day
(Pacific/Apia, 2011-12-30); nothing here assumes an hour.

Standard library only: :mod:`app.schedules` and the web forms read local times through these
functions, so a schedule and a form agree on what a wall time means.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class WallTime:
    """What a naive wall time is in a zone: the instants it names (none, one, or two, earliest first)
    and, for one that does not exist, the instant the clocks jump to."""

    wall: datetime
    zone: tzinfo
    instants: tuple[datetime, ...]
    gap_end: datetime | None = None

    @property
    def skipped(self) -> bool:
        return not self.instants

    @property
    def repeated(self) -> bool:
        return len(self.instants) > 1

    @property
    def first(self) -> datetime:
        """The instant a schedule uses for this wall time, in UTC: the first of two (summer time, when
        clocks go back), or the end of the gap for a wall time that clocks skip (03:00 for 02:30 when
        they jump from 02:00 to 03:00)."""
        if self.instants:
            return self.instants[0]
        assert self.gap_end is not None
        return self.gap_end


def _offset(at: datetime, zone: tzinfo) -> timedelta | None:
    return at.astimezone(zone).utcoffset()


def transition(lo: datetime, hi: datetime, zone: tzinfo) -> datetime:
    """The first instant in ``(lo, hi]`` whose UTC offset in ``zone`` is that of ``hi``, to the second;
    ``lo`` and ``hi`` are aware instants on either side of one change of offset."""
    target = _offset(hi, zone)
    while hi - lo > _SECOND:
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if mid <= lo:
            mid = lo + _SECOND
        if _offset(mid, zone) == target:
            hi = mid
        else:
            lo = mid
    return hi


def resolve(wall: datetime, zone: tzinfo) -> WallTime:
    """What the naive ``wall`` time names in ``zone``: see :class:`WallTime`."""
    wall = wall.replace(tzinfo=None, fold=0)
    candidates = sorted(
        {wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)},
    )
    real = tuple(c for c in candidates if c.astimezone(zone).replace(tzinfo=None) == wall)
    if real:
        return WallTime(wall, zone, real)
    # Neither reading comes back to the same wall time: the clocks skipped it. Both readings lie on
    # either side of the change; the instant the clocks jumped is between them.
    return WallTime(wall, zone, (), gap_end=transition(candidates[0], candidates[-1], zone))


def repeat_end(wall: datetime, zone: tzinfo) -> datetime:
    """For a wall time that happens twice: the naive wall time at which the repetition ends (03:00
    when clocks went back from 03:00 to 02:00), i.e. the first wall time after it that happens once."""
    both = resolve(wall, zone).instants
    change = transition(both[0], both[-1], zone)
    before = change - _SECOND
    return (before.astimezone(zone).replace(tzinfo=None) + _SECOND).replace(microsecond=0)


def describe(at: datetime, zone: tzinfo) -> str:
    """``02:30 CEST (UTC+02:00)``: a local instant with its abbreviation and offset, for messages."""
    local = at.astimezone(zone)
    offset = local.strftime("%z")
    return f"{local:%H:%M} {local.tzname()} (UTC{offset[:3]}:{offset[3:]})"
