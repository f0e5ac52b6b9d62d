"""The completer's jobs let go of with nothing recorded (a lease lost) are kept for a lease, not for the
worker's life: a stop's hand-back leaves them alone while this worker's claim of them may still hold,
and afterwards a job of theirs locked by this worker is from a later claim."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from app.worker import completer as completer_module
from tests.support.workers import standalone_completer


async def test_a_job_let_go_of_is_forgotten_after_a_lease(
    make_settings: Any, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(worker_visibility_timeout_secs=30)
    async with standalone_completer(settings, engine) as completer:
        now = [1000.0]
        clock = SimpleNamespace(monotonic=lambda: now[0])
        monkeypatch.setattr(completer_module, "time", clock, raising=False)
        first, second = uuid.uuid4(), uuid.uuid4()
        completer.forget(SimpleNamespace(id=first))  # type: ignore[arg-type]
        now[0] += 20
        completer.forget(SimpleNamespace(id=second))  # type: ignore[arg-type]
        assert completer.given_up == {first, second}
        now[0] += 15  # the first let go of 35 s ago, the second 15 s ago
        assert completer.given_up == {second}
        now[0] += 30
        assert completer.given_up == set()
        for _ in range(3):  # nothing read between: the ones a lease old go as new ones come
            now[0] += 31
            completer.forget(SimpleNamespace(id=uuid.uuid4()))  # type: ignore[arg-type]
        assert len(completer._given_up) == 1
