"""``/api/jobs``: enqueue, read, list, history, and every action on a job — cancel, retry, run again,
approve, reject, rerun, run now, reschedule, delete, and bulk retry or cancel.

Owners see and act on their own jobs; another user's id gets the same 404 as an unknown id; admins see
and act on all. Every change is carried out by :mod:`app.actions`, exactly as the pages do it: an
admin's action writes one audit entry and one admin notice; a refused one ("already finished") answers
409 and is still audited.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import bulk, submissions
from app.actions import jobs as job_actions
from app.actions.selection import parse_filter, unknown_type
from app.auth import requires_admin, requires_user
from app.errors import BadInput
from app.jobs import queue
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.jobs.permanence import failed_permanently, permanent_among
from app.jobs.queue import NewJob
from app.jobs.states import Status, label
from app.jobs.tags import TAG_FILTER, read_tag, tags_of
from app.jobs.types import priority_lowered
from app.web import DbSession, display
from app.web.api.event_pages import EventsBefore, EventsLimit, EventsPage
from app.web.deps import MAX_PAGE, AfterCursor, actor_of
from app.web.job_page import poll_row
from app.web.openapi import errors


@dataclass
class JobCreate:
    """A job to enqueue. ``run_at`` is ISO text with a UTC offset (``2026-12-01T09:00:00+01:00``), between
    1970 and 9000 (not a number); ``max_attempts``
    1–1000 (default: the type's, else ``len(JOB_RETRY_INTERVALS) + 1``); ``priority`` -100–100, higher
    first, above 0 for admins only (422 naming ``priority``); ``idempotency_key``: a repeat of the same request with the same key returns the existing job
    (200 instead of 201), the same key with a different request is refused (422 on ``idempotency_key``);
    ``dependent_on_jobs``: ids of your jobs that must complete first. Diagnostic and internal types are
    for admins (422 naming ``type`` otherwise)."""

    type: str
    input_data: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    title: str | None = None
    dependent_on_jobs: list[UUID] | None = None
    tags: list[str] | None = None
    """Short labels (at most 20, 1–50 characters each) to find the job again with ``?tag=``."""
    callback_url: str | None = None
    """POSTed the job's JSON when it ends, signed with ``X-Jobdesk-Signature: sha256=<HMAC>`` keyed by
    ``CALLBACK_SIGNING_SECRET``; retried with backoff; the address rules of ``http.request`` apply."""


@dataclass
class RejectBody:
    """Why the step's result is rejected (shown to its owner): ``reason``, or ``comment`` as
    ``/api/approvals/{id}/reject`` names it (either name on either route)."""

    reason: str | None = None
    comment: str | None = None


def rejection_reason(reason: str | None, comment: str | None, route_name: str) -> tuple[str | None, str]:
    """The one text of a rejection sent as ``reason`` or ``comment``, and the name it came under
    (``route_name``, the route's own name for it, when neither was sent).

    Raises:
        BadInput: both given, with different texts.
    """
    if reason is not None and comment is not None and reason != comment:
        raise BadInput.field("reason", "give the reason once, as reason or as comment (they are one field)")
    if reason is not None:
        return reason, "reason"
    return (comment, "comment") if comment is not None else (None, route_name)


@dataclass
class RescheduleBody:
    """When the waiting job should run, with a UTC offset (``2026-12-01T09:00:00+01:00``)."""

    run_at: datetime


@dataclass
class BulkBody:
    """A bulk action: ``action`` is ``retry`` or ``cancel``; give exactly one of ``ids`` (those jobs),
    ``filter`` (every job matching ``{status, type, owner, pipeline, created_from, created_to, q}`` as on
    ``/admin/jobs``; ``owner`` is an e-mail address; any other field, a value that is not text or an
    unknown status is a 422, never a condition left out) or ``group`` (``{type, signature}`` of a failed group
    on ``/admin/failed``; retry only). At most 2,000 jobs per call (more ids are a 422). A filter with no
    condition is refused unless ``all`` is ``true``: every job of every user (the newest 2,000)."""

    action: str
    ids: list[UUID] | None = None
    filter: dict[str, Any] | None = None
    group: dict[str, Any] | None = None
    all: bool = False
    """``true`` confirms an empty (or absent) filter: act on every job of every user."""


def job_json(
    row: Any,
    dependent_on_jobs: list[UUID] | None = None,
    tags: list[str] | None = None,
    permanent: set[str] | None = None,
) -> dict[str, Any]:
    """The API shape of a job. ``permanent``: the ids among failed jobs whose failure was permanent
    (:func:`app.jobs.permanence.permanent_among`), read into ``failed_permanently``."""
    keys = (
        "id type title status is_active input_data result_data error_message attempts max_attempts "
        "priority run_at pipeline_id step_key"
    ).split()
    tail = (
        "progress progress_message idempotency_key user_id created_at updated_at started_at completed_at"
    ).split()
    return {
        **{k: row[k] for k in keys[:4]},
        "status_label": status_label(row),
        **{k: row[k] for k in keys[4:]},
        "failed_permanently": failed_permanently(row, permanent or set()),
        "dependent_on_jobs": dependent_on_jobs or [],
        "tags": tags or [],
        **{k: row[k] for k in tail},
    }


def status_label(row: Any) -> str:
    """The status in plain words (``Cancelling``, ``Retrying``, ``Waiting for earlier steps``…)."""
    queued = row["status"] == Status.QUEUED
    return label(
        row["status"],
        is_active=row["is_active"],
        pending_parents=row.get("pending_parents") or 0,
        retrying=queued and (row.get("attempts") or 0) > 0,
    )


async def job_response(
    db: AsyncSession, row: Any, status_code: int = 200, *, viewer: Any
) -> Response[dict[str, Any]]:
    """The job as ``viewer`` may read it (a traceback is for admins: :func:`app.web.display.job_for`)."""
    deps = await queue.dependencies_of(db, row["id"])
    tags = (await tags_of(db, [row["id"]])).get(row["id"], [])
    permanent = await permanent_among(db, [row["id"]] if row["status"] == Status.FAILED else [])
    return Response(display.job_for(job_json(row, deps, tags, permanent), viewer), status_code=status_code)


async def outcome_response(
    db: AsyncSession, outcome: job_actions.ActionOutcome, *, viewer: Any
) -> Response[dict[str, Any]]:
    """An action's answer: the job as ``viewer`` may read it, or, for a decision by a named approver who
    may not see the job, only what the action tells them (``outcome.decider_view``)."""
    if outcome.row is None and outcome.decider_view is not None:
        return Response(outcome.decider_view, status_code=200)
    return await job_response(db, outcome.row, viewer=viewer)


@asynccontextmanager
async def session_of(request: Request[Any, Any, Any]) -> AsyncIterator[AsyncSession]:
    """A session for one request, committed when the block ends without an exception (rolled back
    otherwise), for a handler that often needs none: a job enqueued on its own is one autocommit
    statement on the engine (:func:`app.actions.submissions.submit`), and the request-scoped ``db_session``
    cost it a session made, begun and committed around nothing (about a tenth of the request's CPU).
    Unlike ``db_session``'s commit, which runs as the answer starts, a failed commit here is the
    request's error."""
    db = AsyncSession(request.app.state.engine)
    try:
        yield db
        if db.in_transaction():
            await db.commit()
    finally:
        # Only a transaction holds a connection (statements here are text, never ORM objects); a
        # session that never began one, or committed it, has nothing to give back.
        if db.in_transaction():
            await db.close()


async def act(
    request: Request[Any, Any, Any], db: AsyncSession, action: str, job_id: str, **kw: Any
) -> job_actions.ActionOutcome:
    """:func:`app.actions.jobs.perform`; a refusal keeps its audit entry and answers 409 with the
    queue's own words."""
    outcome = await job_actions.perform(db, actor_of(request), action, job_id, **kw)
    if outcome.conflict is not None:
        raise outcome.conflict
    return outcome


# Newest first by UUIDv7 id, keyset-paginated; never loads input, result or error text.
_LIST_JOBS = f"""
    SELECT id, type, title, status, is_active, pending_parents, attempts, max_attempts, priority, run_at,
           pipeline_id, step_key, progress, user_id, created_at, updated_at, started_at, completed_at,
           error_message IS NOT NULL AS has_error
    FROM jobs
    WHERE (CAST(:user_id AS int) IS NULL OR user_id = :user_id)
      AND (CAST(:status AS text) IS NULL OR status = :status)
      AND (CAST(:type AS text) IS NULL OR type = :type)
      AND (CAST(:after AS uuid) IS NULL OR id < :after)
      AND {TAG_FILTER}
    ORDER BY id DESC
    LIMIT :limit
"""
_EVENTS = text(
    "SELECT id, at, kind, from_status, to_status, actor, message, data FROM job_events "
    "WHERE job_id = :id AND id < :before ORDER BY id DESC LIMIT :limit"
)


MAX_WAIT_SECS = 60
ENDED = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


async def wait_for_end(request: Request[Any, Any, Any], job_id: str, seconds: float) -> None:
    """Return once the job has ended or ``seconds`` have passed. Each look is one autocommit read that
    gives its connection back at once (:func:`app.web.job_page.poll_row`), so many waiting clients do
    not take the pool from everyone else; the looks start 50 ms apart and slow to half a second.

    Raises:
        NotFound: unknown or another user's job (at the first look).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    delay = 0.05
    while True:
        row = await poll_row(request, job_id, request.user)
        remaining = deadline - loop.time()
        if row["status"] in ENDED or remaining <= 0:
            return
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 1.5, 0.5)


class JobsApiController(Controller):
    """``/api/jobs``: enqueue, read, list, history, and the actions on one job or many."""

    path = "/api/jobs"
    guards = [requires_user]
    tags = ["jobs"]

    @post("/", name="api.jobs.create", responses=errors(401, 403, 409, 413, 415, 422, 429), status_code=201)
    async def create(
        self, request: Request[Any, Any, Any], data: JSONBody[JobCreate]
    ) -> Response[dict[str, Any]]:
        """Enqueue a job. 201 with the job; 200 with the existing job when an ``idempotency_key`` is
        repeated with the same request (the same ``type``, normalised ``input_data``, ``priority``,
        ``max_attempts``, ``title``, ``run_at``, ``dependent_on_jobs``, ``tags`` and ``callback_url``);
        422 on ``idempotency_key`` when the key was used for a different request, naming the job it made
        and what differs; 422 naming the field for bad input (unknown type or one for admins only, input
        not matching the type's schema, NUL characters, ``max_attempts`` out of range, ``run_at`` without
        an offset); 413 above ``JOB_MAX_INPUT_BYTES``."""
        actor = actor_of(request)
        new = NewJob(
            type=data.type,
            input_data=data.input_data,
            user_id=actor.user.id,
            priority=data.priority,
            run_at=data.run_at,
            max_attempts=data.max_attempts,
            idempotency_key=data.idempotency_key,
            title=data.title,
            request_id=actor.request_id,
            depends_on=list(data.dependent_on_jobs or []),
        )
        async with session_of(request) as db:
            result = await submissions.submit(db, actor, new, tags=data.tags, callback_url=data.callback_url)
            if result.created and not new.depends_on and not data.tags:
                # A job just created without dependencies or tags has none: nothing to read back.
                return Response(display.job_for(job_json(result.job), request.user), status_code=201)
            return await job_response(db, result.job, 201 if result.created else 200, viewer=request.user)

    @get("/", name="api.jobs.list", responses=errors(401, 403, 422))
    async def list_jobs(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        status: FromQuery[str | None] = None,
        job_type: Annotated[str | None, QueryParameter(name="type")] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 50,
        after: AfterCursor = None,
        user_id: Annotated[
            int | None,
            QueryParameter(
                ge=1,
                le=2**31 - 1,
                description="Admins: one user's jobs. Others: only their own id (403 for anyone else's).",
            ),
        ] = None,
        tag: Annotated[str | None, QueryParameter(description="Only jobs with this tag.")] = None,
    ) -> dict[str, Any]:
        """Jobs newest first: your own, or (admins) everyone's; ``tag`` keeps those with that tag. Keyset
        pagination: pass the response's ``next`` as ``after``. Rows omit input, result and error text
        (fetch one job for those); ``failed_permanently`` is as on one job."""
        if status is not None and status not in Status._value2member_map_:
            raise BadInput.field("status", f"unknown status; one of {', '.join(s.value for s in Status)}")
        unknown = await unknown_type(db_session, job_type)
        if unknown is not None:
            raise BadInput.field("type", unknown)
        user = request.user
        owner = job_actions.listed_owner(user, user_id)
        params = {
            "user_id": owner,
            "status": status,
            "type": job_type,
            "after": read_cursor(after, Cursor.ID),
            "limit": limit + 1,
            "tag": read_tag(tag) if tag is not None else None,
        }
        fetched = (await db_session.execute(text(_LIST_JOBS), params)).mappings().all()
        rows, after_last = page_of(fetched, limit, lambda r: r["id"])
        tags = await tags_of(db_session, [r["id"] for r in rows])
        permanent = await permanent_among(db_session, [r["id"] for r in rows if r["status"] == Status.FAILED])
        items = [
            {
                **dict(r),
                "status_label": status_label(r),
                "failed_permanently": failed_permanently(r, permanent),
                "tags": tags.get(r["id"], []),
            }
            for r in rows
        ]
        return {"items": items, "next": after_last}

    @post(
        "/bulk",
        name="api.jobs.bulk",
        responses=errors(401, 403, 413, 415, 422),
        status_code=200,
        guards=[requires_admin],
    )
    async def bulk_action(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[BulkBody]
    ) -> dict[str, Any]:
        """Admins: retry or cancel many jobs at once, each in its own savepoint; jobs that moved on are
        skipped, ids no job has are listed apart (``unknown``). One audit entry and one admin notice with
        the count. Answers ``{action, done: [ids], skipped: [ids], unknown: [ids], failed_permanently,
        message}``: ``failed_permanently`` is how many of the jobs retried had failed with a permanent error
        (retried anyway, as the web confirmation warns; 0 for a cancel)."""
        job_filter = None
        async with bulk.refusals(db_session, actor_of(request), data.action):
            if data.filter is not None:
                job_filter = await parse_filter(db_session, data.filter, request.user, strict=True)
            plan = await bulk.plan_for(
                db_session,
                data.action,
                ids=data.ids,
                job_filter=job_filter,
                group=data.group,
                everything=data.all,
            )
        detail = {"filter": {k: v for k, v in job_filter.raw.items() if v}} if job_filter is not None else {}
        outcome = await bulk.run_bulk(db_session, actor_of(request), plan, detail={**detail, "via": "api"})
        return {
            "action": outcome.action,
            "done": outcome.done,
            "skipped": outcome.skipped,
            "unknown": outcome.unknown,
            "failed_permanently": outcome.permanent,
            "message": outcome.message,
        }

    @get("/{job_id:str}", name="api.jobs.get", responses=errors(401, 404, 422))
    async def get_job(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        wait: Annotated[
            float | None,
            QueryParameter(
                ge=0,
                le=MAX_WAIT_SECS,
                description="Answer once the job has ended, or after this many seconds.",
            ),
        ] = None,
    ) -> Response[dict[str, Any]]:
        """One job with its input, result, error, ``dependent_on_jobs`` and ``tags``.
        ``failed_permanently`` is ``true`` for a failed job whose error a retry does not fix by itself
        (a ``PermanentError``: it stopped without using its other tries; a retry is still allowed, and
        will most likely fail the same way), ``false`` for one that failed otherwise (out of tries), and
        ``null`` for a job that is not failed. With ``wait=N``
        (at most 60) the answer comes as soon as the job has ended (completed, failed or cancelled) or
        after N seconds, whichever is first; no database connection is held while it waits. 404 for
        unknown or others' ids."""
        if wait:
            await wait_for_end(request, job_id, wait)
        row = await queue.get_job(db_session, job_id, request.user)
        return await job_response(db_session, row, viewer=request.user)

    @get("/{job_id:str}/events", name="api.jobs.events", responses=errors(401, 404, 422))
    async def events(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        limit: EventsLimit = None,
        before: EventsBefore = None,
    ) -> Response[Any]:
        """The job's history: every transition, cancel request and admin action. With ``limit`` or
        ``before``: ``{"items": [...], "next": event id | null}``, newest first; pass ``next`` as ``before``
        for older events. With neither: a list, oldest first, of the newest 1,000 events; a longer history
        is cut, with a ``Link: <…?before=<event id>>; rel="next"`` header leading to the older ones."""
        asked = EventsPage(limit, before)
        row = await queue.get_job(db_session, job_id, request.user)
        rows = (await db_session.execute(_EVENTS, {"id": row["id"], **asked.params})).mappings().all()
        return asked.answer(request, list(rows))

    @post(
        "/{job_id:str}/cancel", name="api.jobs.cancel", responses=errors(401, 403, 404, 409), status_code=200
    )
    async def cancel(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Cancel (owner or admin). A waiting job is cancelled at once; a running one shows
        ``status_label: Cancelling`` until its worker stops it. 409 if it already finished."""
        outcome = await act(request, db_session, "cancel", job_id)
        return await job_response(db_session, outcome.row, viewer=request.user)

    @post("/{job_id:str}/retry", name="api.jobs.retry", responses=errors(401, 403, 404, 409), status_code=200)
    async def retry(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Retry a failed job with a fresh attempt budget (admins). 409 naming the status otherwise."""
        outcome = await act(request, db_session, "retry", job_id)
        return await job_response(db_session, outcome.row, viewer=request.user)

    @post(
        "/{job_id:str}/run-again",
        name="api.jobs.run_again",
        responses=errors(401, 403, 404, 409, 413, 415, 422, 429),
        status_code=201,
    )
    async def run_again(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """A new job with the same type and input (owner or admin); answers the new job, with a
        ``notice`` when its priority was lowered (above 0 is for admins, and its owner is not one)."""
        outcome = await act(request, db_session, "run-again", job_id)
        answer = await job_response(db_session, outcome.new_job, 201, viewer=request.user)
        old, new = outcome.row or {}, outcome.new_job or {}
        if lowered := priority_lowered(old.get("priority"), new.get("priority")):
            answer.content["notice"] = lowered
        return answer

    @post(
        "/{job_id:str}/approve",
        name="api.jobs.approve",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def approve(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Approve a step waiting for approval (admins): it completes and its dependents run."""
        outcome = await act(request, db_session, "approve", job_id)
        return await outcome_response(db_session, outcome, viewer=request.user)

    @post(
        "/{job_id:str}/reject",
        name="api.jobs.reject",
        responses=errors(401, 403, 404, 409, 413, 415, 422),
        status_code=200,
    )
    async def reject(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        data: JSONBody[RejectBody],
    ) -> Response[dict[str, Any]]:
        """Reject a step waiting for approval (admins), with a ``reason`` (or ``comment``, the name
        ``/api/approvals`` uses): it fails and its dependents are cancelled."""
        reason, sent_as = rejection_reason(data.reason, data.comment, "reason")
        try:
            outcome = await act(request, db_session, "reject", job_id, reason=reason)
        except BadInput as exc:
            if sent_as == "reason" or "reason" not in exc.errors:
                raise
            raise BadInput.field(sent_as, exc.errors["reason"]) from None
        return await outcome_response(db_session, outcome, viewer=request.user)

    @post("/{job_id:str}/rerun", name="api.jobs.rerun", responses=errors(401, 403, 404, 409), status_code=200)
    async def rerun(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Run a step waiting for approval once more (admins); it waits for approval again afterwards."""
        outcome = await act(request, db_session, "rerun", job_id)
        return await job_response(db_session, outcome.row, viewer=request.user)

    @post(
        "/{job_id:str}/run-now",
        name="api.jobs.run_now",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def run_now(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[dict[str, Any]]:
        """Make a scheduled or retrying job due now (admins): it starts as soon as a worker is free, unless
        its type is paused — then it waits until the type is resumed (``GET /api/job-types/controls``
        lists the paused types). 409 if not waiting, or if it waits for earlier steps or is held: its due
        time is not what keeps it."""
        outcome = await act(request, db_session, "run-now", job_id)
        return await job_response(db_session, outcome.row, viewer=request.user)

    @post(
        "/{job_id:str}/reschedule",
        name="api.jobs.reschedule",
        responses=errors(401, 403, 404, 409, 413, 415, 422),
        status_code=200,
    )
    async def reschedule(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        data: JSONBody[RescheduleBody],
    ) -> Response[dict[str, Any]]:
        """Move a waiting job to ``run_at`` (admins): ISO text with a UTC offset, between 1970 and 9000, as
        on submission (422 naming ``run_at`` otherwise); 409 if not waiting."""
        outcome = await act(request, db_session, "reschedule", job_id, run_at=data.run_at)
        return await job_response(db_session, outcome.row, viewer=request.user)

    @delete("/{job_id:str}", name="api.jobs.delete", responses=errors(401, 403, 404, 409), status_code=204)
    async def delete_job(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> None:
        """Delete a job that is not running (admins); its waiting dependents are cancelled. 409 while it
        runs (cancel it first)."""
        await job_actions.delete(db_session, actor_of(request), job_id)
