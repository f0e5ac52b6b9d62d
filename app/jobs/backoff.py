"""Retry delays: a schedule of intervals or an exponential curve, with jitter, never overflowing.

The default is a schedule (``JOB_RETRY_INTERVALS``, the last value repeating) with jitter (±30 %); a job
type may override it (intervals, or an exponential base and cap). ``base * 2**attempt`` plus jitter must
never raise, never go negative and never pass the cap, for any attempt count (other queues have shipped
overflow bugs here, e.g. river#1022) — so the exponent is bounded before it is computed, jitter is
applied first, and the clamp to ``[0, cap]`` comes last.

A server that answers 429 or 503 with ``Retry-After`` (seconds, or an HTTP date) says when it will take
the request again: the next attempt waits at least that long (:func:`retry_after_secs`,
:func:`at_least`), still never past the policy's cap — for ``http.request`` jobs (through
:func:`retry_delay`) and callback deliveries alike.
"""

from __future__ import annotations

import email.utils
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.dbclock import db_time

MAX_DELAY_SECS = 30 * 24 * 3600.0
"""No policy may wait longer than 30 days; keeps ``now() + delay`` far from timestamp limits."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait before retrying after failed attempt ``n``.

    Exactly one of ``intervals`` (seconds before retry 1, 2, …; the last repeats) or ``base`` (exponential:
    ``base * 2**(n-1)`` seconds) is used; ``intervals`` wins when both are set. ``cap`` (seconds) bounds the
    result; for a schedule it defaults to its largest interval plus the jitter. ``jitter`` is the random
    spread as a fraction (0.3 = ±30 %).
    """

    intervals: tuple[float, ...] | None = None
    base: float | None = None
    cap: float | None = None
    jitter: float = 0.3

    @classmethod
    def schedule(cls, intervals: Sequence[float], jitter: float = 0.3) -> RetryPolicy:
        return cls(intervals=tuple(float(i) for i in intervals), jitter=jitter)

    @property
    def effective_cap(self) -> float:
        """The largest delay this policy can return, in seconds."""
        jitter = _fraction(self.jitter)
        if self.cap is not None and math.isfinite(self.cap):
            cap = self.cap
        elif self.intervals:
            cap = max(_finite(i) for i in self.intervals) * (1 + jitter)
        elif self.base is not None:
            cap = MAX_DELAY_SECS
        else:
            cap = 0.0
        return min(max(cap, 0.0), MAX_DELAY_SECS)


def _finite(value: float) -> float:
    return value if math.isfinite(value) and value > 0 else 0.0


def _fraction(value: float) -> float:
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


RETRY_AFTER_STATUSES = frozenset({429, 503})
"""The answers whose ``Retry-After`` says when to try again (RFC 9110 §10.2.3)."""
_SECONDS = re.compile(r"\d{1,12}(\.\d{1,6})?")  # whole seconds, as RFC 9110 writes them; a fraction too


def retry_after_secs(
    value: str | None, now: datetime | None = None, *, date: str | None = None
) -> float | None:
    """Seconds a ``Retry-After`` header value asks to wait: a number of seconds, or an HTTP date (a moment
    already past is 0); ``None`` when there is none or it cannot be read. Never raises.

    An HTTP date is a moment on the answering server's clock, so it is measured from that clock's reading
    in the same answer, its ``Date`` header (``date``), when there is a readable one; else from ``now``,
    else from the database's clock (:func:`app.dbclock.db_time`), which every time of a job is on. The
    host's own clock may be minutes off: a wait measured from it ended minutes too soon (0: at once) or
    too late (the caller's cap then held it)."""
    value = (value or "").strip()
    if not value:
        return None
    if _SECONDS.fullmatch(value):
        return float(value)
    when = _http_date(value)
    if when is None:
        return None
    return max((when - (_http_date(date) or now or db_time())).total_seconds(), 0.0)


def _http_date(value: str | None) -> datetime | None:
    """An HTTP date (RFC 9110 §5.6.7), in UTC; ``None`` when there is none or it cannot be read."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": a time in UTC
        when = when.replace(tzinfo=UTC)
    return when


def at_least(delay: float, wanted: float | None, cap: float) -> float:
    """``delay``, raised to ``wanted`` (what a server's ``Retry-After`` asked for) but never past ``cap``;
    a ``delay`` already longer stays as it is."""
    if wanted is None or not math.isfinite(wanted):
        return delay
    return max(delay, min(wanted, cap))


def retry_delay(
    policy: RetryPolicy,
    attempt: int,
    rand: Callable[[], float] = random.random,
    *,
    retry_after: float | None = None,
) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1 = the first run failed); at least
    ``retry_after`` (a server's ``Retry-After``) when given, within the cap.

    Always returns a finite float in ``[0, policy.effective_cap]``, for any integer ``attempt`` (0,
    negative and 10**6 included) — never raises.
    """
    cap = policy.effective_cap
    n = max(int(attempt), 1) if isinstance(attempt, int) else 1
    if policy.intervals:
        raw = _finite(policy.intervals[min(n, len(policy.intervals)) - 1])
    elif policy.base is not None:
        base = _finite(policy.base)
        if base == 0.0:
            raw = 0.0
        else:
            # Bound the exponent before computing: past log2(cap/base)+1 the result is the cap anyway.
            # Logs of each side, not of the ratio: cap/base overflows to inf for a subnormal base
            # (hypothesis found base=5e-324 at attempt 1025); 2.0**1024 itself overflows.
            limit = math.log2(cap) - math.log2(base) + 1 if cap > 0 else 0
            exponent = n - 1
            raw = cap if exponent >= limit or exponent >= 1023 else base * (2.0**exponent)
    else:
        raw = 0.0
    jitter = _fraction(policy.jitter)
    jittered = raw * (1 + jitter * (2 * rand() - 1)) if jitter else raw
    if not math.isfinite(jittered):
        jittered = cap
    return at_least(min(max(jittered, 0.0), cap), retry_after, cap)
