"""``email.send`` against a real SMTP server (aiosmtpd on 127.0.0.1): delivery, headers, refused and
deferred recipients, login, missing configuration, unreachable server, the demo's loopback server note,
every address exactly one mailbox and every header one line, and end to end through the JSON API and a
worker."""

from __future__ import annotations

import asyncio
import email
import json
import socket
import uuid
from collections.abc import AsyncIterator
from email import policy
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from app.errors import BadInput
from app.processors import PermanentError, registry
from app.processors.email_send import DEMO_DIR, TemporaryMailError
from tests.support.procs import as_dict, enqueue, job_context
from tests.support.webkit import add_token, add_user, app_client
from tests.support.workers import running_worker, wait_status


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
    assert msg["Subject"] == "Your report is ready"
    assert msg["From"] == "Jobdesk <jobs@example.org>"
    assert msg["To"] == "Ann Smith <ann@example.com>, bob@example.com"
    assert msg["Cc"] == "carol@example.com"
    assert msg["Reply-To"] == "help@example.org"
    assert (
        msg.get_content().replace("\r\n", "\n") == "Hello Ann,\n\nthe report is attached to the job page.\n"
    )
    assert result["accepted"] == rcpts
    assert result["refused"] == {}
    assert result["message_id"] == msg["Message-ID"]
    assert result["server"] == f"127.0.0.1:{port}"
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
    assert "Email is not set up" in str(err.value)
    assert "SMTP_HOST" in str(err.value)


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
        (
            {"to": ["not an address"], "subject": "s", "body": "b"},
            "input_data.to[0]",
            "is not an email address",
        ),
        (
            {"to": ["a@example.com\r\nBcc: x@evil.test"], "subject": "s", "body": "b"},
            "input_data.to[0]",
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
    assert field in err.value.errors, err.value.errors
    assert needle.lower() in err.value.errors[field].lower(), err.value.errors


async def test_the_demo_server_note_is_used_for_its_own_job_only(mx, settings) -> None:
    recorder, port = mx
    folder = settings.data_dir / DEMO_DIR
    folder.mkdir(parents=True)
    job_id = "0191e0c1-0000-7000-8000-0000000000aa"
    (folder / f"{job_id}.json").write_text(json.dumps({"host": "127.0.0.1", "port": port}))
    result, _ = await send(settings, job_id=job_id, to=["a@example.com"], subject="s", body="b")
    assert len(recorder.messages) == 1
    assert "jobdesk demo" in result["note"]
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
    assert failed["attempts"] == 1
    assert "550 5.1.1" in failed["error_message"]
    assert [m[1] for m in recorder.messages] == [["z@example.com"]]


# --- every address one mailbox, every header one line --------------------------------------------------

LINE_BREAKS = [chr(c) for c in range(0x110000) if len(f"a{chr(c)}b".splitlines()) > 1]
"""Every character str.splitlines() breaks a line at: \\n \\r VT FF FS GS RS NEL U+2028 U+2029."""
CONTROLS = ["\x00", "\x01", "\x1f", "\x7f", "\x9b"]


def _errors(input_data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(BadInput) as err:
        registry.get("email.send").validate_input({"subject": "s", "body": "b", **input_data})
    return err.value.errors


def test_every_line_separator_and_control_character_is_refused_in_every_header_field() -> None:
    assert len(LINE_BREAKS) == 10
    for ch in LINE_BREAKS + CONTROLS:
        shown = f"U+{ord(ch):04X}"
        assert (
            shown in _errors({"to": ["a@x.test"], "subject": f"Hi{ch}Bcc: v@evil.test"})["input_data.subject"]
        )
        assert shown in _errors({"to": [f"Ann{ch}Bcc <a@x.test>"]})["input_data.to[0]"]
        assert shown in _errors({"to": ["a@x.test"], "cc": [f"b@x.test{ch}"]})["input_data.cc[0]"]
        assert (
            shown in _errors({"to": ["a@x.test"], "reply_to": f"Help{ch} <h@x.test>"})["input_data.reply_to"]
        )


@pytest.mark.parametrize(
    ("input_data", "field", "needle"),
    [
        ({"to": ["victim@evil.test, Ann <ann@example.com>"]}, "input_data.to[0]", "holds 2 addresses"),
        ({"to": ["ann@example.com", "a@x.test b@x.test"]}, "input_data.to[1]", "is not an email address"),
        ({"to": ["Team: a@x.test, b@x.test;"]}, "input_data.to[0]", "is a group of addresses"),
        ({"to": ["a@x.test"], "cc": ["undisclosed-recipients:;"]}, "input_data.cc[0]", "is a group"),
        ({"to": ["a@x.test"], "reply_to": "Team:h@x.test"}, "input_data.reply_to", "is a group"),
        ({"to": ["Ann <ann@example.com> <evil@x.test>"]}, "input_data.to[0]", "not an email address"),
        ({"to": ["ann@"]}, "input_data.to[0]", "not an email address"),
        ({"to": ['"john doe"@x.test']}, "input_data.to[0]", "not an email address"),
        (
            {"to": ["=?utf-8?q?a=0D=0ABcc=3A_x=40evil.test?= <ann@example.com>"]},
            "input_data.to[0]",
            "not an email address",
        ),
        (
            {"to": ["=?utf-8?q?Ann=E2=80=A8Bcc?= <ann@example.com>"]},
            "input_data.to[0]",
            "the name in",
        ),
        (
            {"to": ["a@x.test"], "subject": "=?utf-8?q?hi=0ABcc=3A_v=40evil.test?="},
            "input_data.subject",
            "as read by email programs",
        ),
        ({"to": ["a@x.test"], "body": "bad \ud800 text"}, "input_data.body", "valid string"),
    ],
)
def test_addresses_are_exactly_one_mailbox_and_headers_read_back_as_typed(input_data, field, needle) -> None:
    errors = _errors(input_data)
    assert field in errors, errors
    assert needle.lower() in errors[field].lower(), errors


def test_a_bad_address_names_its_item_in_the_list() -> None:
    """The refusal names the address it is about (``input_data.to[3]``), not the whole list: among
    fifty recipients the person had to find which one it meant."""
    good = ["a@x.test", "b@x.test", "c@x.test"]
    errors = _errors({"to": [*good, "nope"], "cc": ["d@x.test", "bad"]})
    assert errors == {
        "input_data.to[3]": "'nope' is not an email address like ann@example.com",
        "input_data.cc[1]": "'bad' is not an email address like ann@example.com",
    }


def test_names_with_commas_in_quotes_tabs_and_non_ascii_are_kept() -> None:
    inp = registry.get("email.send").validate_input(
        {
            "to": ['"Smith, Ann" <ann@example.com>', " bob@example.com (Bob) "],
            "reply_to": "Zoë Ølsen <zoe@example.org>",
            "subject": "Grüße\tand 📈 figures",
            "body": "b",
        }
    )
    assert inp["to"] == ['"Smith, Ann" <ann@example.com>', "bob@example.com"]
    assert inp["reply_to"] == "Zoë Ølsen <zoe@example.org>"
    assert inp["subject"] == "Grüße\tand 📈 figures"


REFUSED_AT_SUBMISSION = {
    "to[0]": {"to": ["victim@evil.test, Ann <ann@example.com>"]},
    "cc[0]": {"to": ["a@x.test"], "cc": ["Team: a@x.test;"]},
    "subject": {"to": ["a@x.test"], "subject": "Hi\u2028Bcc: v@evil.test"},
    "reply_to": {"to": ["a@x.test"], "reply_to": "h@x.test\x85"},
}
FROM_A_RESULT = {
    "name": "mail from a result",
    "steps": [
        {
            "key": "draft",
            "type": "noop",
            "input_data": {
                "to": ["victim@evil.test, Ann <ann@example.com>"],
                "subject": "Hi\u2028Bcc: v@evil.test",
            },
        },
        {
            "key": "mail",
            "type": "email.send",
            "depends_on": ["draft"],
            "input_data": {"to": {"$ref": "draft.to"}, "subject": {"$ref": "draft.subject"}, "body": "b"},
        },
    ],
}
LONG_SUBJECT = "Quarterly figures – Grüße from the team, " * 4


async def _submit(client: Any, headers: dict[str, str]) -> tuple[uuid.UUID, uuid.UUID]:
    """Check the refusals at submission; submit a good job and the pipeline; return both job ids."""
    for field, data in REFUSED_AT_SUBMISSION.items():
        resp = await client.post(
            "/api/jobs",
            json={"type": "email.send", "input_data": {"subject": "s", "body": "b", **data}},
            headers=headers,
        )
        assert resp.status_code == 422, resp.text
        assert f"input_data.{field}" in resp.json()["errors"], resp.text
    good = {
        "to": ['"Smith, Ann" <ann@example.com>'],
        "reply_to": "Help desk <help@example.org>",
        "subject": LONG_SUBJECT,
        "body": "Hello",
    }
    ok = await client.post("/api/jobs", json={"type": "email.send", "input_data": good}, headers=headers)
    assert ok.status_code == 201, ok.text
    piped = await client.post("/api/pipelines", json=FROM_A_RESULT, headers=headers)
    assert piped.status_code == 201, piped.text
    mail_job = next(s["job_id"] for s in piped.json()["steps"] if s["key"] == "mail")
    return uuid.UUID(ok.json()["id"]), uuid.UUID(mail_job)


async def test_through_the_api_and_a_worker_headers_reach_the_server_as_typed(
    mx, make_settings, db_url, pg
) -> None:
    """Submitted through the JSON API: a hidden recipient, a group or a line separator is a 422 naming
    the field. A name with a comma in quotes, a long non-ASCII subject and a reply-to reach the server as
    one recipient each. A step whose input comes from an earlier step's result ($ref) with a hidden
    recipient and a U+2028 in its subject fails at once, permanently, and sends nothing."""
    recorder, port = mx
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=port, worker_enabled=False)
    user = await add_user(db_url, "sender@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    async with app_client(settings) as client:
        ok, from_result = await _submit(client, headers)
        async with running_worker(settings):
            done = await wait_status(pg, ok, {"completed", "failed"})
            refused = await wait_status(pg, from_result, {"completed", "failed"})
    assert done["status"] == "completed", done["error_message"]
    assert refused["status"] == "failed", refused
    assert refused["attempts"] == 1, refused
    assert "holds 2 addresses" in refused["error_message"] or "U+2028" in refused["error_message"]
    (message,) = recorder.messages
    assert message[1] == ["ann@example.com"]
    msg = email.message_from_bytes(message[2], policy=policy.default)
    assert [(a.display_name, a.addr_spec) for a in msg["To"].addresses] == [("Smith, Ann", "ann@example.com")]
    assert [a.addr_spec for a in msg["Reply-To"].addresses] == ["help@example.org"]
    assert msg["Subject"] == LONG_SUBJECT.strip()
    assert "Bcc" not in msg
