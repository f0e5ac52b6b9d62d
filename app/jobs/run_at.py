"""A job's due time (``run_at``): the one rule for every path that sets one — the job form and
``POST /api/jobs``, pipelines, schedules and batches (all through :func:`app.jobs.queue.enqueue`), and
rescheduling from the page or ``POST /api/jobs/{id}/reschedule``.

A due time is a moment with a UTC offset (``2026-12-01T09:00:00+01:00``) between the years
:data:`RUN_AT_YEARS`, counted in UTC. Outside them, PostgreSQL may still store the moment but Python
cannot always read it back into a person's zone (9999-12-31T23:59:59-14:00 is year 10000 in UTC), and a
date that far off is a typing mistake. Whether the moment has already passed is the action's check
(:func:`app.actions.submissions.check_run_at`), on the database's clock.

As JSON a due time is text: a number is not read as Unix time (the README promises ISO text with an
offset, and ``1700000000`` would silently be a date in 2023), and text that is not such a moment is
refused in these words rather than in the JSON decoder's (:func:`text_problem`, which
:mod:`app.web.body_fields` asks before the decoder sees the value).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from app.errors import BadInput

RUN_AT_YEARS = (1970, 9000)
EXAMPLE = "2026-12-01T09:00:00+01:00"

_MOMENT = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:[Zz]|[+-]\d{2}:\d{2})?")
"""The ISO 8601 text the API's decoder reads as a moment (RFC 3339, the offset checked apart)."""

NOT_TEXT = f"must be a date and time as text with a UTC offset, e.g. {EXAMPLE}"
NOT_A_MOMENT = f"is not a date and time: give one with a UTC offset, e.g. {EXAMPLE}"
NO_OFFSET = f"needs a UTC offset or time zone, e.g. {EXAMPLE}"
OUT_OF_RANGE = f"must be a date between {RUN_AT_YEARS[0]} and {RUN_AT_YEARS[1]}"


def text_problem(value: Any) -> str | None:
    """What is wrong with ``value``, a JSON value sent for a moment, in words; ``None`` when it is text
    the decoder reads as one (or ``null``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return NOT_TEXT
    if not _MOMENT.fullmatch(value):
        return NOT_A_MOMENT
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:  # a 31 February, an hour 25
        return NOT_A_MOMENT
    return None


def check_run_at(value: datetime | str | None, field: str = "run_at") -> datetime | None:
    """``value`` as a due time (``None``: now), read from text when it is text.

    Raises:
        BadInput: on ``field``, for text that is no moment, a moment without a UTC offset, or one outside
            :data:`RUN_AT_YEARS`.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        problem = text_problem(value)
        if problem is not None:
            raise BadInput.field(field, problem)
        assert isinstance(value, str)
        value = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    if value.tzinfo is None or value.utcoffset() is None:
        raise BadInput.field(field, NO_OFFSET)
    try:
        year = value.astimezone(UTC).year
    except OverflowError:  # past the calendar's end (or before its start) in UTC
        raise BadInput.field(field, OUT_OF_RANGE) from None
    if not RUN_AT_YEARS[0] <= year <= RUN_AT_YEARS[1]:
        raise BadInput.field(field, OUT_OF_RANGE)
    return value
