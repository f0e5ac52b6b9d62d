"""One form to create or change a schedule: ``/admin/schedules/new`` and ``/admin/schedules/{id}/edit``.

* ``GET /admin/schedules/new`` — pick a job type or a pipeline template; ``?target=type:<name>`` or
  ``?target=template:<name>`` — its form; ``POST /admin/schedules/new`` — create;
* ``GET``/``POST /admin/schedules/{id}/edit`` — change the cron expression, time zone, input and enabled
  flag (target, owner and name stay);
* ``GET /admin/schedules/preview`` — the next five fire times as the admin types (htmx).

The input is the job type's or template's own generated form — the same controls, parsing and checks as
"Start a job" and the pipeline form (:mod:`app.web.forms`, :func:`app.web.submit.validate`), file fields
included (uploads are stored as the schedule owner's files, since its jobs run as the owner). Beside it,
the schedule's own controls, whose names start with ``_`` so that no input field can clash with them.
Under the cron expression, the next five fire times in the admin's zone (:func:`app.cron.upcoming`,
which resolves daylight-saving gaps and repeats as the schedule will). Every problem — the form's and
the action's — is shown at once next to its field, with what was typed kept. The changes themselves are
:func:`app.actions.schedules.create_schedule` and :func:`~app.actions.schedules.update_schedule`
(audited), the same actions as ``POST /api/schedules`` and ``PATCH /api/schedules/{id}``.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from app import auth, controls, pipelines, schedules, users
from app import cron as cron_times
from app.actions import schedules as schedule_actions
from app.actions import trail
from app.actions.trail import KEEP_REFUSAL
from app.dbclock import db_time
from app.errors import BadInput, Conflict, TooLarge
from app.formatting import format_localtime, zone
from app.jobs.types import type_shown
from app.processors import registry
from app.web import DbSession, flash, forms, render
from app.web.deps import actor_of, client_ip, file_store, settings_of
from app.web.form_shape import shape_problem
from app.web.form_values import NOT_A_CHECKBOX, TYPED_MAX, checkbox, typed_values
from app.web.input_guard import FORM_CHECKED, UPLOADS, form_problems
from app.web.submit import errors_from_bad_input, input_names, text_errors, validate

PREVIEW_COUNT = 5

CRON, TIMEZONE, ENABLED, NAME, OWNER, CATCH_UP, TARGET = (
    "_cron",
    "_timezone",
    "_enabled",
    "_name",
    "_owner",
    "_catch_up",
    "_target",
)
ACTION_FIELD = {
    "cron": CRON,
    "timezone": TIMEZONE,
    "name": NAME,
    "owner": OWNER,
    "type": TARGET,
    "template": TARGET,
}
"""The actions' error fields → the form's controls; other errors belong to the input fields."""


@dataclass(frozen=True)
class Target:
    """What a schedule starts: a job type (``kind`` ``type``) or a pipeline template, and its form."""

    kind: str
    name: str
    title: str
    model: type[BaseModel]

    @property
    def value(self) -> str:
        return f"{self.kind}:{self.name}"


def target_of(kind: str, name: str) -> Target | None:
    """The job type or template so named, or ``None`` when there is none (any text is safe here)."""
    if kind == "type":
        spec = registry.get(name)
        return Target("type", name, spec.title, spec.input_model) if spec else None
    if kind == "template":
        tpl = pipelines.get_template(name)
        return Target("template", name, tpl.title, tpl.input_model) if tpl else None
    return None


CHOOSE_TARGET = "Choose a job type or a pipeline template."


def target_problem(value: str) -> str:
    """Why ``value`` (a ``?target=`` or the form's ``_target``, for which :func:`target_of` found nothing)
    names nothing a schedule can start, in words: the unknown type or template by its name, or how a
    target is written (``type:<name>`` or ``template:<name>``) when ``value`` is not written so — with
    the target it most likely meant when it names one without its kind (``http.request``)."""
    kind, sep, name = value.partition(":")
    shown = repr(value[:100])
    if not value.strip():
        return CHOOSE_TARGET
    if sep and kind == "type":
        return f"There is no job type called {type_shown(name)}. {CHOOSE_TARGET}"
    if sep and kind == "template":
        return f"There is no pipeline template called {name[:100]!r}. {CHOOSE_TARGET}"
    meant = next((t for t in (target_of("type", value), target_of("template", value)) if t is not None), None)
    if meant is not None:
        return (
            f"{shown} is written without its kind: a schedule's target is type:<job type> or "
            f"template:<pipeline template>, here {meant.value}. Choose it below."
        )
    return (
        f"{shown} is not a job type or a pipeline template that a schedule can start (a target is "
        f"type:<job type> or template:<pipeline template>). {CHOOSE_TARGET}"
    )


def target_options() -> list[tuple[str, list[tuple[str, str]]]]:
    """The picker's groups of ``(value, label)``: job types, then pipeline templates."""
    types = [
        (f"type:{s.type}", f"{s.title} ({s.type})") for s in sorted(registry.all(), key=lambda s: s.type)
    ]
    templates = [
        (f"template:{t.name}", f"{t.title} ({t.name})")
        for t in sorted(pipelines.all_templates(), key=lambda t: t.name)
    ]
    return [("Job types", types), ("Pipelines", templates)]


def preview(cron: str, tz: str, viewer_tz: str | None) -> tuple[list[str], str | None]:
    """The next :data:`PREVIEW_COUNT` fire times in the viewer's zone, or the reason there are none."""
    try:
        # from now on the database's clock, which fires the schedule (a fast web host skipped its next runs)
        times = cron_times.upcoming(cron, tz, db_time(), PREVIEW_COUNT)
    except BadInput as exc:
        return [], "; ".join(exc.errors.values()) or exc.detail
    return [format_localtime(t, zone(viewer_tz)) for t in times], None


def read_typed(request: Any, form: Any, tgt: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The schedule's own controls as typed, and the form's errors before any action: text that cannot
    be taken beside its control (:func:`app.web.input_guard.form_problems`; the target's generated
    fields too), a checkbox sent with a value no box sends.

    The text is kept whole: the action refuses one over its limit naming its real length, and the form
    shows it as typed (cut here, a 6,009-character cron was refused as "1,000 characters long" and came
    back holding its first 1,000)."""
    typed: dict[str, Any] = typed_values(form, (CRON, TIMEZONE, NAME, OWNER))
    fields = forms.form_fields(tgt.model) if tgt is not None else []
    own = {key: key for key in (CRON, TIMEZONE, NAME, OWNER, ENABLED, CATCH_UP, TARGET)}
    errors = text_errors(fields, form_problems(request), own)
    known, many = input_names(fields)
    shape = shape_problem(form, known | set(own), many, nothing="nothing was saved")
    if shape:
        errors.setdefault(forms.FORM_ERROR, shape)
    for key in (ENABLED, CATCH_UP):
        ticked = checkbox(form.get(key))
        typed[key] = bool(ticked)
        if ticked is None:
            errors.setdefault(key, NOT_A_CHECKBOX)
    return typed, errors


def action_errors(exc: BadInput | TooLarge, fields: list[forms.FormField]) -> dict[str, str]:
    """An action's refusal as the form's errors: the schedule's fields to their controls, the input's to
    the generated fields (or above the form)."""
    if isinstance(exc, TooLarge):
        return {forms.FORM_ERROR: exc.detail}
    own = {ACTION_FIELD[k]: v for k, v in exc.errors.items() if k in ACTION_FIELD}
    rest = {k: v for k, v in exc.errors.items() if k not in ACTION_FIELD}
    if rest or not own:
        for name, message in errors_from_bad_input(BadInput(exc.detail, errors=rest), fields).items():
            own.setdefault(name, message)
    return own


class _Discard(Exception):
    """Rolls back an action that succeeded although the form had errors of its own."""


async def submit(
    request: Request[Any, Any, Any],
    db: AsyncSession,
    form: Any,
    target: Target | None,
    principal: Any,
    act: Callable[[dict[str, Any]], Awaitable[Mapping[Any, Any]]],
    *,
    audited: tuple[str, list[Any]],
    unchanged_input: dict[str, Any] | None = None,
    own_errors: Mapping[str, str] | None = None,
) -> tuple[Mapping[Any, Any] | None, dict[str, Any], dict[str, str]]:
    """Parse the target's form (uploads stored as ``principal``'s), check it against the schema and run
    ``act`` with the input — even when the form has errors, so that the action names the schedule's bad
    fields in the same answer; its change is then rolled back. Returns the saved row (``None`` on any
    error), the input controls' values to show again and every error.

    ``target`` is ``None`` for a schedule whose job type or template is gone from the code: there is no
    form, and ``unchanged_input`` is passed on (the action names the missing target). ``audited`` is the
    action's name and targets: a form refused for its own errors is audited as the action's refusal."""
    settings = settings_of(request)
    fields = forms.form_fields(target.model) if target else []
    parsed = await forms.parse_form(
        fields,
        form,
        tz=zone(request.user.timezone),
        conn=await db.connection(),
        store=file_store(request),
        principal=principal,
        max_upload_bytes=settings.upload_max_bytes,
        settings=settings,
    )
    errors = {**parsed.errors, **(own_errors or {})}
    data = parsed.data if target else dict(unchanged_input or {})
    for name, message in (validate(target.model, data) if target else {}).items():
        errors.setdefault(name, message)
    row: Mapping[Any, Any] | None = None
    form_to_correct = bool(errors)
    try:
        if form_to_correct:
            # run only to name the schedule's own problems beside the form's: undone, and not a refusal
            # to audit (nothing was asked of the action yet; the form is to be corrected first)
            async with db.begin_nested():
                row = await act(data)
                raise _Discard
        else:
            # the action's own savepoint undoes its change on a refusal and keeps its audit entry
            row = await act(data)
    except _Discard:
        row = None
    except (BadInput, TooLarge) as exc:
        for name, message in action_errors(exc, fields).items():
            errors.setdefault(name, message)
    except Conflict as exc:
        if exc.extra.get("field") == "enabled":
            # enabling a schedule whose owner's account is disabled: said beside the Enabled box
            errors[ENABLED] = exc.detail
        elif not (form_to_correct and schedule_actions.unchanged(exc)):
            # an edit to the stored values is the caller's 409; with errors of the form's own, those are
            # what to correct (as before the action refused a no-op), audited below
            raise
    if form_to_correct:
        # the savepoint that held the action's own entry was rolled back: one entry names every error
        db.info.pop(KEEP_REFUSAL, None)
        action, ids = audited
        await trail.refused_form(
            db, actor_of(request), action, errors, target_type="schedule", target_ids=ids
        )
    if errors and parsed.new_files:
        await db.commit()  # the form shown again keeps the uploads; the action's change was rolled back
    return (None if errors else row), parsed.values, errors


async def form_context(
    request: Request[Any, Any, Any],
    *,
    target: Target | None,
    typed: dict[str, Any],
    values: dict[str, Any],
    errors: dict[str, str] | None = None,
    schedule: Any = None,
) -> dict[str, Any]:
    """What ``admin/schedule_form.html`` shows: the picker (no target, a new schedule), or the form."""
    user = request.user
    # no preview of a cron over its limit (its length is the error beside it): the text is kept whole,
    # and one of megabytes would only be parsed to show nothing
    over = len(typed[CRON]) > schedule_actions.CRON_MAX
    times, problem = ([], None) if over else preview(typed[CRON], typed[TIMEZONE] or "UTC", user.timezone)
    fields = forms.form_fields(target.model) if target else []
    # the summary lists the errors in the order of the controls on the page
    order = [TARGET, NAME, CRON, TIMEZONE, OWNER, forms.FORM_ERROR] + [f.name for f in fields]
    errors = dict(
        sorted((errors or {}).items(), key=lambda e: order.index(e[0]) if e[0] in order else len(order))
    )
    return {
        "target": target,
        "targets": target_options(),
        "schedule": schedule,
        "action": f"/admin/schedules/{schedule['id']}/edit" if schedule else "/admin/schedules/new",
        "fields": fields,
        "values": values,
        "typed": typed,
        "errors": errors,
        "labels": {**{f.name: f.label for f in fields}, **LABELS},
        "preview": times,
        # a cron or zone already marked wrong next to its field is not repeated under it
        "preview_problem": problem if typed[CRON] and not ({CRON, TIMEZONE} & errors.keys()) else None,
        "user_tz": user.timezone or "UTC",
        "upload_limit": settings_of(request).upload_max_bytes,
    }


LABELS = {
    CRON: "Cron expression",
    TIMEZONE: "Time zone",
    NAME: "Name",
    OWNER: "Owner",
    TARGET: "Starts",
    ENABLED: "Enabled",
    CATCH_UP: "Catch up",
    forms.FORM_ERROR: "Input",
}


async def _owner(db: AsyncSession, row: Any) -> Any:
    """Who the schedule's jobs (and the files uploaded in its form) belong to."""
    emails = await users.emails_of(db, [row["user_id"]])
    return SimpleNamespace(id=row["user_id"], email=emails.get(row["user_id"], ""), is_admin=False)


def _status(errors: Mapping[str, str]) -> int:
    """409 when the form was right but the schedule cannot be enabled now (its owner's account is
    disabled), 422 for a form to correct."""
    refused = list(errors) == [ENABLED] and errors[ENABLED] != NOT_A_CHECKBOX
    return 409 if refused else 422


def _row_target(row: Any) -> Target | None:
    return target_of("type", row["job_type"]) if row["job_type"] else target_of("template", row["template"])


async def schedules_context(db: AsyncSession) -> dict[str, Any]:
    """What ``admin/schedules.html`` shows (:mod:`app.web.admin.schedules`); here, beside the forms, since
    a form that changed nothing answers with the list too."""
    rows = await controls.list_schedules(db)
    owner_ids = sorted({r["user_id"] for r in rows})
    return {
        "schedules": rows,
        "owners": await users.emails_of(db, owner_ids),
        # such a schedule cannot be enabled (nor run) until its owner's account is enabled again
        "disabled_owners": await users.disabled_among(db, owner_ids),
        "declared": schedules.declared_code_schedules(),
        "targets": target_options(),
        "errors": {},
        "notice": None,
        "notice_ok": True,
    }


async def refused(db: AsyncSession, request: Request[Any, Any, Any], exc: Conflict) -> Template:
    """``/admin/schedules`` again, 409, with the refusal's own words: a schedule already as asked
    ("Nothing changed: …", as the other admin pages show a no-op), one defined in code, an owner's
    disabled account."""
    ctx = await schedules_context(db)
    ctx.update(notice=exc.detail, notice_ok=False)
    return render(request, "admin/schedules.html", ctx, status_code=409)


class ScheduleFormController(Controller):
    """The create and edit forms (see the module docstring); admins only."""

    path = "/admin/schedules"
    guards = [auth.requires_admin]
    include_in_schema = False

    @get("/new", name="admin.schedules.new")
    async def new_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        target: Annotated[str, QueryParameter(name="target")] = "",
    ) -> Template:
        """The picker, or with ``?target=`` that type's or template's form (an unknown one, or one not
        written ``type:<name>`` / ``template:<name>``: 404, the picker saying what is wrong)."""
        user = request.user
        kind, _, name = target[:TYPED_MAX].partition(":")
        tgt = target_of(kind, name)
        typed = {
            CRON: "",
            TIMEZONE: user.timezone or "UTC",
            NAME: "",
            OWNER: user.email,
            ENABLED: True,
            CATCH_UP: False,
        }
        values: dict[str, Any] = {}
        if tgt is not None:
            conn = await db_session.connection()
            fields = forms.form_fields(tgt.model)
            values = await forms.initial_values(
                fields, None, zone(user.timezone), conn, file_store(request), user
            )
        errors = {TARGET: target_problem(target)} if target and tgt is None else {}
        ctx = await form_context(request, target=tgt, typed=typed, values=values, errors=errors)
        return render(request, "admin/schedule_form.html", ctx, status_code=404 if errors else 200)

    @post("/new", name="admin.schedules.create", status_code=303, opt={FORM_CHECKED: True, UPLOADS: True})
    async def create(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Create; any problem → the form again (422) with every error next to its field, values kept (409
        when the form was right but its owner's account is disabled and it was to be enabled)."""
        user = request.user
        form = await request.form()
        sent = str(form.get(TARGET) or "")[:TYPED_MAX]
        kind, _, name = sent.partition(":")
        tgt = target_of(kind, name)
        typed, own_errors = read_typed(request, form, tgt)
        if tgt is None:
            errors = {TARGET: target_problem(sent), **own_errors}
            await trail.refused_form(
                db_session,
                actor_of(request),
                "schedule.create",
                errors,
                target_type="schedule",
                target_ids=[],
            )
            ctx = await form_context(request, target=None, typed=typed, values={}, errors=errors)
            return render(request, "admin/schedule_form.html", ctx, status_code=422)
        try:
            principal = await schedule_actions.owner_of(db_session, user, typed[OWNER])
        except BadInput:
            principal = user  # the action names the owner's problem; uploads are the admin's meanwhile

        async def act(data: dict[str, Any]) -> Mapping[Any, Any]:
            return await schedule_actions.create_schedule(
                db_session,
                user,
                cron=typed[CRON],
                timezone=typed[TIMEZONE],
                job_type=tgt.name if tgt.kind == "type" else None,
                template=tgt.name if tgt.kind == "template" else None,
                input_data=data,
                enabled=typed[ENABLED],
                catch_up=typed[CATCH_UP],
                name=typed[NAME],
                owner_email=typed[OWNER],
                settings=settings_of(request),
                ip=client_ip(request),
            )

        row, values, errors = await submit(
            request,
            db_session,
            form,
            tgt,
            principal,
            act,
            audited=("schedule.create", []),
            own_errors=own_errors,
        )
        if row is None:
            ctx = await form_context(request, target=tgt, typed=typed, values=values, errors=errors)
            return render(request, "admin/schedule_form.html", ctx, status_code=_status(errors))
        return flash.redirect(request, "/admin/schedules", f"Schedule {row['name']!r} created.")

    @get("/{schedule_id:str}/edit", name="admin.schedules.edit")
    async def edit_page(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template:
        row = await schedules.get_schedule(db_session, schedule_id)
        tgt = _row_target(row)
        fields = forms.form_fields(tgt.model) if tgt else []
        conn = await db_session.connection()
        owner = await _owner(db_session, row)
        tz = zone(request.user.timezone)
        values = await forms.initial_values(
            fields, row["input_data"] or {}, tz, conn, file_store(request), owner
        )
        typed = {CRON: row["cron"], TIMEZONE: row["timezone"], ENABLED: row["enabled"]}
        ctx = await form_context(request, target=tgt, typed=typed, values=values, schedule=row)
        return render(request, "admin/schedule_form.html", ctx)

    @post(
        "/{schedule_id:str}/edit",
        name="admin.schedules.save",
        status_code=303,
        opt={FORM_CHECKED: True, UPLOADS: True},
    )
    async def save(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template | Redirect:
        """Save; any problem → the form again (422) with every error next to its field, values kept."""
        row = await schedules.get_schedule(db_session, schedule_id)
        tgt = _row_target(row)
        form = await request.form()
        typed, own_errors = read_typed(request, form, tgt)

        async def act(data: dict[str, Any]) -> Mapping[Any, Any]:
            return await schedule_actions.update_schedule(
                db_session,
                request.user,
                row["id"],
                cron=typed[CRON],
                timezone=typed[TIMEZONE],
                input_data=data,
                enabled=typed[ENABLED],
                settings=settings_of(request),
                ip=client_ip(request),
            )

        owner = await _owner(db_session, row)
        try:
            saved, values, errors = await submit(
                request,
                db_session,
                form,
                tgt,
                owner,
                act,
                audited=("schedule.update", [row["id"]]),
                unchanged_input=row["input_data"] or {},
                own_errors=own_errors,
            )
        except Conflict as exc:
            if not schedule_actions.unchanged(exc):
                raise
            # the form as the schedule is: the list with "Nothing changed: …", 409, as the Enable and
            # Disable buttons of a schedule already so answer
            return await refused(db_session, request, exc)
        if saved is None:
            ctx = await form_context(
                request, target=tgt, typed=typed, values=values, errors=errors, schedule=row
            )
            return render(request, "admin/schedule_form.html", ctx, status_code=_status(errors))
        return flash.redirect(request, "/admin/schedules", f"Schedule {saved['name']!r} saved.")

    @get("/preview", name="admin.schedules.preview")
    async def preview_fragment(
        self,
        request: Request[Any, Any, Any],
        cron: Annotated[str, QueryParameter(name=CRON)] = "",
        timezone: Annotated[str, QueryParameter(name=TIMEZONE)] = "",
    ) -> Template:
        """The next five fire times for the cron and zone typed so far (htmx, as the admin types)."""
        times, problem = preview(cron[:TYPED_MAX], timezone[:TYPED_MAX] or "UTC", request.user.timezone)
        return Template(
            template_name="admin/_schedule_preview.html",
            context={"preview": times, "preview_problem": problem, "user": request.user},
        )
