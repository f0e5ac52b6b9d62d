"""``/api/schedules``: periodic jobs and pipelines (admins), carried out by
:mod:`app.actions.schedules` as on the admin page.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass, field
from typing import Any

from litestar import Controller, Request, delete, get, patch, post, put
from litestar.params import FromPath, JSONBody

from app import schedules
from app.actions import schedules as schedule_actions
from app.auth import requires_admin
from app.web import DbSession
from app.web.deps import client_ip, settings_of
from app.web.openapi import errors


@dataclass
class ScheduleCreate:
    """A periodic job (``type``) or pipeline (``template``): ``cron`` has five fields (minute hour day month
    weekday) and is read in ``timezone``; ``catch_up`` back-fills times missed while no worker ran."""

    cron: str
    timezone: str = "UTC"
    type: str | None = None
    template: str | None = None
    input_data: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    catch_up: bool = False
    name: str | None = None


@dataclass
class ScheduleChange:
    """A schedule's new cron expression, time zone, input and enabled flag; a field left out keeps its
    value, and ``null`` is refused (422 naming the field). The target (type or template), owner and
    name do not change."""

    cron: str | None = None
    timezone: str | None = None
    input_data: dict[str, Any] | None = None
    enabled: bool | None = None


class SchedulesApiController(Controller):
    """``/api/schedules`` (admins)."""

    path = "/api"
    guards = [requires_admin]
    tags = ["operator controls"]

    @get("/schedules", name="api.schedules.list", responses=errors(401, 403))
    async def list_schedules(self, db_session: DbSession) -> list[dict[str, Any]]:
        """Every schedule with its next and last fire time and last job or pipeline."""
        return [dict(r) for r in await schedules.list_schedules(db_session)]

    @post(
        "/schedules", name="api.schedules.create", responses=errors(401, 403, 413, 415, 422), status_code=201
    )
    async def create_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[ScheduleCreate]
    ) -> dict[str, Any]:
        """Create a schedule; its jobs belong to you. 422 naming the field for a bad cron expression, time
        zone, type (or one you may not submit), template or input."""
        row = await schedule_actions.create_schedule(
            db_session,
            request.user,
            cron=data.cron,
            timezone=data.timezone,
            job_type=data.type,
            template=data.template,
            input_data=data.input_data,
            enabled=data.enabled,
            catch_up=data.catch_up,
            name=data.name,
            settings=settings_of(request),
            ip=client_ip(request),
            source="api",
        )
        return dict(row)

    @post(
        ["/schedules/{schedule_id:str}/enable", "/schedules/{schedule_id:str}/disable"],
        name="api.schedules.enable",
        status_code=200,
        responses=errors(401, 403, 404, 409),
    )
    async def enable_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> dict[str, Any]:
        """Enable a schedule (its next run is computed from now; missed runs are not back-filled) or
        disable it. Returns the schedule; 409 "Nothing changed" when it is already so (audited as
        refused)."""
        enabled = request.url.path.rstrip("/").endswith("/enable")
        row = await schedule_actions.set_enabled(
            db_session, request.user, schedule_id, enabled, ip=client_ip(request)
        )
        return dict(row)

    @patch(
        "/schedules/{schedule_id:str}",
        name="api.schedules.update",
        responses=errors(401, 403, 404, 409, 413, 415, 422),
        status_code=200,
    )
    async def update_schedule(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        schedule_id: FromPath[str],
        data: JSONBody[ScheduleChange],
    ) -> dict[str, Any]:
        """Change cron, time zone, input or enabled (the next run is computed from now); the same action
        as the console's edit form, audited as ``schedule.update``. 422 naming every bad field; 409 for
        enabling a schedule whose owner's account is disabled, and "Nothing changed" for an edit that
        gives no field or only the values the schedule has (audited as refused)."""
        return await _change(request, db_session, schedule_id, data)

    @put(
        "/schedules/{schedule_id:str}",
        name="api.schedules.replace",
        responses=errors(401, 403, 404, 409, 413, 415, 422),
        status_code=200,
    )
    async def replace_schedule(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        schedule_id: FromPath[str],
        data: JSONBody[ScheduleChange],
    ) -> dict[str, Any]:
        """The same as ``PATCH`` (a field left out keeps its value)."""
        return await _change(request, db_session, schedule_id, data)

    @delete(
        "/schedules/{schedule_id:str}",
        name="api.schedules.delete",
        responses=errors(401, 403, 404),
        status_code=204,
    )
    async def delete_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> None:
        """Delete a schedule; jobs it already created stay."""
        await schedule_actions.delete_schedule(db_session, request.user, schedule_id, ip=client_ip(request))


async def _change(
    request: Request[Any, Any, Any], db_session: Any, schedule_id: str, data: ScheduleChange
) -> dict[str, Any]:
    # The body as sent, for which fields it gives: ``data`` reads a field left out and one sent as
    # null alike (None), and the action keeps the first but refuses the second.
    sent = await request.json()
    given = {k: getattr(data, k) for k in schedule_actions.CHANGEABLE if isinstance(sent, dict) and k in sent}
    updated = await schedule_actions.change_schedule(
        db_session, request.user, schedule_id, given, settings=settings_of(request), ip=client_ip(request)
    )
    return dict(updated)
