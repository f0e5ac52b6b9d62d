"""``email.send``: send a plain-text email over SMTP (issue 9 §2), with aiosmtplib.

The server comes from ``SMTP_HOST``, ``SMTP_PORT``, ``SMTP_USERNAME``/``SMTP_PASSWORD`` (login when
set), ``SMTP_STARTTLS`` (upgrade the connection with STARTTLS; port 465 uses TLS from the start instead)
and ``SMTP_FROM`` (the sender). Without ``SMTP_HOST`` the job fails permanently and says so.

Failures: an answer in the 5xx range (unknown recipient, refused sender, bad login) is permanent; a 4xx
answer ("try later"), a timeout or an unreachable server is retried. When only some recipients are
refused the others still get the message and the result lists the refusals. The Message-ID is the same
on every attempt (``<jobdesk.<job id>@…>``), so a receiving system can drop a duplicate from a retried
attempt (jobs run at least once).

``jobdesk demo`` (issue 9 §4): when no ``SMTP_HOST`` is set, the demo starts a mail server on loopback
for the one email job it submits and writes its address to ``JOBDESK_DATA_DIR/demo-mail/<job id>.json``.
A job with such a file (and only that job) is sent there; nothing else uses it.
"""

from __future__ import annotations

import json
import re
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import Any

import aiosmtplib
from pydantic import Field, field_validator

from app.processors import Input, JobContext, LongText, PermanentError, RetryableError, processor
from app.processors.inputs import invalid

ADDRESS = re.compile(
    r"^(?:(?P<name>[^<>\r\n\"]*?)\s*<(?P<addr>[^<>\s@]+@[A-Za-z0-9.-]+)>|(?P<bare>[^<>\s@\"]+@[A-Za-z0-9.-]+))$"
)
SEND_TIMEOUT_SECS = 30
LOOPBACK = ("127.0.0.1", "::1", "localhost")
DEMO_DIR = "demo-mail"


def address_of(value: str) -> str:
    """The bare address of ``ann@example.com`` or ``Ann <ann@example.com>``.

    Raises:
        PydanticCustomError: anything else (also line breaks, which would inject headers).
    """
    m = ADDRESS.match(value.strip())
    if not m or len(value) > 320:
        raise invalid(f"{value.strip()[:80]!r} is not an email address like ann@example.com")
    return m.group("addr") or m.group("bare")


class EmailInput(Input):
    """Input of ``email.send``."""

    to: list[str] = Field(
        title="To",
        description="One or more addresses, like ann@example.com or Ann Smith <ann@example.com>.",
        min_length=1,
        max_length=50,
    )
    cc: list[str] = Field(
        default_factory=list, title="Copy to (Cc)", description="Optional addresses.", max_length=50
    )
    reply_to: str = Field(
        "", title="Reply to", description="Optional: where replies should go.", max_length=320
    )
    subject: str = Field(title="Subject", min_length=1, max_length=250)
    body: LongText = Field(title="Message", description="Plain text.", max_length=200_000)

    @field_validator("to", "cc")
    @classmethod
    def _check_list(cls, value: list[str]) -> list[str]:
        for v in value:
            address_of(v)
        return [v.strip() for v in value]

    @field_validator("reply_to")
    @classmethod
    def _check_reply_to(cls, value: str) -> str:
        if value.strip():
            address_of(value)
        return value.strip()

    @field_validator("subject")
    @classmethod
    def _check_subject(cls, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise invalid("must be one line")
        if not value.strip():
            raise invalid("is required")
        return value.strip()


class TemporaryMailError(RetryableError):
    """A failed attempt worth retrying: unreachable server, timeout, a 4xx answer."""


def demo_server(data_dir: Path, job_id: Any) -> tuple[str, int] | None:
    """The loopback mail server ``jobdesk demo`` started for this job, if any."""
    path = Path(data_dir) / DEMO_DIR / f"{job_id}.json"
    try:
        info = json.loads(path.read_text())
        host, port = str(info["host"]), int(info["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (host, port) if host in LOOPBACK and 0 < port < 65536 else None


def build_message(inp: EmailInput, sender: str, job_id: Any) -> EmailMessage:
    """The message as sent; its Message-ID is stable across attempts of one job."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(inp.to)
    if inp.cc:
        msg["Cc"] = ", ".join(inp.cc)
    if inp.reply_to:
        msg["Reply-To"] = inp.reply_to
    msg["Subject"] = inp.subject
    msg["Date"] = formatdate(localtime=False)
    domain = address_of(sender).rpartition("@")[2] if ADDRESS.match(sender.strip()) else "jobdesk"
    msg["Message-ID"] = f"<jobdesk.{job_id}@{domain}>"
    msg.set_content(inp.body)
    return msg


def _code_text(code: int, message: str) -> str:
    return f"{code} {' '.join(str(message).split())}".strip()


@processor(
    "email.send",
    title="Send an email",
    description="Sends a plain-text email through the configured mail server (SMTP).",
    input=EmailInput,
    group="Web and email",
    timeout=120,
)
async def send_email(ctx: JobContext[EmailInput]) -> dict[str, Any]:
    """Send the message; return ``{to, cc, subject, message_id, server, accepted, refused,
    server_answer, note?}``.

    Raises:
        PermanentError: no ``SMTP_HOST``; a 5xx answer (every recipient refused, sender refused, login
            refused); the server lacks something the settings require (STARTTLS, AUTH).
        TemporaryMailError: unreachable server, timeout, disconnect, a 4xx answer (retried).
    """
    s = ctx.settings
    inp = ctx.input
    note = None
    username, password = s.smtp_username, s.smtp_password
    if s.smtp_host:
        host, port, starttls = s.smtp_host, s.smtp_port, s.smtp_starttls
    else:
        demo = demo_server(s.data_dir, ctx.job["id"])
        if demo is None:
            raise PermanentError(
                "Email is not set up on this Jobdesk: an administrator needs to set SMTP_HOST "
                "(and usually SMTP_PORT, SMTP_USERNAME, SMTP_PASSWORD and SMTP_FROM)."
            )
        host, port, starttls = demo[0], demo[1], False
        username = password = None
        note = "Delivered to the local mail server started by `jobdesk demo` (no SMTP_HOST is set)."
    message = build_message(inp, s.smtp_from, ctx.job["id"])
    recipients = [address_of(a) for a in [*inp.to, *inp.cc]]
    server = f"{host}:{port}"
    implicit_tls = port == 465 and not starttls
    await ctx.report_progress(0.2, f"Connecting to the mail server {server}")
    try:
        refused, answer = await aiosmtplib.send(
            message,
            sender=address_of(s.smtp_from) if ADDRESS.match(s.smtp_from.strip()) else s.smtp_from,
            recipients=recipients,
            hostname=host,
            port=port,
            username=username or None,
            password=password or None,
            start_tls=False if implicit_tls else starttls,
            use_tls=implicit_tls,
            timeout=SEND_TIMEOUT_SECS,
        )
    except aiosmtplib.SMTPRecipientsRefused as exc:
        details = "; ".join(f"{r.recipient}: {_code_text(r.code, r.message)}" for r in exc.recipients)
        if any(400 <= r.code < 500 for r in exc.recipients):
            raise TemporaryMailError(f"The mail server {server} asked to try later: {details}") from None
        raise PermanentError(f"The mail server {server} refused every recipient: {details}") from None
    except aiosmtplib.SMTPAuthenticationError as exc:
        raise PermanentError(
            f"The mail server {server} did not accept the login (SMTP_USERNAME / SMTP_PASSWORD): "
            f"{_code_text(exc.code, exc.message)}"
        ) from None
    except aiosmtplib.SMTPSenderRefused as exc:
        if exc.code == 530:
            raise PermanentError(
                f"The mail server {server} requires a login: set SMTP_USERNAME and SMTP_PASSWORD "
                f"({_code_text(exc.code, exc.message)})."
            ) from None
        if 400 <= exc.code < 500:
            raise TemporaryMailError(
                f"The mail server {server} asked to try later: {_code_text(exc.code, exc.message)}"
            ) from None
        raise PermanentError(
            f"The mail server {server} refused the sender {exc.sender} (SMTP_FROM): "
            f"{_code_text(exc.code, exc.message)}"
        ) from None
    except (
        aiosmtplib.SMTPConnectError,
        aiosmtplib.SMTPTimeoutError,
        aiosmtplib.SMTPServerDisconnected,
    ) as exc:
        raise TemporaryMailError(f"Could not reach the mail server {server}: {exc}") from None
    except aiosmtplib.SMTPResponseException as exc:
        if exc.code == 530:
            raise PermanentError(
                f"The mail server {server} requires a login: set SMTP_USERNAME and SMTP_PASSWORD "
                f"({_code_text(exc.code, exc.message)})."
            ) from None
        if exc.code >= 500:
            raise PermanentError(
                f"The mail server {server} refused the message: {_code_text(exc.code, exc.message)}"
            ) from None
        raise TemporaryMailError(
            f"The mail server {server} answered {_code_text(exc.code, exc.message)}"
        ) from None
    except aiosmtplib.SMTPException as exc:
        text = str(exc)
        if (
            isinstance(exc, aiosmtplib.SMTPNotSupported)
            or "not supported" in text
            or "authentication method" in text
        ):
            raise PermanentError(
                f"The mail server {server} cannot do what the settings ask: {text} "
                "Check SMTP_STARTTLS, SMTP_PORT, SMTP_USERNAME and SMTP_PASSWORD."
            ) from None
        raise TemporaryMailError(f"Sending through {server} failed: {exc}") from None
    except OSError as exc:
        raise TemporaryMailError(f"Sending through {server} failed: {exc}") from None
    await ctx.report_progress(1.0, f"Handed to the mail server {server}")
    result: dict[str, Any] = {
        "to": inp.to,
        "cc": inp.cc,
        "subject": inp.subject,
        "message_id": message["Message-ID"],
        "server": server,
        "accepted": [r for r in recipients if r not in refused],
        "refused": {addr: _code_text(r.code, r.message) for addr, r in refused.items()},
        "server_answer": answer,
    }
    if note:
        result["note"] = note
    return result
