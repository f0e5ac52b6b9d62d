"""How stop signals are counted (:class:`app.worker.signals.StopSignals`): the first asks for a stop, a
second hurries it — but one SIGTERM that reaches the process twice within moments (its group signalled,
and a parent passing it on) is one request. Raised in this process, with the handlers put back after."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from app.worker.signals import ONE_REQUEST_SECS, STOP_SIGNALS, StopSignals


@pytest.fixture
def stop() -> Iterator[tuple[StopSignals, list[tuple[int, int]]]]:
    """A fresh :class:`StopSignals` installed in this process, and the ``(signal, count)`` it forwards."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    stop = StopSignals()
    calls: list[tuple[int, int]] = []
    stop.install()
    stop.forward(lambda signum, count: calls.append((signum, count)))
    try:
        yield stop, calls
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_sigterm_passed_on_again_within_moments_is_one_request(
    stop: tuple[StopSignals, list[tuple[int, int]]],
) -> None:
    """``kill -TERM -- -<pgid>`` reaches the process, and its parent (``make run``'s shell) passes a
    SIGTERM on: counted as a second request, it hurried the stop (exit 3, running jobs released)."""
    signals, calls = stop
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGTERM)
    assert calls == [(signal.SIGTERM, 1)]
    assert signals.count == 1


def test_a_second_sigterm_later_hurries_the_stop(stop: tuple[StopSignals, list[tuple[int, int]]]) -> None:
    signals, calls = stop
    signal.raise_signal(signal.SIGTERM)
    time.sleep(ONE_REQUEST_SECS + 0.1)
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGTERM)  # passed on again: still the second request
    assert calls == [(signal.SIGTERM, 1), (signal.SIGTERM, 2)]
    assert signals.count == 2


def test_every_ctrl_c_counts(stop: tuple[StopSignals, list[tuple[int, int]]]) -> None:
    """A terminal sends one SIGINT per Ctrl+C: two in quick succession are a person's two requests (and
    uvicorn quits at once on the second), as is a SIGINT after a SIGTERM."""
    signals, calls = stop
    signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGTERM)
    assert calls == [(signal.SIGINT, 1), (signal.SIGINT, 2), (signal.SIGTERM, 3)]
    assert signals.received == signal.SIGINT
