"""Notices to owners: rows written with the transition (finish, fail, a step waiting for approval), the
API and page to read and mark them (each person only their own), the e-mail choice, and one e-mail for a
whole failing batch, through the outbox, to a local SMTP server."""

from __future__ import annotations

import asyncio
import email
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from aiosmtpd.smtp import SMTP
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # registers test.form
import tests.support.processors  # noqa: F401  (registers test.logs)
from app.jobs.types import registry
from app.settings import Settings
from tests.support.factories import make_job, make_user
from tests.support.jobsteps import claim, enqueue, failed_job, finish
from tests.support.webkit import add_token, add_user, csrf, sign_in_as
from tests.support.workers import running_worker, wait_until


class Inbox:
    """An aiosmtpd handler that keeps what it is given."""

    def __init__(self) -> None:
        self.messages: list[email.message.Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 2.0.0 Message accepted"


@pytest.fixture
async def mx() -> AsyncIterator[tuple[Inbox, int]]:
    inbox = Inbox()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(inbox, hostname="test-mx"), "127.0.0.1", 0)
    yield inbox, server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def notices(pg: asyncpg.Connection, user_id: int) -> list[dict[str, Any]]:
    rows = await pg.fetch("SELECT * FROM notifications WHERE user_id = $1 ORDER BY id", user_id)
    return [dict(r) for r in rows]


async def test_finish_and_fail_notify_the_owner_who_reads_and_marks_only_their_own(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    done = await enqueue(engine, ui_settings, ann.id, title="Quarterly report")
    await claim(engine, done)
    await finish(engine, ui_settings, done, "completed", result={})
    assert [(n["kind"], n["text"], n["job_id"]) for n in await notices(pg, ann.id)] == [
        ("job_completed", "Your job “Quarterly report” has finished.", done)
    ]
    bad = await failed_job(engine, ui_settings, ann.id, "boom", title="Broken")

    token = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    body = (await client.get("/api/notifications", headers=token)).json()
    assert body["unread"] == 2
    assert [(i["kind"], i.get("job_id"), i["read"]) for i in body["items"]] == [
        ("job_failed", str(bad), False),
        ("job_completed", str(done), False),
    ]
    assert set(body["items"][0]) == {"id", "kind", "job_id", "text", "at", "read"}
    failed_id, done_id = body["items"][0]["id"], body["items"][1]["id"]

    # the page shows them; the bell's fragment counts them
    page = (await client.get("/notifications")).text
    assert "Your job “Broken” failed." in page and f'href="/jobs/{bad}"' in page
    assert ">2</span>" in (await client.get("/notifications/bell")).text

    # someone else sees none of them and cannot mark them
    bob = await make_user(pg, email="bob@example.com")
    bob_token = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    assert (await client.get("/api/notifications", headers=bob_token)).json() == {
        "items": [],
        "unread": 0,
        "next": None,
    }
    r = await client.post("/api/notifications/read", json={"ids": [failed_id, done_id]}, headers=bob_token)
    assert r.status_code == 200 and r.json() == {"marked": 0, "unread": 0}
    r = await client.post("/api/notifications/read", json={"all": True}, headers=bob_token)
    assert r.json()["marked"] == 0
    assert (await client.get("/api/notifications", headers=token)).json()["unread"] == 2

    # the owner marks one through the API, the other on the page
    r = await client.post("/api/notifications/read", json={"ids": [done_id]}, headers=token)
    assert r.json() == {"marked": 1, "unread": 1}
    bad_body = await client.post("/api/notifications/read", json={"ids": ["x"]}, headers=token)
    assert bad_body.status_code == 422 and "ids" in bad_body.text
    # both, or an "all" that is not true: which was meant is unclear, and marking all cannot be undone
    for body in ({"all": True, "ids": [failed_id]}, {"all": "yes"}, {"all": False, "ids": [failed_id]}):
        r = await client.post("/api/notifications/read", json=body, headers=token)
        assert r.status_code == 422 and list(r.json()["errors"]) == ["all"], (body, r.text)
    assert (await client.get("/api/notifications", headers=token)).json()["unread"] == 1
    r = await client.post("/notifications/read", data={"_csrf_token": await csrf(client), "all": "1"})
    assert r.status_code in (200, 303)
    assert (await client.get("/api/notifications", headers=token)).json()["unread"] == 0

    # the e-mail choice: API and the account fragment's form
    r = await client.put("/api/me/notifications", json={"email": True}, headers=token)
    assert r.status_code == 200 and r.json()["email"] is True
    assert await pg.fetchval("SELECT email_notifications FROM users WHERE id = $1", ann.id) is True
    assert (
        await client.put("/api/me/notifications", json={"email": "yes"}, headers=token)
    ).status_code == 422
    r = await client.post(
        "/notifications/email",
        data={"_csrf_token": await csrf(client), "next": "//evil.example/"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/notifications"
    assert await pg.fetchval("SELECT email_notifications FROM users WHERE id = $1", ann.id) is False


async def test_the_page_shows_each_notice_in_the_person_s_time_zone(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    # the page printed every notice in UTC ("2026-12-06 00:54 UTC") whatever zone the person chose
    ann = await sign_in_as(client, db_url, "ann@example.com")
    await pg.execute("UPDATE users SET timezone = 'Asia/Tokyo' WHERE id = $1", ann.id)
    done = await enqueue(engine, ui_settings, ann.id, title="Quarterly report")
    await claim(engine, done)
    await finish(engine, ui_settings, done, "completed", result={})
    await pg.execute("UPDATE notifications SET at = '2026-12-01 08:30+00' WHERE user_id = $1", ann.id)
    page = (await client.get("/notifications")).text
    assert "1 Dec 2026, 17:30 JST" in page and "08:30 UTC" not in page


async def test_the_bell_is_drawn_not_an_emoji(client: AsyncTestClient, db_url: str) -> None:
    # the emoji U+1F514 showed as an empty box on a machine without an emoji font
    await sign_in_as(client, db_url, "ann@example.com")
    for html in ((await client.get("/")).text, (await client.get("/notifications/bell")).text):
        bell = html[html.index('id="notif-bell"') :].split("</a>", 1)[0]
        assert '<span class="bell-icon" aria-hidden="true"></span>' in bell
        assert "&#128276;" not in bell and "\U0001f514" not in bell


async def test_steps_of_a_pipeline_do_not_notify_one_by_one(
    engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    from app.jobs import queue

    user = await make_user(pg)
    async with engine.begin() as conn:
        p = await queue.create_pipeline(
            conn,
            name="Two steps",
            steps=[
                {"key": "a", "type": "test.form", "input_data": {"name": "A"}},
                {"key": "b", "type": "test.form", "input_data": {"name": "B"}, "depends_on": ["a"]},
            ],
            user_id=user.id,
            settings=ui_settings,
        )
    pid = p["id"]
    for _ in range(2):
        jid = await claim(engine)
        await finish(engine, ui_settings, jid, "completed", result={})
    rows = await notices(pg, user.id)
    assert [(n["kind"], n["pipeline_id"], n["job_id"]) for n in rows] == [("pipeline_completed", pid, None)]
    assert rows[0]["text"] == "Your pipeline “Two steps” has finished."

    # a step that waits for approval tells the people who may decide it: here its owner, listed
    async with engine.begin() as conn:
        p = await queue.create_pipeline(
            conn,
            name="Checked",
            steps=[
                {
                    "key": "a",
                    "type": "test.form",
                    "input_data": {"name": "A"},
                    "requires_approval": True,
                    "approvers": ["owner"],
                }
            ],
            user_id=user.id,
            settings=ui_settings,
        )
    jid = await claim(engine)
    await finish(engine, ui_settings, jid, "completed", result={})
    last = (await notices(pg, user.id))[-1]
    assert (last["kind"], last["job_id"], last["pipeline_id"]) == ("approval_waiting", jid, p["id"])


async def test_a_failing_batch_sends_one_email(
    make_settings: Any, engine: AsyncEngine, pg: asyncpg.Connection, mx: tuple[Inbox, int], long_run: bool
) -> None:
    inbox, port = mx
    settings = make_settings(
        smtp_host="127.0.0.1",
        smtp_port=port,
        smtp_from="Jobdesk <jobs@example.org>",
        notification_email_quiet_secs=1.0,
        jobdesk_base_url="https://jobs.example.org",
    )
    ann = await make_user(pg, email="ann@example.com")
    quiet = await make_user(pg, email="quiet@example.com")
    await pg.execute("UPDATE users SET email_notifications = true WHERE id = $1", ann.id)
    n = 500 if long_run else 100
    for _ in range(n):
        await make_job(engine, settings, ann, "test.logs", {"lines": 0, "fail": True}, max_attempts=1)
    await make_job(engine, settings, quiet, "test.logs", {"lines": 0, "fail": True}, max_attempts=1)
    started = time.monotonic()
    async with running_worker(settings):
        await wait_until(lambda: _failed(pg, n + 1), timeout=60, what="every job failed")
        failed_in = time.monotonic() - started
        await wait_until(lambda: _emailed(pg, ann.id), timeout=20, what="the notices e-mailed")
        await asyncio.sleep(1.5)  # a second e-mail, if any, would be on its way by now
    assert len(inbox.messages) == 1, [m["Subject"] for m in inbox.messages]
    msg = inbox.messages[0]
    assert msg["To"] == "ann@example.com"
    rows = await notices(pg, ann.id)
    assert sum(r["count"] for r in rows) == n and len(rows) <= 5
    body = msg.get_payload(decode=True).decode()
    assert "of your jobs failed" in body and "https://jobs.example.org/notifications" in body
    # the person who did not choose e-mail has the notice in the app only
    assert [r["emailed_at"] for r in await notices(pg, quiet.id)] == [None]
    print(f"{n} failures in {failed_in:.1f}s, {len(rows)} notice rows, 1 e-mail")


async def _failed(pg: asyncpg.Connection, n: int) -> bool:
    return await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") >= n


async def _emailed(pg: asyncpg.Connection, user_id: int) -> bool:
    return not await pg.fetchval(
        "SELECT count(*) FROM notifications WHERE user_id = $1 AND emailed_at IS NULL", user_id
    )


async def test_a_job_without_a_title_of_its_own_is_named_by_its_types_title(
    engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection, db_url: str
) -> None:
    """As its page and My jobs name it ("Your job “Every field” failed."), not by the type's code name."""
    ann = await add_user(db_url, "ann@example.com")
    spec = registry.get("test.form")
    assert spec is not None and spec.title and spec.title != "test.form"
    await failed_job(engine, ui_settings, ann.id, "boom")
    assert [n["text"] for n in await notices(pg, ann.id)] == [f"Your job “{spec.title}” failed."]
