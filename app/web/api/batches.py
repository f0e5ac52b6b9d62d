"""``/api/batches``: start a batch (one job per row), read it with its counts and jobs, list them, retry
its failed rows — through :mod:`app.actions.batches`, like the batch pages.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass, field
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, JSONBody, KwargDefinition, QueryParameter
from sqlalchemy.ext.asyncio import AsyncSession

from app import batches
from app.actions import batches as batch_actions
from app.auth import requires_user
from app.errors import Conflict
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import DbSession
from app.web.deps import MAX_PAGE, REFUSAL_WORDS, AfterCursor, actor_of
from app.web.openapi import KEY_WORDS, errors

JOB_FIELDS = ("id", "row", "status", "title", "attempts", "max_attempts", "error_message", "completed_at")


@dataclass
class BatchCreate:
    """``type``: a job type you may submit; ``rows``: one ``input_data`` object per job (at most 10,000);
    ``name``: optional text (at most 200 characters), shown on the batch page; ``idempotency_key``:
    optional, makes the request safe to send again (its field says how)."""

    type: Any = None
    rows: Any = field(default_factory=list)
    name: Any = None
    idempotency_key: Annotated[str | None, KwargDefinition(description=KEY_WORDS.format("batch"))] = None


def batch_json(view: batches.BatchView, jobs: list[Any] | None = None) -> dict[str, Any]:
    """The API shape of a batch: ``{id, type, status, total, counts: {<status>: n}, jobs: […]}`` and more."""
    row = view.row
    body: dict[str, Any] = {
        "id": row["id"],
        "type": row["type"],
        "name": row["name"],
        "status": view.status,
        "finished": view.finished,
        "total": row["total"],
        "done": view.done,
        "progress": view.percent,
        "counts": {s: view.counts.get(s, 0) for s in batches.STATUSES},
        "source": row["source"],
        "user_id": row["user_id"],
        "created_at": row["created_at"],
        "finished_at": view.finished_at,
    }
    if jobs is not None:
        body["jobs"] = [{k: j[k] for k in JOB_FIELDS} for j in jobs]
    return body


async def full_json(db: AsyncSession, batch_id: Any, user: Any) -> dict[str, Any]:
    view = await batches.get(db, batch_id, user)
    return batch_json(view, await batches.jobs_of(db, view.id))


class BatchesApiController(Controller):
    """``/api/batches``: create, read, list, retry failed rows."""

    path = "/api/batches"
    guards = [requires_user]
    tags = ["batches"]

    @post(
        "/",
        name="api.batches.create",
        responses=errors(401, 403, 413, 415, 422, 429),
        status_code=201,
        opt={REFUSAL_WORDS: batches.nothing_started},
    )
    async def create(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[BatchCreate]
    ) -> Response[dict[str, Any]]:
        """Start one job of ``type`` per row. Every row is checked first; any problem is a 422 naming
        each bad row's field (``rows[3].url``) and nothing is created. Over your limits: 429, whole.
        201 with the batch; 200 with the batch an ``idempotency_key`` started for the same request
        before (over your limits or not); 422 on ``idempotency_key`` when it started one for another
        request."""
        row, created = await batch_actions.submit(
            db_session,
            actor_of(request),
            data.type,
            data.rows,
            name=data.name,
            idempotency_key=data.idempotency_key,
        )
        body = await full_json(db_session, row["id"], request.user)
        return Response(body, status_code=201 if created else 200)

    @get("/", name="api.batches.list", responses=errors(401, 422))
    async def list_batches(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 50,
        after: AfterCursor = None,
    ) -> dict[str, Any]:
        """Your batches, newest first (without their jobs), keyset-paginated by ``after`` as the other
        lists are: ``{items, next}``."""
        fetched = await batches.recent_views(
            db_session, request.user, limit + 1, read_cursor(after, Cursor.ID)
        )
        views, after_last = page_of(fetched, limit, lambda v: v.id)
        return {"items": [batch_json(v) for v in views], "next": after_last}

    @get("/{batch_id:str}", name="api.batches.get", responses=errors(401, 404))
    async def get_batch(
        self, request: Request[Any, Any, Any], db_session: DbSession, batch_id: FromPath[str]
    ) -> dict[str, Any]:
        """The batch's status (derived from its jobs), counts by status, and every job in row order."""
        return await full_json(db_session, batch_id, request.user)

    @post(
        "/{batch_id:str}/retry-failed",
        name="api.batches.retry_failed",
        responses=errors(401, 404, 409, 429),
        status_code=200,
    )
    async def retry_failed(
        self, request: Request[Any, Any, Any], db_session: DbSession, batch_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Give every failed row a fresh set of attempts (owner or admin); ``{"retried": n, "message",
        "batch": …}``. 409 when no row has failed."""
        outcome = await batch_actions.retry_failed(db_session, actor_of(request), batch_id)
        if outcome.status_code == 409:
            raise Conflict(outcome.message)
        body = {
            "retried": outcome.retried,
            "skipped": outcome.skipped,
            "message": outcome.message,
            "batch": batch_json(await batches.get(db_session, outcome.batch_id, request.user)),
        }
        return Response(body, status_code=200)
