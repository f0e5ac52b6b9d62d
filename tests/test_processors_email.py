"""``email.send`` against a real SMTP server (aiosmtpd on 127.0.0.1, issue 9 §2): delivery, headers,
refused and deferred recipients, login, missing configuration, unreachable server, the demo's loopback
server note, and end to end through a worker."""

from __future__ import annotations

import asyncio
import email
import json
import socket
from collections.abc import AsyncIterator
from email import policy
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword
from procs import as_dict, enqueue, job_context
from webkit import add_user
from workers import running_worker, wait_status

from app.errors import BadInput
from app.processors import PermanentError, registry
from app.processors.email_send import DEMO_DIR, TemporaryMailError


class Recorder:
    """An aiosmtpd handler that keeps messages; ``@refused.test`` gets 550, ``@later.test`` 451."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.endswith("@refused.test"):
            return "550 5.1.1 No such user here"
        if address.endswith("@later.test"):
            return "451 4.3.0 Mailbox busy, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 2.0.0 Message accepted"


def _auth(server, session, envelope, mechanism, data):
    ok = (
        isinstance(data, LoginPassword)
        and bytes(data.login) == b"mailer"
        and bytes(data.password) == b"s3cret"
    )
    return AuthResult(success=ok, handled=False)


async def start_server(**smtp_kw: Any) -> tuple[Any, Recorder, int]:
    recorder = Recorder()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(recorder, hostname="test-mx", **smtp_kw), "127.0.0.1", 0)
    return server, recorder, server.sockets[0].getsockname()[1]


@pytest.fixture
async def mx() -> AsyncIterator[tuple[Recorder, int]]:
    server, recorder, port = await start_server()
    yield recorder, port
    server.close()
    await server.wait_closed()


async def send(settings: Any, job_id: Any = None, **input_data: Any) -> tuple[dict[str, Any], Any]:
    ctx, progress = job_context("email.send", input_data, settings, job_id=job_id)
    return await registry.get("email.send").func(ctx), progress


async def test_a_message_is_delivered_with_its_headers(mx, make_settings) -> None:
    recorder, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port, smtp_from="Jobdesk <jobs@example.org>")
    result, progress = await send(
        settings,
        to=["Ann Smith <ann@example.com>", "bob@example.com"],
        cc=["carol@example.com"],
        reply_to="help@example.org",
        subject="Your report is ready",
        body="Hello Ann,\n\nthe report is attached to the job page.\n",
    )
    assert len(recorder.messages) == 1
    sender, rcpts, raw = recorder.messages[0]
    assert sender == "jobs@example.org"
    assert rcpts == ["ann@example.com", "bob@example.com", "carol@example.com"]
    msg = email.message_from_bytes(raw, policy=policy.default)
    assert msg["Subject"] == "Your report is ready" and msg["From"] == "Jobdesk <jobs@example.org>"
    assert msg["To"] == "Ann Smith <ann@example.com>, bob@example.com" and msg["Cc"] == "carol@example.com"
    assert msg["Reply-To"] == "help@example.org"
    assert (
        msg.get_content().replace("\r\n", "\n") == "Hello Ann,\n\nthe report is attached to the job page.\n"
    )
    assert result["accepted"] == rcpts and result["refused"] == {}
    assert result["message_id"] == msg["Message-ID"] and result["server"] == f"127.0.0.1:{port}"
    assert (
        result["server_answer"].startswith("2.0.0 Message accepted") or "accepted" in result["server_answer"]
    )
    assert progress.reports[0][1] == f"Connecting to the mail server 127.0.0.1:{port}"
    assert progress.reports[-1][0] == 1.0


async def test_the_message_id_is_the_same_on_every_attempt(mx, make_settings) -> None:
    recorder, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port)
    job_id = "0191e0c1-0000-7000-8000-000000000001"
    first, _ = await send(settings, job_id=job_id, to=["a@example.com"], subject="s", body="b")
    again, _ = await send(settings, job_id=job_id, to=["a@example.com"], subject="s", body="b")
    assert first["message_id"] == again["message_id"] == f"<jobdesk.{job_id}@localhost>"


async def test_some_recipients_refused_the_others_still_get_it(mx, make_settings) -> None:
    recorder, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port)
    result, _ = await send(settings, to=["ann@example.com", "ghost@refused.test"], subject="s", body="b")
    assert recorder.messages[0][1] == ["ann@example.com"]
    assert result["accepted"] == ["ann@example.com"]
    assert result["refused"] == {"ghost@refused.test": "550 5.1.1 No such user here"}


async def test_every_recipient_refused_is_permanent(mx, make_settings) -> None:
    recorder, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port)
    with pytest.raises(PermanentError) as err:
        await send(settings, to=["ghost@refused.test"], subject="s", body="b")
    assert "refused every recipient: ghost@refused.test: 550 5.1.1 No such user here" in str(err.value)
    assert recorder.messages == []


async def test_a_4xx_answer_is_retried(mx, make_settings) -> None:
    _, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port)
    with pytest.raises(TemporaryMailError, match="asked to try later: busy@later.test: 451"):
        await send(settings, to=["busy@later.test"], subject="s", body="b")


async def test_without_smtp_host_the_job_fails_permanently_and_says_what_to_set(settings) -> None:
    assert settings.smtp_host is None
    with pytest.raises(PermanentError) as err:
        await send(settings, to=["a@example.com"], subject="s", body="b")
    assert "Email is not set up" in str(err.value) and "SMTP_HOST" in str(err.value)


async def test_an_unreachable_server_is_retried(make_settings) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port)
    with pytest.raises(TemporaryMailError, match=f"Could not reach the mail server 127.0.0.1:{port}"):
        await send(settings, to=["a@example.com"], subject="s", body="b")


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
@pytest.mark.filterwarnings("ignore:Session.login_data is deprecated")
async def test_login_with_smtp_username_and_password(make_settings) -> None:
    server, recorder, port = await start_server(
        authenticator=_auth, auth_require_tls=False, auth_required=True, auth_exclude_mechanism=["LOGIN"]
    )
    try:
        good = make_settings(
            smtp_host="127.0.0.1", smtp_port=port, smtp_username="mailer", smtp_password="s3cret"
        )
        await send(good, to=["a@example.com"], subject="s", body="b")
        assert len(recorder.messages) == 1
        bad = make_settings(
            smtp_host="127.0.0.1", smtp_port=port, smtp_username="mailer", smtp_password="wrong"
        )
        with pytest.raises(
            PermanentError, match=r"did not accept the login \(SMTP_USERNAME / SMTP_PASSWORD\): 535"
        ):
            await send(bad, to=["a@example.com"], subject="s", body="b")
        anonymous = make_settings(smtp_host="127.0.0.1", smtp_port=port)
        with pytest.raises(PermanentError, match="requires a login: set SMTP_USERNAME and SMTP_PASSWORD"):
            await send(anonymous, to=["a@example.com"], subject="s", body="b")
        assert len(recorder.messages) == 1
    finally:
        server.close()
        await server.wait_closed()


async def test_starttls_required_but_not_offered_is_permanent(mx, make_settings) -> None:
    _, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port, smtp_starttls=True)
    with pytest.raises(PermanentError, match="SMTP_STARTTLS"):
        await send(settings, to=["a@example.com"], subject="s", body="b")


@pytest.mark.parametrize(
    ("input_data", "field", "needle"),
    [
        ({"to": [], "subject": "s", "body": "b"}, "input_data.to", "at least 1"),
        ({"to": ["not an address"], "subject": "s", "body": "b"}, "input_data.to", "is not an email address"),
        (
            {"to": ["a@example.com\r\nBcc: x@evil.test"], "subject": "s", "body": "b"},
            "input_data.to",
            "not an email",
        ),
        (
            {"to": ["a@example.com"], "subject": "hi\r\nBcc: x@evil.test", "body": "b"},
            "input_data.subject",
            "one line",
        ),
        ({"to": ["a@example.com"], "subject": "   ", "body": "b"}, "input_data.subject", "is required"),
        ({"to": ["a@example.com"], "subject": "s"}, "input_data.body", "is required"),
        (
            {"to": ["a@example.com"], "reply_to": "nope", "subject": "s", "body": "b"},
            "input_data.reply_to",
            "not an email",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field(input_data, field, needle) -> None:
    with pytest.raises(BadInput) as err:
        registry.get("email.send").validate_input(input_data)
    assert field in err.value.errors and needle in err.value.errors[field], err.value.errors


async def test_the_demo_server_note_is_used_for_its_own_job_only(mx, settings) -> None:
    recorder, port = mx
    folder = settings.data_dir / DEMO_DIR
    folder.mkdir(parents=True)
    job_id = "0191e0c1-0000-7000-8000-0000000000aa"
    (folder / f"{job_id}.json").write_text(json.dumps({"host": "127.0.0.1", "port": port}))
    result, _ = await send(settings, job_id=job_id, to=["a@example.com"], subject="s", body="b")
    assert len(recorder.messages) == 1 and "jobdesk demo" in result["note"]
    with pytest.raises(PermanentError, match="Email is not set up"):  # another job: no note, no server
        await send(settings, to=["a@example.com"], subject="s", body="b")
    other = "0191e0c1-0000-7000-8000-0000000000bb"
    (folder / f"{other}.json").write_text(json.dumps({"host": "10.0.0.1", "port": port}))
    with pytest.raises(PermanentError, match="Email is not set up"):  # never anything but loopback
        await send(settings, job_id=other, to=["a@example.com"], subject="s", body="b")
    assert len(recorder.messages) == 1


async def test_through_a_worker(mx, make_settings, engine, pg) -> None:
    recorder, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port)
    user = await add_user(settings.database_url, "mailer@example.com")
    ok = await enqueue(
        engine, settings, user.id, "email.send", {"to": ["z@example.com"], "subject": "Hi", "body": "x"}
    )
    refused = await enqueue(
        engine, settings, user.id, "email.send", {"to": ["nobody@refused.test"], "subject": "Hi", "body": "x"}
    )
    async with running_worker(settings):
        done = await wait_status(pg, ok, {"completed"})
        failed = await wait_status(pg, refused, {"failed"})
    assert as_dict(done["result_data"])["accepted"] == ["z@example.com"]
    assert failed["attempts"] == 1 and "550 5.1.1" in failed["error_message"]
    assert [m[1] for m in recorder.messages] == [["z@example.com"]]
