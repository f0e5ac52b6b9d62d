"""Finished and failed jobs over time, from the workers' per-minute tallies (``throughput_samples``, a row
per worker per minute written with each heartbeat): the one source of ``/admin``'s chart and of its
"Failed, last hour" figure, so the two cannot disagree.

The tallies, not the ``jobs`` table: the chart reaches back a week and a poll must stay a primary-key
range of a small table, never a scan of ``jobs``. The price is that a figure lags a worker's heartbeat
and leaves out jobs failed outside a worker (a rejection at submission); both read the same rows, so they
lag and leave out alike.

"The last hour" is the sixty whole minutes ending with the current one (the one-hour chart's sixty bars),
on the database's clock: a tally of the minute 59 minutes before the current one counts, one of the
minute before that does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

HOUR_BARS = 60
"""Minutes in "the last hour": the one-hour chart's bars of one minute each."""

#: Completed and failed per bin of ``step`` minutes from ``origin`` (a primary-key range).
PER_BIN = text(
    """
    SELECT date_bin(make_interval(mins => :step), minute, :origin) AS minute,
           sum(completed) AS completed, sum(failed) AS failed
    FROM throughput_samples
    WHERE minute >= :origin
    GROUP BY 1 ORDER BY 1
    """
)
NOW_MINUTE = text("SELECT date_trunc('minute', now())")


def origin(end_minute: datetime, bars: int, step: int) -> datetime:
    """The first bin's start: ``bars - 1`` steps of ``step`` minutes before the bin holding ``end_minute``
    (bins start at whole multiples of ``step`` minutes since midnight UTC)."""
    since_midnight = end_minute - end_minute.replace(hour=0, minute=0, second=0, microsecond=0)
    aligned = end_minute - timedelta(minutes=(since_midnight.total_seconds() // 60) % step)
    return aligned - timedelta(minutes=step * (bars - 1))


async def now_minute(db: Any) -> datetime:
    """The database's current minute, the last bin's (``conn`` or session)."""
    minute: datetime = (await db.execute(NOW_MINUTE)).scalar_one()
    return minute


async def per_bin(db: Any, end_minute: datetime, bars: int, step: int) -> list[Mapping[str, Any]]:
    """``[{"minute", "completed", "failed"}]``: the tallies of the ``bars`` bins of ``step`` minutes ending
    with the one holding ``end_minute``, each bin keyed by its start; bins without tallies are missing."""
    params = {"step": step, "origin": origin(end_minute, bars, step)}
    return list((await db.execute(PER_BIN, params)).mappings().all())


def failed_in(rows: Sequence[Mapping[str, Any]]) -> int:
    """The failures of :func:`per_bin`'s rows."""
    return sum(int(r["failed"] or 0) for r in rows)


async def failed_last_hour(db: Any, end_minute: datetime | None = None) -> int:
    """Jobs failed in the last hour (the :data:`HOUR_BARS` minutes ending with ``end_minute``, the current
    minute when not given): the one-hour chart's failures, by the same query."""
    end = end_minute if end_minute is not None else await now_minute(db)
    return failed_in(await per_bin(db, end, HOUR_BARS, 1))
