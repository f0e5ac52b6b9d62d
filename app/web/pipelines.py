"""Pipeline pages.

* ``GET/POST /pipelines/new/{template}`` — the form generated from the template's input schema; errors
  next to their field (422, 413 for a too-large upload); success is a 303 to the pipeline's page.
  ``?from=<pipeline id>`` pre-fills it from an earlier run of the same template.
* ``GET /pipelines/{id}`` — the step indicator in DAG order, each step's state in plain words and a
  link to its job page, the percentage done, and the history (:mod:`app.web.pipeline_page`).
  ``GET /pipelines/{id}/status?v=…`` is the polled fragment (204 while unchanged, 286 once no step is
  live any more); ``GET /pipelines/{id}/cell?v=…`` is the My jobs cell.
* ``POST /pipelines/{id}/cancel`` — owner or admin, carried out by :mod:`app.actions.pipelines`; steps'
  admin actions post to ``/jobs/{id}/<action>`` with ``view=pipeline`` so the answer is this page's
  status part.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import uuid
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from app import pipelines
from app.actions import pipelines as pipeline_actions
from app.auth import requires_user
from app.errors import NotFound
from app.jobs.cursors import Cursor, read_cursor
from app.processors import registry
from app.web import DbSession, forms, is_htmx, render, submit, zone
from app.web.deps import (
    POLL_VARY,
    actor_of,
    cell_response,
    file_store,
    one_snapshot,
    parse_uuid,
    poll_status,
    settings_of,
    unchanged,
)
from app.web.input_guard import FORM_CHECKED, UPLOADS
from app.web.my_jobs import pipeline_list_items
from app.web.notifications import bell_news, viewer_bell
from app.web.pipeline_page import (
    PIPELINE_INPUT,
    load_pipeline_row,
    outcome_context,
    pipeline_history,
    pipeline_page_context,
    pipeline_status_context,
)


def form_context(
    request: Request[Any, Any, Any],
    *,
    tpl: pipelines.Template,
    values: dict[str, Any] | None = None,
    fields: list[forms.FormField] | None = None,
    sub: submit.Submission | None = None,
    resubmit_of: Any = None,
    form_key: str,
) -> dict[str, Any]:
    """What ``jobs/new.html`` shows for a template: a fresh form (``values``) or a submitted one again
    (``sub``) with its errors; ``form_key`` is the form's one-time key (kept when it comes back)."""
    errors = sub.errors if sub is not None else {}
    return {
        "kind": "pipeline",
        "spec": tpl,
        "heading": tpl.title,
        "description": tpl.description,
        "steps": [
            {"key": s.key, "title": s.title or _step_title(s.type), "requires_approval": s.requires_approval}
            for s in tpl.steps
        ],
        "fields": sub.fields if sub is not None else fields or forms.form_fields(tpl.input_model),
        "values": sub.parsed.values if sub is not None else values or {},
        "errors": errors,
        "form_error": errors.get(forms.FORM_ERROR),
        "title_error": errors.get(forms.TITLE),
        "job_title": sub.title if sub is not None else "",
        "error_count": len(errors),
        "action": f"/pipelines/new/{tpl.name}",
        "form_key": form_key,
        "resubmit_of": resubmit_of,
        "user_tz": request.user.timezone or "UTC",
        "upload_limit": settings_of(request).upload_max_bytes,
    }


def _step_title(type_name: str) -> str:
    spec = registry.get(type_name)
    return spec.title if spec else type_name


async def opened_directly(request: Request[Any, Any, Any], db: AsyncSession, pipeline_id: str) -> Template:
    """The pipeline page, for a poll's address (``/status``, ``/cell``) opened without htmx — a reload, a
    bookmark, a link copied from the developer tools: the whole page, never a bare fragment (``Vary``: the
    same address answers htmx with the fragment)."""
    await one_snapshot(db)
    ctx = await pipeline_page_context(db, pipeline_id, request.user)
    return render(request, "pipelines/detail.html", ctx, headers=POLL_VARY)


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
        tpl = pipeline_actions.page_template(user, name)
        fields = forms.form_fields(tpl.input_model)
        source = None
        resubmit_of = None
        if from_pipeline:
            pid = parse_uuid(from_pipeline, "pipeline")
            old = (await db_session.execute(PIPELINE_INPUT, {"id": pid})).mappings().first()
            mine = old is not None and (user.is_admin or old["user_id"] == user.id)
            if old is None or not mine or old["template"] != tpl.name:
                raise NotFound(f"No pipeline with id {pid}.")
            source, resubmit_of = old["input_data"] or {}, pid
        values = await forms.initial_values(
            fields, source, zone(user.timezone), await db_session.connection(), file_store(request), user
        )
        return render(
            request,
            "jobs/new.html",
            form_context(
                request,
                tpl=tpl,
                values=values,
                fields=fields,
                resubmit_of=resubmit_of,
                form_key=str(uuid.uuid4()),
            ),
        )

    @post(
        "/new/{name:str}", name="pipelines.create", status_code=303, opt={FORM_CHECKED: True, UPLOADS: True}
    )
    async def create_pipeline(
        self, request: Request[Any, Any, Any], db_session: DbSession, name: FromPath[str]
    ) -> Template | Redirect:
        """Validate and start; 303 to the pipeline, or the form again with errors next to the fields. The
        form is read whole even when its key was sent before: an upload it repeats (same key, name and
        bytes) is the file stored the first time (:func:`app.actions.files.store_upload`), so the form
        sent again as it was asks for the same pipeline and is a 303 to it; sent again with other values
        it comes back saying so, with a link to that pipeline and a new key (the action compares)."""
        tpl = pipeline_actions.page_template(request.user, name)
        actor = actor_of(request)
        sub = await submit.read_form(request, db_session, tpl.input_model)
        key = sub.key
        submit.check_schema(sub, tpl.input_model)
        row = await submit.start(
            db_session,
            sub,
            lambda: pipeline_actions.submit_template(
                db_session, actor, tpl.name, sub.parsed.data, title=sub.title, form_key=key
            ),
        )
        return await submit.answer(
            request,
            db_session,
            sub,
            row,
            url="/pipelines/",
            form_context=lambda s: form_context(request, tpl=tpl, sub=s, form_key=key),
        )

    @get("/{pipeline_id:str}", name="pipelines.detail")
    async def pipeline_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        pipeline_id: FromPath[str],
    ) -> Template:
        """The pipeline page (htmx: its status part): its steps and history from one snapshot."""
        await one_snapshot(db_session)
        ctx = await pipeline_page_context(db_session, pipeline_id, request.user)
        return render(request, "pipelines/detail.html", ctx, fragment="pipelines/_status.html")

    @get("/{pipeline_id:str}/history", name="pipelines.history")
    async def older_events(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        pipeline_id: FromPath[str],
        before: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The pipeline's events before ``before`` (an event id, as its page's "Older events" link gives):
        htmx gets their lines, put above the ones shown; a plain visit a page of them."""
        before_id = read_cursor(before, Cursor.ENTRY, field="before")
        row = await load_pipeline_row(db_session, pipeline_id, request.user)
        ctx = {
            "history": await pipeline_history(db_session, row["id"], request.user, before_id),
            "title": row["name"],
            "back_url": f"/pipelines/{row['id']}",
            "history_id": "pipeline-history",
            "show_steps": True,
        }
        return render(request, "jobs/history.html", ctx, fragment="jobs/_history_lines.html")

    @get("/{pipeline_id:str}/status", name="pipelines.status")
    async def pipeline_status(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        pipeline_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
        bell: Annotated[int | None, QueryParameter(ge=0, le=2**62)] = None,
    ) -> Template | Response[Any]:
        """The polled fragment: 204 while unchanged; 286 with the final state once finished; the bell
        out of band when the viewer's unread count is no longer ``bell``. Steps, outputs and history
        from one snapshot."""
        if not is_htmx(request):
            return await opened_directly(request, db_session, pipeline_id)
        user = request.user
        await one_snapshot(db_session)
        ctx = await pipeline_status_context(db_session, pipeline_id, user, with_outcome=False)
        finished = ctx["state"]["finished"]
        quiet = unchanged(v, ctx["state"]["version"], finished)
        news = bell_news(ctx["unread"], bell)
        if quiet is not None and not news:
            return quiet
        ctx["bell"] = ctx["unread"] if bell is not None else None
        ctx.update(await outcome_context(db_session, ctx["pipeline"], user))
        if quiet is None:  # with every change, not only the last ("Started" came late)
            ctx["history"] = await pipeline_history(db_session, ctx["pipeline"]["id"], user)
            ctx["history_oob"] = True
        return render(
            request, "pipelines/_status.html", ctx, status_code=poll_status(finished), headers=POLL_VARY
        )

    @get("/{pipeline_id:str}/cell", name="pipelines.cell")
    async def pipeline_cell(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        pipeline_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
        bell: Annotated[int | None, QueryParameter(ge=0, le=2**62)] = None,
    ) -> Template | Response[Any]:
        """One My jobs status cell for a pipeline (with its percentage while running); the bell out of
        band when the viewer's unread count is no longer ``bell``."""
        if not is_htmx(request):
            return await opened_directly(request, db_session, pipeline_id)
        row = await load_pipeline_row(db_session, pipeline_id, request.user)
        count = await viewer_bell(db_session, request.user) if bell is not None else None
        (item,) = await pipeline_list_items(db_session, [row], count)
        return cell_response(request, item, v, (bell_news(count, bell), count))

    @post("/{pipeline_id:str}/cancel", name="pipelines.cancel", status_code=200)
    async def cancel_pipeline(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> Template:
        """Cancel every unfinished step (owner or admin); 409 "Nothing changed" once it has finished."""
        user = request.user
        outcome = await pipeline_actions.cancel(db_session, actor_of(request), pipeline_id)
        kw: dict[str, Any] = {"notice": outcome.message, "notice_ok": outcome.ok}
        if is_htmx(request):
            ctx = await pipeline_status_context(db_session, outcome.id, user, with_history=True, **kw)
            return render(request, "pipelines/_status.html", ctx, status_code=outcome.status_code)
        ctx = await pipeline_page_context(db_session, outcome.id, user, **kw)
        return render(request, "pipelines/detail.html", ctx, status_code=outcome.status_code)
