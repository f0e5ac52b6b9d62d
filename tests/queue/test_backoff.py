"""Retry delays (case C05: exponential backoff overflowing at large attempt counts)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from app.jobs.backoff import MAX_DELAY_SECS, RetryPolicy, retry_delay

HOUR = 3600.0
C05_ATTEMPTS = [0, 1, 30, 63, 64, 1024, 10**6]


@pytest.mark.parametrize("attempt", C05_ATTEMPTS)
@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999999])  # jitter at its low end, none, its high end
def test_exponential_backoff_never_raises_and_stays_within_the_cap(attempt: int, rand: float) -> None:
    # base 1 s, cap 1 h, ±30 % jitter: the case C05 unit scenario.
    policy = RetryPolicy(base=1.0, cap=HOUR, jitter=0.3)
    delay = retry_delay(policy, attempt, rand=lambda: rand)
    assert math.isfinite(delay)
    assert 0.0 <= delay <= HOUR


def test_jitter_is_applied_before_the_final_clamp() -> None:
    # At attempt 64 the raw delay is the cap; upward jitter must not push it past the cap.
    policy = RetryPolicy(base=1.0, cap=HOUR, jitter=0.3)
    assert retry_delay(policy, 64, rand=lambda: 0.999999) == HOUR
    # ...while downward jitter still spreads it below the cap.
    assert retry_delay(policy, 64, rand=lambda: 0.0) == pytest.approx(HOUR * 0.7)


def test_exponential_delay_doubles_per_attempt_until_the_cap() -> None:
    policy = RetryPolicy(base=2.0, cap=100.0, jitter=0.0)
    assert [retry_delay(policy, n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 64, 100, 100]


def test_schedule_follows_the_intervals_and_repeats_the_last() -> None:
    # A schedule of fixed intervals, without jitter.
    policy = RetryPolicy.schedule([10, 30, 60, 120, 240], jitter=0.0)
    assert [retry_delay(policy, n) for n in range(1, 8)] == [10, 30, 60, 120, 240, 240, 240]
    assert retry_delay(policy, 10**9) == 240


def test_schedule_jitter_spreads_thirty_percent_either_way() -> None:
    policy = RetryPolicy.schedule([100], jitter=0.3)
    assert retry_delay(policy, 1, rand=lambda: 0.0) == pytest.approx(70)
    assert retry_delay(policy, 1, rand=lambda: 0.999999) == pytest.approx(130, rel=1e-4)


@given(
    attempt=st.integers(min_value=-(10**9), max_value=10**12),
    base=st.floats(allow_nan=True, allow_infinity=True),
    cap=st.floats(min_value=0, max_value=1e12) | st.none(),
    jitter=st.floats(allow_nan=True, allow_infinity=True),
    rand=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
@example(attempt=1025, base=5e-324, cap=None, jitter=0.0, rand=0.0)  # cap/base overflowed (found once)
@example(attempt=10**6, base=5e-324, cap=1e12, jitter=1.0, rand=0.5)
def test_any_policy_and_attempt_gives_a_finite_delay_within_its_cap(
    attempt: int, base: float, cap: float | None, jitter: float, rand: float
) -> None:
    policy = RetryPolicy(base=base, cap=cap, jitter=jitter)
    delay = retry_delay(policy, attempt, rand=lambda: rand)
    assert math.isfinite(delay)
    assert 0.0 <= delay <= policy.effective_cap <= MAX_DELAY_SECS


def test_a_tiny_cap_and_a_huge_base_do_not_underflow() -> None:
    # Found by hypothesis: cap / base underflowed to 0 and math.log2 raised.
    policy = RetryPolicy(base=9.0e10, cap=2.2e-313, jitter=0.3)
    assert 0.0 <= retry_delay(policy, 5) <= 2.2e-313
