"""``/api/job-types`` and ``/api/pipeline-templates`` (what a person may start, with input schemas) and
the operator controls of job types (``pause``, ``resume``, ``limits``; admins), carried out by
:mod:`app.actions.controls` as on the admin page.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, get, post, put
from litestar.params import FromPath, JSONBody

from app import controls
from app.actions import access
from app.actions import controls as control_actions
from app.actions.pipelines import startable_templates
from app.auth import requires_admin, requires_user
from app.web import DbSession
from app.web.deps import client_ip
from app.web.openapi import errors


def schema_of(model: Any) -> dict[str, Any]:
    """The JSON schema of a type's or template's input model."""
    schema: dict[str, Any] = model.model_json_schema()
    return schema


class JobTypesApiController(Controller):
    """``/api/job-types`` and ``/api/pipeline-templates``: what can be started, with input schemas."""

    path = "/api"
    guards = [requires_user]
    tags = ["catalogue"]

    @get("/job-types", name="api.job_types", responses=errors(401))
    async def job_types(self, request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
        """The job types you may submit with title, description and input JSON schema (diagnostic and
        internal ones for admins only)."""
        return [
            {
                "type": s.type,
                "title": s.title,
                "description": s.description,
                "group": s.group,
                "diagnostic": s.diagnostic,
                "input_schema": schema_of(s.input_model),
            }
            for s in access.submittable_types(request.user)
        ]

    @get("/pipeline-templates", name="api.pipeline_templates", responses=errors(401))
    async def templates(self, request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
        """The pipeline templates you may start, with their steps and input JSON schema."""
        return [
            {
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "input_schema": schema_of(t.input_model),
                "steps": [
                    {
                        "key": s.key,
                        "type": s.type,
                        "depends_on": list(s.depends_on),
                        "requires_approval": s.requires_approval,
                    }
                    for s in t.steps
                ],
            }
            for t in startable_templates(request.user)
        ]


@dataclass
class LimitsBody:
    """``max_running``: at most this many running at once across all workers; ``max_per_minute``: at most
    this many starts per minute; ``max_running_per_user``: at most this many of one person's running at
    once. ``null`` (or leaving a field out) removes that limit."""

    max_running: int | None = None
    max_per_minute: int | None = None
    max_running_per_user: int | None = None


class JobTypeControlsApiController(Controller):
    """``/api/job-types/{type}/pause|resume|limits`` and ``/api/job-types/controls`` (admins)."""

    path = "/api"
    guards = [requires_admin]
    tags = ["operator controls"]

    @post(
        "/job-types/{job_type:str}/pause",
        name="api.job_types.pause",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def pause(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_type: FromPath[str]
    ) -> dict[str, Any]:
        """Pause a job type (``*`` = all): it keeps accepting jobs but none is claimed until resumed; 409 when
        it is paused already (who paused it and when stay)."""
        row = await control_actions.pause(db_session, request.user, job_type, ip=client_ip(request))
        return dict(row)

    @post(
        "/job-types/{job_type:str}/resume",
        name="api.job_types.resume",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def resume(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_type: FromPath[str]
    ) -> dict[str, Any]:
        """Resume a paused job type (``*`` = the pause of all types); 409 when it is not paused."""
        row = await control_actions.resume(db_session, request.user, job_type, ip=client_ip(request))
        return dict(row)

    @put(
        "/job-types/{job_type:str}/limits",
        name="api.job_types.limits",
        responses=errors(401, 403, 404, 409, 413, 415, 422),
        status_code=200,
    )
    async def limits(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_type: FromPath[str],
        data: JSONBody[LimitsBody],
    ) -> dict[str, Any]:
        """Set or remove a job type's concurrency and rate limits; enforced in the claim by every worker. 409
        when they are these already."""
        row = await control_actions.set_limits(
            db_session,
            request.user,
            job_type,
            max_running=data.max_running,
            max_per_minute=data.max_per_minute,
            max_running_per_user=data.max_running_per_user,
            ip=client_ip(request),
        )
        return dict(row)

    @get("/job-types/controls", name="api.job_types.controls", responses=errors(401, 403))
    async def list_controls(self, db_session: DbSession) -> list[dict[str, Any]]:
        """Every paused or limited type."""
        return [dict(r) for r in (await controls.controls(db_session)).values()]
