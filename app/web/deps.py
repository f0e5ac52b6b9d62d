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
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from litestar import Request, Response
from litestar.params import QueryParameter
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import jobs as job_actions
from app.actions.jobs import ActionOutcome, parse_id
from app.actions.trail import Actor
from app.db import fetch_dicts
from app.errors import BadInput
from app.files import FileStore
from app.web.form_shape import form_errors

NO_NEWS = 204
"""A poll's answer while nothing changed (htmx keeps the old content)."""
POLL_VARY = {"Vary": "HX-Request"}
"""On every answer of a polled address, the page, the fragment and the 204 alike: the same address answers
a reload with the page and htmx with a fragment or nothing."""
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


REFUSAL_WORDS = "refusal_words"
"""Route ``opt`` key: a function that gives every refusal the route answers (413, 415, 422, 429) the
words its action's own refusals have, whatever refused it, the action or the edge before the handler
(text that cannot be stored, a field the body may not have, a key given twice): a batch's
"Nothing was started." (:func:`app.batches.nothing_started`)."""
REFUSALS = frozenset({413, 415, 422, 429})
"""The statuses :data:`REFUSAL_WORDS` rewords: the request was refused as it was sent."""

FORM = "form"
"""Error key of a problem no control of the form shows (a hidden field, a button's value): it is shown
above the form's buttons, in the answer's notice."""

NOTHING_CHANGED = "Nothing changed: correct what the form says below."

ACTION_CONTROLS = {"reject": ("reason",)}
"""The fields a job action's form shows an error beside (the others' only field is hidden: ``view``)."""
ACTION_HIDDEN = ("view",)
"""The hidden field every job action's form may send: which status part answers it."""


def sent_form(action: str, job_id: Any, errors: dict[str, str], **typed: str) -> dict[str, Any]:
    """The form of ``action`` on a job a person just sent, for the answer to show as the server renders
    it (its errors beside its fields, what was typed) rather than as htmx kept it (``hx-preserve``);
    ``id`` is the form's element id on the page."""
    shown = {k: v for k, v in errors.items() if k != FORM}
    return {"id": f"{action}-{job_id}", "action": action, "errors": shown, "typed": typed}


def tell_unshown(ctx: dict[str, Any], errors: dict[str, str], shown: bool) -> dict[str, Any]:
    """``ctx`` with a form's ``errors`` in its notice when the answer does not show that form (the job
    moved on since the page was drawn), so that they are not lost."""
    errors = {k: v for k, v in errors.items() if k != FORM}
    if errors and not shown:
        ctx["notice"] = nothing_changed(" ".join(errors.values()))
    return ctx


async def refuse_form(
    request: Request[Any, Any, Any], db: AsyncSession, action: str, job_id: Any, errors: dict[str, str]
) -> tuple[ActionOutcome, dict[str, str]]:
    """The answer to an action's form that cannot be taken (``errors``, by control): a 422 with nothing
    done, after the permission check the action itself makes first (so it tells no one more than the
    action would)."""
    jid = await job_actions.refuse_form(db, actor_of(request), action, job_id, errors)
    return ActionOutcome(action, False, not_taken(errors), 422, jid), errors


def not_taken(errors: dict[str, str]) -> str:
    """The notice of a form that was not taken: the problem no control shows (:data:`FORM`), or where the
    errors are. "Nothing changed" is said here, so the problem must not say it too: its form is checked by
    :func:`action_form_errors`."""
    problem = errors.get(FORM)
    return nothing_changed(problem) if problem else NOTHING_CHANGED


def nothing_changed(problem: str) -> str:
    """The notice of a refused form: "Nothing changed: " and the problem, which goes on after it in
    lower case ("Nothing changed: this form has no field 'x'"), on a job's actions and the bulk panels
    alike."""
    return f"Nothing changed: {problem[:1].lower()}{problem[1:]}"


def action_form_errors(
    request: Request[Any, Any, Any],
    form: Any,
    controls: Any,
    hidden: Iterable[str],
    repeatable: Iterable[str] = (),
) -> dict[str, str]:
    """:func:`app.web.form_shape.form_errors` of a form whose refusal is worded "Nothing changed: …"
    (:func:`not_taken`, the bulk panels): the problem leaves out what was not done, which that prefix
    says ("Nothing changed: this form has no field 'x'; nothing was done" said it twice).
    ``repeatable``: the fields the form may send more than once."""
    return form_errors(request, form, controls, FORM, hidden=hidden, repeatable=repeatable, nothing="")


async def perform_from_page(
    db: AsyncSession,
    request: Request[Any, Any, Any],
    action: str,
    job_id: Any,
    *,
    reason: str = "",
    run_at: Any = None,
    controls: Any = (),
) -> tuple[ActionOutcome, dict[str, str]]:
    """:func:`app.actions.jobs.perform` for a page's form, and the errors to show on the form by control:
    text it cannot take or a field it has not or sent twice (:func:`app.web.form_shape.form_errors`:
    beside ``controls``, a mapping field → control or the names of fields that are their own; any other
    field's under :data:`FORM`) and a bad reason or time are a 422 with nothing done. A refusal's audit entry stays: the action marks it
    for the answer to commit (:data:`app.actions.trail.KEEP_REFUSAL`)."""
    form = await request.form()
    errors = action_form_errors(request, form, controls, ACTION_HIDDEN)
    if errors:
        return await refuse_form(request, db, action, job_id, errors)
    try:
        outcome = await job_actions.perform(
            db, actor_of(request), action, job_id, reason=reason, run_at=run_at
        )
    except BadInput as exc:
        shown = set(controls.values() if hasattr(controls, "values") else controls)
        errors = {key: sentence(exc.errors[key]) for key in shown if key in exc.errors}
        message = NOTHING_CHANGED if errors else sentence(exc.detail)
        return ActionOutcome(action, False, message, 422, parse_uuid(job_id)), errors
    return outcome, {}


def sentence(message: str) -> str:
    """A field message (``"must not be empty"``) as a sentence (``"Must not be empty."``)."""
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


def unchanged(v: str | None, version: str, finished: bool) -> Response[Any] | None:
    """A poll's 204 when the fingerprint ``v`` it sent still matches and nothing has finished; ``None``
    when there is news to render (with :func:`poll_status`)."""
    if not finished and v == version:
        return Response(content=b"", status_code=NO_NEWS, headers=POLL_VARY)
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
        headers=POLL_VARY,
    )


AfterCursor = Annotated[
    str | None,
    QueryParameter(description="The `next` of the page before (leave it out for the first page)."),
]
"""A list's ``?after=`` cursor as sent: read by :func:`app.jobs.cursors.read_cursor`, whose 422 names it."""

MAX_PAGE = 200
"""Most rows one API list answer may ask for (``limit``)."""
