"""How many cron times a sweep looks at for a schedule that was due long ago. A trial set a schedule that
fires every minute 400 days behind (a server left off, a database restored from an old backup): the
sweep walked every one of the 576,000 missed minutes to find the last, held the worker's event loop for
33 s, and the database ended its transaction as idle, on every sweep, so no schedule fired again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app import cron

NOW = datetime(2026, 12, 7, 17, 30, tzinfo=UTC)


def _reference(cron_text: str, tz: str, due: datetime, now: datetime, catch_up: bool) -> Any:
    """Every missed time, walked one by one from ``due``: what the sweep must still find."""
    times = [due]
    while (following := cron.next_fire(cron_text, tz, times[-1])) <= now:
        times.append(following)
    wanted = cron.MAX_CATCH_UP if catch_up else 1
    return times[-wanted:], cron.next_fire(cron_text, tz, max(times[-1], now))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the cron times looked at, and stops a walk that looks at far more than it fires."""
    calls = [0]
    real = cron.next_fire

    def next_fire(*args: Any) -> datetime:
        calls[0] += 1
        if calls[0] > 5_000:
            raise AssertionError("walked over thousands of missed times to find the few that fire")
        return real(*args)

    monkeypatch.setattr(cron, "next_fire", next_fire)
    return calls


@pytest.mark.parametrize("catch_up", [False, True])
def test_a_schedule_due_a_year_ago_looks_only_at_the_times_it_fires(
    counted: list[int], catch_up: bool
) -> None:
    times, nxt = cron.fire_times("* * * * *", "Europe/Berlin", NOW - timedelta(days=400), NOW, catch_up)
    assert times[-1] == NOW and nxt == NOW + timedelta(minutes=1)
    assert len(times) == (cron.MAX_CATCH_UP if catch_up else 1)
    assert counted[0] < 1_000


@pytest.mark.parametrize(
    ("cron_text", "tz", "back"),
    [
        ("*/15 * * * *", "America/New_York", timedelta(days=40)),  # across the fall-back day
        ("30 2 * * *", "America/New_York", timedelta(days=300)),  # the spring-forward gap
        ("*/30 * * * *", "Australia/Lord_Howe", timedelta(days=200)),  # a 30-minute shift
        ("0 0 29 2 *", "UTC", timedelta(days=3_000)),  # sparse: a window grows to reach it
        ("0 * * * *", "UTC", timedelta(hours=3)),  # fewer times than a catch-up takes
        ("0 9 * * 1-5", "Europe/Berlin", timedelta(hours=10)),  # due this morning
    ],
)
@pytest.mark.parametrize("catch_up", [False, True])
def test_the_same_times_as_a_walk_from_the_due_time(
    cron_text: str, tz: str, back: timedelta, catch_up: bool
) -> None:
    due = cron.next_fire(cron_text, tz, NOW - back - timedelta(seconds=1))
    assert cron.fire_times(cron_text, tz, due, NOW, catch_up) == _reference(cron_text, tz, due, NOW, catch_up)
