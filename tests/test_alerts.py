"""Alerts (issue 8): Slack, Telegram and webhook messages as a real HTTP receiver on 127.0.0.1 gets them,
escaping (case C19's alert part), trimming (case C13's alert part), delivery off the worker's path with
retries, grouping across worker processes (case C22), admin-action notices and the admin page.

The receiver is pytest-httpserver's threaded server; each test scripts its answers (200, 429 with
``Retry-After``, 500, or hanging until the test ends) and asserts on the bodies it recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import support_processors
from factories import TestUser, make_user
from pytest_httpserver import HTTPServer
from webkit import add_user, app_client, login
from werkzeug import Request, Response
from workers import WorkerProcess, running_worker, wait_status, wait_until

from app import alerts
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings, SettingsError, load_settings

SLACK_PATH = "/services/T0001/B0002/slacksecretpath"
TOKEN = "123456789:AAtelegramSECRETtoken"
CHAT = "-1001234567890"
HOOK_PATH = "/hooks/webhooksecret"
BASE = "https://jobdesk.example.com"


# --- the receiver ----------------------------------------------------------------------------------


@dataclass
class Hit:
    path: str
    body: str
    status: int
    at: float

    @property
    def channel(self) -> str:
        if self.path.startswith("/services/"):
            return "slack"
        if self.path.startswith("/bot"):
            return "telegram"
        return "webhook"

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """A real HTTP server on 127.0.0.1 recording every request. Answers: 200 by default (Slack's ``ok``,
    Telegram's ``{"ok": true}``); ``busy_until`` (monotonic time) → 429 with ``Retry-After: 1`` until then;
    ``script[channel]`` → a list of answers used one by one (``(status, headers, body)`` or ``"hang"``);
    ``hang = True`` → every request waits until the test ends."""

    def __init__(self) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.lock = threading.Lock()
        self.hits: list[Hit] = []
        self.script: dict[str, list[Any]] = {}
        self.busy_until = 0.0
        self.hang = False
        self.released = threading.Event()

    def start(self) -> None:
        self.server.expect_request(re.compile(".*")).respond_with_handler(self._handle)
        self.server.start()

    def stop(self) -> None:
        self.released.set()
        self.server.clear()
        if self.server.is_running():
            self.server.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.port}{path}"

    def _ok(self, channel: str) -> tuple[int, dict[str, str], str]:
        if channel == "telegram":
            return 200, {"content-type": "application/json"}, '{"ok":true,"result":{"message_id":1}}'
        return 200, {"content-type": "text/plain"}, "ok"

    def _handle(self, request: Request) -> Response:
        body = request.get_data(as_text=True)
        hit = Hit(request.path, body, 0, time.monotonic())
        with self.lock:
            script = self.script.get(hit.channel)
            answer: Any = script.pop(0) if script else None
            if answer is None:
                if self.hang:
                    answer = "hang"
                elif time.monotonic() < self.busy_until:
                    answer = (
                        429,
                        {"retry-after": "1", "content-type": "application/json"},
                        '{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 1",'
                        '"parameters":{"retry_after":1}}',
                    )
                else:
                    answer = self._ok(hit.channel)
        if answer == "hang":
            with self.lock:
                self.hits.append(hit)
            self.released.wait(60)
            return Response("too late", status=200)
        status, headers, text = answer
        hit.status = status
        with self.lock:
            self.hits.append(hit)
        return Response(text, status=status, headers=headers)

    def got(self, channel: str, *, status: int | None = 200) -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if h.channel == channel and (status is None or h.status == status)]

    def texts(self, channel: str) -> list[str]:
        """Message texts delivered (answered 200) to a channel, in arrival order."""
        if channel == "webhook":
            return [h.json()["text"] for h in self.got(channel)]
        return [h.json()["text"] for h in self.got(channel)]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    r = Receiver()
    r.start()
    yield r
    r.stop()


def alert_settings(make_settings: Any, receiver: Receiver, **over: Any) -> Settings:
    values = {
        "slack_webhook_url": receiver.url(SLACK_PATH),
        "telegram_bot_token": TOKEN,
        "telegram_chat_id": CHAT,
        "telegram_api_base": receiver.url(""),
        "alert_webhook_url": receiver.url(HOOK_PATH),
        "jobdesk_base_url": BASE,
        **over,
    }
    return make_settings(**values)


@pytest.fixture
async def owner(pg: asyncpg.Connection) -> TestUser:
    await pg.execute(support_processors.SIDE_EFFECTS_DDL)
    return await make_user(pg, email="alice@example.com")


UNSETTLED = """
    SELECT count(*) FROM alert_outbox WHERE status = 'pending'
    AND NOT (kind = 'summary' AND attempts = 0 AND next_attempt_at > now() AND $1)
"""


async def unsettled(pg: asyncpg.Connection, *, windows_too: bool = False) -> int:
    """Alerts still to be sent or retried (and, with ``windows_too``, grouping windows still open)."""
    return await pg.fetchval(UNSETTLED, not windows_too)


async def deliver_all(
    engine: Any,
    settings: Settings,
    pg: asyncpg.Connection,
    *,
    windows_too: bool = False,
    timeout: float = 20.0,
) -> None:
    """Run delivery rounds (as the worker's loop does) until no alert is waiting to be sent or retried."""
    deliverer = alerts.Deliverer(engine, settings)
    deadline = time.monotonic() + timeout
    async with alerts.new_client() as client:
        while True:
            await deliverer.run_once(client)
            if await unsettled(pg, windows_too=windows_too) == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"alerts still pending after {timeout}s")
            await asyncio.sleep(0.05)


async def failed_job_alert(
    engine: Any,
    owner: TestUser,
    *,
    error: str,
    title: str | None = "Nightly report",
    type_: str = "fail",
    **kw: Any,
) -> tuple[uuid.UUID, int]:
    """Record a ``failed`` alert the way the queue does (through :func:`alerts.record_job_failures`)."""
    job_id = kw.pop("job_id", uuid.uuid4())
    row = {
        "id": job_id,
        "type": type_,
        "title": title,
        "user_id": owner.id,
        "pipeline_id": None,
        "step_key": None,
        "attempts": kw.pop("attempts", 5),
        "max_attempts": kw.pop("max_attempts", 5),
        "error_message": error,
        **kw,
    }
    async with engine.begin() as conn:
        await alerts.record_job_failures(conn, [row])
        alert_id = (await conn.execute(alerts.text("SELECT max(id) FROM alert_outbox"))).scalar_one()
    return job_id, alert_id


# --- message bodies --------------------------------------------------------------------------------


async def test_slack_telegram_and_webhook_receive_exactly_these_bodies(
    make_settings, engine, owner, pg, receiver
) -> None:
    settings = alert_settings(make_settings, receiver)
    job_id = uuid.UUID("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
    _, alert_id = await failed_job_alert(
        engine,
        owner,
        job_id=job_id,
        error="RuntimeError: payment gateway said no\n\nTraceback (most recent call last): …",
    )
    at = await pg.fetchval(
        "UPDATE alert_outbox SET created_at = date_trunc('second', created_at) RETURNING created_at"
    )
    when = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    await deliver_all(engine, settings, pg)

    [slack] = receiver.got("slack")
    assert slack.json() == {
        "text": "❌ *Job failed: Fail on purpose*\n"
        "*Job:* <https://jobdesk.example.com/jobs/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b|0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b>\n"
        "*Label:* `Nightly report`\n"
        "*Type:* `fail`\n"
        "*Owner:* `alice@example.com`\n"
        "*Attempts:* 5 of 5\n"
        f"*When:* {when}\n"
        "*Error:*\n"
        "```RuntimeError: payment gateway said no\n\nTraceback (most recent call last): …```",
        "unfurl_links": False,
        "unfurl_media": False,
    }
    [telegram] = receiver.got("telegram")
    assert telegram.path == f"/bot{TOKEN}/sendMessage"
    assert telegram.json() == {
        "chat_id": CHAT,
        "text": "❌ <b>Job failed: Fail on purpose</b>\n"
        '<b>Job:</b> <a href="https://jobdesk.example.com/jobs/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b">0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b</a>\n'
        "<b>Label:</b> <code>Nightly report</code>\n"
        "<b>Type:</b> <code>fail</code>\n"
        "<b>Owner:</b> <code>alice@example.com</code>\n"
        "<b>Attempts:</b> 5 of 5\n"
        f"<b>When:</b> {when}\n"
        "<b>Error:</b>\n"
        "<pre>RuntimeError: payment gateway said no\n\nTraceback (most recent call last): …</pre>",
        "parse_mode": "HTML",
        "disable_web_page_preview": True,
    }
    [hook] = receiver.got("webhook")
    body = hook.json()
    assert body["alert_id"] == alert_id and body["kind"] == "failed"
    assert body["url"] == f"{BASE}/jobs/{job_id}"
    assert body["created_at"] == at.astimezone(UTC).isoformat()
    assert body["facts"]["Owner"] == "alice@example.com" and body["facts"]["Attempts"] == "5 of 5"
    assert body["data"]["job_id"] == str(job_id) and body["data"]["type"] == "fail"
    assert body["text"].startswith("❌ Job failed: Fail on purpose\nJob: 0190a1b2")
    # print the bodies for the closing note (visible with -s)
    print("SLACK BODY:", slack.body)
    print("TELEGRAM BODY:", telegram.body)

    row = await pg.fetchrow(
        "SELECT status, attempts, sent_at, last_error FROM alert_outbox WHERE id = $1", alert_id
    )
    assert row["status"] == "sent" and row["attempts"] == 1 and row["sent_at"] is not None
    deliveries = await pg.fetch("SELECT channel, ok, status_code FROM alert_deliveries ORDER BY channel")
    assert [tuple(d) for d in deliveries] == [
        ("slack", True, 200),
        ("telegram", True, 200),
        ("webhook", True, 200),
    ]


NASTY_ERROR = (
    "Exception: <!channel> <!here> <@U123> <script>alert(4)</script> *bold* _italic_ ~strike~ `code` "
    "```fence``` <https://evil.example|click here> &amp; :rotating_light:\nsecond line *more*"
)
NASTY_LABEL = '"><svg onload=alert(3)> *shout* `x`'


def _outside_code(slack_text: str) -> str:
    """Slack text with code blocks and inline code removed: what Slack would format."""
    no_blocks = re.sub(r"```.*?```", "", slack_text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", no_blocks)


async def test_payload_text_cannot_mention_link_or_format_in_slack_or_telegram(
    make_settings, engine, owner, pg, receiver
) -> None:
    """Case C19 (alert part): error text and job label with ``<!channel>``, ``<script>``, ``*bold*``, backtick
    fences and a Slack link stay inert text in Slack mrkdwn and Telegram HTML."""
    settings = alert_settings(make_settings, receiver)
    job_id, _ = await failed_job_alert(engine, owner, error=NASTY_ERROR, title=NASTY_LABEL)
    await deliver_all(engine, settings, pg)

    [slack] = receiver.texts("slack")
    # the only <…> is our own link: no mention, no user link, no HTML
    assert re.findall(r"<[^>]*>", slack) == [f"<{BASE}/jobs/{job_id}|{job_id}>"]
    assert "&lt;!channel&gt;" in slack and "&lt;script&gt;alert(4)&lt;/script&gt;" in slack
    assert "&lt;https://evil.example|click here&gt;" in slack and "&amp;amp;" in slack
    # user text sits in code, which Slack does not format; it cannot close its code span or block
    assert slack.count("```") == 2
    block = slack.split("```")[1]
    assert "`" not in block and "*bold*" in block and "ˋˋˋfenceˋˋˋ" in block
    assert re.search(r"^\*Label:\* `[^`]*`$", slack, flags=re.M)
    assert "ˋxˋ" in slack  # the label's backticks
    outside = _outside_code(slack)
    for inert in ("bold", "italic", "strike", "shout", "svg", "script", "channel", "evil", "rotating_light"):
        assert inert not in outside, inert

    [telegram] = receiver.texts("telegram")
    assert set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", telegram)) <= {"b", "a", "code", "pre"}
    assert re.findall(r"<a [^>]*>", telegram) == [f'<a href="{BASE}/jobs/{job_id}">']
    assert "<script>" not in telegram and "&lt;script&gt;alert(4)&lt;/script&gt;" in telegram
    assert "<svg" not in telegram and "&lt;svg onload=alert(3)&gt;" in telegram
    assert "&lt;!channel&gt;" in telegram and "&amp;amp;" in telegram

    [hook] = receiver.got("webhook")
    assert hook.json()["data"]["error"] == NASTY_ERROR  # JSON carries the text as it is


def _telegram_units(value: str) -> int:
    return len(value.encode("utf-16-le")) // 2


@pytest.mark.parametrize("unit", ["E", "😀", "<&>", "a`*_~"])
def test_any_error_is_cut_to_each_channels_limit_with_a_marker_and_no_broken_escape(unit: str) -> None:
    """Case C13 (alert part) as a unit: whatever the error's characters (astral emoji count twice in
    Telegram, escapes grow ``<&>``), the message fits and says how large the full error was."""
    error = unit * 200_000
    size = len(error.encode())
    message = alerts.describe(
        "failed",
        {"job_id": str(uuid.uuid4()), "type": "fail", "attempts": 1, "max_attempts": 1, "error": error},
        created_at=datetime.now(UTC),
        owner_email="a@example.com",
        base_url=BASE,
    )
    slack = alerts.slack_body(message)["text"]
    telegram = alerts.telegram_body(message, CHAT)["text"]
    assert len(slack) <= alerts.SLACK_TEXT_LIMIT and slack.endswith(f"…[truncated, {size} bytes]```")
    assert _telegram_units(telegram) <= alerts.TELEGRAM_TEXT_LIMIT
    assert telegram.endswith(f"…[truncated, {size} bytes]</pre>")
    assert len(slack) > alerts.SLACK_TEXT_LIMIT - 20 or unit == "a`*_~"  # the room is used, not wasted
    for text_ in (slack, telegram):
        assert not re.search(r"&(?!amp;|lt;|gt;|quot;)", text_)  # no escape cut in half
    hook = alerts.webhook_body(message, alert_id=1, payload={}, created_at=None)
    assert len(hook["error"]) <= alerts.WEBHOOK_ERROR_LIMIT


async def test_a_5_mb_error_is_trimmed_to_each_channels_limit(
    make_settings, engine, owner, pg, receiver
) -> None:
    """Case C13 (alert part): a processor raises with a 5 MB message; the job still fails with its error
    capped, and every channel gets a message within its limit that names the full size."""
    settings = alert_settings(make_settings, receiver)
    async with running_worker(settings):
        async with engine.begin() as conn:
            job = (
                await queue.enqueue(
                    conn,
                    NewJob(type="test.huge_error", input_data={}, user_id=owner.id, max_attempts=1),
                    settings,
                )
            ).job["id"]
        row = await wait_status(pg, job, {"failed"})
        await wait_until(lambda: _sent_count(pg), what="the alert delivered")
    assert row["error_message"].startswith("RuntimeError: EEEE") and len(row["error_message"]) < 70_000
    full = int(re.search(r"truncated, (\d+) bytes", row["error_message"]).group(1))
    assert full > 5 * 1024 * 1024
    [slack] = receiver.texts("slack")
    assert len(slack) <= alerts.SLACK_TEXT_LIMIT and slack.endswith(f"…[truncated, {full} bytes]```")
    [telegram] = receiver.texts("telegram")
    assert _telegram_units(telegram) <= alerts.TELEGRAM_TEXT_LIMIT
    assert telegram.endswith(f"…[truncated, {full} bytes]</pre>")
    [hook] = receiver.got("webhook")
    assert hook.json()["error"].endswith(f"…[truncated, {full} bytes]")


async def _sent_count(pg: asyncpg.Connection) -> int:
    return await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE status = 'sent'")


# --- retries -------------------------------------------------------------------------------------------

TOO_MANY = (429, {"retry-after": "1"}, "rate_limited")
TELEGRAM_TOO_MANY = (
    429,
    {"content-type": "application/json"},
    '{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 1","parameters":{"retry_after":1}}',
)


async def test_a_429_then_200_is_delivered_exactly_once_after_retry_after(
    make_settings, engine, owner, pg, receiver, monkeypatch
) -> None:
    settings = alert_settings(make_settings, receiver)
    receiver.script = {"slack": [TOO_MANY], "telegram": [TELEGRAM_TOO_MANY], "webhook": [(503, {}, "busy")]}
    _, alert_id = await failed_job_alert(engine, owner, error="boom")
    await deliver_all(engine, settings, pg)
    for channel in ("slack", "telegram", "webhook"):
        hits = receiver.got(channel, status=None)
        assert [h.status for h in hits] == [429 if channel != "webhook" else 503, 200], channel
        assert hits[0].body == hits[1].body  # the same message, delivered once
        if channel != "webhook":
            assert hits[1].at - hits[0].at >= 0.95  # Retry-After: 1 (header, or Telegram's retry_after)
    row = await pg.fetchrow("SELECT status, attempts, last_error FROM alert_outbox WHERE id = $1", alert_id)
    assert (row["status"], row["attempts"], row["last_error"]) == ("sent", 2, None)
    log = await pg.fetch("SELECT channel, status_code, ok, error FROM alert_deliveries ORDER BY id")
    assert sorted((d["channel"], d["status_code"], d["ok"]) for d in log) == [
        ("slack", 200, True),
        ("slack", 429, False),
        ("telegram", 200, True),
        ("telegram", 429, False),
        ("webhook", 200, True),
        ("webhook", 503, False),
    ]
    assert any("Too Many Requests" in (d["error"] or "") for d in log)

    # negative control: without retries the same receiver never gets the message
    receiver.hits.clear()
    monkeypatch.setattr(alerts, "MAX_ATTEMPTS", 1)
    receiver.script = {"slack": [TOO_MANY], "telegram": [TELEGRAM_TOO_MANY], "webhook": [(503, {}, "busy")]}
    _, second = await failed_job_alert(engine, owner, error="another failure")
    await deliver_all(engine, settings, pg)
    assert receiver.got("slack") == [] and receiver.got("telegram") == []
    row = await pg.fetchrow("SELECT status, last_error FROM alert_outbox WHERE id = $1", second)
    assert row["status"] == "failed" and row["last_error"].startswith(
            "slack: gave up after 1 attempts: HTTP 429"
        )


async def test_a_channel_that_took_the_message_is_not_sent_it_again_and_4xx_is_final(
    make_settings, engine, owner, pg, receiver
) -> None:
    settings = alert_settings(make_settings, receiver)
    receiver.script = {
        "telegram": [
            (
                400,
                {"content-type": "application/json"},
                '{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}',
            )
        ],
        "webhook": [(500, {}, "oops"), (502, {}, "bad gateway")],
    }
    _, alert_id = await failed_job_alert(engine, owner, error="boom")
    await deliver_all(engine, settings, pg, timeout=30)
    assert [h.status for h in receiver.got("slack", status=None)] == [200]  # once, although others retried
    assert [h.status for h in receiver.got("telegram", status=None)] == [400]  # refused for good: no retry
    assert [h.status for h in receiver.got("webhook", status=None)] == [500, 502, 200]
    row = await pg.fetchrow(
        "SELECT status, attempts, last_error, sent_at, payload FROM alert_outbox WHERE id = $1", alert_id
    )
    assert row["status"] == "failed" and row["attempts"] == 3 and row["sent_at"] is not None
    assert row["last_error"] == "telegram: HTTP 400: Bad Request: chat not found"
    assert json.loads(row["payload"])["_channels"] == {
        "slack": "sent",
        "telegram": "gave_up",
        "webhook": "sent",
    }


async def test_delivery_gives_up_after_a_bounded_number_of_attempts_and_never_alerts_about_itself(
    make_settings, engine, owner, pg, receiver, monkeypatch
) -> None:
    settings = alert_settings(
        make_settings, receiver, alert_webhook_url=None, telegram_bot_token=None, telegram_chat_id=None
    )
    monkeypatch.setattr(alerts, "BACKOFF_BASE_SECS", 0.01)
    monkeypatch.setattr(alerts, "MAX_ATTEMPTS", 4)
    receiver.script = {"slack": [(500, {}, "down")] * 10}
    _, alert_id = await failed_job_alert(engine, owner, error="boom")
    await deliver_all(engine, settings, pg)
    assert [h.status for h in receiver.got("slack", status=None)] == [500] * 4
    row = await pg.fetchrow("SELECT status, attempts, last_error FROM alert_outbox WHERE id = $1", alert_id)
    assert row["status"] == "failed" and row["attempts"] == 4
    assert row["last_error"] == "slack: gave up after 4 attempts: HTTP 500: down"
    kinds = await pg.fetch("SELECT kind, status FROM alert_outbox ORDER BY id")
    assert [tuple(k) for k in kinds] == [("failed", "failed"), ("summary", "pending")]  # no alert about it
    # the secret path of the webhook never appears in what is stored
    assert (
        await pg.fetchval("SELECT count(*) FROM alert_deliveries WHERE error LIKE '%slacksecretpath%'") == 0
    )


def test_backoff_doubles_with_jitter_is_capped_and_honours_retry_after() -> None:
    import random

    rng = random.Random(7)
    for attempts in (0, 1, 2, 5, 9, 10, 64, 10**6):
        raw = min(alerts.BACKOFF_CAP_SECS, alerts.BACKOFF_BASE_SECS * 2 ** min(max(attempts - 1, 0), 30))
        for _ in range(20):
            delay = alerts.backoff_secs(attempts, rng=rng)
            assert raw * 0.5 <= delay <= raw
    assert alerts.backoff_secs(1, 120.0, rng=rng) >= 120.0


# --- what is sent ---------------------------------------------------------------------------------------


async def test_admin_actions_are_notices_naming_the_admin_one_per_bulk_action(
    make_settings, engine, owner, pg, receiver
) -> None:
    settings = alert_settings(make_settings, receiver)
    ids = [uuid.uuid4() for _ in range(37)]
    async with engine.begin() as conn:
        await alerts.record_admin_action(
            conn, admin_email="boss@example.com", action="jobs.bulk_cancel", count=37, job_ids=ids
        )
        await alerts.record_admin_action(
            conn, admin_email="boss@example.com", action="job.retry", count=1, job_ids=ids[:1]
        )
    await deliver_all(engine, settings, pg)
    bulk, single = receiver.texts("slack")
    assert bulk.startswith("🛠 *Admin action: 37 jobs cancelled*\n*Admin:* `boss@example.com`\n")
    assert "*Action:* `jobs.bulk_cancel`\n*Jobs:* 37\n" in bulk and f"`{ids[0]}, {ids[1]}" in bulk
    assert "and 32 more`" in bulk
    assert single.startswith("🛠 *Admin action: 1 job retried*\n*Admin:* `boss@example.com`\n")
    assert f"*Job:* <{BASE}/jobs/{ids[0]}|{ids[0]}>" in single
    tg_bulk, _ = receiver.texts("telegram")
    assert "<b>Admin:</b> <code>boss@example.com</code>" in tg_bulk and "<b>Jobs:</b> 37" in tg_bulk


async def test_kinds_not_in_alert_on_are_suppressed_and_stale_alerts_are_dropped(
    make_settings, engine, owner, pg, receiver
) -> None:
    settings = alert_settings(make_settings, receiver, alert_on="failed")
    async with engine.begin() as conn:
        await alerts.record_admin_action(conn, admin_email="boss@example.com", action="job.cancel", count=1)
    _, stale = await failed_job_alert(engine, owner, error="long ago")
    await pg.execute("UPDATE alert_outbox SET created_at = now() - interval '2 days' WHERE id = $1", stale)
    _, fresh = await failed_job_alert(engine, owner, error="just now")
    await deliver_all(engine, settings, pg)
    [text_] = receiver.texts("slack")
    assert "just now" in text_
    rows = {r["kind"] + str(r["id"] == stale): r for r in await pg.fetch("SELECT * FROM alert_outbox")}
    assert rows["admin_actionFalse"]["status"] == "suppressed"
    assert rows["admin_actionFalse"]["last_error"] == "not sent: ALERT_ON does not include admin_action"
    assert rows["failedTrue"]["status"] == "suppressed"
    assert rows["failedTrue"]["last_error"] == "not sent: no channel took it within 24 h"


async def test_old_alerts_and_delivery_records_are_pruned(make_settings, engine, owner, pg, receiver) -> None:
    settings = alert_settings(make_settings, receiver)
    await failed_job_alert(engine, owner, error="old")
    await deliver_all(engine, settings, pg)
    await failed_job_alert(engine, owner, error="new")
    await pg.execute(
        "UPDATE alert_outbox SET created_at = now() - interval '40 days' WHERE payload->>'error' = 'old'"
    )
    await pg.execute("UPDATE alert_deliveries SET at = now() - interval '40 days'")
    async with engine.begin() as conn:
        assert await alerts.prune(conn, 30) == 1  # (its 3 delivery records go with it)
    left = await pg.fetch("SELECT payload->>'error' AS e FROM alert_outbox WHERE kind = 'failed'")
    assert [r["e"] for r in left] == ["new"]
    assert await pg.fetchval("SELECT count(*) FROM alert_deliveries") == 0
    await pg.execute(
        "INSERT INTO alert_deliveries (channel, ok, at) VALUES ('slack', true, now() - interval '40 days')"
    )
    async with engine.begin() as conn:
        assert await alerts.prune(conn, 30) == 1  # a test send's record, which has no alert
