"""``jobdesk demo --email EMAIL``: submit, as an existing user, one job of each built-in type,
one run of each pipeline template, and a batch read from a small spreadsheet of web requests to
Jobdesk's own pages (:func:`demo_sheet`), using the sample files in ``examples/``.

Everything goes through the same actions as the API, as the user: jobs through
:func:`app.actions.submissions.submit`, pipelines through :mod:`app.actions.pipelines`, the batch through
:func:`app.actions.batches.submit`, and each sample file is stored under the user's storage limit
(:func:`app.actions.quotas.check_upload`) — so the per-person limits (waiting jobs, jobs per minute,
stored bytes) hold for the demo as for any other submission; the demo is not exempt. All in one
transaction, so a refusal leaves nothing half-created.

Email: with ``SMTP_HOST`` set, the email job goes through that server like any other. Without it the
demo starts a small mail server (aiosmtpd) on 127.0.0.1, tells the email job where it is through
``JOBDESK_DATA_DIR/demo-mail/<job id>.json`` (read by ``email.send`` for that job only; see
:mod:`app.processors.email_send`), and keeps running until that job has finished (at most ``wait``
seconds), saving the delivered message as an ``.eml`` file next to it. So the worker must share the
data folder — true for ``make run`` / ``jobdesk serve`` on the same machine; elsewhere the email job
fails with "Email is not set up", which is the truth.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from aiosmtpd.smtp import SMTP
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app import pipelines, spreadsheets
from app.actions import batches as batch_actions
from app.actions import pipelines as pipeline_actions
from app.actions import quotas
from app.actions.submissions import submit as submit_job
from app.actions.trail import Actor
from app.auth import CurrentUser, email_key
from app.errors import AppError
from app.files import FileStore
from app.jobs.queue import NewJob, new_id
from app.processors import registry
from app.processors.email_send import DEMO_DIR
from app.settings import Settings

SAMPLES = {
    "rocket": "images/rocket.jpg",
    "chelsea": "images/chelsea.jpg",
    "coffee": "images/coffee.jpg",
    "horse": "images/horse.png",
    "penguins": "csv/penguins.csv",
    "statecrime": "csv/statecrime.csv",
    "danish": "csv/danish-money.csv",
    "damaged": "broken/damaged-photo.jpg",
    "web_page": "broken/web-page-not-table.csv",
}
"""Sample files the demo uploads, relative to the samples folder (``examples/``)."""


def default_samples_dir() -> Path:
    """``examples/`` next to the ``app`` package (a checkout, or the Docker image)."""
    return Path(__file__).resolve().parent.parent / "examples"


class DemoError(AppError):
    """A problem the person running the demo can fix (unknown user, missing samples…)."""


@dataclass
class Submitted:
    """One job or pipeline the demo created: what it is, its page, and the end state to expect."""

    kind: str  # "job" | "pipeline" | "batch"
    id: uuid.UUID
    type: str
    label: str
    expect: str
    url: str


@dataclass
class DemoRun:
    """What :func:`submit` created."""

    user_email: str
    user_is_admin: bool
    items: list[Submitted] = field(default_factory=list)
    email_job: uuid.UUID | None = None
    sink: MailSink | None = None


class MailSink:
    """A loopback SMTP server (aiosmtpd) that saves every message it receives as an ``.eml`` file in
    ``folder``. Start with :meth:`start` (port 0 = any free port), stop with :meth:`stop`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.received: list[Path] = []
        self.port = 0
        self._server: asyncio.base_events.Server | None = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd hook
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{datetime.now():%Y%m%d-%H%M%S}-{len(self.received) + 1}.eml"
        path.write_bytes(envelope.original_content or envelope.content)
        self.received.append(path)
        return "250 Message accepted for delivery"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: SMTP(self, hostname="jobdesk-demo"), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


USER_ROW = text("SELECT id, email, is_admin, is_active FROM users WHERE email = :email")
LIVE_WORKERS = text(
    "SELECT count(*) FROM workers WHERE NOT stopping AND last_seen_at > now() - make_interval(secs => :secs)"
)
JOB_STATE = text("SELECT status, error_message, result_data FROM jobs WHERE id = :id")


def _samples(folder: Path) -> dict[str, Path]:
    paths = {key: folder / rel for key, rel in SAMPLES.items()}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise DemoError(
            f"The sample files are missing from {folder}: {', '.join(missing)}. "
            "Run the demo from a Jobdesk checkout, or point --samples at its examples folder."
        )
    return paths


async def check_base_url(base: str, timeout_secs: float = 3.0) -> None:
    """Make sure Jobdesk answers at ``base`` (``JOBDESK_BASE_URL``) before anything is submitted: the
    demo prints links there and its web request job calls ``base/healthz``, which would otherwise retry
    against the wrong address (found in a first-time user's trial with ``make run PORT=8100``).

    Raises:
        DemoError: nothing answers ``GET base/healthz`` within ``timeout_secs`` seconds with a 2xx.
    """
    url = base.rstrip("/") + "/healthz"
    try:
        async with httpx.AsyncClient(timeout=timeout_secs, trust_env=False) as client:
            ok = (await client.get(url)).is_success
    except httpx.HTTPError:
        ok = False
    if not ok:
        raise DemoError(
            f"Jobdesk does not answer at {url}. The demo's links and its web request use JOBDESK_BASE_URL "
            f"({base}): start Jobdesk first (make run), or set JOBDESK_BASE_URL to where it runs "
            "(make demo EMAIL=... PORT=... does that for make run's HOST and PORT)."
        )


@dataclass(frozen=True)
class _Planned:
    """One job or pipeline the demo will create (``kind`` ``"job"`` or ``"pipeline"``)."""

    kind: str
    type: str
    input_data: dict[str, Any]
    label: str
    expect: str
    options: dict[str, Any] = field(default_factory=dict)


def _plan(base: str, email: str, files: dict[str, str], email_job: uuid.UUID | None) -> list[_Planned]:
    """What the demo submits, in order: one job of each built-in type (two of them fail on purpose, to
    show how a failure reads) and one run of each pipeline template. ``files`` maps :data:`SAMPLES` keys
    to the ids of the uploaded copies. Longer than most functions because it is a table: one entry per
    submission, read top to bottom."""
    body = (
        f"This email was sent by an email.send job that `jobdesk demo` started.\n\nYour jobs: {base}/jobs\n"
    )
    photos = [files["rocket"], files["chelsea"], files["coffee"], files["horse"]]
    return [
        _Planned(
            "job",
            "http.request",
            {"method": "GET", "url": f"{base}/healthz", "timeout": 10},
            "web request to Jobdesk's own health check",
            "completed",
        ),
        _Planned(
            "job",
            "email.send",
            {"to": [email], "subject": "Hello from the Jobdesk demo", "body": body},
            f"email to {email}",
            "completed",
            {"id": email_job} if email_job else {},
        ),
        _Planned(
            "job",
            "images.thumbnail",
            {"image": files["rocket"], "sizes": [160, 480], "format": "WEBP", "name": "rocket.jpg"},
            "thumbnails of rocket.jpg",
            "completed",
        ),
        _Planned(
            "job",
            "images.contact_sheet",
            {"images": photos[1:], "columns": 3, "title": "Three samples"},
            "contact sheet of three sample pictures",
            "completed",
        ),
        _Planned(
            "job", "report.csv_check", {"file": files["danish"]}, "check of danish-money.csv", "completed"
        ),
        _Planned(
            "job",
            "report.csv_summary",
            {"file": files["penguins"], "title": "Palmer penguins"},
            "summary report of penguins.csv",
            "completed",
        ),
        _Planned(
            "job",
            "images.thumbnail",
            {"image": files["damaged"], "name": "damaged-photo.jpg"},
            "thumbnails of a damaged photo (fails on purpose)",
            "failed",
        ),
        _Planned(
            "job",
            "report.csv_summary",
            {"file": files["web_page"], "title": "Not a table"},
            "summary of a web page named .csv (fails on purpose)",
            "failed",
        ),
        _Planned(
            "pipeline",
            "photo_batch",
            {"images": photos, "title": "Sample photos"},
            "Photo batch of four sample pictures",
            "completed",
        ),
        _Planned(
            "pipeline",
            "csv_report_review",
            {"file": files["statecrime"], "title": "US state crime 2009"},
            "CSV report with review of statecrime.csv (waits for an admin's approval)",
            "waiting_approval",
        ),
        _Planned(
            "steps",
            "http.request",
            {"method": "GET", "url": f"{base}/healthz", "timeout": 10},
            f"health check reviewed by {email} (waits for your approval on {base}/approvals)",
            "waiting_approval",
            {"approvers": [email, "owner"], "approval_timeout": 7 * 86400, "on_approval_timeout": "remind"},
        ),
    ]


async def _demo_user(engine: AsyncEngine, email: str) -> Any:
    """The active user ``email``; :class:`DemoError` when there is none."""
    wanted = email_key(email)
    async with engine.connect() as conn:
        user = (await conn.execute(USER_ROW, {"email": wanted})).mappings().first()
    if user is None:
        raise DemoError(f"No user with the email {wanted}. Create one first: jobdesk create-user {wanted}")
    if not user["is_active"]:
        raise DemoError(f"The user {user['email']} is disabled; the demo needs an active account.")
    return user


async def _start_mail_sink(run: DemoRun, settings: Settings) -> Path:
    """Start the local mail server for the email job and leave the note that tells that job where it
    is; returns the note's path."""
    run.sink = MailSink(settings.data_dir / DEMO_DIR)
    port = await run.sink.start()
    run.email_job = new_id()
    note_path = settings.data_dir / DEMO_DIR / f"{run.email_job}.json"
    note_path.parent.mkdir(parents=True, exist_ok=True)
    note_path.write_text(json.dumps({"host": "127.0.0.1", "port": port, "started_by": "jobdesk demo"}))
    return note_path


async def _create(db: AsyncSession, item: _Planned, actor: Actor, base: str) -> Submitted:
    """Create ``item`` as the actor through the same actions as the API, in ``db``'s transaction."""
    if item.kind == "job":
        assert registry.get(item.type) is not None, item.type
        new = NewJob(
            type=item.type,
            input_data=item.input_data,
            user_id=actor.user.id,
            title=f"Demo: {item.label}",
            **item.options,
        )
        row = (await submit_job(db, actor, new)).job
        return Submitted("job", row["id"], item.type, item.label, item.expect, f"{base}/jobs/{row['id']}")
    if item.kind == "steps":
        return await _create_reviewed(db, item, actor, base)
    assert pipelines.get_template(item.type) is not None, item.type
    pipeline = await pipeline_actions.submit_template(db, actor, item.type, item.input_data)
    return Submitted(
        "pipeline", pipeline["id"], item.type, item.label, item.expect, f"{base}/pipelines/{pipeline['id']}"
    )


DEMO_SHEET_PATHS = ("/healthz", "/readyz", "/static/app.js", "/static/app.css", "/static/favicon.svg")
"""The demo's own pages that its spreadsheet batch requests: loopback only, never outside."""


def demo_sheet(base: str) -> bytes:
    """A small spreadsheet of web requests to Jobdesk's own pages, as a person would upload it."""
    lines = ["Address (URL),Method,Time limit (seconds)"]
    lines += [f"{base}{path},GET,10" for path in DEMO_SHEET_PATHS]
    return ("\n".join(lines) + "\n").encode()


async def _create_batch(db: AsyncSession, actor: Actor, base: str) -> Submitted:
    """The spreadsheet batch: read like an upload, every row checked, one ``http.request`` per row."""
    spec = registry.get("http.request")
    assert spec is not None
    sheet = spreadsheets.read(demo_sheet(base), "demo-requests.csv")
    fields = spreadsheets.fields_of(spec.input_model)
    mapping = spreadsheets.match_columns(fields, sheet.columns)
    rows = [spreadsheets.row_input(fields, cells, mapping) for _, cells in sheet.rows]
    batch, _ = await batch_actions.submit(
        db,
        actor,
        spec.type,
        rows,
        name="Demo: web requests from a spreadsheet",
        source="spreadsheet demo-requests.csv",
        row_numbers=[n for n, _ in sheet.rows],
    )
    label = f"spreadsheet batch of {len(rows)} web requests to Jobdesk's own pages"
    return Submitted("batch", batch["id"], spec.type, label, "completed", f"{base}/batches/{batch['id']}")


async def _create_reviewed(db: AsyncSession, item: _Planned, actor: Actor, base: str) -> Submitted:
    """An ad-hoc pipeline whose one step waits for a named approver: the demo user, by e-mail (with
    ``owner``, since a submitter may approve their own step only when the step says so)."""
    step = {"key": "review", "type": item.type, "input_data": item.input_data, "requires_approval": True}
    pipeline = await pipeline_actions.submit_steps(
        db, actor, f"Demo: {item.label}", [{**step, **item.options}]
    )
    return Submitted(
        "pipeline", pipeline["id"], item.type, item.label, item.expect, f"{base}/pipelines/{pipeline['id']}"
    )


async def submit(
    engine: AsyncEngine,
    settings: Settings,
    email: str,
    *,
    samples_dir: Path | None = None,
) -> DemoRun:
    """Upload the samples and create the demo's jobs and pipelines as the user ``email``, all in one
    transaction. Without ``SMTP_HOST`` a :class:`MailSink` is started for the email job (the caller
    waits with :func:`wait_for_email` and stops it).

    Raises:
        DemoError: unknown or disabled user; sample files missing; nothing answers at
        ``JOBDESK_BASE_URL`` (:func:`check_base_url`).
        BadInput / TooLarge: a job or pipeline the checks refuse (as the API would).
        RateLimited: the user's per-person limits refuse it (waiting jobs, jobs per minute, stored
        bytes), as they would refuse the same submissions on a page or the API.
    """
    paths = _samples(samples_dir or default_samples_dir())
    user = await _demo_user(engine, email)
    run = DemoRun(user["email"], user["is_admin"])
    actor = Actor(CurrentUser(user["id"], user["email"], user["is_admin"]), settings=settings)
    base = settings.jobdesk_base_url
    await check_base_url(base)
    store = FileStore(settings.files_dir)
    stored: list[uuid.UUID] = []
    note_path: Path | None = None
    try:
        if not settings.smtp_host:
            note_path = await _start_mail_sink(run, settings)
        async with AsyncSession(engine, expire_on_commit=False) as db, db.begin():
            conn = await db.connection()
            files: dict[str, str] = {}
            for key, path in paths.items():
                # the person's storage limit, as an upload of the same file on a page is held to it
                await quotas.check_upload(conn, actor.user, settings, path.stat().st_size)
                row = await store.save(
                    conn,
                    user_id=user["id"],
                    name=path.name,
                    source=path,
                    limit=settings.user_max_upload_bytes,
                )
                stored.append(row["id"])
                files[key] = str(row["id"])
            for item in _plan(base, user["email"], files, run.email_job):
                run.items.append(await _create(db, item, actor, base))
            run.items.append(await _create_batch(db, actor, base))
    except BaseException:
        store.remove(stored)
        if note_path is not None:
            note_path.unlink(missing_ok=True)
        if run.sink is not None:
            await run.sink.stop()
        raise
    return run


async def live_workers(engine: AsyncEngine, settings: Settings) -> int:
    """Workers seen recently (within two lease renewals plus 10 s)."""
    async with engine.connect() as conn:
        return int(
            (await conn.execute(LIVE_WORKERS, {"secs": 2 * settings.heartbeat_secs + 10})).scalar() or 0
        )


async def wait_for_email(
    engine: AsyncEngine,
    settings: Settings,
    run: DemoRun,
    wait_secs: float,
    say: Callable[[str], None],
) -> str:
    """Keep the local mail server up until the email job has finished or ``wait_secs`` passed, then stop
    it and remove the job's note. Returns the job's final status (or its status at the deadline)."""
    assert run.sink is not None and run.email_job is not None
    note = settings.data_dir / DEMO_DIR / f"{run.email_job}.json"
    status = "queued"
    try:
        deadline = time.monotonic() + wait_secs
        while True:
            async with engine.connect() as conn:
                row = (await conn.execute(JOB_STATE, {"id": run.email_job})).mappings().first()
            status = row["status"] if row else "missing"
            if status in ("completed", "failed", "cancelled", "missing"):
                break
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        if status == "completed" and run.sink.received:
            say(f"The email was delivered to the local mail server and saved as {run.sink.received[-1]}.")
        elif status == "failed" and row is not None:
            say(f"The email job failed: {(row['error_message'] or '').splitlines()[0]}")
        elif status not in ("completed",):
            say(
                f"The email job had not run after {wait_secs:g} s (status: {status}); the local mail server "
                "has stopped, so it will fail with 'Email is not set up' when it runs. Set SMTP_HOST to "
                "send real email."
            )
    finally:
        note.unlink(missing_ok=True)
        await run.sink.stop()
    return status
