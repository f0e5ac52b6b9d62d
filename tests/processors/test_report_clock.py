"""Times Jobdesk stamps on what it makes outside the database are on the database's clock and said in an
explicit zone: the CSV report's "Made by Jobdesk on …" (made in a child process, whose host clock and
zone are no one's) and an admin's test alert's "When"."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app import dbclock
from app.alerts import admin as alert_admin
from app.alerts.sending import Attempt
from app.files import FileStore
from app.processors.reports import summarise_csv
from app.settings import Settings
from tests.support.procs import as_dict, cpu_context, enqueue, put_file, upload
from tests.support.webkit import add_user
from tests.support.workers import running_worker, wait_status

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


def test_the_csv_report_says_its_time_in_its_owners_zone_with_the_zones_name(tmp_path: Any) -> None:
    from dataclasses import replace

    fid = put_file(tmp_path, data=b"a,b\n1,2\n")
    made = datetime(2031, 3, 4, 5, 6, tzinfo=UTC)
    with cpu_context("report.csv_summary", {"file": fid}, tmp_path) as ctx:
        (report,) = summarise_csv(replace(ctx, now=made, timezone="Europe/Berlin")).files
        assert "Made by Jobdesk on 2031-03-04 06:06 CET (Europe/Berlin)." in report.path.read_text()
        (report,) = summarise_csv(replace(ctx, now=made, timezone="America/New_York")).files
        assert "Made by Jobdesk on 2031-03-04 00:06 EST (America/New_York)." in report.path.read_text()


async def test_the_worker_gives_a_report_its_owners_zone(settings: Settings, engine: Any, pg: Any) -> None:
    """The worker reads the owner's zone as it hands the attempt to its process: the report was stamped
    in UTC, whatever the zone its owner reads every other time in."""
    user = await add_user(settings.database_url, "tz@example.com")
    await pg.execute("UPDATE users SET timezone = 'Asia/Tokyo' WHERE id = $1", user.id)
    fid = await upload(engine, settings, user.id, data=b"a,b\n1,2\n", name="t.csv")
    job = await enqueue(engine, settings, user.id, "report.csv_summary", {"file": fid})
    async with running_worker(settings):
        done = await wait_status(pg, job, {"completed", "failed"}, timeout=60)
    assert done["status"] == "completed", done["error_message"]
    (ref,) = as_dict(done["result_data"])["files"]
    html = FileStore(settings.files_dir).path(ref["file_id"]).read_text()
    assert re.search(r"Made by Jobdesk on \d{4}-\d\d-\d\d \d\d:\d\d JST \(Asia/Tokyo\)\.", html), html[-600:]


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
