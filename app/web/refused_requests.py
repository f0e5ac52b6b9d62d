"""An admin's request refused before its action was asked — on the JSON API, a body the decoder or the
field check refused (422), a body sent to a route that takes none, a reason given twice; on a page, a form
that cannot be read (a multipart body without its boundary, a part that is not text), a field sent to a
button form that reads none; on either, a body over the limit (413), or a row the request refers to
that another transaction deleted meanwhile (the database's 409, which the action does not audit as its
own refusal) — is audited as the refusal of the action the route carries out, once, as the action's own
refusal would have been (:mod:`app.actions.trail`). One rule for every entry path: a page's form and the API's request for the
same action leave the same entry.

Such a request never reaches the action's audited block (the error is raised while the request is read,
before its handler runs, or by the handler before it calls the action), so :func:`audit_refused_request`,
an ``after_exception`` hook, writes the entry from :data:`ROUTE_ACTIONS`, in a transaction of its own:
the request's is rolled back with its error. An error an action has audited already (marked by
:func:`app.actions.trail.refused_once`, also when a handler raises another error in its place) and a
request whose session keeps a refusal are not written again. A bulk request whose body could not be
read names no action: it is audited as :data:`app.actions.bulk.UNKNOWN_ACTION`, its detail saying that
the action is not known because the request was not read. A person who is not an
admin leaves no entry, as their refusals never do; nor does a failed CSRF check (403), which may be a
request the admin never sent, nor a page's request refused before its CSRF check could pass — over the
body limit, or a form the check could not parse to find its token — unless its ``X-CSRFToken`` header
(every htmx request's) is the session's token (:func:`app.web.csrf.vouched`): a page of another site on
this host could otherwise write entries in the admin's name with their session cookie alone. A plain
form's refused post, whose token is in the body that was refused, is therefore not audited.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from advanced_alchemy.extensions.litestar._utils import get_aa_scope_state
from litestar import Request
from litestar.exceptions import HTTPException, ValidationException
from litestar.types import AfterExceptionHookHandler, Scope
from litestar.utils.empty import value_or_default
from litestar.utils.scope.state import ScopeState
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import bulk
from app.actions.trail import KEEP_REFUSAL, Actor, audited, refused_once
from app.db import referent_deleted
from app.errors import GONE_MESSAGE, AppError, BadInput, Conflict
from app.web import csrf, param_words
from app.web.deps import actor_of

log = structlog.get_logger("jobdesk.web")

ROUTE_ACTIONS = {
    # the JSON API
    "api.jobs.bulk": "jobs.bulk",
    "api.jobs.cancel": "job.cancel",
    "api.jobs.retry": "job.retry",
    "api.jobs.run_again": "job.run_again",
    "api.jobs.approve": "job.approve",
    "api.jobs.reject": "job.reject",
    "api.jobs.rerun": "job.rerun",
    "api.jobs.run_now": "job.run_now",
    "api.jobs.reschedule": "job.reschedule",
    "api.jobs.delete": "job.delete",
    "api.approvals.decide:approve": "job.approve",
    "api.approvals.decide:reject": "job.reject",
    "api.pipelines.cancel": "pipeline.cancel",
    "api.batches.retry_failed": "batch.retry_failed",
    "api.job_types.pause": "job_type.pause",
    "api.job_types.resume": "job_type.resume",
    "api.job_types.limits": "job_type.limits",
    "api.schedules.create": "schedule.create",
    "api.schedules.enable:enable": "schedule.enable",
    "api.schedules.enable:disable": "schedule.disable",
    "api.schedules.update": "schedule.update",
    "api.schedules.replace": "schedule.update",
    "api.schedules.delete": "schedule.delete",
    "api.users.unlock": "user.unlock",
    "api.users.reset_password": "user.reset_password",
    "api.users.release_jobs": "user.release_jobs",
    "api.users.cancel_jobs": "user.cancel_jobs",
    # the pages: a job's page (its owner's own actions are not audited: the hook skips non-admins)
    "jobs.action:cancel": "job.cancel",
    "jobs.action:retry": "job.retry",
    "jobs.action:run-again": "job.run_again",
    "jobs.action:approve": "job.approve",
    "jobs.action:reject": "job.reject",
    "jobs.action:rerun": "job.rerun",
    "jobs.action:run-now": "job.run_now",
    "jobs.reschedule": "job.reschedule",
    "approvals.decide:approve": "job.approve",
    "approvals.decide:reject": "job.reject",
    "pipelines.cancel": "pipeline.cancel",
    "batches.retry_failed": "batch.retry_failed",
    # the admin pages
    "admin.jobs.action:cancel": "job.cancel",
    "admin.jobs.action:retry": "job.retry",
    "admin.jobs.action:run-again": "job.run_again",
    "admin.jobs.action:approve": "job.approve",
    "admin.jobs.action:reject": "job.reject",
    "admin.jobs.action:rerun": "job.rerun",
    "admin.jobs.action:run-now": "job.run_now",
    "admin.jobs.bulk": "jobs.bulk",
    "admin.jobs.bulk_confirm": "jobs.bulk",
    "admin.failed.retry": "jobs.bulk_retry",
    "admin.failed.confirm": "jobs.bulk_retry",
    "admin.controls.pause:pause": "job_type.pause",
    "admin.controls.pause:resume": "job_type.resume",
    "admin.controls.limits": "job_type.limits",
    "admin.schedules.create": "schedule.create",
    "admin.schedules.save": "schedule.update",
    "admin.schedules.enable:enable": "schedule.enable",
    "admin.schedules.enable:disable": "schedule.disable",
    "admin.schedules.delete": "schedule.delete",
    "admin.users.create": "user.create",
    "admin.users.action:make-admin": "user.make_admin",
    "admin.users.action:revoke-admin": "user.revoke_admin",
    "admin.users.action:disable": "user.disable",
    "admin.users.action:enable": "user.enable",
    "admin.users.action:unlock": "user.unlock",
    "admin.users.reset_password": "user.reset_password",
    "admin.users.held:release-jobs": "user.release_jobs",
    "admin.users.held:cancel-jobs": "user.cancel_jobs",
    "admin.users.token": "token.create",
    "admin.tokens.revoke": "token.revoke",
    "admin.alerts.test": "alerts.test",
}
"""The audited action each route that changes something carries out, on the JSON API and the pages alike
(``name:last path segment`` for a route with several paths), as its action names it."""

TARGETS = {
    "job_id": "job",
    "pipeline_id": "pipeline",
    "batch_id": "batch",
    "job_type": "job_type",
    "schedule_id": "schedule",
    "user_id": "user",
}
"""The path parameters that name what an action acts on, and the kind of target each names."""

TARGET_KINDS = {"jobs": "job", "token": "user", "alerts": "alert_channel"}
"""The kind of target of an action whose path names none (a bulk action, a create, a token's revoke, whose
target is the token's owner), by the action's first part where it is not the kind itself."""

_NOT_REFUSALS = (401, 405)
"""Not an admin's refused action: a request nobody signed in to, a method the address does not take."""


def route_key(scope: Scope) -> str | None:
    """The request's route as :data:`ROUTE_ACTIONS` names it, or ``None`` for a route that carries out no
    audited action."""
    handler = scope.get("route_handler")
    name = getattr(handler, "name", None)
    if not name:
        return None
    last = str(scope.get("path", "")).rstrip("/").rsplit("/", 1)[-1]
    for key in (f"{name}:{last}", name):
        if key in ROUTE_ACTIONS:
            return key
    return None


def _as_refusal(exc: Exception, scope: Scope) -> AppError | None:
    """``exc`` as the error the answer says, when it refuses the request (4xx); else ``None``."""
    if isinstance(exc, AppError):
        found: AppError | None = exc
    elif isinstance(exc, ValidationException):
        detail, errors = param_words.refusal(exc, scope.get("route_handler"))
        found = BadInput(detail, errors=errors)
    elif isinstance(exc, HTTPException) and exc.status_code == 413:
        found = AppError(exc.detail)
        found.status_code = 413
    elif referent_deleted(exc):
        # The database's refusal, not the action's (which audits only its own): the request's rows
        # refer to one another transaction deleted meanwhile, answered 409 saying nothing was changed.
        found = Conflict(GONE_MESSAGE)
    else:
        return None
    status = getattr(found, "status_code", 400)
    return found if 400 <= status < 500 and status not in _NOT_REFUSALS else None


def _asked_bulk_action(scope: Scope) -> tuple[bool, Any]:
    """Whether a bulk request's body was read, and the ``action`` it names: a page's form field (the
    button pressed), or the field of the API's JSON object."""
    state = ScopeState.from_scope(scope)
    form = value_or_default(state.form, None)
    if isinstance(form, dict):
        return True, form.get("action")
    body = value_or_default(state.body, None)
    if body is None:
        return False, None
    try:
        value = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return True, None
    return True, value.get("action") if isinstance(value, dict) else None


def _target(scope: Scope, action: str) -> tuple[str, list[str]]:
    params = scope.get("path_params") or {}
    for name, kind in TARGETS.items():
        if name in params:
            return kind, [str(params[name])[:100]]
    first = action.split(".", 1)[0]
    return TARGET_KINDS.get(first, first), []


def audit_refused_request(session_scope_key: str) -> AfterExceptionHookHandler:
    """The ``after_exception`` hook described in the module docstring (``session_scope_key``: where the
    request's session is kept in the scope, to see whether it holds a refusal already)."""

    async def hook(exc: Exception, scope: Scope) -> None:
        key = route_key(scope)
        user = scope.get("user")
        if key is None or not getattr(user, "is_admin", False) or audited(exc):
            return
        if not csrf.vouched(scope):  # possibly forged: refused before a CSRF check it would fail
            return
        session: Any = get_aa_scope_state(scope, session_scope_key)
        if session is not None and session.info.get(KEEP_REFUSAL):
            return
        refusal = _as_refusal(exc, scope)
        engine = scope["litestar_app"].state.engine
        if refusal is None or engine is None:
            return
        actor: Actor = actor_of(Request(scope))
        action = ROUTE_ACTIONS[key]
        target_type, target_ids = _target(scope, action)
        try:
            async with AsyncSession(engine, expire_on_commit=False) as db:
                if action == "jobs.bulk":
                    read, asked = _asked_bulk_action(scope)
                    await bulk.refused(db, actor, asked, refusal, read=read)
                else:
                    await refused_once(
                        db, actor, action, refusal, target_type=target_type, target_ids=target_ids
                    )
                await db.commit()
        except Exception as error:  # the answer stands; the entry is what was lost
            log.warning("a refused request could not be audited", error=repr(error)[:300], action=action)

    return hook
