"""``/api/pipelines``: start (template or ad hoc), read, list, history, cancel — through
:mod:`app.actions.pipelines`, like the pipeline pages.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, JSONBody, KwargDefinition, QueryParameter
from sqlalchemy import text

from app import pipelines
from app.actions import pipelines as pipeline_actions
from app.auth import requires_user
from app.errors import BadInput, Conflict
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import DbSession
from app.web.api.event_pages import EventsBefore, EventsLimit, EventsPage
from app.web.deps import MAX_PAGE, AfterCursor, actor_of
from app.web.openapi import KEY_WORDS, errors

STEP_FIELDS = (
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
_LIST_PIPELINES = text(
    f"""
    SELECT id, name, template, status, {pipelines.started_column("pipelines")}, user_id, created_at, updated_at,
           finished_at, cancelled_at
    FROM pipelines
    WHERE (CAST(:user_id AS int) IS NULL OR user_id = :user_id)
      AND (CAST(:after AS uuid) IS NULL OR id < :after)
    ORDER BY id DESC LIMIT :limit
    """
)


@dataclass
class PipelineStep:
    """One step of an ad-hoc pipeline: ``key`` names it, ``depends_on`` lists other steps' keys.
    Diagnostic and internal types are for admins (422 naming ``steps[i].type`` otherwise)."""

    key: str
    type: str
    input_data: dict[str, Any] = field(default_factory=dict)
    depends_on: list[str] = field(default_factory=list)
    requires_approval: bool = False
    title: str | None = None
    priority: int = 0
    """-100–100, higher first, as for a job; above 0 for admins only (422 naming ``steps[i].priority``)."""
    max_attempts: int | None = None
    """Attempts before the step fails for good, as for a job (1–1,000; the type's default without it)."""
    for_each: list[Any] | dict[str, Any] | None = None
    """Run the step once per item: a list, or ``{"$ref": "<step>.<field>"}`` naming a list in a
    parent's result; ``{"$item": ""}`` in ``input_data`` is the item (``{"$item": "name"}`` its field)."""
    # Checked by the queue (app.jobs.approvals), so that a wrong value gets 422 naming its path.
    approvers: Any = None
    approvals_needed: Any = None
    approval_timeout: Any = None
    on_approval_timeout: Any = None


@dataclass
class PipelineCreate:
    """Either ``{template, input_data, name?}`` (a registered template; ``name`` names the run, the
    template's title without it) or ``{name, steps}`` (ad hoc). ``idempotency_key``: optional, makes
    the request safe to send again (its field says how)."""

    template: str | None = None
    input_data: dict[str, Any] | None = None
    name: str | None = None
    steps: list[PipelineStep] | None = None
    idempotency_key: Annotated[str | None, KwargDefinition(description=KEY_WORDS.format("pipeline"))] = None


def pipeline_json(view: dict[str, Any]) -> dict[str, Any]:
    """The API shape of a pipeline."""
    return {
        "id": view["id"],
        "name": view["name"],
        "template": view["template"],
        "status": view["status"],
        # ``status`` stays ``running`` from the start, as it always was; whether a worker has taken any
        # step yet is said apart (the pages read "Waiting" until then).
        "started": view["started"],
        "progress": view["progress"],
        "current": view["current"],
        "layers": [[step["key"] for step in layer] for layer in view["layers"]],
        "user_id": view["user_id"],
        "created_at": view["created_at"],
        "finished_at": view["finished_at"],
        # set once a person cancelled it: it stays cancelled, and its steps cannot be retried or rerun
        "cancelled_at": view["cancelled_at"],
        "cancelled_by": view["cancelled_by"],
        "steps": [{k: s[k] for k in STEP_FIELDS} for s in view["steps"]],
    }


class PipelinesApiController(Controller):
    """``/api/pipelines``: start (template or ad hoc), read, list, history, cancel."""

    path = "/api/pipelines"
    guards = [requires_user]
    tags = ["pipelines"]

    @post("/", name="api.pipelines.create", responses=errors(401, 403, 413, 415, 422, 429), status_code=201)
    async def create(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[PipelineCreate]
    ) -> Response[dict[str, Any]]:
        """Start a pipeline from a registered ``template`` with ``input_data``, or from an ad-hoc ``name``
        and ``steps``. All steps are created or none: cycles (a step depending on itself included),
        unknown keys and bad inputs get 422 naming the path (``steps[1].depends_on``). 201 with the
        pipeline; 200 with the pipeline an ``idempotency_key`` started for the same request before
        (over your limits or not); 422 on ``idempotency_key`` when it started one for another request."""
        actor = actor_of(request)
        steps: list[dict[str, Any]] | None = None
        if data.template is not None:
            if data.steps is not None:
                raise BadInput.field("steps", "give either a template or steps, not both")
        elif data.steps is None:
            raise BadInput.field("template", "give a template name (with input_data), or a name and steps")
        else:
            steps = [
                {k: v for k, v in asdict(s).items() if k != "for_each" or v is not None} for s in data.steps
            ]
        # ``name`` names a template's run, as the template form's "Name this pipeline" does (it was
        # dropped silently); checked by the same rule, its error under the API's own field name.
        try:
            row, created = await pipeline_actions.submit_api(
                db_session,
                actor,
                template=data.template,
                input_data=data.input_data or {},
                name=data.name,
                steps=steps,
                idempotency_key=data.idempotency_key,
            )
        except BadInput as exc:
            if data.template is None or "title" not in exc.errors:
                raise
            raise BadInput.field("name", exc.errors["title"]) from None
        view = await pipelines.get(db_session, row["id"], actor.user)
        return Response(pipeline_json(view), status_code=201 if created else 200)

    @get("/", name="api.pipelines.list", responses=errors(401, 422))
    async def list_pipelines(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 50,
        after: AfterCursor = None,
    ) -> dict[str, Any]:
        """Your pipelines (admins: everyone's), newest first, keyset-paginated by ``after``."""
        user = request.user
        after_id = read_cursor(after, Cursor.ID)
        params = {"user_id": None if user.is_admin else user.id, "after": after_id, "limit": limit + 1}
        fetched = (await db_session.execute(_LIST_PIPELINES, params)).mappings().all()
        rows, after_last = page_of(fetched, limit, lambda r: r["id"])
        return {"items": [dict(r) for r in rows], "next": after_last}

    @get("/{pipeline_id:str}", name="api.pipelines.get", responses=errors(401, 404))
    async def get_pipeline(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> dict[str, Any]:
        """The pipeline's status, percentage done, current steps and every step."""
        return pipeline_json(await pipelines.get(db_session, pipeline_id, request.user))

    @get("/{pipeline_id:str}/events", name="api.pipelines.events", responses=errors(401, 404, 422))
    async def events(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        pipeline_id: FromPath[str],
        limit: EventsLimit = None,
        before: EventsBefore = None,
    ) -> Response[Any]:
        """Every step's events: the pipeline's history. With ``limit`` or ``before``: ``{"items": [...],
        "next": event id | null}``, newest first; pass ``next`` as ``before`` for older events. With
        neither: a list, oldest first, of the newest 1,000 events; a longer history is cut, with a
        ``Link: <…?before=<event id>>; rel="next"`` header leading to the older ones."""
        asked = EventsPage(limit, before)
        rows = await pipelines.events(db_session, pipeline_id, request.user, **asked.params)
        return asked.answer(request, rows)

    @post(
        "/{pipeline_id:str}/cancel",
        name="api.pipelines.cancel",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def cancel(
        self, request: Request[Any, Any, Any], db_session: DbSession, pipeline_id: FromPath[str]
    ) -> dict[str, Any]:
        """Cancel every unfinished step (owner or admin); returns ``{"cancelled": n, "cancelling": n,
        "pipeline": …}``. 409 when it had already finished, as for a finished job."""
        outcome = await pipeline_actions.cancel(db_session, actor_of(request), pipeline_id)
        if not outcome.ok:
            raise Conflict(outcome.message)
        view = await pipelines.get(db_session, outcome.id, request.user)
        return {
            "cancelled": outcome.cancelled,
            "cancelling": outcome.cancelling,
            "pipeline": pipeline_json(view),
        }
