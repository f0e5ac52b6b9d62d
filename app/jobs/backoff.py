"""Retry delays: a schedule of intervals or an exponential curve, with jitter, never overflowing.

The default is a schedule (``JOB_RETRY_INTERVALS``, the last value repeating) with jitter (±30 %); a job
type may override it (intervals, or an exponential base and cap). ``base * 2**attempt`` plus jitter must
never raise, never go negative and never pass the cap, for any attempt count (other queues have shipped
overflow bugs here, e.g. river#1022) — so the exponent is bounded before it is computed, jitter is
applied first, and the clamp to ``[0, cap]`` comes last.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


def retry_delay(policy: RetryPolicy, attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1 = the first run failed).

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
    return min(max(jittered, 0.0), cap)
