"""``/admin/schedules``: periodic jobs and pipelines (admins only).

* ``GET /admin/schedules`` — every schedule (made here, through the API, or defined in code) with its
  next and last runs, and the form to create one;
* ``POST /admin/schedules`` — create; any bad value (cron, time zone, target, input JSON, owner) is an
  error next to its field (422), never a server error;
* ``POST /admin/schedules/{id}/{enable,disable,delete}`` — a schedule defined in code cannot be deleted
  (409: disable it instead).

The changes themselves, their audit entries and admin notices are :mod:`app.actions.schedules`; this
module reads the form and renders.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from litestar import Controller, Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.params import FromPath
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from app import auth, controls, pipelines, users
from app.actions import schedules as schedule_actions
from app.errors import AppError, BadInput, Conflict, TooLarge
from app.processors import registry
from app.web import DbSession, flash, render
from app.web.deps import client_ip, settings_of
from app.web.input_guard import FORM_CHECKED
from app.web.job_page import timezone_names

INPUT_MAX_CHARS = 100_000
"""The input JSON typed in the form is refused above this many characters (it is echoed back on errors)."""

FIELDS = ("name", "cron", "timezone", "target", "input_data", "owner")
ERROR_FIELD = {"type": "target", "template": "target", "job_type": "target"}
"""Where an error of :mod:`app.actions.schedules` shows in the form, when its field is named otherwise."""


def target_options() -> list[tuple[str, str]]:
    """``(value, label)`` for the schedule form's target: ``type:<name>`` and ``template:<name>``."""
    options = [
        (f"type:{s.type}", f"{s.title} ({s.type})") for s in sorted(registry.all(), key=lambda s: s.type)
    ]
    options += [
        (f"template:{t.name}", f"{t.title} (pipeline {t.name})")
        for t in sorted(pipelines.all_templates(), key=lambda t: t.name)
    ]
    return options


async def schedules_context(db: AsyncSession, user: Any) -> dict[str, Any]:
    rows = await controls.list_schedules(db)
    return {
        "schedules": rows,
        "owners": await users.emails_of(db, sorted({r["user_id"] for r in rows})),
        "errors": {},
        "values": {
            "name": "",
            "cron": "",
            "timezone": user.timezone or "UTC",
            "target": "",
            "input_data": "{}",
            "owner": user.email,
            "enabled": True,
            "catch_up": False,
        },
        "targets": target_options(),
        "timezones": timezone_names(),
        "notice": None,
        "notice_ok": True,
    }


def parse_input_json(raw: str) -> dict[str, Any]:
    """The JSON object typed in the form.

    Raises:
        BadInput: (field ``input_data``) too long, not JSON — a syntax error, a number of more digits
        than Python converts, nesting deeper than the parser goes — or not an object.
    """
    if len(raw) > INPUT_MAX_CHARS:
        raise BadInput.field("input_data", f"The input is longer than {INPUT_MAX_CHARS:,} characters.")
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise BadInput.field(
            "input_data", f"Not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})."
        ) from None
    except ValueError:
        raise BadInput.field(
            "input_data", "Not valid JSON input: a number in it has more than 4,300 digits."
        ) from None
    except RecursionError:
        raise BadInput.field("input_data", "Not valid JSON input: it is nested too deeply.") from None
    if not isinstance(value, dict):
        raise BadInput.field("input_data", 'Enter a JSON object, e.g. {"url": "https://example.com"}.')
    return value


@dataclass
class ScheduleForm:
    """The create form as typed (``values``, echoed back on errors) and what it asks for."""

    values: dict[str, Any]
    errors: dict[str, str] = field(default_factory=dict)
    kind: str = ""
    target: str = ""
    input_data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, data: FormMultiDict) -> "ScheduleForm":
        values: dict[str, Any] = {name: str(data.get(name) or "") for name in FIELDS}
        values["enabled"] = data.get("enabled") in ("on", "true", "1")
        values["catch_up"] = data.get("catch_up") in ("on", "true", "1")
        form = cls(values)
        form.kind, _, form.target = values["target"].partition(":")
        if form.kind not in ("type", "template") or not form.target:
            form.errors["target"] = "Choose a job type or a pipeline template."
        try:
            form.input_data = parse_input_json(values["input_data"].strip())
        except BadInput as exc:
            form.errors["input_data"] = exc.errors["input_data"]
        if not values["timezone"].strip():
            form.errors["timezone"] = "Choose a time zone."
        return form

    def add_errors(self, exc: AppError) -> None:
        """An error of the action, keyed by the form's field names; errors in the target's own input fields
        go under ``input_data`` naming the field."""
        for key, message in (exc.errors if isinstance(exc, BadInput) else {}).items():
            name = ERROR_FIELD.get(key, key)
            if name in FIELDS:
                self.errors.setdefault(name, message)
            else:
                self.errors.setdefault("input_data", f"{key}: {message}")
        if not self.errors:
            self.errors["input_data"] = exc.detail

    def shown(self) -> dict[str, Any]:
        """The typed values to show again, each cut to a length the page can hold."""
        return {k: v[:INPUT_MAX_CHARS] if isinstance(v, str) else v for k, v in self.values.items()}


class SchedulesController(Controller):
    """``/admin/schedules`` (see the module docstring); admins only."""

    path = "/admin/schedules"
    guards = [auth.requires_admin]
    include_in_schema = False

    @get("/", name="admin.schedules")
    async def schedules_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
    ) -> Template:
        """Schedules (code and UI) with next and last runs, and the create form."""
        ctx = await schedules_context(db_session, request.user)
        return render(request, "admin/schedules.html", ctx)

    @post("/", name="admin.schedules.create", status_code=303, opt={FORM_CHECKED: True})
    async def create_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession
    ) -> Template | Redirect:
        """Create a schedule; any bad value → errors next to the fields (422)."""
        form = ScheduleForm.read(await request.form())
        if not form.errors:
            values = form.values
            try:
                row = await schedule_actions.create_schedule(
                    db_session,
                    request.user,
                    cron=values["cron"],
                    timezone=values["timezone"].strip(),
                    job_type=form.target if form.kind == "type" else None,
                    template=form.target if form.kind == "template" else None,
                    input_data=form.input_data,
                    enabled=values["enabled"],
                    catch_up=values["catch_up"],
                    name=values["name"],
                    owner_email=values["owner"],
                    settings=settings_of(request),
                    ip=client_ip(request),
                )
            except (BadInput, TooLarge) as exc:
                form.add_errors(exc)
        if form.errors:
            ctx = await schedules_context(db_session, request.user)
            ctx.update(errors=form.errors, values=form.shown())
            return render(request, "admin/schedules.html", ctx, status_code=422)
        return flash.redirect(request, "/admin/schedules", f"Schedule {row['name']!r} created.")

    @post(
        ["/{schedule_id:str}/enable", "/{schedule_id:str}/disable"],
        name="admin.schedules.enable",
        status_code=303,
    )
    async def enable_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Redirect:
        """Enable (next run computed from now, no back-fill) or disable a schedule."""
        enabled = request.url.path.rstrip("/").endswith("/enable")
        row = await schedule_actions.set_enabled(
            db_session, request.user, schedule_id, enabled, ip=client_ip(request)
        )
        return flash.redirect(
            request, "/admin/schedules", f"Schedule {row['name']!r} {'enabled' if enabled else 'disabled'}."
        )

    @post("/{schedule_id:str}/delete", name="admin.schedules.delete", status_code=303)
    async def delete_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template | Redirect:
        """Delete a UI schedule; a code-defined one answers 409 with the rule (disable it instead)."""
        try:
            row = await schedule_actions.delete_schedule(
                db_session, request.user, schedule_id, ip=client_ip(request)
            )
        except Conflict as exc:
            ctx = await schedules_context(db_session, request.user)
            ctx.update(notice="Nothing changed: " + exc.detail, notice_ok=False)
            return render(request, "admin/schedules.html", ctx, status_code=409)
        return flash.redirect(request, "/admin/schedules", f"Schedule {row['name']!r} deleted.")
