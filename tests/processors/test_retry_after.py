"""A server that answers 429 or 503 with ``Retry-After`` (seconds or an HTTP date) is not asked again
sooner than it said: an ``http.request`` job's next attempt and a callback's next delivery wait at least
that long, never past the longest retry delay. Only loopback servers receive traffic."""

from __future__ import annotations

import asyncio
import email.utils
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app.callbacks import CallbackSender
from app.jobs.backoff import RetryPolicy, retry_after_secs, retry_delay
from app.processors import registry
from app.processors.http_request import TemporaryHttpError
from tests.support.procs import enqueue, job_context
from tests.support.webkit import add_user, app_client, bearer
from tests.support.workers import running_worker

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    assert retry_after_secs("120") == 120.0
    assert retry_after_secs(" 7 ") == 7.0
    assert retry_after_secs("Sun, 06 Dec 2026 12:05:00 GMT", NOW) == 300.0
    assert retry_after_secs("Sun, 06 Dec 2026 11:00:00 GMT", NOW) == 0.0  # already past
    for unreadable in (None, "", "soon", "-5", "1e9", "Sun, 99 Foo 2026"):
        assert retry_after_secs(unreadable, NOW) is None, unreadable


@pytest.mark.parametrize("skew", [timedelta(minutes=10), timedelta(minutes=-10)])
def test_an_http_date_is_measured_on_the_servers_clock_or_the_databases_not_the_hosts(
    monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    """The worker host's clock is ten minutes fast (or slow); the database's is right, and dbclock knows
    the offset. A server asks to wait until a date two minutes after its own ``Date``, or, without a
    ``Date``, five minutes from now. Measured from the host's clock, the wait was 0 (the retry came at
    once, hammering a server that asked for a pause) or fifteen minutes; measured from the answer's
    ``Date``, or else the database's clock, it is what the server asked."""
    from types import SimpleNamespace

    from app import dbclock
    from app.jobs import backoff

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + skew

    monkeypatch.setattr(backoff, "datetime", Skewed)
    monkeypatch.setattr(
        dbclock,
        "time",
        SimpleNamespace(time_ns=lambda: time.time_ns() + int(skew / timedelta(microseconds=1)) * 1000),
    )
    monkeypatch.setattr(dbclock, "_offset_ns", -int(skew / timedelta(microseconds=1)) * 1000)

    def http(moment: datetime) -> str:
        return email.utils.format_datetime(moment, usegmt=True)

    real = datetime.now(UTC).replace(microsecond=0)
    server = real - timedelta(hours=1)  # the server's own clock is off too: its Date says where it is
    assert retry_after_secs(http(server + timedelta(seconds=120)), date=http(server)) == 120.0
    assert retry_after_secs(http(real + timedelta(seconds=300))) == pytest.approx(300, abs=2)
    # an unreadable Date is no reference: the database's clock is
    assert retry_after_secs(http(real + timedelta(seconds=300)), date="soon") == pytest.approx(300, abs=2)
    assert retry_after_secs("120", date=http(server)) == 120.0  # seconds need no clock


def test_the_delay_is_at_least_what_was_asked_and_at_most_the_cap() -> None:
    policy = RetryPolicy.schedule([10.0, 60.0], jitter=0.0)
    assert retry_delay(policy, 1) == 10.0
    assert retry_delay(policy, 1, retry_after=45.0) == 45.0
    assert retry_delay(policy, 2, retry_after=5.0) == 60.0  # a shorter wish leaves the backoff
    assert retry_delay(policy, 1, retry_after=10_000.0) == policy.effective_cap == 60.0
    assert retry_delay(policy, 1, retry_after=float("inf")) == 10.0


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        status, wait = {
            "/wait-secs": (429, "100"),
            "/wait-date": (
                503,
                email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=200), usegmt=True),
            ),
            "/wait-long": (503, "100000"),
            "/no-wait": (503, None),
            "/teapot-wait": (500, "100"),  # Retry-After means something on 429 and 503 only
        }[path]
        self.send_response(status)
        if wait is not None:
            self.send_header("Retry-After", wait)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"busy")

    do_GET = do_POST = _answer


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def settings(make_settings, server):
    return make_settings(http_request_allowed_hosts=server.removeprefix("http://"))


@pytest.mark.parametrize(
    ("path", "low", "high"),
    [("/wait-secs", 100, 100), ("/wait-date", 190, 200), ("/wait-long", 100000, 100000)],
)
async def test_the_job_s_error_carries_what_the_server_asked(server, settings, path, low, high) -> None:
    ctx, _ = job_context("http.request", {"url": f"{server}{path}"}, settings)
    with pytest.raises(TemporaryHttpError) as err:
        await registry.get("http.request").func(ctx)  # type: ignore[union-attr]
    assert err.value.retry_after is not None and low <= err.value.retry_after <= high
    assert "It asked to wait" in str(err.value)


@pytest.mark.parametrize("path", ["/no-wait", "/teapot-wait"])
async def test_no_retry_after_or_another_status_asks_nothing(server, settings, path) -> None:
    ctx, _ = job_context("http.request", {"url": f"{server}{path}"}, settings)
    with pytest.raises(TemporaryHttpError) as err:
        await registry.get("http.request").func(ctx)  # type: ignore[union-attr]
    assert err.value.retry_after is None and "asked to wait" not in str(err.value)


async def _first_retry_wait(pg: Any, job_id: Any) -> float:
    """Seconds from now until the job's second attempt, once its first one failed."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = await pg.fetchrow(
            "SELECT attempts, status, extract(epoch FROM run_at - now()) AS wait FROM jobs WHERE id = $1",
            job_id,
        )
        if row["attempts"] == 1 and row["status"] == "queued":
            return float(row["wait"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"the first attempt did not fail in time: {dict(row)}")


async def test_through_a_worker_the_next_attempt_waits_as_asked_within_the_cap(
    server, make_settings, engine, pg
) -> None:
    # retries after 10 s, then 240 s (the tests' settings have no jitter): the longest is the cap
    settings = make_settings(
        http_request_allowed_hosts=server.removeprefix("http://"), job_retry_intervals=[10.0, 240.0]
    )
    user = await add_user(settings.database_url, "worker@example.com")
    secs = await enqueue(engine, settings, user.id, "http.request", {"url": f"{server}/wait-secs"})
    date = await enqueue(engine, settings, user.id, "http.request", {"url": f"{server}/wait-date"})
    long = await enqueue(engine, settings, user.id, "http.request", {"url": f"{server}/wait-long"})
    plain = await enqueue(engine, settings, user.id, "http.request", {"url": f"{server}/no-wait"})
    async with running_worker(settings):
        waits = [await _first_retry_wait(pg, j) for j in (secs, date, long, plain)]
    assert 95 <= waits[0] <= 100, waits
    assert 185 <= waits[1] <= 200, waits
    assert 235 <= waits[2] <= 240, waits
    assert waits[3] <= 10, waits


class _Log:
    def info(self, *a: Any, **k: Any) -> None:
        pass

    warning = info


@pytest.mark.parametrize(
    ("path", "low", "high"), [("/wait-secs", 95, 100), ("/wait-date", 185, 200), ("/wait-long", 595, 600)]
)
async def test_a_callback_waits_as_its_receiver_asked(
    make_settings, db_url, engine, pg, server, path, low, high
) -> None:
    settings = make_settings(
        worker_enabled=False,
        callback_signing_secret="s",
        callback_retry_intervals=[10.0, 600.0],
        http_request_allowed_hosts=["127.0.0.1"],
    )
    _, headers = await bearer(db_url, "hook@example.com", admin=True)
    async with app_client(settings) as client:
        resp = await client.post(
            "/api/jobs", json={"type": "noop", "callback_url": f"{server}{path}"}, headers=headers
        )
        job_id = resp.json()["id"]
    await pg.execute("UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1::uuid", job_id)
    assert await CallbackSender(engine, settings, log=_Log()).run_once() == 1
    wait = await pg.fetchval(
        "SELECT extract(epoch FROM next_at - now()) FROM job_callbacks WHERE job_id = $1::uuid", job_id
    )
    assert low <= float(wait) <= high, wait
