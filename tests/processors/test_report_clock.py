"""Times Jobdesk stamps on what it makes outside the database are on the database's clock and said in an
explicit zone: the CSV report's "Made by Jobdesk on …" (made in a child process, whose host clock and
zone are no one's) and an admin's test alert's "When"."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app import dbclock
from app.alerts import admin as alert_admin
from app.alerts.sending import Attempt
from app.processors.reports import summarise_csv
from app.settings import Settings
from tests.support.procs import cpu_context, put_file

AHEAD = timedelta(days=400, hours=5)
"""How far the database's clock is ahead of this host's in these tests: far enough to tell apart."""


@pytest.fixture
def clocks_apart(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The database's clock 400 days ahead of the host's, and the host in a zone that is not UTC."""
    monkeypatch.setattr(dbclock, "_offset_ns", int(AHEAD.total_seconds()) * 1_000_000_000)
    monkeypatch.setenv("TZ", "Asia/Kathmandu")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _stamps(fmt: str) -> set[str]:
    """The database's now (and the minute either side, for a test that crosses one) in ``fmt``, UTC."""
    now = datetime.now(UTC) + AHEAD
    return {(now + timedelta(minutes=m)).strftime(fmt) for m in (-1, 0, 1)}


def test_the_csv_report_is_stamped_on_the_database_clock_in_utc(tmp_path: Any, clocks_apart: None) -> None:
    fid = put_file(tmp_path, data=b"a,b\n1,2\n")
    with cpu_context("report.csv_summary", {"file": fid}, tmp_path) as ctx:
        (report,) = summarise_csv(ctx).files
        html = report.path.read_text()
    assert any(f"Made by Jobdesk on {s} UTC." in html for s in _stamps("%Y-%m-%d %H:%M")), html[-600:]


def test_the_csv_report_takes_the_time_the_worker_gives_it(tmp_path: Any) -> None:
    from dataclasses import replace

    fid = put_file(tmp_path, data=b"a,b\n1,2\n")
    with cpu_context("report.csv_summary", {"file": fid}, tmp_path) as ctx:
        made = datetime(2031, 3, 4, 5, 6, tzinfo=UTC)
        (report,) = summarise_csv(replace(ctx, now=made)).files
        assert "Made by Jobdesk on 2031-03-04 05:06 UTC." in report.path.read_text()


async def test_a_test_alert_is_dated_on_the_database_clock(
    clocks_apart: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[Any] = []

    async def fake_send(client: Any, channel: Any, body: Any, *, limit_secs: float) -> Attempt:
        sent.append(body)
        return Attempt(channel.name, True, 200)

    monkeypatch.setattr(alert_admin, "send", fake_send)
    settings = Settings(alert_webhook_url="https://alerts.example/hook", _env_file=None)  # type: ignore[call-arg]
    attempt, message = await alert_admin.send_test(settings, "webhook", admin_email="root@example.com")
    assert attempt.ok
    [when] = [f.value for f in message.facts if f.label == "When"]
    assert any(s in when for s in _stamps("%Y-%m-%d %H:%M")), when
    assert os.environ["TZ"] == "Asia/Kathmandu"
