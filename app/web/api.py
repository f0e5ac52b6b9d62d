"""The JSON API (issue 3 §11, issue 5 §2 and §6), documented at ``/schema``.

API routes authenticate with ``Authorization: Bearer <token>`` only — never the session cookie — and
are therefore exempt from CSRF (issue 2 §7, issue 7 §7). Owners see and act on their own jobs and
pipelines; another user's id gets the same 404 as an unknown id (case C20); admins see and act on all.
Errors are ``{"detail": …}`` (plus ``errors`` per field for 422) with a 4xx status, never a 500 for bad
input. All state changes go through :mod:`app.jobs.queue` and :mod:`app.pipelines`.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, post, put
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from sqlalchemy import text

from app import controls, pipelines
from app.auth import requires_admin, requires_user
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob
from app.jobs.states import Status, label
from app.processors import registry
from app.web import DbSession, display

MAX_PAGE = 200


@dataclass
class Me:
    """The token's owner."""

    id: int
    email: str
    is_admin: bool


class AccountApiController(Controller):
    """``/api/me``."""

    path = "/api"
    guards = [requires_user]
    tags = ["account"]

    @get("/me", name="api.me")
    async def me(self, request: Request[Any, Any, Any]) -> Me:
        """The user the bearer token belongs to. 401 ``{"detail": …}`` without a valid token."""
        user = request.user
        return Me(id=user.id, email=user.email, is_admin=user.is_admin)


# --- shapes ---------------------------------------------------------------------------------------------


@dataclass
class JobCreate:
    """A job to enqueue. ``run_at`` needs a UTC offset (``2026-12-01T09:00:00+01:00``); ``max_attempts``
    1–1000 (default: the type's, else ``len(JOB_RETRY_INTERVALS) + 1``); ``priority`` -100–100, higher
    first; ``idempotency_key``: a repeat with the same key returns the existing job (200 instead of 201);
    ``dependent_on_jobs``: ids of your jobs that must complete first (seed 000)."""

    type: str
    input_data: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    title: str | None = None
    dependent_on_jobs: list[UUID] | None = None


@dataclass
class RejectBody:
    """Why the step's result is rejected (shown to its owner)."""

    reason: str


@dataclass
class PipelineStep:
    """One step of an ad-hoc pipeline: ``key`` names it, ``depends_on`` lists other steps' keys."""

    key: str
    type: str
    input_data: dict[str, Any] = field(default_factory=dict)
    depends_on: list[str] = field(default_factory=list)
    requires_approval: bool = False
    title: str | None = None


@dataclass
class PipelineCreate:
    """Either ``{template, input_data}`` (a registered template) or ``{name, steps}`` (ad hoc)."""

    template: str | None = None
    input_data: dict[str, Any] | None = None
    name: str | None = None
    steps: list[PipelineStep] | None = None


def job_json(row: Any, dependent_on_jobs: list[UUID] | None = None) -> dict[str, Any]:
    """The API shape of a job (issue 3 §11)."""
    return {
        "id": row["id"],
        "type": row["type"],
        "title": row["title"],
        "status": row["status"],
        "status_label": _label(row),
        "is_active": row["is_active"],
        "input_data": row["input_data"],
        "result_data": row["result_data"],
        "error_message": row["error_message"],
        "attempts": row["attempts"],
        "max_attempts": row["max_attempts"],
        "priority": row["priority"],
        "run_at": row["run_at"],
        "pipeline_id": row["pipeline_id"],
        "step_key": row["step_key"],
        "dependent_on_jobs": dependent_on_jobs or [],
        "progress": row["progress"],
        "progress_message": row["progress_message"],
        "idempotency_key": row["idempotency_key"],
        "user_id": row["user_id"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "started_at": row["started_at"],
        "completed_at": row["completed_at"],
    }


def _label(row: Any) -> str:
    queued = row["status"] == Status.QUEUED
    return label(
        row["status"],
        is_active=row["is_active"],
        pending_parents=row.get("pending_parents") or 0,
        retrying=queued and (row.get("attempts") or 0) > 0,
    )


def _settings(request: Request[Any, Any, Any]) -> Any:
    return request.app.state.settings


def _request_id(request: Request[Any, Any, Any]) -> str | None:
    return getattr(request.state, "request_id", None)


async def _job_response(
    db: Any, row: Any, status_code: int = 200, *, viewer: Any
) -> Response[dict[str, Any]]:
    deps = await queue.dependencies_of(db, row["id"])
    return Response(display.job_for(job_json(row, deps), viewer), status_code=status_code)


# Newest first by UUIDv7 id, keyset-paginated; never loads input, result or error text (case C13).
_LIST_JOBS = """
    SELECT id, type, title, status, is_active, pending_parents, attempts, max_attempts, priority, run_at,
           pipeline_id, step_key, progress, user_id, created_at, updated_at, started_at, completed_at,
           error_message IS NOT NULL AS has_error
    FROM jobs
    WHERE (CAST(:user_id AS int) IS NULL OR user_id = :user_id)
      AND (CAST(:status AS text) IS NULL OR status = :status)
      AND (CAST(:type AS text) IS NULL OR type = :type)
      AND (CAST(:after AS uuid) IS NULL OR id < :after)
    ORDER BY id DESC
    LIMIT :limit
"""


class JobsApiController(Controller):
    """``/api/jobs``: enqueue, read, list, history, cancel, retry, approve, reject, rerun, run again."""

    path = "/api/jobs"
    guards = [requires_user]
    tags = ["jobs"]

    @post("/", name="api.jobs.create", status_code=201)
    async def create(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[JobCreate]
    ) -> Response[dict[str, Any]]:
        """Enqueue a job. 201 with the job; 200 with the existing job on an idempotent repeat; 422 naming
        the field for bad input (unknown type, input not matching the type's schema, NUL characters,
        ``max_attempts`` out of range, ``run_at`` without an offset); 413 above ``JOB_MAX_INPUT_BYTES``."""
        user = request.user
        result = await queue.enqueue(
            db_session,
            NewJob(
                type=data.type,
                input_data=data.input_data,
                user_id=user.id,
                priority=data.priority,
                run_at=data.run_at,
                max_attempts=data.max_attempts,
                idempotency_key=data.idempotency_key,
                title=data.title,
                request_id=_request_id(request),
                depends_on=list(data.dependent_on_jobs or []),
            ),
            _settings(request),
        )
        return await _job_response(
            db_session, result.job, 201 if result.created else 200, viewer=request.user
        )

    @get("/", name="api.jobs.list")
    async def list_jobs(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        status: FromQuery[str | None] = None,
        job_type: Annotated[str | None, QueryParameter(name="type")] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 50,
        after: FromQuery[UUID | None] = None,
        user_id: Annotated[
            int | None, QueryParameter(ge=1, le=2**31 - 1, description="Admins only: one user's jobs.")
        ] = None,
    ) -> dict[str, Any]:
        """Jobs newest first: your own, or (admins) everyone's. Keyset pagination: pass the response's
        ``next`` as ``after``. Rows omit input, result and error text (fetch one job for those)."""
        if status is not None and status not in Status._value2member_map_:
            raise BadInput.field("status", f"unknown status; one of {', '.join(s.value for s in Status)}")
        user = request.user
        owner = user_id if user.is_admin else user.id
        rows = (
            (
                await db_session.execute(
                    text(_LIST_JOBS),
                    {"user_id": owner, "status": status, "type": job_type, "after": after, "limit": limit},
                )
            )
            .mappings()
            .all()
        )
        items = [{**dict(r), "status_label": _label(r)} for r in rows]
        return {"items": items, "next": rows[-1]["id"] if len(rows) == limit else None}

    @get("/{job_id:str}", name="api.jobs.get")
    async def get_job(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """One job with its input, result, error and ``dependent_on_jobs``. 404 for unknown or others' ids."""
        row = await queue.get_job(db_session, job_id, request.user)
        return await _job_response(db_session, row, viewer=request.user)

    @get("/{job_id:str}/events", name="api.jobs.events")
    async def events(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> list[dict[str, Any]]:
        """The job's history, oldest first: every transition, cancel request and admin action."""
        row = await queue.get_job(db_session, job_id, request.user)
        rows = (
            (
                await db_session.execute(
                    text(
                        "SELECT id, at, kind, from_status, to_status, actor, message, data FROM job_events "
                        "WHERE job_id = :id ORDER BY id"
                    ),
                    {"id": row["id"]},
                )
            )
            .mappings()
            .all()
        )
        return [display.event_for(r, request.user) for r in rows]

    @post("/{job_id:str}/cancel", name="api.jobs.cancel", status_code=200)
    async def cancel(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Cancel (owner or admin). A waiting job is cancelled at once; a running one shows
        ``status_label: Cancelling`` until its worker stops it. 409 if it already finished."""
        row = await queue.cancel(db_session, job_id, request.user)
        return await _job_response(db_session, row, viewer=request.user)

    @post("/{job_id:str}/retry", name="api.jobs.retry", status_code=200)
    async def retry(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Retry a failed job with a fresh attempt budget (admins). 409 naming the status otherwise."""
        row = await queue.retry(db_session, job_id, request.user)
        return await _job_response(db_session, row, viewer=request.user)

    @post("/{job_id:str}/run-again", name="api.jobs.run_again", status_code=201)
    async def run_again(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """A new job with the same type and input (owner or admin)."""
        result = await queue.run_again(
            db_session, job_id, request.user, _settings(request), request_id=_request_id(request)
        )
        return await _job_response(db_session, result.job, 201, viewer=request.user)

    @post("/{job_id:str}/approve", name="api.jobs.approve", status_code=200)
    async def approve(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Approve a step waiting for approval (admins): it completes and its dependents run."""
        row = await queue.approve(db_session, job_id, request.user)
        return await _job_response(db_session, row, viewer=request.user)

    @post("/{job_id:str}/reject", name="api.jobs.reject", status_code=200)
    async def reject(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        data: JSONBody[RejectBody],
    ) -> Response[dict[str, Any]]:
        """Reject a step waiting for approval (admins), with a reason: it fails and its dependents are cancelled."""
        row = await queue.reject(db_session, job_id, request.user, data.reason)
        return await _job_response(db_session, row, viewer=request.user)

    @post("/{job_id:str}/rerun", name="api.jobs.rerun", status_code=200)
    async def rerun(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Run a step waiting for approval once more (admins); it waits for approval again afterwards."""
        row = await queue.rerun(db_session, job_id, request.user)
        return await _job_response(db_session, row, viewer=request.user)


_LIST_PIPELINES = """
    SELECT id, name, template, status, user_id, created_at, updated_at, finished_at FROM pipelines
    WHERE (CAST(:user_id AS int) IS NULL OR user_id = :user_id)
      AND (CAST(:after AS uuid) IS NULL OR id < :after)
    ORDER BY id DESC LIMIT :limit
"""


def pipeline_json(view: dict[str, Any]) -> dict[str, Any]:
    """The API shape of a pipeline (issue 5 §6)."""
    return {
        "id": view["id"],
        "name": view["name"],
        "template": view["template"],
        "status": view["status"],
        "progress": view["progress"],
        "current": view["current"],
        "layers": [[step["key"] for step in layer] for layer in view["layers"]],
        "user_id": view["user_id"],
        "created_at": view["created_at"],
        "finished_at": view["finished_at"],
        "steps": [
            {
                k: s[k]
                for k in (
                    "job_id",
                    "key",
                    "type",
                    "title",
                    "status",
                    "depends_on",
                    "started_at",
                    "completed_at",
                    "requires_approval",
                    "attempts",
                    "max_attempts",
                    "progress",
                )
            }
            for s in view["steps"]
        ],
    }


class PipelinesApiController(Controller):
    """``/api/pipelines``: start (template or ad hoc), read, list, history, cancel."""

    path = "/api/pipelines"
    guards = [requires_user]
    tags = ["pipelines"]

    @post("/", name="api.pipelines.create", status_code=201)
    async def create(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[PipelineCreate]
    ) -> dict[str, Any]:
        """Start a pipeline from a registered ``template`` with ``input_data``, or from an ad-hoc ``name``
        and ``steps``. All steps are created or none: cycles (a step depending on itself included),
        unknown keys and bad inputs get 422 naming the path (``steps[1].depends_on``)."""
        user, settings = request.user, _settings(request)
        if data.template is not None:
            if data.steps is not None:
                raise BadInput.field("steps", "give either a template or steps, not both")
            row = await pipelines.create_from_template(
                db_session,
                data.template,
                data.input_data or {},
                user_id=user.id,
                settings=settings,
                request_id=_request_id(request),
            )
        else:
            if data.steps is None:
                raise BadInput.field(
                    "template", "give a template name (with input_data), or a name and steps"
                )
            row = await pipelines.create(
                db_session,
                name=data.name or "",
                user_id=user.id,
                settings=settings,
                request_id=_request_id(request),
                steps=[
                    {
                        "key": s.key,
                        "type": s.type,
                        "input_data": s.input_data,
                        "depends_on": s.depends_on,
                        "requires_approval": s.requires_approval,
                        "title": s.title,
                    }
                    for s in data.steps
                ],
            )
        return pipeline_json(await pipelines.get(db_session, row["id"], user))

    @get("/", name="api.pipelines.list")
    async def list_pipelines(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 50,
        after: FromQuery[UUID | None] = None,
    ) -> dict[str, Any]:
        """Your pipelines (admins: everyone's), newest first, keyset-paginated by ``after``."""
        user = request.user
        rows = (
            (
                await db_session.execute(
                    text(_LIST_PIPELINES),
                    {"user_id": None if user.is_admin else user.id, "after": after, "limit": limit},
                )
            )
            .mappings()
            .all()
        )
        return {"items": [dict(r) for r in rows], "next": rows[-1]["id"] if len(rows) == limit else None}

    @get("/{pipeline_id:str}", name="api.pipelines.get")
    async def get_pipeline(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> dict[str, Any]:
        """The pipeline's status, percentage done, current steps and every step."""
        return pipeline_json(await pipelines.get(db_session, pipeline_id, request.user))

    @get("/{pipeline_id:str}/events", name="api.pipelines.events")
    async def events(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> list[dict[str, Any]]:
        """Every step's events in order: the pipeline's whole history."""
        return [
            display.event_for(r, request.user)
            for r in await pipelines.events(db_session, pipeline_id, request.user)
        ]

    @post("/{pipeline_id:str}/cancel", name="api.pipelines.cancel", status_code=200)
    async def cancel(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> dict[str, Any]:
        """Cancel every unfinished step; returns ``{"cancelled": n, "cancelling": n, "pipeline": …}``."""
        counts = await pipelines.cancel(db_session, pipeline_id, request.user)
        return {
            **counts,
            "pipeline": pipeline_json(await pipelines.get(db_session, pipeline_id, request.user)),
        }


class JobTypesApiController(Controller):
    """``/api/job-types`` and ``/api/pipeline-templates``: what can be started, with input schemas."""

    path = "/api"
    guards = [requires_user]
    tags = ["catalogue"]

    @get("/job-types", name="api.job_types")
    async def job_types(self, request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
        """Registered job types with title, description and input JSON schema (diagnostic ones for admins)."""
        admin = request.user.is_admin
        return [
            {
                "type": s.type,
                "title": s.title,
                "description": s.description,
                "group": s.group,
                "diagnostic": s.diagnostic,
                "input_schema": s.input_model.model_json_schema(),
            }
            for s in registry.all()
            if admin or not s.diagnostic
        ]

    @get("/pipeline-templates", name="api.pipeline_templates")
    async def templates(self, request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
        """Registered pipeline templates with their steps and input JSON schema."""
        admin = request.user.is_admin
        return [
            {
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "input_schema": t.input_model.model_json_schema(),
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
            for t in pipelines.all_templates()
            if admin or not t.diagnostic
        ]


# --- operator controls (issue 11 §6): admins only ------------------------------------------------------


@dataclass
class LimitsBody:
    """``max_running``: at most this many running at once across all workers; ``max_per_minute``: at most
    this many starts per minute. ``null`` removes a limit."""

    max_running: int | None = None
    max_per_minute: int | None = None


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


def _client_ip(request: Request[Any, Any, Any]) -> str | None:
    return request.client.host if request.client else None


class ControlsApiController(Controller):
    """``/api/job-types/{type}/pause|resume|limits`` and ``/api/schedules`` (admins)."""

    path = "/api"
    guards = [requires_admin]
    tags = ["operator controls"]

    @post("/job-types/{job_type:str}/pause", name="api.job_types.pause", status_code=200)
    async def pause(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_type: FromPath[str]
    ) -> dict[str, Any]:
        """Pause a job type (``*`` = all): it keeps accepting jobs but none is claimed until resumed."""
        return dict(
            await controls.set_paused(db_session, job_type, True, request.user, ip=_client_ip(request))
        )

    @post("/job-types/{job_type:str}/resume", name="api.job_types.resume", status_code=200)
    async def resume(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_type: FromPath[str]
    ) -> dict[str, Any]:
        """Resume a paused job type (``*`` = the pause of all types)."""
        return dict(
            await controls.set_paused(db_session, job_type, False, request.user, ip=_client_ip(request))
        )

    @put("/job-types/{job_type:str}/limits", name="api.job_types.limits", status_code=200)
    async def limits(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_type: FromPath[str],
        data: JSONBody[LimitsBody],
    ) -> dict[str, Any]:
        """Set or remove a job type's concurrency and rate limits; enforced in the claim by every worker."""
        row = await controls.set_limits(
            db_session,
            job_type,
            max_running=data.max_running,
            max_per_minute=data.max_per_minute,
            admin=request.user,
            ip=_client_ip(request),
        )
        return dict(row)

    @get("/job-types/controls", name="api.job_types.controls")
    async def list_controls(self, db_session: DbSession) -> list[dict[str, Any]]:
        """Every paused or limited type."""
        return [dict(r) for r in (await controls.controls(db_session)).values()]

    @get("/schedules", name="api.schedules.list")
    async def list_schedules(self, db_session: DbSession) -> list[dict[str, Any]]:
        """Every schedule with its next and last fire time and last job or pipeline."""
        return [dict(r) for r in await controls.list_schedules(db_session)]

    @post("/schedules", name="api.schedules.create", status_code=201)
    async def create_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[ScheduleCreate]
    ) -> dict[str, Any]:
        """Create a schedule; its jobs belong to you. 422 naming the field for a bad cron expression, time
        zone, type, template or input."""
        row = await controls.create_schedule(
            db_session,
            cron=data.cron,
            timezone=data.timezone,
            job_type=data.type,
            template=data.template,
            input_data=data.input_data,
            enabled=data.enabled,
            catch_up=data.catch_up,
            name=data.name,
            owner=request.user,
            settings=_settings(request),
            ip=_client_ip(request),
        )
        return dict(row)

    @delete("/schedules/{schedule_id:str}", name="api.schedules.delete", status_code=204)
    async def delete_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> None:
        """Delete a schedule; jobs it already created stay."""
        await controls.delete_schedule(db_session, schedule_id, request.user, ip=_client_ip(request))
