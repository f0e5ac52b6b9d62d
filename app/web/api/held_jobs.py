"""``/api/users/{id}/…``: a person's use of the limits, and their held jobs (admins only).

* ``GET /api/users/{id}/usage`` → ``{user_id, waiting, held, stored_bytes, limits: {SETTING: value}}``;
* ``POST /api/users/{id}/release-jobs`` and ``/cancel-jobs`` → ``{user_id, email, count, message}``: the
  jobs held when the account was disabled run, or are cancelled (409 when none are held).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath

from app import quotas, users
from app.actions.held_jobs import act_on_held
from app.auth import requires_admin
from app.web import DbSession
from app.web.deps import client_ip, settings_of
from app.web.openapi import errors


@dataclass
class UsageAnswer:
    """One person's waiting and held jobs and stored bytes, with the limits in force (0 = off)."""

    user_id: int
    waiting: int
    held: int
    stored_bytes: int
    limits: dict[str, int]


@dataclass
class HeldAnswer:
    """How many held jobs were released or cancelled."""

    user_id: int
    email: str
    count: int
    message: str


class HeldJobsApiController(Controller):
    """``/api/users/{id}/usage``, ``/release-jobs`` and ``/cancel-jobs`` (admins)."""

    path = "/api/users"
    guards = [requires_admin]
    tags = ["users"]

    @get("/{user_id:int}/usage", name="api.users.usage", responses=errors(401, 403, 404))
    async def usage(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> UsageAnswer:
        """The person's waiting and held jobs and stored bytes against the limits. 404 for no such user."""
        target = await users.get_user(db_session, user_id)
        use = (await quotas.usage_of(db_session, [target["id"]]))[target["id"]]
        limits = quotas.limits(settings_of(request))
        return UsageAnswer(target["id"], use.waiting, use.held, use.stored_bytes, limits)

    @post(
        "/{user_id:int}/release-jobs",
        name="api.users.release_jobs",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def release(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> HeldAnswer:
        """Let the jobs held when the person was disabled run. 409 when none are held."""
        return await _act(request, db_session, user_id, "release-jobs")

    @post(
        "/{user_id:int}/cancel-jobs",
        name="api.users.cancel_jobs",
        responses=errors(401, 403, 404, 409),
        status_code=200,
    )
    async def cancel(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> HeldAnswer:
        """Cancel the jobs held when the person was disabled (their dependents too). 409 when none are held."""
        return await _act(request, db_session, user_id, "cancel-jobs")


async def _act(request: Request[Any, Any, Any], db: Any, user_id: int, name: str) -> HeldAnswer:
    done = await act_on_held(db, request.user, user_id, name, ip=client_ip(request))
    return HeldAnswer(done.user_id, done.email, done.count, done.message)
