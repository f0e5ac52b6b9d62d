"""``/admin/schedules/{id}/edit``: change a schedule's cron expression, time zone, input and enabled flag.

The input is the job type's own generated form — the same controls, parsing and checks as "Start a job"
(:mod:`app.web.forms`, :func:`app.web.submit.validate`), file fields included (uploads are stored as the
schedule owner's files, since its jobs run as the owner). A pipeline template's schedule keeps a JSON
input box. Under the form, the next five fire times in the admin's zone (:func:`app.schedules.upcoming`,
which resolves daylight-saving gaps and repeats as the schedule will). Every problem is shown at once
next to its field, with what was typed kept. The change itself is
:func:`app.actions.schedules.update_schedule` (audited), the same action as ``PATCH /api/schedules/{id}``.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from app import auth, schedules, users
from app.actions import schedules as schedule_actions
from app.errors import BadInput, TooLarge
from app.formatting import format_localtime, zone
from app.processors import registry
from app.web import DbSession, flash, forms, render
from app.web.admin.schedules import parse_input_json
from app.web.deps import client_ip, file_store, settings_of
from app.web.input_guard import FORM_CHECKED
from app.web.job_page import timezone_names
from app.web.submit import validate

PREVIEW_COUNT = 5


def preview(cron: str, tz: str, viewer_tz: str | None) -> tuple[list[str], str | None]:
    """The next :data:`PREVIEW_COUNT` fire times in the viewer's zone, or the reason there are none."""
    try:
        times = schedules.upcoming(cron, tz, datetime.now(UTC), PREVIEW_COUNT)
    except BadInput as exc:
        return [], exc.detail
    where = zone(viewer_tz)
    return [format_localtime(t, where) for t in times], None


async def _owner(db: AsyncSession, row: Any) -> Any:
    """Who the schedule's jobs (and the files uploaded in its form) belong to."""
    emails = await users.emails_of(db, [row["user_id"]])
    return SimpleNamespace(id=row["user_id"], email=emails.get(row["user_id"], ""), is_admin=False)


async def edit_context(request: Request[Any, Any, Any], db: AsyncSession, row: Any) -> dict[str, Any]:
    user = request.user
    spec = registry.get(row["job_type"]) if row["job_type"] else None
    fields = forms.form_fields(spec.input_model) if spec else []
    tz = zone(user.timezone)
    conn = await db.connection()
    owner = await _owner(db, row)
    values = await forms.initial_values(fields, row["input_data"] or {}, tz, conn, file_store(request), owner)
    times, problem = preview(row["cron"], row["timezone"], user.timezone)
    return {
        "schedule": row,
        "spec": spec,
        "fields": fields,
        "values": values,
        "errors": {},
        "typed": {
            "cron": row["cron"],
            "timezone": row["timezone"],
            "enabled": row["enabled"],
            "input_json": json.dumps(row["input_data"] or {}, indent=2, ensure_ascii=False),
        },
        "preview": times,
        "preview_problem": problem,
        "timezones": timezone_names(),
        "user_tz": user.timezone or "UTC",
        "upload_limit": settings_of(request).upload_max_bytes,
    }


class ScheduleEditController(Controller):
    """``GET``/``POST /admin/schedules/{id}/edit``; admins only."""

    path = "/admin/schedules"
    guards = [auth.requires_admin]
    include_in_schema = False

    @get("/{schedule_id:str}/edit", name="admin.schedules.edit")
    async def edit_page(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template:
        row = await schedules.get_schedule(db_session, schedule_id)
        return render(request, "admin/schedule_edit.html", await edit_context(request, db_session, row))

    @post("/{schedule_id:str}/edit", name="admin.schedules.save", status_code=303, opt={FORM_CHECKED: True})
    async def save(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template | Redirect:
        """Save; any problem → the form again (422) with every error next to its field, values kept."""
        row = await schedules.get_schedule(db_session, schedule_id)
        ctx = await edit_context(request, db_session, row)
        form = await request.form()
        cron = str(form.get("cron") or "")[:200]
        timezone = str(form.get("timezone") or "")[:100]
        enabled = form.get("enabled") in ("on", "true", "1")
        input_json = str(form.get("input_json") or "")[:100_000]
        typed = {"cron": cron, "timezone": timezone, "enabled": enabled, "input_json": input_json}
        errors: dict[str, str] = {}
        input_data: dict[str, Any] = {}
        if ctx["spec"] is not None:
            parsed = await forms.parse_form(
                ctx["fields"],
                form,
                tz=zone(request.user.timezone),
                conn=await db_session.connection(),
                store=file_store(request),
                principal=await _owner(db_session, row),
                max_upload_bytes=settings_of(request).upload_max_bytes,
                settings=settings_of(request),
            )
            errors.update(parsed.errors)
            input_data = parsed.data
            for name, message in validate(ctx["spec"].input_model, input_data).items():
                errors.setdefault(name, message)
            ctx["values"] = {**ctx["values"], **parsed.values}
        else:
            try:
                input_data = parse_input_json(input_json.strip())
            except BadInput as exc:
                errors.update(exc.errors)
        try:
            saved = await schedule_actions.update_schedule(
                db_session,
                request.user,
                row["id"],
                cron=cron,
                timezone=timezone,
                input_data=input_data,
                enabled=enabled,
                settings=settings_of(request),
                ip=client_ip(request),
            )
        except (BadInput, TooLarge) as exc:
            for key, message in (
                exc.errors if isinstance(exc, BadInput) else {"input_json": exc.detail}
            ).items():
                name = key.removeprefix("input_data.") if key.startswith("input_data.") else key
                if name == "input_data" or (ctx["spec"] is None and name not in ("cron", "timezone")):
                    name = "input_json"
                errors.setdefault(name, message)
        if errors:
            times, problem = preview(cron, timezone, request.user.timezone)
            ctx.update(errors=errors, typed=typed, preview=times, preview_problem=problem)
            return render(request, "admin/schedule_edit.html", ctx, status_code=422)
        return flash.redirect(request, "/admin/schedules", f"Schedule {saved['name']!r} saved.")

    @get("/preview", name="admin.schedules.preview")
    async def preview_fragment(
        self, request: Request[Any, Any, Any], cron: FromQuery[str] = "", timezone: FromQuery[str] = ""
    ) -> Template:
        """The next five fire times for the cron and zone typed so far (htmx, as the admin types)."""
        times, problem = preview(cron[:200], timezone[:100] or "UTC", request.user.timezone)
        return Template(
            template_name="admin/_schedule_preview.html",
            context={"preview": times, "preview_problem": problem, "user": request.user},
        )
