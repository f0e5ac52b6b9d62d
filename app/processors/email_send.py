"""``email.send``: send a plain-text email over SMTP, with aiosmtplib.

The server comes from ``SMTP_HOST``, ``SMTP_PORT``, ``SMTP_USERNAME``/``SMTP_PASSWORD`` (login when
set), ``SMTP_STARTTLS`` (upgrade the connection with STARTTLS; port 465 uses TLS from the start instead)
and ``SMTP_FROM`` (the sender). Without ``SMTP_HOST`` the job fails permanently and says so.

Failures: an answer in the 5xx range (unknown recipient, refused sender, bad login) is permanent; a 4xx
answer ("try later"), a timeout or an unreachable server is retried. When only some recipients are
refused the others still get the message and the result lists the refusals. The Message-ID is the same
on every attempt (``<jobdesk.<job id>@…>``), so a receiving system can drop a duplicate from a retried
attempt (jobs run at least once).

Headers: every address is exactly one mailbox as the email package reads it (no second address hidden in
a display name, no group), and every header text — subject, display names, reply-to — is one line: no
line separator of any kind (those :meth:`str.splitlines` knows, U+2028/U+2029, NEL), no control
character, neither as typed nor after the email package decodes ``=?…?=`` encoded words. The input is
checked at submission (422 naming the field) and again when the job runs; the message is built from the
parsed addresses, never by parsing the strings again, and is checked once more as it will be sent.

``jobdesk demo``: when no ``SMTP_HOST`` is set, the demo starts a mail server on loopback for the one
email job it submits and writes its address to ``JOBDESK_DATA_DIR/demo-mail/<job id>.json``. A job with
such a file (and only that job) is sent there; nothing else uses it.
"""

from __future__ import annotations

import email
import json
import re
import unicodedata
from email import policy
from email.errors import HeaderParseError
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from app.formatting import host_port
from app.processors import Input, JobContext, LongText, PermanentError, RetryableError, processor
from app.processors.inputs import invalid

if TYPE_CHECKING:
    import aiosmtplib

ADDR_SPEC = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$"
)
"""An address as SMTP carries it everywhere: a dot-atom local part and an ASCII domain."""
NOT_ONE_LINE = frozenset({"Cc", "Cs", "Zl", "Zp"})
"""Unicode categories a header text may not hold: control characters (C0, DEL, C1 with NEL), lone
surrogates, and the line and paragraph separators. A tab is allowed."""
MAX_ADDRESS_CHARS = 320
SEND_TIMEOUT_SECS = 30
LOOPBACK = ("127.0.0.1", "::1", "localhost")
DEMO_DIR = "demo-mail"


def _describe(ch: str) -> str:
    name = unicodedata.name(ch, "")
    kind = (
        "a line break" if ch in "\n\r" or unicodedata.category(ch) in ("Zl", "Zp") else "a control character"
    )
    return f"{kind} (U+{ord(ch):04X}{' ' + name if name else ''})"


def one_line(value: str, what: str = "") -> str:
    """``value`` when it is one line of text (see :data:`NOT_ONE_LINE`).

    Raises:
        PydanticCustomError: it is not; the message names the first offending character.
    """
    for ch in value:
        if ch != "\t" and unicodedata.category(ch) in NOT_ONE_LINE:
            raise invalid(f"{what}must be one line of plain text: it contains {_describe(ch)}")
    return value


def mailbox(value: str) -> Address:
    """The one mailbox ``value`` names: ``ann@example.com``, ``Ann Smith <ann@example.com>`` or
    ``"Smith, Ann" <ann@example.com>``, read as the email package reads a To: header.

    Raises:
        PydanticCustomError: more than one address, a group, not an address, a line break or control
            character (also one hidden in an encoded word).
    """
    shown = repr(value.strip()[:80])
    one_line(value, f"{shown} is not an email address: it ")
    text = value.strip()
    if not text or len(text) > MAX_ADDRESS_CHARS:
        raise invalid(f"{shown} is not an email address like ann@example.com")
    try:
        header = policy.default.header_factory("to", text)
        groups, addresses, defects = header.groups, header.addresses, header.defects
    except (HeaderParseError, ValueError, IndexError, TypeError):
        raise invalid(f"{shown} is not an email address like ann@example.com") from None
    if any(group.display_name is not None for group in groups):
        raise invalid(f"{shown} is a group of addresses; give each address on its own")
    if len(addresses) > 1:
        raise invalid(
            f"{shown} holds {len(addresses)} addresses; give each address on its own (a name with a comma "
            'goes in quotes: "Smith, Ann" <ann@example.com>)'
        )
    if defects or not addresses or not ADDR_SPEC.match(addresses[0].addr_spec):
        raise invalid(f"{shown} is not an email address like ann@example.com")
    found = addresses[0]
    one_line(found.display_name, f"the name in {shown} ")
    return Address(display_name=found.display_name, addr_spec=found.addr_spec)


def address_of(value: str) -> str:
    """The bare address of ``ann@example.com`` or ``Ann <ann@example.com>`` (see :func:`mailbox`)."""
    return mailbox(value).addr_spec


def _subject(value: str) -> str:
    one_line(value)
    try:
        decoded = str(policy.default.header_factory("subject", value))
    except (HeaderParseError, ValueError, IndexError, TypeError):
        raise invalid("is not a subject the email package can read") from None
    one_line(decoded, "as read by email programs (=?…?= decoded), it ")
    return value


def _mailbox_text(value: str) -> str:
    return str(mailbox(value))


MailboxText = Annotated[str, AfterValidator(_mailbox_text)]
"""One address of a list, checked as its item: a refusal names it (``input_data.to[3]``), where a check
of the whole list named only the list, and the person had to find which of fifty it was about."""


class EmailInput(Input):
    """Input of ``email.send``."""

    to: list[MailboxText] = Field(
        title="To",
        description="One or more addresses, like ann@example.com or Ann Smith <ann@example.com>.",
        min_length=1,
        max_length=50,
    )
    cc: list[MailboxText] = Field(
        default_factory=list, title="Copy to (Cc)", description="Optional addresses.", max_length=50
    )
    reply_to: str = Field(
        "", title="Reply to", description="Optional: where replies should go.", max_length=320
    )
    subject: str = Field(title="Subject", min_length=1, max_length=250)
    body: LongText = Field(title="Message", description="Plain text.", max_length=200_000)

    @field_validator("reply_to")
    @classmethod
    def _check_reply_to(cls, value: str) -> str:
        return str(mailbox(value)) if value.strip() else ""

    @field_validator("subject")
    @classmethod
    def _check_subject(cls, value: str) -> str:
        one_line(value)
        if not value.strip():
            raise invalid("is required")
        return _subject(value.strip())


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


def _worker_mailbox(value: str, what: str) -> Address:
    """:func:`mailbox` when the job runs: a permanent failure instead of a validation error."""
    try:
        return mailbox(value)
    except PydanticCustomError as exc:
        raise PermanentError(f"{what}: {exc.message()}") from None


def build_message(inp: EmailInput, sender: str, job_id: Any) -> tuple[EmailMessage, list[str]]:
    """The message as sent and its envelope recipients. Headers are set from parsed addresses, never
    from strings the email package would parse again; the Message-ID is stable across attempts.

    Raises:
        PermanentError: ``SMTP_FROM`` or an input header is not valid (see the module docstring), or the
            message does not read back with exactly the headers and recipients it was built with.
    """
    from_ = _worker_mailbox(sender, "SMTP_FROM")
    to = [_worker_mailbox(v, "To") for v in inp.to]
    cc = [_worker_mailbox(v, "Copy to (Cc)") for v in inp.cc]
    try:
        subject = _subject(inp.subject)
    except PydanticCustomError as exc:
        raise PermanentError(f"Subject: {exc.message()}") from None
    msg = EmailMessage()
    msg["From"] = from_
    msg["To"] = to
    if cc:
        msg["Cc"] = cc
    if inp.reply_to:
        msg["Reply-To"] = _worker_mailbox(inp.reply_to, "Reply to")
    msg["Subject"] = subject
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = f"<jobdesk.{job_id}@{from_.domain}>"
    msg.set_content(inp.body)
    recipients = [a.addr_spec for a in [*to, *cc]]
    _check_as_sent(msg, recipients)
    return msg, recipients


def _check_as_sent(msg: EmailMessage, recipients: list[str]) -> None:
    """Read the message back as a receiver would: the same header names and the same recipients.

    Raises:
        PermanentError: it cannot be written out, or reads back differently.
    """
    try:
        raw = msg.as_bytes()
    except (ValueError, TypeError, UnicodeError, HeaderParseError) as exc:
        raise PermanentError(f"The message cannot be written out: {exc}") from None
    sent = email.message_from_bytes(raw, policy=policy.default)
    names = [k.lower() for k in msg.keys()]
    seen = [
        a.addr_spec for name in ("To", "Cc") for header in sent.get_all(name, []) for a in header.addresses
    ]
    if [k.lower() for k in sent.keys()] != names or seen != recipients:
        raise PermanentError("The message's headers do not read back as they were written; it was not sent.")


def _code_text(code: int, message: str) -> str:
    return f"{code} {' '.join(str(message).split())}".strip()


def _login_needed(server: str, exc: aiosmtplib.SMTPResponseException) -> PermanentError:
    return PermanentError(
        f"The mail server {server} requires a login: set SMTP_USERNAME and SMTP_PASSWORD "
        f"({_code_text(exc.code, exc.message)})."
    )


def _failure(exc: Exception, server: str) -> Exception:
    """The job's failure for an error of :func:`aiosmtplib.send` (see the module docstring)."""
    import aiosmtplib

    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        details = "; ".join(f"{r.recipient}: {_code_text(r.code, r.message)}" for r in exc.recipients)
        if any(400 <= r.code < 500 for r in exc.recipients):
            return TemporaryMailError(f"The mail server {server} asked to try later: {details}")
        return PermanentError(f"The mail server {server} refused every recipient: {details}")
    if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
        return PermanentError(
            f"The mail server {server} did not accept the login (SMTP_USERNAME / SMTP_PASSWORD): "
            f"{_code_text(exc.code, exc.message)}"
        )
    if isinstance(
        exc, aiosmtplib.SMTPConnectError | aiosmtplib.SMTPTimeoutError | aiosmtplib.SMTPServerDisconnected
    ):
        return TemporaryMailError(f"Could not reach the mail server {server}: {exc}")
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return _answer_failure(exc, server)
    text = str(exc)
    unsupported = "not supported" in text or "authentication method" in text
    if isinstance(exc, aiosmtplib.SMTPNotSupported) or (
        isinstance(exc, aiosmtplib.SMTPException) and unsupported
    ):
        return PermanentError(
            f"The mail server {server} cannot do what the settings ask: {text} "
            "Check SMTP_STARTTLS, SMTP_PORT, SMTP_USERNAME and SMTP_PASSWORD."
        )
    return TemporaryMailError(f"Sending through {server} failed: {exc}")


def _answer_failure(exc: aiosmtplib.SMTPResponseException, server: str) -> Exception:
    """An answer the server gave: 530 asks for a login; a refused sender is retried on 4xx; another
    answer is permanent from 500 on and retried below."""
    import aiosmtplib

    said = _code_text(exc.code, exc.message)
    if exc.code == 530:
        return _login_needed(server, exc)
    if isinstance(exc, aiosmtplib.SMTPSenderRefused):
        if 400 <= exc.code < 500:
            return TemporaryMailError(f"The mail server {server} asked to try later: {said}")
        return PermanentError(f"The mail server {server} refused the sender {exc.sender} (SMTP_FROM): {said}")
    if exc.code >= 500:
        return PermanentError(f"The mail server {server} refused the message: {said}")
    return TemporaryMailError(f"The mail server {server} answered {said}")


def _server(ctx: JobContext[EmailInput]) -> tuple[str, int, bool, str | None, str | None, str | None]:
    """``(host, port, starttls, username, password, note)`` of the mail server for this job.

    Raises:
        PermanentError: no ``SMTP_HOST`` and no demo server for this job.
    """
    s = ctx.settings
    if s.smtp_host:
        return s.smtp_host, s.smtp_port, s.smtp_starttls, s.smtp_username, s.smtp_password, None
    demo = demo_server(s.data_dir, ctx.job["id"])
    if demo is None:
        raise PermanentError(
            "Email is not set up on this Jobdesk: an administrator needs to set SMTP_HOST "
            "(and usually SMTP_PORT, SMTP_USERNAME, SMTP_PASSWORD and SMTP_FROM)."
        )
    note = "Delivered to the local mail server started by `jobdesk demo` (no SMTP_HOST is set)."
    return demo[0], demo[1], False, None, None, note


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
        PermanentError: no ``SMTP_HOST``; a header that is not valid; a 5xx answer (every recipient
            refused, sender refused, login refused); the server lacks something the settings require
            (STARTTLS, AUTH).
        TemporaryMailError: unreachable server, timeout, disconnect, a 4xx answer (retried).
    """
    # Here, at the first e-mail job: every worker loads this module with the processors as it starts, and
    # aiosmtplib cost each start 7-16 ms (python -X importtime).
    import aiosmtplib

    inp = ctx.input
    host, port, starttls, username, password, note = _server(ctx)
    message, recipients = build_message(inp, ctx.settings.smtp_from, ctx.job["id"])
    server = host_port(host, port)
    implicit_tls = port == 465 and not starttls
    await ctx.report_progress(0.2, f"Connecting to the mail server {server}")
    try:
        refused, answer = await aiosmtplib.send(
            message,
            sender=message["From"].addresses[0].addr_spec,
            recipients=recipients,
            hostname=host,
            port=port,
            username=username or None,
            password=password or None,
            start_tls=False if implicit_tls else starttls,
            use_tls=implicit_tls,
            timeout=SEND_TIMEOUT_SECS,
        )
    except (aiosmtplib.SMTPException, OSError) as exc:
        raise _failure(exc, server) from None
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
