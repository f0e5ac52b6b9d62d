"""A person's notices: reading and marking their own (the bell, ``/notifications``, ``GET
/api/notifications``), their e-mail choice, and the mailer that sends the e-mail outbox.

Rows are written by the queue with the transition that causes them (:mod:`app.jobs.notices`). Every
read and write here is scoped to one person: another person's ids are ignored, never an error that
would tell them apart from unknown ones.

The mailer runs as a side task of the worker on its processors' pool, off the job path, like alert
delivery: when ``SMTP_HOST`` is set, it takes the rows due for e-mail once they have been quiet for
``NOTIFICATION_EMAIL_QUIET_SECS`` (so the rest of a failing batch folds in first), and sends each
person one message listing them all.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import is_transient
from app.jobs.cursors import moment_cursor
from app.settings import Settings
from app.silence import answered_within

PAGE = 100
"""Notices listed a page (page and API); older ones are on the next page (``after``)."""
POLL_SECS = 5.0
"""How often the mailer looks for rows due."""
SEND_TIMEOUT_SECS = 30.0
MAIL_BATCH = 500
"""Rows one mailer round takes."""

LIST = text(
    """
    SELECT id, kind, job_id, pipeline_id, text, count, at, read_at IS NOT NULL AS read
    FROM notifications WHERE user_id = :user
      AND (CAST(:at AS timestamptz) IS NULL OR (at, id) < (CAST(:at AS timestamptz), CAST(:id AS bigint)))
    ORDER BY at DESC, id DESC LIMIT :limit
    """
)
UNREAD = text("SELECT count(*) FROM notifications WHERE user_id = :user AND read_at IS NULL")
MARK_READ = text(
    """
    UPDATE notifications SET read_at = now()
    WHERE user_id = :user AND read_at IS NULL AND (:all OR id = ANY(CAST(:ids AS bigint[])))
    RETURNING id
    """
)
EMAIL_CHOICE = text("SELECT email_notifications FROM users WHERE id = :user")
SET_EMAIL_CHOICE = text("UPDATE users SET email_notifications = :on WHERE id = :user")


def as_json(row: Any) -> dict[str, Any]:
    """One notice as the API shows it (``job_id`` and ``pipeline_id`` only when it names one)."""
    item: dict[str, Any] = {"id": row["id"], "kind": row["kind"], "text": row["text"]}
    if row["job_id"] is not None:
        item["job_id"] = str(row["job_id"])
    if row["pipeline_id"] is not None:
        item["pipeline_id"] = str(row["pipeline_id"])
    item["at"] = row["at"].isoformat()
    item["read"] = bool(row["read"])
    return item


APPROVAL_KINDS = ("approval_waiting", "approval_reminder")


def link(row: Any) -> str:
    """Where a notice leads: a step to decide (the approver's confirm page or list: an approver need not
    own the step, so its job page may be closed to them), its job, its pipeline, or the list of the
    person's jobs of its kind."""
    if row["kind"] in APPROVAL_KINDS:
        return f"/approvals/{row['job_id']}" if row["job_id"] is not None else "/approvals"
    if row["job_id"] is not None:
        return f"/jobs/{row['job_id']}"
    if row["pipeline_id"] is not None:
        return f"/pipelines/{row['pipeline_id']}"
    if row["kind"] in ("job_failed", "job_cancelled"):
        return f"/jobs?status={row['kind'].removeprefix('job_')}"
    return "/jobs"


async def listing(
    db: Any, user_id: int, limit: int = PAGE, after: tuple[datetime, int] | None = None
) -> list[dict[str, Any]]:
    """The person's newest notices (``conn`` or session), those listed after the notice ``after``
    (``(at, id)``, :data:`app.jobs.cursors.Cursor.NOTICE`) when given: keyset pages."""
    at, nid = after if after is not None else (None, None)
    params = {"user": user_id, "limit": limit, "at": at, "id": nid}
    return [dict(r) for r in (await db.execute(LIST, params)).mappings().all()]


def cursor_of(row: Any) -> str:
    """The position after ``row``, as :func:`listing`'s ``after`` takes it back (read by
    :func:`app.jobs.cursors.read_cursor`)."""
    return moment_cursor(row["at"], row["id"])


async def unread_count(db: Any, user_id: int) -> int:
    return int((await db.execute(UNREAD, {"user": user_id})).scalar_one())


async def mark_read(db: Any, user_id: int, ids: Sequence[int] | None) -> int:
    """Mark the person's notices ``ids`` (all when ``None``) read; returns how many changed. Ids that are
    not theirs change nothing."""
    params = {"user": user_id, "all": ids is None, "ids": list(ids or [])}
    return len((await db.execute(MARK_READ, params)).all())


async def email_choice(db: Any, user_id: int) -> bool:
    return bool((await db.execute(EMAIL_CHOICE, {"user": user_id})).scalar_one_or_none())


async def set_email_choice(db: Any, user_id: int, on: bool) -> None:
    await db.execute(SET_EMAIL_CHOICE, {"user": user_id, "on": bool(on)})


# --- the e-mail outbox ------------------------------------------------------------------------------

TAKE_DUE = text(
    """
    WITH due AS (
        SELECT n.id FROM notifications n JOIN users u ON u.id = n.user_id
        WHERE n.email_due AND n.at < now() - make_interval(secs => :quiet)
          AND u.email_notifications AND u.is_active
        ORDER BY n.id LIMIT :limit
        FOR UPDATE OF n SKIP LOCKED
    )
    UPDATE notifications n SET email_due = false, emailed_at = now()
    FROM due, users u WHERE n.id = due.id AND u.id = n.user_id
    RETURNING n.id, n.user_id, u.email, n.kind, n.job_id, n.pipeline_id, n.text, n.count, n.at
    """
)
DROP_UNWANTED = text(
    """
    UPDATE notifications n SET email_due = false
    FROM users u WHERE u.id = n.user_id AND n.email_due AND NOT (u.email_notifications AND u.is_active)
    """
)
PUT_BACK = text(
    "UPDATE notifications SET email_due = true, emailed_at = NULL WHERE id = ANY(CAST(:ids AS bigint[]))"
)


def build_message(settings: Settings, email: str, rows: Sequence[Any]) -> EmailMessage:
    """One e-mail for all of a person's notices due."""
    base = settings.jobdesk_base_url.rstrip("/")
    total = sum(int(r["count"]) for r in rows)
    msg = EmailMessage()
    msg["From"] = settings.smtp_from
    msg["To"] = email
    msg["Subject"] = rows[0]["text"] if len(rows) == 1 else f"Jobdesk: {total} updates on your jobs"
    msg["Message-ID"] = make_msgid(domain="jobdesk")
    lines = [f"- {r['text']}\n  {base}{link(r)}" for r in rows]
    body = "\n".join(
        [
            "Hello,",
            "",
            "News about your jobs:",
            "",
            *lines,
            "",
            f"All your notifications: {base}/notifications",
            "You get these e-mails because you chose them; you can switch them off on your account page.",
        ]
    )
    msg.set_content(body)
    return msg


class Mailer:
    """Sends the notices due for e-mail; :meth:`run` is a side task of the worker."""

    def __init__(
        self, engine: AsyncEngine, settings: Settings, *, log: Any = None, quiet_secs: float | None = None
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.log = log
        self.quiet_secs = settings.notification_email_quiet_secs if quiet_secs is None else quiet_secs
        self.answer_secs = settings.heartbeat_secs
        """How long each transaction waits for its answer before its connection is closed
        (:func:`app.silence.answered_within`): on a connection gone silent the mailer waited for ever."""

    async def run_once(self) -> int:
        """Send one round; returns how many e-mails went out."""
        async with answered_within(self.engine.begin(), self.answer_secs) as conn:
            await conn.execute(DROP_UNWANTED)
            rows = (
                (await conn.execute(TAKE_DUE, {"quiet": self.quiet_secs, "limit": MAIL_BATCH}))
                .mappings()
                .all()
            )
        if not rows:
            return 0
        # Here, when there is mail to send: every worker imports this module as it starts, most never send
        # a notice by e-mail, and aiosmtplib cost each start 7-16 ms (python -X importtime).
        import aiosmtplib

        by_user: dict[int, list[Any]] = defaultdict(list)
        for r in rows:
            by_user[r["user_id"]].append(r)
        sent = 0
        for user_rows in by_user.values():
            user_rows.sort(key=lambda r: r["id"])
            try:
                await self.send(build_message(self.settings, user_rows[0]["email"], user_rows))
                sent += 1
            except (aiosmtplib.SMTPException, OSError) as exc:
                async with answered_within(self.engine.begin(), self.answer_secs) as conn:
                    await conn.execute(PUT_BACK, {"ids": [r["id"] for r in user_rows]})
                raise MailServerDown(str(exc)) from exc
        return sent

    async def send(self, message: EmailMessage) -> None:
        s = self.settings
        assert s.smtp_host is not None
        implicit_tls = s.smtp_port == 465 and not s.smtp_starttls
        import aiosmtplib

        await aiosmtplib.send(
            message,
            hostname=s.smtp_host,
            port=s.smtp_port,
            username=s.smtp_username or None,
            password=s.smtp_password or None,
            start_tls=False if implicit_tls else s.smtp_starttls,
            use_tls=implicit_tls,
            timeout=SEND_TIMEOUT_SECS,
        )

    async def run(self) -> None:
        """Until cancelled; without ``SMTP_HOST`` it only waits. A mail server or database outage is
        logged and waited out (doubling the wait up to five minutes)."""
        if not self.settings.smtp_host:
            await asyncio.Event().wait()  # nothing to send, ever; a side task must not end by itself
        poll = min(POLL_SECS, max(0.2, self.quiet_secs))
        delay = poll
        while True:
            try:
                await self.run_once()
                delay = poll
            except MailServerDown as exc:
                self._warn("notice e-mails paused: the mail server did not take them", exc)
                delay = min(delay * 2, 300.0)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._warn("notice e-mails paused: database unavailable", exc)
                delay = min(delay * 2, 300.0)
            await asyncio.sleep(delay)

    def _warn(self, what: str, exc: BaseException) -> None:
        if self.log is not None:
            self.log.warning(what, error=(str(exc).splitlines() or [type(exc).__name__])[0][:200])


class MailServerDown(Exception):
    """The mail server could not be reached or refused the message; the rows were put back."""
