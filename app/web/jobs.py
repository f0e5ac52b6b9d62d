"""Job pages for people who are not engineers.

* ``GET /jobs`` — My jobs (:mod:`app.web.my_jobs`); unfinished rows have a live status cell
  (``/jobs/{id}/cell``, ``/pipelines/{id}/cell``) that polls only its own row and stops when finished.
* ``GET/POST /jobs/new/{type}`` — the form generated from the type's input schema (:mod:`app.web.forms`),
  with an optional "Run at"; ``?from=<job id>`` pre-fills it ("Edit and resubmit"). Errors are shown
  next to their field (422; 413 for a too-large upload); success is a 303 to the new job's page.
* ``GET /jobs/{id}`` — status in plain words, progress, attempts, times, result, error and history
  (:mod:`app.web.job_page`). ``GET /jobs/{id}/status?v=<fingerprint>`` is its htmx fragment, polled
  every 2 s: 204 while nothing changed, the new fragment when something did, and 286 (stop polling)
  once the job is finished. ``GET /jobs/{id}/history?before=<event id>``: the events older than those
  its page shows (its "Older events" link).
* ``POST /jobs/{id}/<action>`` — cancel, run again (owner or admin), retry, approve, reject (with a
  reason), rerun, run now, reschedule (admins), carried out by :mod:`app.actions.jobs`. Each answers in
  place; a job that already finished gets 409 with "Nothing changed: …".

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import dataclasses
import uuid
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from app import controls
from app.actions import access, submissions
from app.actions.jobs import ACTIONS, ActionOutcome
from app.auth import requires_user
from app.errors import NotFound
from app.jobs import queue
from app.jobs.cursors import Cursor, read_cursor
from app.processors import ProcessorSpec, registry
from app.web import DbSession, display, forms, is_htmx, job_log, render, submit, zone
from app.web.deps import (
    ACTION_CONTROLS,
    ACTION_HIDDEN,
    POLL_VARY,
    action_form_errors,
    actor_of,
    cell_response,
    file_store,
    one_snapshot,
    perform_from_page,
    poll_status,
    refuse_form,
    sent_form,
    settings_of,
    tell_unshown,
    unchanged,
)
from app.web.input_guard import FORM_CHECKED, UPLOADS
from app.web.job_page import (
    JOB_CELL,
    job_history,
    load_status_row,
    page_context,
    poll_row,
    status_context,
    timezone_names,
)
from app.web.my_jobs import job_list_item, list_context
from app.web.notifications import poll_bell
from app.web.pipeline_page import pipeline_page_context, pipeline_status_context


def form_context(
    request: Request[Any, Any, Any],
    *,
    spec: ProcessorSpec,
    sub: submit.Submission | None = None,
    values: dict[str, Any] | None = None,
    fields: list[forms.FormField] | None = None,
    form_key: str,
    run_at: dict[str, str] | None = None,
    resubmit_of: Any = None,
    job_title: str = "",
) -> dict[str, Any]:
    """What ``jobs/new.html`` shows for a job type: a fresh form (``values``), or a submitted one
    (``sub``) again with its errors."""
    user = request.user
    errors = sub.errors if sub is not None else {}
    return {
        "kind": "job",
        "spec": spec,
        "heading": spec.title,
        "description": spec.description,
        "fields": sub.fields if sub is not None else fields or forms.form_fields(spec.input_model),
        "values": sub.parsed.values if sub is not None else values or {},
        "errors": errors,
        "form_error": errors.get(forms.FORM_ERROR),
        "run_at_error": errors.get(forms.RUN_AT),
        "title_error": errors.get(forms.TITLE),
        "job_title": sub.title if sub is not None else job_title,
        "error_count": len(errors),
        "action": f"/jobs/new/{spec.type}",
        "form_key": form_key,
        "run_at": run_at or {"date": "", "time": "", "tz": user.timezone or "UTC"},
        "timezones": timezone_names(),
        "user_tz": user.timezone or "UTC",
        "resubmit_of": resubmit_of,
        "upload_limit": settings_of(request).upload_max_bytes,
        "setup_notice": setup_notice(spec, settings_of(request), user),
    }


NEEDS_SETUP = {"email.send": (("SMTP_HOST", "smtp_host"), ("SMTP_FROM", "smtp_from"))}
"""Job types that cannot work until an administrator sets these settings (name, attribute): the first
must be set; the rest are named as what to check too. Their form says so before anyone fills it in."""


def setup_notice(spec: ProcessorSpec, settings: Any, user: Any) -> dict[str, Any] | None:
    """``{"text", "settings"}`` when ``spec`` cannot work yet: everyone reads that it is not set up;
    admins also get the settings to set (``settings``, empty for others)."""
    needed = NEEDS_SETUP.get(spec.type)
    if not needed or getattr(settings, needed[0][1], None):
        return None
    return {
        "text": "Sending e-mail is not set up on this Jobdesk yet, so this job would fail."
        if spec.type == "email.send"
        else "This kind of job is not set up on this Jobdesk yet, so it would fail.",
        "settings": [name for name, _ in needed] if getattr(user, "is_admin", False) else [],
    }


def _run_at_raw(form: Any, user: Any) -> dict[str, str]:
    return {
        "date": str(form.get("_run_at_date") or ""),
        "time": str(form.get("_run_at_time") or ""),
        "tz": str(form.get("_run_at_tz") or user.timezone or "UTC"),
    }


async def opened_directly(request: Request[Any, Any, Any], job_id: str) -> Template:
    """The job page, for a poll's address (``/status``, ``/cell``) opened without htmx — a reload, a
    bookmark, a link copied from the developer tools: the whole page, never a bare fragment (``Vary``: the
    same address answers htmx with the fragment)."""
    async with AsyncSession(request.app.state.engine) as db:
        await one_snapshot(db)
        ctx = await page_context(db, job_id, request.user, files=file_store(request))
    return render(request, "jobs/detail.html", ctx, headers=POLL_VARY)


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
        q: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """My jobs (full page, or ``jobs/_list.html`` for htmx); ``q`` searches names and input text. The
        jobs, the pipelines and the recent batches' counts above them are read from one snapshot."""
        await one_snapshot(db_session)
        ctx = await list_context(db_session, request.user, status, type_filter, after, q)
        ctx["paused"] = await controls.paused_for(db_session)
        return render(
            request,
            "jobs/list.html",
            ctx,
            fragment="jobs/_list.html",
            status_code=422 if ctx["errors"] else 200,  # a filter that cannot be read, as the console
        )

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
        spec = access.page_spec(user, type_name)
        fields = forms.form_fields(spec.input_model)
        source, resubmit_of, title = None, None, ""
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
            values=values,
            fields=fields,
            form_key=str(uuid.uuid4()),
            resubmit_of=resubmit_of,
            job_title=title,
        )
        return render(request, "jobs/new.html", ctx)

    @post(
        "/new/{type_name:str}", name="jobs.create", status_code=303, opt={FORM_CHECKED: True, UPLOADS: True}
    )
    async def create_job(
        self, request: Request[Any, Any, Any], db_session: DbSession, type_name: FromPath[str]
    ) -> Template | Redirect:
        """Validate and enqueue; 303 to the job, or the form again with errors next to the fields
        (422; 413 when an upload is above ``UPLOAD_MAX_BYTES``)."""
        user = request.user
        spec = access.page_spec(user, type_name)
        sub = await submit.read_form(request, db_session, spec.input_model, submit.RUN_AT_CONTROLS)
        run_at_raw = _run_at_raw(sub.form, user)
        run_at = submit.parse_run_at(run_at_raw["date"], run_at_raw["time"], run_at_raw["tz"])
        if run_at.error:
            sub.errors.setdefault(forms.RUN_AT, run_at.error)
        if run_at.note:
            sub.notes.insert(0, f"Run at: {run_at.note}")
        submit.check_schema(sub, spec.input_model)
        key = sub.key
        actor = actor_of(request)
        job = await submit.start(
            db_session,
            sub,
            lambda: submissions.submit_form(
                db_session, actor, spec, sub.parsed.data, run_at=run_at.when, form_key=key, title=sub.title
            ),
        )
        return await submit.answer(
            request,
            db_session,
            sub,
            job,
            url="/jobs/",
            form_context=lambda s: form_context(request, spec=spec, sub=s, form_key=key, run_at=run_at_raw),
        )

    @get("/{job_id:str}", name="jobs.detail")
    async def job_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
    ) -> Template:
        """The job page (htmx: just its status part): its status, input and history from one snapshot."""
        await one_snapshot(db_session)
        ctx = await page_context(db_session, job_id, request.user, files=file_store(request))
        return render(request, "jobs/detail.html", ctx, fragment="jobs/_status.html")

    @get("/{job_id:str}/history", name="jobs.history")
    async def older_events(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        before: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The job's events before ``before`` (an event id, as its page's "Older events" link gives, the
        ``id`` the API's events carry): htmx gets their lines, put above the ones shown; a plain visit a
        page of them."""
        before_id = read_cursor(before, Cursor.ENTRY, field="before")
        row = await load_status_row(db_session, job_id, request.user)
        ctx = {
            "history": await job_history(db_session, row["id"], request.user, before_id),
            "title": display.job_title(row, registry.get(row["type"])),
            "back_url": f"/jobs/{row['id']}",
            "history_id": "job-history",
        }
        return render(request, "jobs/history.html", ctx, fragment="jobs/_history_lines.html")

    @get("/{job_id:str}/status", name="jobs.status")
    async def job_status(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
        log: Annotated[int | None, QueryParameter(ge=0, le=2**62)] = None,
        bell: Annotated[int | None, QueryParameter(ge=0, le=2**62)] = None,
    ) -> Template | Response[Any]:
        """The status fragment, polled every 2 s: 204 while its fingerprint ``v`` still matches and no
        log line came after ``log``; 286 — htmx's "stop polling" — with the final fragment (result, error,
        history) once finished. New log lines ride along out of band. The unchanged case costs one
        autocommit query (:func:`poll_row`) and no session; a read-only session is opened only to render."""
        if not is_htmx(request):
            return await opened_directly(request, job_id)
        user = request.user
        row = await poll_row(request, job_id, user)
        state = display.job_state(row)
        quiet = unchanged(v, state["version"], state["terminal"])
        bell_news, bell_count = poll_bell(row, user, bell)
        if quiet is not None and is_htmx(request) and not (job_log.has_news(row, log) or bell_news):
            return quiet
        async with AsyncSession(request.app.state.engine) as db:
            # the status shown and the history below it from one snapshot: the poll's row is read again
            # in it (a retry between the poll's read and the history's showed a history ahead of it)
            await one_snapshot(db)
            row = await load_status_row(db, row["id"], user)
            # the history below goes with every change of the status part ("Started" came only with the
            # final answer, or a reload); an answer for log lines or the bell alone leaves it be
            ctx = await status_context(db, row, user, with_history=quiet is None, files=file_store(request))
            ctx["log_lines"] = await job_log.new_lines(db, row, log)
            ctx["log"] = job_log.note_view(row)
            ctx["log_oob"] = state["terminal"] or bool(ctx["log_lines"])
            ctx["bell"] = bell_count
        return render(
            request,
            "jobs/detail.html",
            ctx,
            fragment="jobs/_status_poll.html",
            status_code=poll_status(state["terminal"]),
        )

    @get("/{job_id:str}/cell", name="jobs.cell")
    async def job_cell(
        self,
        request: Request[Any, Any, Any],
        job_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
        bell: Annotated[int | None, QueryParameter(ge=0, le=2**62)] = None,
    ) -> Template | Response[Any]:
        """One My jobs status cell: 204 while unchanged, 286 with the final cell once finished; the
        bell out of band when the owner's unread count is no longer ``bell`` (one query either way)."""
        if not is_htmx(request):
            return await opened_directly(request, job_id)
        row = await poll_row(request, job_id, request.user, JOB_CELL)
        news, count = poll_bell(row, request.user, bell)
        return cell_response(request, job_list_item(row, count), v, (news, count))

    @post(
        [f"/{{job_id:str}}/{action}" for action in ACTIONS],
        name="jobs.action",
        status_code=200,
        opt={FORM_CHECKED: True},
    )
    async def job_action(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """Cancel, retry, run again, approve, reject, rerun or run now; the outcome is shown in place
        (the job's or, with ``view=pipeline``, the pipeline's status part), 409 when nothing changed; a
        reason that cannot be taken is a 422 with the error beside it, as typed."""
        action = request.url.path.rstrip("/").rsplit("/", 1)[1]
        form = await request.form()
        reason = str(form.get("reason") or "")
        outcome, errors = await perform_from_page(
            db_session, request, action, job_id, reason=reason, controls=ACTION_CONTROLS.get(action, ())
        )
        sent = sent_form(action, outcome.job_id, errors, reason=reason)
        return await action_response(request, db_session, outcome, str(form.get("view") or ""), sent)

    @post("/{job_id:str}/reschedule", name="jobs.reschedule", status_code=200, opt={FORM_CHECKED: True})
    async def reschedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """Admins: move a waiting job to a date, time and time zone; audited like the other actions. A
        bad or past moment, or text that cannot be taken, answers 422 with the reason beside the fields,
        as typed; a job no longer waiting, 409."""
        form = await request.form()
        typed = {name: str(form.get(name) or "") for name in RESCHEDULE_CONTROLS}
        errors = action_form_errors(request, form, RESCHEDULE_CONTROLS, ACTION_HIDDEN)
        reading = submit.parse_run_at(typed["date"], typed["time"], typed["tz"])
        if not errors and (reading.error or reading.when is None):
            errors = {RUN_AT: reading.error or "Choose a date and a time (or use Run now)."}
        if errors:
            outcome, errors = await refuse_form(request, db_session, "reschedule", job_id, errors)
        else:
            outcome, errors = await perform_from_page(
                db_session, request, "reschedule", job_id, run_at=reading.when, controls=RESCHEDULE_CONTROLS
            )
            if outcome.ok and reading.note:
                outcome = dataclasses.replace(outcome, message=f"{outcome.message} {reading.note}")
        sent = sent_form("reschedule", outcome.job_id, errors, **typed)
        return await action_response(request, db_session, outcome, str(form.get("view") or ""), sent)


RUN_AT = "run_at"
RESCHEDULE_CONTROLS = {"date": RUN_AT, "time": RUN_AT, "tz": RUN_AT}
"""The reschedule form's fields: one error beside the three of them (a moment is wrong as a whole)."""


async def action_response(
    request: Request[Any, Any, Any],
    db: AsyncSession,
    outcome: ActionOutcome,
    view: str,
    sent: dict[str, Any] | None = None,
) -> Template:
    """The outcome in place: the status part of the job (or of its pipeline when ``view`` is
    ``pipeline``) with a notice, and the form just ``sent`` (:func:`app.web.deps.sent_form`) as the server
    renders it; the full page when the request did not come from htmx."""
    user = request.user
    row = await load_status_row(db, outcome.job_id, user)
    kw: dict[str, Any] = {
        "notice": outcome.message,
        "notice_ok": outcome.ok,
        "new_job_id": outcome.new_job_id,
    }
    code = outcome.status_code
    sent = sent or sent_form(outcome.action, outcome.job_id, {})
    if view == "pipeline" and row["pipeline_id"]:
        if is_htmx(request):
            ctx = await pipeline_status_context(db, row["pipeline_id"], user, **kw)
            name = "pipelines/_status.html"
        else:
            ctx = await pipeline_page_context(db, row["pipeline_id"], user, **kw)
            name = "pipelines/detail.html"
        steps = (s for layer in ctx["layers"] for s in layer if str(s["job_id"]) == str(outcome.job_id))
        shown = any(s["actions"].get(sent["action"]) for s in steps)
        return render(
            request, name, {**tell_unshown(ctx, sent["errors"], shown), "sent": sent}, status_code=code
        )
    if is_htmx(request):
        ctx = await status_context(db, row, user, with_history=True, **kw)
        name = "jobs/_status.html"
    else:
        ctx = await page_context(db, row["id"], user, **kw)
        name = "jobs/detail.html"
    shown = bool(ctx["actions"].get(sent["action"]))
    return render(request, name, {**tell_unshown(ctx, sent["errors"], shown), "sent": sent}, status_code=code)
