"""Job pages for people who are not engineers (issue 6 §2, §3, §5; issue 7 §2; issue 11 §1).

* ``GET /jobs`` — My jobs: the user's own jobs and pipelines, newest first, filtered by status and
  type, keyset-paginated ("Older"); unfinished rows have a live status cell (``/jobs/{id}/cell``,
  ``/pipelines/{id}/cell``) that polls only its own job and stops when it is finished.
* ``GET/POST /jobs/new/{type}`` — the form generated from the type's input schema
  (:mod:`app.web.forms`), with an optional "Run at"; ``?from=<job id>`` pre-fills it ("Edit and
  resubmit"). Errors are shown next to their field (422; 413 for a too-large upload); success is a 303
  to the new job's page.
* ``GET /jobs/{id}`` — status in plain words, progress, attempts, times, result, error and history.
  ``GET /jobs/{id}/status?v=<fingerprint>`` is its htmx fragment, polled every 2 s: 204 while nothing
  changed, the new fragment when something did, and 286 (stop polling) once the job is finished.
* ``POST /jobs/{id}/<action>`` — cancel (owner or admin), run-again (owner or admin), retry, approve,
  reject (with a reason), rerun, run-now (admins). Each answers in place; a job that already finished
  gets 409 with "Nothing changed: …". Admin actions are written to the audit trail and the alert
  outbox in the same transaction (:func:`perform_job_action`, reusable by the admin console).

Every query here reads one job by primary key, or one user's rows through ``ix_jobs_user_id_id`` /
``ix_pipelines_user_id_id``; list queries never load ``input_data``, ``result_data`` or the error text
(cases C13, C17). Other users' jobs get the same 404 as unknown ids (case C20).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import functools
import uuid
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit, controls
from app.auth import requires_user
from app.db import read_rows
from app.errors import BadInput, Conflict, Forbidden, NotFound, TooLarge
from app.files import FileStore
from app.jobs import outbox, queue
from app.jobs.queue import NewJob
from app.jobs.states import LIVE, Status
from app.processors import ProcessorSpec, registry
from app.web import DbSession, forms, is_htmx, render, zone
from app.web import display as views

PAGE_SIZE = 25
HISTORY_LIMIT = 200
"""Most recent events shown on a job page."""
POLL = "every 2s"
"""How often a live status region asks for news (issue 6 §3)."""

# --- queries ------------------------------------------------------------------------------------------

#: One job's live state for the status fragment and list cells: by primary key, without input, result
#: or the full error text (cases C13, C17).
JOB_STATUS = text(
    """
    SELECT id, user_id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts,
           progress, progress_message, requires_approval, pipeline_id, step_key, blocked_by,
           created_at, updated_at, started_at, completed_at, left(error_message, 2000) AS error_preview
    FROM jobs WHERE id = :id
    """
)
#: One My jobs status cell: the live columns only (case C13).
JOB_CELL = text(
    """
    SELECT id, user_id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts,
           progress, progress_message, created_at, updated_at
    FROM jobs WHERE id = :id
    """
)
#: A finished job's outcome, loaded once when its page or final fragment is rendered.
JOB_OUTCOME = text("SELECT result_data, error_message FROM jobs WHERE id = :id")
JOB_EVENTS = text(
    """
    SELECT id, job_id, at, kind, from_status, to_status, actor, message, data
    FROM job_events WHERE job_id = :id ORDER BY id DESC LIMIT :limit
    """
)
USER_EMAILS = text("SELECT id, email FROM users WHERE id = ANY(CAST(:ids AS int[]))")
PIPELINE_NAME = text("SELECT id, name, user_id FROM pipelines WHERE id = :id")
FILES_BY_ID = text("SELECT id, name, size, user_id FROM files WHERE id = ANY(CAST(:ids AS uuid[]))")
_LIST_JOB_COLUMNS = (
    "id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts, progress, "
    "progress_message, created_at, updated_at, started_at, completed_at"
)
_LIST_PIPELINE_COLUMNS = "id, name, template, status, created_at, updated_at, finished_at"

STATUS_FILTERS = (
    ("", "Any status"),
    (Status.QUEUED.value, "Waiting"),
    (Status.IN_PROGRESS.value, "Running"),
    (Status.WAITING_APPROVAL.value, "Needs approval"),
    (Status.COMPLETED.value, "Done"),
    (Status.FAILED.value, "Failed"),
    (Status.CANCELLED.value, "Cancelled"),
)
#: Job status filter → pipeline status (``None``: no pipeline matches that filter).
PIPELINE_STATUS_FOR = {
    "queued": None,
    "in_progress": "running",
    "waiting_approval": "waiting_approval",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}
PIPELINE_TYPE_PREFIX = "pipeline:"


def list_jobs_sql(*, status: bool, job_type: bool, after: bool) -> Any:
    """The My jobs query for one combination of filters: ``WHERE user_id = … ORDER BY id DESC`` served by
    ``ix_jobs_user_id_id`` (each combination is its own statement, so the planner sees real values)."""
    where = ["user_id = :user_id", "pipeline_id IS NULL"]
    if status:
        where.append("status = :status")
    if job_type:
        where.append("type = :type")
    if after:
        where.append("id < :after")
    return text(
        f"SELECT {_LIST_JOB_COLUMNS} FROM jobs WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT :limit"
    )


def list_pipelines_sql(*, status: bool, template: bool, after: bool) -> Any:
    """The pipelines half of My jobs, served by ``ix_pipelines_user_id_id``."""
    where = ["user_id = :user_id"]
    if status:
        where.append("status = :status")
    if template:
        where.append("template = :template")
    if after:
        where.append("id < :after")
    return text(
        f"SELECT {_LIST_PIPELINE_COLUMNS} FROM pipelines WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT :limit"
    )


# --- small helpers ------------------------------------------------------------------------------------


def settings_of(request: Request[Any, Any, Any]) -> Any:
    return request.app.state.settings


def file_store(request: Request[Any, Any, Any]) -> FileStore:
    return FileStore(settings_of(request).files_dir)


def client_ip(request: Request[Any, Any, Any]) -> str | None:
    return request.client.host if request.client else None


def request_id(request: Request[Any, Any, Any]) -> str | None:
    return getattr(request.state, "request_id", None)


def parse_uuid(value: Any, what: str = "job") -> uuid.UUID:
    """The id, or :class:`NotFound` (the same answer as an unknown id)."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(f"No {what} with id {str(value)[:64]!r}.") from None


def visible_spec(type_name: str, user: Any) -> ProcessorSpec:
    """The job type, if this user may start it from the catalogue (diagnostic types: admins only).

    Raises:
        NotFound: unknown type, or a diagnostic type for a non-admin.
    """
    spec = registry.get(type_name)
    if spec is None or (spec.diagnostic and not user.is_admin):
        raise NotFound(f"There is no job type called {type_name[:100]!r}.")
    return spec


@functools.lru_cache(maxsize=1)
def timezone_names() -> tuple[str, ...]:
    """IANA time zone names for the "Run at" picker, sorted, without the ``posix/`` and ``right/`` copies."""
    names = {n for n in zoneinfo.available_timezones() if not n.startswith(("posix/", "right/"))}
    names.add("UTC")
    return tuple(sorted(names))


async def load_status_row(
    db: AsyncSession, job_id: Any, user: Any, query: Any = JOB_STATUS
) -> Mapping[str, Any]:
    """The job's live columns (:data:`JOB_STATUS`, or ``query``).

    Raises:
        NotFound: unknown, malformed or another user's id — one answer for all (case C20).
    """
    jid = parse_uuid(job_id)
    return _visible((await db.execute(query, {"id": jid})).mappings().first(), jid, user)


def _visible(row: Mapping[str, Any] | None, jid: uuid.UUID, user: Any) -> Mapping[str, Any]:
    """``row`` if ``user`` may see it (its owner, or an admin); else the same NotFound as an unknown id
    (case C20)."""
    if row is None or (not user.is_admin and row["user_id"] != user.id):
        raise NotFound(f"No job with id {jid}.")
    return row


async def poll_row(
    request: Request[Any, Any, Any], job_id: Any, user: Any, query: Any = JOB_STATUS
) -> Mapping[str, Any]:
    """:func:`load_status_row` for the 2 s polls: one autocommit round trip on the asyncpg connection
    (:func:`app.db.read_rows`), so a poll answered 204 never opens a transaction (issue 10 §1 pages
    targets). Not for reads after a change in the request's own transaction (they would not see it).

    Raises:
        NotFound: unknown, malformed or another user's id — one answer for all (case C20).
    """
    jid = parse_uuid(job_id)
    rows = await read_rows(request.app.state.engine, query, {"id": jid})
    return _visible(rows[0] if rows else None, jid, user)


async def emails_for(db: AsyncSession, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = (await db.execute(USER_EMAILS, {"ids": ids})).mappings().all()
    return {r["id"]: r["email"] for r in rows}


async def job_history(db: AsyncSession, job_id: uuid.UUID, user: Any) -> dict[str, Any]:
    """The job's most recent :data:`HISTORY_LIMIT` events, oldest first, in plain words."""
    rows = list((await db.execute(JOB_EVENTS, {"id": job_id, "limit": HISTORY_LIMIT + 1})).mappings().all())
    more = len(rows) > HISTORY_LIMIT
    rows = rows[:HISTORY_LIMIT][::-1]
    emails = await emails_for(db, views.user_ids_in(rows)) if user.is_admin else {}
    return {"lines": [views.event_line(r, user, emails) for r in rows], "more": more}


def available_actions(row: Mapping[str, Any], state: Mapping[str, Any], user: Any) -> dict[str, bool]:
    """Which buttons the viewer gets (the queue checks again when one is pressed)."""
    status = row["status"]
    owner = row["user_id"] == user.id
    admin = bool(user.is_admin)
    standalone = row.get("pipeline_id") is None
    spec = registry.get(row["type"])
    return {
        "cancel": (owner or admin) and status in LIVE and not state["cancelling"],
        "retry": admin and status == Status.FAILED,
        "run_again": (owner or admin) and standalone and state["terminal"] and spec is not None,
        "resubmit": owner
        and standalone
        and status in (Status.FAILED, Status.CANCELLED)
        and spec is not None
        and (admin or not spec.diagnostic),
        "approve": admin and status == Status.WAITING_APPROVAL,
        "reject": admin and status == Status.WAITING_APPROVAL,
        "rerun": admin and status == Status.WAITING_APPROVAL,
        "run_now": admin and status == Status.QUEUED and (state["scheduled"] or state["retrying"]),
        "reschedule": admin and status == Status.QUEUED,
    }


async def status_context(
    db: AsyncSession,
    row: Mapping[str, Any],
    user: Any,
    *,
    notice: str | None = None,
    notice_ok: bool = True,
    new_job_id: Any = None,
    with_history: bool = False,
) -> dict[str, Any]:
    """Everything ``jobs/_status.html`` shows; loads the result and full error only when there is an
    outcome to show (finished, or waiting for approval)."""
    state = views.job_state(row)
    spec = registry.get(row["type"])
    ctx: dict[str, Any] = {
        "job": row,
        "state": state,
        "title": views.job_title(row, spec),
        "actions": available_actions(row, state, user),
        "notice": notice,
        "notice_ok": notice_ok,
        "new_job_id": new_job_id,
        "poll_url": None if state["terminal"] else f"/jobs/{row['id']}/status?v={state['version']}",
        "poll": POLL,
        "confirms": CONFIRM,
        "result_items": [],
        "result_json": None,
        "error": None,
        "history": None,
    }
    if state["terminal"] or row["status"] == Status.WAITING_APPROVAL:
        outcome = (await db.execute(JOB_OUTCOME, {"id": row["id"]})).mappings().one()
        result = outcome["result_data"]
        ctx["result_items"] = views.result_items(result)
        ctx["result_json"] = views.pretty_json(result) if result is not None else None
        ctx["error"] = views.error_summary(row, outcome["error_message"], user)
    elif row.get("error_preview"):
        ctx["error"] = views.error_summary(row, row["error_preview"], user)
    if ctx["actions"]["reschedule"]:
        ctx["timezones"] = timezone_names()
        ctx["reschedule_tz"] = user.timezone or "UTC"
    if with_history:
        ctx["history"] = await job_history(db, row["id"], user)
        ctx["history_oob"] = True
    return ctx


async def page_context(db: AsyncSession, job_id: Any, user: Any, **status_kw: Any) -> dict[str, Any]:
    """The whole job page: its status part (:func:`status_context`), the input as readable fields, the
    pipeline it belongs to, and the history."""
    full = await queue.get_job(db, job_id, user)
    row = (await db.execute(JOB_STATUS, {"id": full["id"]})).mappings().one()
    ctx = await status_context(db, row, user, **status_kw)
    spec = registry.get(row["type"])
    fields = forms.form_fields(spec.input_model) if spec else []
    ids = views.file_ids_in(full["input_data"], fields)
    names: dict[str, Any] = {}
    if ids:
        valid = []
        for i in ids:
            try:
                valid.append(uuid.UUID(i))
            except ValueError:
                continue
        for f in (await db.execute(FILES_BY_ID, {"ids": valid})).mappings().all():
            if user.is_admin or f["user_id"] == user.id:
                names[str(f["id"])] = f
    pipeline = None
    if row["pipeline_id"]:
        pipeline = (await db.execute(PIPELINE_NAME, {"id": row["pipeline_id"]})).mappings().first()
    ctx.update(
        spec=spec,
        input_items=views.input_items(full["input_data"], fields, names, zone(user.timezone)),
        pipeline=pipeline,
        history=await job_history(db, row["id"], user),
        history_oob=False,
        paused=await controls.paused_for(db, [row["type"]]) if row["status"] == Status.QUEUED else [],
    )
    return ctx


# --- actions (issue 7 §2) -----------------------------------------------------------------------------

ACTIONS = ("cancel", "retry", "run-again", "approve", "reject", "rerun", "run-now")
CONFIRM = {
    "cancel": "Cancel this job? Work already done is lost.",
    "retry": "Retry this job with a fresh set of attempts?",
    "run-again": "Start a new job with the same input?",
    "approve": "Approve this result? The next steps will run.",
    "reject": "Reject this result? Steps that depend on it will be cancelled.",
    "rerun": "Run this step again?",
    "run-now": "Start this job now instead of at its scheduled time?",
    "reschedule": "Move this job to the chosen time?",
}


@dataclass
class ActionOutcome:
    """What an action did: ``ok``; ``message`` in plain words; ``status_code`` (200, or 409 when nothing
    changed because the job had moved on); the job's id; ``new_job_id`` for "run again"."""

    action: str
    ok: bool
    message: str
    status_code: int
    job_id: uuid.UUID
    new_job_id: uuid.UUID | None = None


def _ok_message(action: str, row: Mapping[str, Any]) -> str:
    if action == "cancel":
        if row["status"] == Status.IN_PROGRESS:
            return "Stopping the job. It will show as Cancelled once it has stopped."
        return "Cancelled."
    return {
        "retry": f"Retrying: the job is waiting to run again with a fresh set of {row['max_attempts']} attempts.",
        "run-again": "Started again as a new job.",
        "approve": "Approved. The steps after it can run now.",
        "reject": "Rejected. Steps that depend on it were cancelled.",
        "rerun": "This step will run again, then wait for approval again.",
        "run-now": "It will start as soon as a worker is free.",
        "reschedule": "Rescheduled: it now waits until the time shown.",
    }[action]


def conflict_words(exc: Conflict, action: str) -> str:
    """A :class:`Conflict` from the queue as "Nothing changed: …" in plain words."""
    extra = exc.extra or {}
    decision = extra.get("decision")
    if decision:
        done = {"approved": "approved", "rejected": "rejected", "rerun_requested": "sent back to run again"}
        return f"Nothing changed: someone already {done.get(decision, decision)} this step."
    status = extra.get("status")
    if status == "cancelling":
        return "Nothing changed: the job is already being stopped."
    if status in (Status.COMPLETED, Status.FAILED, Status.CANCELLED):
        label = views.STATUS_WORDS.get(status, status)
        return f"Nothing changed: the job has already finished ({label})."
    if status:
        return f"Nothing changed: the job is now {views.STATUS_WORDS.get(status, status)}, so this cannot be done."
    return "Nothing changed: " + exc.detail


async def perform_job_action(
    db: AsyncSession,
    user: Any,
    action: str,
    job_id: Any,
    settings: Any,
    *,
    reason: str | None = None,
    ip: str | None = None,
    req_id: str | None = None,
    run_at: Any = None,
) -> ActionOutcome:
    """Carry out one job action through :mod:`app.jobs.queue` in the caller's transaction.

    ``action`` is one of :data:`ACTIONS`, or ``reschedule`` with ``run_at`` (an aware datetime; issue 11 §1).
    When ``user`` is an admin the action is recorded with
    :func:`app.audit.record` (also when refused, with the reason) and, when it changed something, with
    :func:`app.outbox.record_admin_action` — both in the same transaction (issue 7 §2, §5). A refused
    action (the job moved on: "already finished") is returned with ``status_code=409`` after rolling back
    to a savepoint; the caller must commit to keep its audit entry.

    Raises:
        NotFound: unknown or another user's job (case C20). Forbidden: an owner asking for an admin
        action. BadInput: ``reject`` without a reason; ``run-again`` of a type that no longer validates.
        ValueError: an unknown ``action``.
    """
    if action not in ACTIONS and action != "reschedule":
        raise ValueError(f"unknown job action {action!r}")
    jid = parse_uuid(job_id)
    new_id = None
    audit_action = "job." + action.replace("-", "_")
    try:
        async with db.begin_nested():
            if action == "cancel":
                row = await queue.cancel(db, jid, user)
            elif action == "retry":
                row = await queue.retry(db, jid, user)
            elif action == "run-again":
                result = await queue.run_again(db, jid, user, settings, request_id=req_id)
                new_id = result.job["id"]
                row = await queue.get_job(db, jid, user)
            elif action == "approve":
                row = await queue.approve(db, jid, user)
            elif action == "reject":
                row = await queue.reject(db, jid, user, reason or "")
            elif action == "rerun":
                row = await queue.rerun(db, jid, user)
            elif action == "reschedule":
                row = await queue.reschedule(db, jid, user, run_at)
            else:
                row = await queue.reschedule(db, jid, user, None)
    except Conflict as exc:
        message = conflict_words(exc, action)
        if user.is_admin:
            await audit.record(
                db,
                user=user,
                action=audit_action,
                target_type="job",
                target_ids=[jid],
                outcome=f"refused: {message}"[:300],
                ip=ip,
            )
        return ActionOutcome(action, False, message, 409, jid)
    if user.is_admin:
        detail: dict[str, Any] = {}
        if reason:
            detail["reason"] = reason[:2000]
        if new_id is not None:
            detail["new_job"] = str(new_id)
        if action == "reschedule":
            detail["run_at"] = row["run_at"].isoformat()
        await audit.record(
            db,
            user=user,
            action=audit_action,
            target_type="job",
            target_ids=[jid],
            outcome="ok",
            detail=detail or None,
            ip=ip,
        )
        await outbox.record_admin_action(
            await db.connection(),
            admin_email=user.email,
            action=audit_action,
            count=1,
            job_ids=[jid],
            detail=detail or None,
        )
    return ActionOutcome(action, True, _ok_message(action, row), 200, jid, new_id)


# --- forms --------------------------------------------------------------------------------------------


def form_context(
    request: Request[Any, Any, Any],
    *,
    spec: Any,
    fields: list[forms.FormField],
    values: dict[str, Any],
    errors: dict[str, str],
    form_key: str,
    run_at: dict[str, str] | None = None,
    resubmit_of: Any = None,
    job_title: str = "",
) -> dict[str, Any]:
    user = request.user
    return {
        "kind": "job",
        "spec": spec,
        "heading": spec.title,
        "description": spec.description,
        "fields": fields,
        "values": values,
        "errors": errors,
        "form_error": errors.get(forms.FORM_ERROR),
        "run_at_error": errors.get(forms.RUN_AT),
        "title_error": errors.get(forms.TITLE),
        "job_title": job_title,
        "error_count": len(errors),
        "action": f"/jobs/new/{spec.type}",
        "form_key": form_key,
        "run_at": run_at or {"date": "", "time": "", "tz": user.timezone or "UTC"},
        "timezones": timezone_names(),
        "user_tz": user.timezone or "UTC",
        "resubmit_of": resubmit_of,
        "upload_limit": settings_of(request).upload_max_bytes,
    }


def _form_key(value: Any) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return str(uuid.uuid4())


# --- the controller -----------------------------------------------------------------------------------


class JobsController(Controller):
    """``/jobs``: My jobs, the job forms, job pages, their live fragments and actions."""

    path = "/jobs"
    guards = [requires_user]
    include_in_schema = False

    @get("/", name="jobs.list")
    async def my_jobs(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        status: Annotated[str | None, QueryParameter()] = None,
        type_filter: Annotated[str | None, QueryParameter(name="type")] = None,
        after: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """My jobs (full page, or ``jobs/_list.html`` for htmx)."""
        ctx = await list_context(db_session, request.user, status, type_filter, after)
        ctx["paused"] = await controls.paused_for(db_session)
        return render(request, "jobs/list.html", ctx, fragment="jobs/_list.html")

    @get("/new/{type_name:str}", name="jobs.new")
    async def new_job(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        type_name: FromPath[str],
        from_job: Annotated[str | None, QueryParameter(name="from")] = None,
    ) -> Template:
        """The form; ``?from=<job id>`` pre-fills it from that job's input (Edit and resubmit)."""
        user = request.user
        spec = visible_spec(type_name, user)
        fields = forms.form_fields(spec.input_model)
        source = None
        resubmit_of = None
        title = ""
        if from_job:
            old = await queue.get_job(db_session, from_job, user)
            if old["type"] != spec.type:
                raise NotFound(f"No job with id {old['id']}.")
            source, resubmit_of, title = old["input_data"], old["id"], old["title"] or ""
        values = await forms.initial_values(
            fields, source, zone(user.timezone), await db_session.connection(), file_store(request), user
        )
        ctx = form_context(
            request,
            spec=spec,
            fields=fields,
            values=values,
            errors={},
            form_key=str(uuid.uuid4()),
            resubmit_of=resubmit_of,
            job_title=title,
        )
        return render(request, "jobs/new.html", ctx)

    @post("/new/{type_name:str}", name="jobs.create", status_code=303)
    async def create_job(
        self, request: Request[Any, Any, Any], db_session: DbSession, type_name: FromPath[str]
    ) -> Template | Redirect:
        """Validate and enqueue; 303 to the job, or the form again with errors next to the fields
        (422; 413 when an upload is above ``UPLOAD_MAX_BYTES``)."""
        user, settings = request.user, settings_of(request)
        spec = visible_spec(type_name, user)
        fields = forms.form_fields(spec.input_model)
        form = await request.form()
        tz = zone(user.timezone)
        parsed = await forms.parse_form(
            fields,
            form,
            tz=tz,
            conn=await db_session.connection(),
            store=file_store(request),
            principal=user,
            max_upload_bytes=settings.upload_max_bytes,
        )
        errors = dict(parsed.errors)
        run_at_raw = {
            "date": str(form.get("_run_at_date") or ""),
            "time": str(form.get("_run_at_time") or ""),
            "tz": str(form.get("_run_at_tz") or user.timezone or "UTC"),
        }
        run_at, run_at_error = forms.parse_run_at(run_at_raw["date"], run_at_raw["time"], run_at_raw["tz"])
        if run_at_error:
            errors[forms.RUN_AT] = run_at_error
        for name, message in forms.validate(spec.input_model, parsed.data).items():
            errors.setdefault(name, message)
        key = _form_key(form.get("_form_key"))
        title = str(form.get(forms.TITLE) or "").strip()
        too_large = parsed.too_large
        job = None
        if not errors:
            try:
                async with db_session.begin_nested():
                    job = await enqueue_from_form(
                        db_session, spec, parsed.data, user, settings, run_at, key, request_id(request), title
                    )
            except BadInput as exc:
                errors = forms.errors_from_bad_input(exc, fields)
            except TooLarge as exc:
                errors = {forms.FORM_ERROR: exc.detail}
                too_large = True
        if job is None:
            if parsed.new_files:
                await db_session.commit()  # keep the uploads: the re-shown form refers to them
            ctx = form_context(
                request,
                spec=spec,
                fields=fields,
                values=parsed.values,
                errors=errors,
                form_key=key,
                run_at=run_at_raw,
                job_title=title,
            )
            return render(request, "jobs/new.html", ctx, status_code=413 if too_large else 422)
        return Redirect(f"/jobs/{job['id']}", status_code=303)

    @get("/{job_id:str}", name="jobs.detail")
    async def job_page(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """The job page (htmx: just its status part)."""
        ctx = await page_context(db_session, job_id, request.user)
        return render(request, "jobs/detail.html", ctx, fragment="jobs/_status.html")

    @get("/{job_id:str}/status", name="jobs.status")
    async def job_status(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
    ) -> Template | Response[Any]:
        """The status fragment, polled every 2 s: 204 while its fingerprint ``v`` still matches; 286 —
        htmx's "stop polling" — with the final fragment (result, error, history) once finished. The
        unchanged case costs one autocommit query (:func:`poll_row`) and no session; a read-only session
        is opened only to render."""
        user = request.user
        row = await poll_row(request, job_id, user)
        state = views.job_state(row)
        if not state["terminal"] and v == state["version"] and is_htmx(request):
            return Response(content=b"", status_code=204)
        async with AsyncSession(request.app.state.engine) as db:
            if not is_htmx(request):
                ctx = await page_context(db, row["id"], user)
                return render(request, "jobs/detail.html", ctx)
            ctx = await status_context(db, row, user, with_history=state["terminal"])
        return render(
            request,
            "jobs/detail.html",
            ctx,
            fragment="jobs/_status.html",
            status_code=286 if state["terminal"] else 200,
        )

    @get("/{job_id:str}/cell", name="jobs.cell")
    async def job_cell(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
    ) -> Template | Response[Any]:
        """One My jobs status cell: 204 while unchanged, 286 with the final cell once finished."""
        row = await poll_row(request, job_id, request.user, JOB_CELL)
        state = views.job_state(row)
        if not state["terminal"] and v == state["version"]:
            return Response(content=b"", status_code=204)
        item = job_list_item(row)
        return Template(
            template_name="jobs/_cell.html",
            context={"item": item, "user": request.user},
            status_code=286 if state["terminal"] else 200,
            headers={"Vary": "HX-Request"},
        )

    @post(
        [f"/{{job_id:str}}/{action}" for action in ACTIONS],
        name="jobs.action",
        status_code=200,
    )
    async def job_action(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """Cancel, retry, run again, approve, reject, rerun or run now; the outcome is shown in place
        (the job's or, with ``view=pipeline``, the pipeline's status part), 409 when nothing changed."""
        action = request.url.path.rstrip("/").rsplit("/", 1)[1]
        form = await request.form()
        view = str(form.get("view") or "")
        reason = str(form.get("reason") or "")
        user = request.user
        try:
            outcome = await perform_job_action(
                db_session,
                user,
                action,
                job_id,
                settings_of(request),
                reason=reason,
                ip=client_ip(request),
                req_id=request_id(request),
            )
        except BadInput as exc:
            outcome = ActionOutcome(
                action, False, exc.errors.get("reason", exc.detail), 422, parse_uuid(job_id)
            )
            outcome.message = outcome.message[:1].upper() + outcome.message[1:] + "."
        if outcome.status_code == 409:
            await db_session.commit()  # keep the audit entry of the refused action
        return await action_response(request, db_session, outcome, view)

    @post("/{job_id:str}/reschedule", name="jobs.reschedule", status_code=200)
    async def reschedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """Admins: move a waiting job to a date, time and time zone (issue 11 §1); audited like the other
        actions. A bad or past moment answers 422 with the reason in place; a job no longer waiting, 409."""
        form = await request.form()
        run_at, error = forms.parse_run_at(
            str(form.get("date") or ""), str(form.get("time") or ""), str(form.get("tz") or "")
        )
        if error is None and run_at is None:
            error = "Choose a date and a time (or use Run now)."
        user = request.user
        if error:
            load = await load_status_row(db_session, job_id, user)
            if not user.is_admin:
                raise Forbidden("Only an admin can reschedule a job.")
            outcome = ActionOutcome("reschedule", False, "Nothing changed: " + error, 422, load["id"])
        else:
            outcome = await perform_job_action(
                db_session,
                user,
                "reschedule",
                job_id,
                settings_of(request),
                ip=client_ip(request),
                req_id=request_id(request),
                run_at=run_at,
            )
        if outcome.status_code == 409:
            await db_session.commit()
        return await action_response(request, db_session, outcome, str(form.get("view") or ""))


async def action_response(
    request: Request[Any, Any, Any], db: AsyncSession, outcome: ActionOutcome, view: str
) -> Template:
    """The outcome in place: the status part of the job (or of its pipeline when ``view`` is
    ``pipeline``) with a notice; the full page when the request did not come from htmx."""
    user = request.user
    row = await load_status_row(db, outcome.job_id, user)
    if view == "pipeline" and row["pipeline_id"]:
        from app.web.pipelines import pipeline_page_context, pipeline_status_context

        kw = {"notice": outcome.message, "notice_ok": outcome.ok, "new_job_id": outcome.new_job_id}
        if is_htmx(request):
            ctx = await pipeline_status_context(db, row["pipeline_id"], user, **kw)
            return render(request, "pipelines/_status.html", ctx, status_code=outcome.status_code)
        ctx = await pipeline_page_context(db, row["pipeline_id"], user, **kw)
        return render(request, "pipelines/detail.html", ctx, status_code=outcome.status_code)
    kw = {"notice": outcome.message, "notice_ok": outcome.ok, "new_job_id": outcome.new_job_id}
    if is_htmx(request):
        ctx = await status_context(db, row, user, with_history=True, **kw)
        return render(request, "jobs/_status.html", ctx, status_code=outcome.status_code)
    ctx = await page_context(db, row["id"], user, **kw)
    return render(request, "jobs/detail.html", ctx, status_code=outcome.status_code)


async def enqueue_from_form(
    db: AsyncSession,
    spec: ProcessorSpec,
    data: dict[str, Any],
    user: Any,
    settings: Any,
    run_at: Any,
    form_key: str,
    req_id: str | None,
    title: str = "",
) -> Mapping[str, Any]:
    """Enqueue the form's job. The form's one-time key makes a double click create one job; the same
    key with different input (the browser's back button, then a change) creates a new one.

    Raises:
        BadInput / TooLarge: from :func:`app.jobs.queue.enqueue` (mapped to fields by the caller).
    """
    new = NewJob(
        type=spec.type,
        input_data=data,
        user_id=user.id,
        run_at=run_at,
        idempotency_key=f"form:{form_key}",
        request_id=req_id,
        title=title or None,
    )
    result = await queue.enqueue(db, new, settings)
    if result.created:
        return result.job
    same = (
        result.job["type"] == spec.type
        and result.job["input_data"] == spec.validate_input(data)
        and (result.job["title"] or "") == (title or "")
    )
    if same:
        return result.job
    new.idempotency_key = None
    new.id = queue.new_id()
    return (await queue.enqueue(db, new, settings)).job


# --- My jobs ------------------------------------------------------------------------------------------


def job_list_item(row: Mapping[str, Any]) -> dict[str, Any]:
    """A My jobs row for a job."""
    spec = registry.get(row["type"])
    state = views.job_state(row)
    return {
        "kind": "job",
        "id": row["id"],
        "title": views.job_title(row, spec),
        "subtitle": spec.title if spec is not None and row.get("title") else None,
        "url": f"/jobs/{row['id']}",
        "state": state,
        "created_at": row["created_at"],
        "cell_url": None if state["terminal"] else f"/jobs/{row['id']}/cell?v={state['version']}",
        "percent": state["percent"] if row["status"] == Status.IN_PROGRESS else None,
    }


def pipeline_list_item(row: Mapping[str, Any], done: int | None = None, total: int | None = None) -> dict:
    """A My jobs row for a pipeline."""
    state = views.pipeline_state(row, None)
    version = views.fingerprint(state["version"], done, total)
    return {
        "kind": "pipeline",
        "id": row["id"],
        "title": row["name"],
        "subtitle": "Pipeline",
        "url": f"/pipelines/{row['id']}",
        "state": {**state, "terminal": state["finished"], "version": version},
        "created_at": row["created_at"],
        "cell_url": None if state["finished"] else f"/pipelines/{row['id']}/cell?v={version}",
        "percent": round(100 * done / total)
        if total and done is not None and not state["finished"]
        else None,
    }


def _type_filter_options(user: Any) -> list[tuple[str, str]]:
    from app import pipelines

    options = [("", "Any kind")]
    for spec in sorted(registry.all(), key=lambda s: s.title.lower()):
        if user.is_admin or not spec.diagnostic:
            options.append((spec.type, spec.title))
    for tpl in sorted(pipelines.all_templates(), key=lambda t: t.title.lower()):
        if user.is_admin or not tpl.diagnostic:
            options.append((PIPELINE_TYPE_PREFIX + tpl.name, f"{tpl.title} (pipeline)"))
    return options


async def list_context(
    db: AsyncSession, user: Any, status: str | None, type_filter: str | None, after: str | None
) -> dict[str, Any]:
    """My jobs: the user's own standalone jobs and pipelines merged newest first (both ids are UUIDv7,
    so id order is creation order), :data:`PAGE_SIZE` per page, keyset-paginated by ``after``."""
    status = status if status in PIPELINE_STATUS_FOR else None
    type_filter = (type_filter or "").strip()[:200] or None
    try:
        after_id = uuid.UUID(after) if after else None
    except ValueError:
        after_id = None
    template = None
    job_type = None
    if type_filter and type_filter.startswith(PIPELINE_TYPE_PREFIX):
        template = type_filter.removeprefix(PIPELINE_TYPE_PREFIX)
    elif type_filter:
        job_type = type_filter
    limit = PAGE_SIZE + 1
    job_rows: list[Any] = []
    pipeline_rows: list[Any] = []
    if template is None:
        params: dict[str, Any] = {"user_id": user.id, "limit": limit}
        if status:
            params["status"] = status
        if job_type:
            params["type"] = job_type
        if after_id:
            params["after"] = after_id
        sql = list_jobs_sql(status=bool(status), job_type=bool(job_type), after=bool(after_id))
        job_rows = list((await db.execute(sql, params)).mappings().all())
    pipeline_status = PIPELINE_STATUS_FOR.get(status) if status else None
    if job_type is None and not (status and pipeline_status is None):
        params = {"user_id": user.id, "limit": limit}
        if pipeline_status:
            params["status"] = pipeline_status
        if template:
            params["template"] = template
        if after_id:
            params["after"] = after_id
        sql = list_pipelines_sql(status=bool(pipeline_status), template=bool(template), after=bool(after_id))
        pipeline_rows = list((await db.execute(sql, params)).mappings().all())
    merged = sorted(
        [("job", r) for r in job_rows] + [("pipeline", r) for r in pipeline_rows],
        key=lambda kr: kr[1]["id"],
        reverse=True,
    )
    page = merged[:PAGE_SIZE]
    more = len(merged) > PAGE_SIZE
    items = [job_list_item(r) if kind == "job" else pipeline_list_item(r) for kind, r in page]
    query = {"status": status or "", "type": type_filter or ""}
    return {
        "items": items,
        "older_url": _list_url(query, page[-1][1]["id"]) if more and page else None,
        "newest_url": _list_url(query, None) if after_id else None,
        "status": status or "",
        "type_filter": type_filter or "",
        "status_options": STATUS_FILTERS,
        "type_options": _type_filter_options(user),
        "filtered": bool(status or type_filter),
        "paged": bool(after_id),
    }


def _list_url(query: dict[str, str], after: Any) -> str:
    from urllib.parse import urlencode

    params = {k: v for k, v in query.items() if v}
    if after is not None:
        params["after"] = str(after)
    return "/jobs" + (("?" + urlencode(params)) if params else "")
