"""Request helpers shared by the pages and the JSON API: the app's settings, the file store, the
client's address, the request id, the acting person (:class:`app.actions.trail.Actor`), path ids, and
the answers every live fragment and every refused action share.

API routes authenticate with ``Authorization: Bearer <token>`` only (never the session cookie), so they
need no CSRF token; the guards are :func:`app.auth.requires_user` and :func:`app.auth.requires_admin`.
Errors are :class:`app.errors.AppError` subclasses, rendered by the app's exception handler as
``{"detail": …}`` (plus ``errors`` per field for 422) with their 4xx status.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import uuid
from collections.abc import Mapping
from typing import Any

from litestar import Request, Response
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import jobs as job_actions
from app.actions.jobs import ActionOutcome, parse_id
from app.actions.trail import Actor
from app.db import fetch_dicts
from app.errors import BadInput
from app.files import FileStore

NO_NEWS = 204
"""A poll's answer while nothing changed (htmx keeps the old content)."""
STOP_POLLING = 286
"""htmx's "stop polling" status: sent with the final content once a job or pipeline has finished."""


async def rows_of(db: AsyncSession, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A page's read: ``statement``'s rows as dicts, in ``db``'s transaction, run straight on asyncpg
    (:func:`app.db.fetch_dicts`). SQLAlchemy's result objects were about a third of the job page's and the
    lists' CPU in ``bench/pages.py``; and a plain dict is also the quickest row for a template to read."""
    return await fetch_dicts(await db.connection(), statement, params)


async def one_snapshot(db: AsyncSession) -> None:
    """For a page that shows several reads that must agree (a job's or a pipeline's status and its
    history, a batch's counts and its failed rows, a list and the counts beside it): ``db``'s statements run in one ``REPEATABLE READ``, read-only transaction, so all of them
    see the database as it was at the first. Read one by one (each its own snapshot, as ``READ
    COMMITTED`` and autocommit give), a step that changed between the two showed a state the
    history below it disagreed with. Call it before the first statement."""
    await db.connection(execution_options={"isolation_level": "REPEATABLE READ", "postgresql_readonly": True})


def settings_of(request: Request[Any, Any, Any]) -> Any:
    return request.app.state.settings


def file_store(request: Request[Any, Any, Any]) -> FileStore:
    """The app's file store. Kept on the app, made again only if the data directory setting changed:
    resolving that path (a file-system call per folder) was 2 % of a job page's CPU."""
    settings = settings_of(request)
    state = request.app.state
    kept = getattr(state, "jobdesk_file_store", None)
    if kept is None or kept[0] != settings.jobdesk_data_dir:
        kept = (settings.jobdesk_data_dir, FileStore(settings.files_dir))
        state.jobdesk_file_store = kept
    return kept[1]


def client_ip(request: Request[Any, Any, Any]) -> str | None:
    return request.client.host if request.client else None


def request_id(request: Request[Any, Any, Any]) -> str | None:
    return getattr(request.state, "request_id", None)


def actor_of(request: Request[Any, Any, Any]) -> Actor:
    """The signed-in person (or token owner) with the request's settings, address and id."""
    return Actor(request.user, settings_of(request), client_ip(request), request_id(request))


def parse_uuid(value: Any, what: str = "job") -> uuid.UUID:
    """A path id, or :class:`app.errors.NotFound` (the same answer as an unknown id)."""
    return parse_id(value, what)


async def keep_refusal(db: AsyncSession, status_code: int) -> None:
    """Commit when an action was refused (409): the session is rolled back on a 4xx answer, and the
    refusal's audit entry must stay."""
    if status_code == 409:
        await db.commit()


async def perform_from_page(
    db: AsyncSession,
    request: Request[Any, Any, Any],
    action: str,
    job_id: Any,
    *,
    reason: str = "",
    run_at: Any = None,
) -> ActionOutcome:
    """:func:`app.actions.jobs.perform` for a page: a bad reason or time is a 422 shown in place, and a
    refusal (409) is committed so an admin's audit entry of it stays."""
    try:
        outcome = await job_actions.perform(
            db, actor_of(request), action, job_id, reason=reason, run_at=run_at
        )
    except BadInput as exc:
        message = sentence(exc.errors.get("reason") or exc.errors.get("run_at") or exc.detail)
        if "run_at" in exc.errors:
            message = "Nothing changed: " + message
        return ActionOutcome(action, False, message, 422, parse_uuid(job_id))
    await keep_refusal(db, outcome.status_code)
    return outcome


def sentence(message: str) -> str:
    """A field message (``"must not be empty"``) as a sentence (``"Must not be empty."``)."""
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


def unchanged(v: str | None, version: str, finished: bool) -> Response[Any] | None:
    """A poll's 204 when the fingerprint ``v`` it sent still matches and nothing has finished; ``None``
    when there is news to render (with :func:`poll_status`)."""
    if not finished and v == version:
        return Response(content=b"", status_code=NO_NEWS)
    return None


def poll_status(finished: bool) -> int:
    """The status of a poll's answer with news: :data:`STOP_POLLING` once finished, else 200."""
    return STOP_POLLING if finished else 200


def cell_response(
    request: Request[Any, Any, Any],
    item: Mapping[str, Any],
    v: str | None,
    bell: tuple[bool, int | None] = (False, None),
) -> Template | Response[Any]:
    """One My jobs status cell (a job's or a pipeline's): 204 while unchanged, 286 with the final cell.
    ``bell`` is ``(news, count)`` of :mod:`app.web.notifications`: a changed count is news too, and the
    cell then brings the bell out of band."""
    finished = bool(item["state"]["terminal"])
    quiet = unchanged(v, item["state"]["version"], finished)
    news, count = bell
    if quiet is not None and not news:
        return quiet
    return Template(
        template_name="jobs/_cell.html",
        context={"item": item, "user": request.user, "bell": count},
        status_code=poll_status(finished),
        headers={"Vary": "HX-Request"},
    )


MAX_PAGE = 200
"""Most rows one API list answer may ask for (``limit``)."""
