"""Pipeline pages (issue 6 §2, §4; issue 7 §2).

* ``GET/POST /pipelines/new/{template}`` — the form generated from the template's input schema; errors
  next to their field (422, 413 for a too-large upload); success is a 303 to the pipeline's page.
  ``?from=<pipeline id>`` pre-fills it from an earlier run of the same template.
* ``GET /pipelines/{id}`` — the step indicator in DAG order (parallel steps side by side), each step's
  state in plain words and a link to its job page (with its intermediate result), the percentage done,
  and the history. ``GET /pipelines/{id}/status?v=…`` is the polled fragment (204 while unchanged, 286
  once no step is live any more); ``GET /pipelines/{id}/cell?v=…`` is the My jobs cell.
* ``POST /pipelines/{id}/cancel`` — owner or admin; steps' admin actions post to ``/jobs/{id}/<action>``
  with ``view=pipeline`` so the answer is this page's status part.

A poll reads one pipeline: its row by primary key and its steps through ``ix_jobs_pipeline_id``
(case C17). Another user's pipeline gets the same 404 as an unknown id (case C20).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit, controls, pipelines
from app.auth import requires_user
from app.errors import BadInput, NotFound, TooLarge
from app.jobs import outbox
from app.web import DbSession, forms, is_htmx, render, zone
from app.web import display as views
from app.web.jobs import (
    CONFIRM,
    POLL,
    client_ip,
    emails_for,
    file_store,
    parse_uuid,
    request_id,
    settings_of,
)

HISTORY_LIMIT = 200

PIPELINE_ROW = text(
    "SELECT id, name, template, user_id, status, created_at, updated_at, finished_at FROM pipelines WHERE id = :id"
)
STEP_COUNTS = text(
    """
    SELECT count(*) AS total, count(*) FILTER (WHERE status = 'completed') AS done
    FROM jobs WHERE pipeline_id = :id
    """
)
PIPELINE_EVENTS = text(
    """
    SELECT e.id, e.job_id, COALESCE(j.title, j.step_key) AS step_key, e.at, e.kind, e.from_status, e.to_status, e.actor, e.message, e.data
    FROM job_events e LEFT JOIN jobs j ON j.id = e.job_id
    WHERE e.pipeline_id = :id ORDER BY e.id DESC LIMIT :limit
    """
)
PIPELINE_INPUT = text("SELECT user_id, template, input_data FROM pipelines WHERE id = :id")
CONFIRM_CANCEL = "Cancel this pipeline? Steps that have not finished will not run."


def visible_template(name: str, user: Any) -> pipelines.Template:
    """The template, if this user may start it (diagnostic templates: admins only).

    Raises:
        NotFound: unknown, or diagnostic for a non-admin.
    """
    tpl = pipelines.get_template(name)
    if tpl is None or (tpl.diagnostic and not user.is_admin):
        raise NotFound(f"There is no pipeline called {name[:100]!r}.")
    return tpl


async def load_pipeline_row(db: AsyncSession, pipeline_id: Any, user: Any) -> Mapping[str, Any]:
    """Raises:
    NotFound: unknown, malformed or another user's id (one answer, case C20).
    """
    pid = parse_uuid(pipeline_id, "pipeline")
    row = (await db.execute(PIPELINE_ROW, {"id": pid})).mappings().first()
    if row is None or (not user.is_admin and row["user_id"] != user.id):
        raise NotFound(f"No pipeline with id {pid}.")
    return row


def step_view(step: Mapping[str, Any], user: Any) -> dict[str, Any]:
    """One box of the step indicator: the step, its derived state and the admin buttons it offers."""
    state = views.job_state(step)
    status = step["status"]
    return {
        **step,
        "state": state,
        "actions": {
            "approve": user.is_admin and status == "waiting_approval",
            "reject": user.is_admin and status == "waiting_approval",
            "rerun": user.is_admin and status == "waiting_approval",
            "retry": user.is_admin and status == "failed",
        },
    }


async def pipeline_status_context(
    db: AsyncSession,
    pipeline_id: Any,
    user: Any,
    *,
    notice: str | None = None,
    notice_ok: bool = True,
    new_job_id: Any = None,
    with_history: bool = False,
) -> dict[str, Any]:
    """What ``pipelines/_status.html`` shows: overall state, percentage and the step indicator."""
    view = await pipelines.get(db, pipeline_id, user)
    state = views.pipeline_state(view, view["steps"])
    steps = {s["key"]: step_view(s, user) for s in view["steps"]}
    layers = [[steps[s["key"]] for s in layer] for layer in view["layers"]]
    owner = view["user_id"] == user.id
    ctx: dict[str, Any] = {
        "pipeline": view,
        "state": state,
        "layers": layers,
        "step_count": len(view["steps"]),
        "done_count": sum(1 for s in view["steps"] if s["status"] == "completed"),
        "can_cancel": (owner or user.is_admin) and not state["finished"],
        "notice": notice,
        "notice_ok": notice_ok,
        "new_job_id": new_job_id,
        "poll_url": None if state["finished"] else f"/pipelines/{view['id']}/status?v={state['version']}",
        "poll": POLL,
        "history": None,
        "history_oob": False,
        "confirm_cancel": CONFIRM_CANCEL,
        "confirms": CONFIRM,
    }
    if with_history:
        ctx["history"] = await pipeline_history(db, view["id"], user)
        ctx["history_oob"] = True
    return ctx


async def pipeline_history(db: AsyncSession, pipeline_id: uuid.UUID, user: Any) -> dict[str, Any]:
    rows = list(
        (await db.execute(PIPELINE_EVENTS, {"id": pipeline_id, "limit": HISTORY_LIMIT + 1})).mappings().all()
    )
    more = len(rows) > HISTORY_LIMIT
    rows = rows[:HISTORY_LIMIT][::-1]
    emails = await emails_for(db, views.user_ids_in(rows)) if user.is_admin else {}
    return {"lines": [views.event_line(r, user, emails) for r in rows], "more": more}


async def pipeline_page_context(db: AsyncSession, pipeline_id: Any, user: Any, **kw: Any) -> dict[str, Any]:
    ctx = await pipeline_status_context(db, pipeline_id, user, **kw)
    ctx["history"] = await pipeline_history(db, ctx["pipeline"]["id"], user)
    ctx["history_oob"] = False
    tpl = pipelines.get_template(ctx["pipeline"]["template"]) if ctx["pipeline"]["template"] else None
    ctx["template"] = tpl
    live_types = {s["type"] for s in ctx["pipeline"]["steps"] if s["status"] in ("queued", "in_progress")}
    ctx["paused"] = await controls.paused_for(db, live_types) if live_types else []
    ctx["can_resubmit"] = (
        tpl is not None
        and ctx["pipeline"]["user_id"] == user.id
        and ctx["pipeline"]["status"] in ("failed", "cancelled")
        and (user.is_admin or not tpl.diagnostic)
    )
    return ctx


def form_context(
    request: Request[Any, Any, Any],
    *,
    tpl: pipelines.Template,
    fields: list[forms.FormField],
    values: dict[str, Any],
    errors: dict[str, str],
    resubmit_of: Any = None,
    job_title: str = "",
) -> dict[str, Any]:
    return {
        "kind": "pipeline",
        "spec": tpl,
        "heading": tpl.title,
        "description": tpl.description,
        "steps": [
            {"key": s.key, "title": s.title or _step_title(s.type), "requires_approval": s.requires_approval}
            for s in tpl.steps
        ],
        "fields": fields,
        "values": values,
        "errors": errors,
        "form_error": errors.get(forms.FORM_ERROR),
        "title_error": errors.get(forms.TITLE),
        "job_title": job_title,
        "error_count": len(errors),
        "action": f"/pipelines/new/{tpl.name}",
        "resubmit_of": resubmit_of,
        "user_tz": request.user.timezone or "UTC",
        "upload_limit": settings_of(request).upload_max_bytes,
    }


def _step_title(type_name: str) -> str:
    from app.processors import registry

    spec = registry.get(type_name)
    return spec.title if spec else type_name


def _pipeline_errors(exc: BadInput, fields: list[forms.FormField]) -> dict[str, str]:
    errors = forms.errors_from_bad_input(exc, fields)
    step_problems = [f"{path}: {message}" for path, message in exc.errors.items() if path.startswith("steps")]
    if step_problems:
        errors[forms.FORM_ERROR] = (
            "One of the steps could not be prepared from what you entered: " + "; ".join(step_problems)[:500]
        )
    return errors


class PipelinesController(Controller):
    """``/pipelines``: template forms, pipeline pages, their live fragments, cancel."""

    path = "/pipelines"
    guards = [requires_user]
    include_in_schema = False

    @get("/", name="pipelines.list")
    async def pipelines_list(self) -> Redirect:
        """Pipelines are listed with the jobs on My jobs."""
        return Redirect("/jobs", status_code=303)

    @get("/new/{name:str}", name="pipelines.new")
    async def new_pipeline(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        name: FromPath[str],
        from_pipeline: Annotated[str | None, QueryParameter(name="from")] = None,
    ) -> Template:
        """The template's form; ``?from=<pipeline id>`` pre-fills it from that pipeline's input."""
        user = request.user
        tpl = visible_template(name, user)
        fields = forms.form_fields(tpl.input_model)
        source = None
        resubmit_of = None
        if from_pipeline:
            pid = parse_uuid(from_pipeline, "pipeline")
            old = (await db_session.execute(PIPELINE_INPUT, {"id": pid})).mappings().first()
            if (
                old is None
                or (not user.is_admin and old["user_id"] != user.id)
                or old["template"] != tpl.name
            ):
                raise NotFound(f"No pipeline with id {pid}.")
            source, resubmit_of = old["input_data"] or {}, pid
        values = await forms.initial_values(
            fields, source, zone(user.timezone), await db_session.connection(), file_store(request), user
        )
        ctx = form_context(request, tpl=tpl, fields=fields, values=values, errors={}, resubmit_of=resubmit_of)
        return render(request, "jobs/new.html", ctx)

    @post("/new/{name:str}", name="pipelines.create", status_code=303)
    async def create_pipeline(
        self, request: Request[Any, Any, Any], db_session: DbSession, name: FromPath[str]
    ) -> Template | Redirect:
        """Validate and start; 303 to the pipeline, or the form again with errors next to the fields."""
        user, settings = request.user, settings_of(request)
        tpl = visible_template(name, user)
        fields = forms.form_fields(tpl.input_model)
        form = await request.form()
        parsed = await forms.parse_form(
            fields,
            form,
            tz=zone(user.timezone),
            conn=await db_session.connection(),
            store=file_store(request),
            principal=user,
            max_upload_bytes=settings.upload_max_bytes,
        )
        errors = dict(parsed.errors)
        for field_name, message in forms.validate(tpl.input_model, parsed.data).items():
            errors.setdefault(field_name, message)
        too_large = parsed.too_large
        title = str(form.get(forms.TITLE) or "").strip()
        row = None
        if not errors:
            try:
                async with db_session.begin_nested():
                    row = await pipelines.create_from_template(
                        db_session,
                        tpl.name,
                        parsed.data,
                        user_id=user.id,
                        settings=settings,
                        request_id=request_id(request),
                        title=title,
                    )
            except BadInput as exc:
                errors = _pipeline_errors(exc, fields)
                if "title" in exc.errors:
                    message = exc.errors["title"]
                    errors[forms.TITLE] = message[:1].upper() + message[1:] + "."
            except TooLarge as exc:
                errors = {forms.FORM_ERROR: exc.detail}
                too_large = True
        if row is None:
            if parsed.new_files:
                await db_session.commit()  # keep the uploads: the re-shown form refers to them
            ctx = form_context(
                request, tpl=tpl, fields=fields, values=parsed.values, errors=errors, job_title=title
            )
            return render(request, "jobs/new.html", ctx, status_code=413 if too_large else 422)
        return Redirect(f"/pipelines/{row['id']}", status_code=303)

    @get("/{pipeline_id:str}", name="pipelines.detail")
    async def pipeline_page(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> Template:
        """The pipeline page (htmx: its status part)."""
        ctx = await pipeline_page_context(db_session, pipeline_id, request.user)
        return render(request, "pipelines/detail.html", ctx, fragment="pipelines/_status.html")

    @get("/{pipeline_id:str}/status", name="pipelines.status")
    async def pipeline_status(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        pipeline_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
    ) -> Template | Response[Any]:
        """The polled fragment: 204 while unchanged; 286 with the final state once finished."""
        user = request.user
        if not is_htmx(request):
            ctx = await pipeline_page_context(db_session, pipeline_id, user)
            return render(request, "pipelines/detail.html", ctx)
        ctx = await pipeline_status_context(db_session, pipeline_id, user)
        finished = ctx["state"]["finished"]
        if not finished and v == ctx["state"]["version"]:
            return Response(content=b"", status_code=204)
        if finished:
            ctx["history"] = await pipeline_history(db_session, ctx["pipeline"]["id"], user)
            ctx["history_oob"] = True
        return render(request, "pipelines/_status.html", ctx, status_code=286 if finished else 200)

    @get("/{pipeline_id:str}/cell", name="pipelines.cell")
    async def pipeline_cell(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        pipeline_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
    ) -> Template | Response[Any]:
        """One My jobs status cell for a pipeline (with its percentage while running)."""
        from app.web.jobs import pipeline_list_item

        row = await load_pipeline_row(db_session, pipeline_id, request.user)
        counts = (await db_session.execute(STEP_COUNTS, {"id": row["id"]})).mappings().one()
        item = pipeline_list_item(row, counts["done"], counts["total"])
        if not item["state"]["terminal"] and v == item["state"]["version"]:
            return Response(content=b"", status_code=204)
        return Template(
            template_name="jobs/_cell.html",
            context={"item": item, "user": request.user},
            status_code=286 if item["state"]["terminal"] else 200,
            headers={"Vary": "HX-Request"},
        )

    @post("/{pipeline_id:str}/cancel", name="pipelines.cancel", status_code=200)
    async def cancel_pipeline(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> Template:
        """Cancel every unfinished step (owner or admin); 409 "Nothing changed" once it has finished."""
        user = request.user
        outcome = await perform_pipeline_cancel(db_session, user, pipeline_id, ip=client_ip(request))
        if outcome["status_code"] == 409:
            await db_session.commit()  # keep the audit entry of the refused action
        kw = {"notice": outcome["message"], "notice_ok": outcome["ok"]}
        if is_htmx(request):
            ctx = await pipeline_status_context(db_session, outcome["id"], user, with_history=True, **kw)
            return render(request, "pipelines/_status.html", ctx, status_code=outcome["status_code"])
        ctx = await pipeline_page_context(db_session, outcome["id"], user, **kw)
        return render(request, "pipelines/detail.html", ctx, status_code=outcome["status_code"])


async def perform_pipeline_cancel(
    db: AsyncSession, user: Any, pipeline_id: Any, *, ip: str | None = None
) -> dict[str, Any]:
    """Cancel a pipeline's unfinished steps through :func:`app.pipelines.cancel`; admins' cancels are
    audited and alerted in the same transaction (refusals audited too). Returns ``{"id", "ok",
    "message", "status_code", "cancelled", "cancelling"}``.

    Raises:
        NotFound: unknown or another user's pipeline.
    """
    row = await load_pipeline_row(db, pipeline_id, user)
    if row["finished_at"] is not None or row["status"] == "cancelled":
        message = "Nothing changed: the pipeline has already finished."
        if user.is_admin:
            await audit.record(
                db,
                user=user,
                action="pipeline.cancel",
                target_type="pipeline",
                target_ids=[row["id"]],
                outcome=f"refused: {message}",
                ip=ip,
            )
        return {
            "id": row["id"],
            "ok": False,
            "message": message,
            "status_code": 409,
            "cancelled": 0,
            "cancelling": 0,
        }
    counts = await pipelines.cancel(db, row["id"], user)
    parts = []
    if counts["cancelled"]:
        parts.append(f"{counts['cancelled']} step{'s' if counts['cancelled'] != 1 else ''} cancelled")
    if counts["cancelling"]:
        parts.append(
            f"{counts['cancelling']} running step{'s are' if counts['cancelling'] != 1 else ' is'} stopping"
        )
    message = "Pipeline cancelled: " + (", ".join(parts) if parts else "nothing was left to stop") + "."
    if user.is_admin:
        await audit.record(
            db,
            user=user,
            action="pipeline.cancel",
            target_type="pipeline",
            target_ids=[row["id"]],
            outcome="ok",
            detail=dict(counts),
            ip=ip,
        )
        await outbox.record_admin_action(
            await db.connection(),
            admin_email=user.email,
            action="pipeline.cancel",
            count=counts["cancelled"] + counts["cancelling"],
            detail={"pipeline_id": str(row["id"]), **counts},
        )
    return {"id": row["id"], "ok": True, "message": message, "status_code": 200, **counts}
