"""``/api/notifications`` and ``/api/me/notifications``: a person's own notices and their e-mail choice.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Controller, Request, get, post, put
from litestar.params import JSONBody, QueryParameter

from app import notifications
from app.actions import account as account_actions
from app.auth import requires_user
from app.errors import BadInput
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import DbSession
from app.web.deps import MAX_PAGE, AfterCursor, client_ip
from app.web.openapi import errors


@dataclass
class ReadBody:
    """``{"ids": [1, 2]}`` (those of your notices) or ``{"all": true}``; checked by the route, so that a
    wrong value gets its own words."""

    ids: Any = None
    all: Any = None


@dataclass
class EmailChoiceBody:
    """``{"email": true}`` or ``{"email": false}``."""

    email: Any = None


class NotificationsApiController(Controller):
    """A person's notices: list, mark read, e-mail choice."""

    path = "/api"
    guards = [requires_user]
    tags = ["notifications"]

    @get("/notifications", name="api.notifications.list", responses=errors(401, 422))
    async def list_notices(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = notifications.PAGE,
        after: AfterCursor = None,
    ) -> dict[str, Any]:
        """``{"items": [{id, kind, job_id?, pipeline_id?, text, at, read}], "unread": n, "next": cursor |
        null}``, newest first (a notice folded with a later one moves up to its time), keyset-paginated
        by ``after`` as the other lists are."""
        uid = request.user.id
        rows = await notifications.listing(db_session, uid, limit + 1, read_cursor(after, Cursor.NOTICE))
        page, after_last = page_of(rows, limit, notifications.cursor_of)
        return {
            "items": [notifications.as_json(r) for r in page],
            "unread": await notifications.unread_count(db_session, uid),
            "next": after_last,
        }

    @post(
        "/notifications/read",
        name="api.notifications.read",
        responses=errors(401, 413, 415, 422),
        status_code=200,
    )
    async def mark_read(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[ReadBody | None] = None
    ) -> dict[str, Any]:
        """Mark notices read: ``{"ids": [1, 2]}`` or ``{"all": true}``. Others' ids change nothing.
        Answers ``{"marked": n, "unread": n}``."""
        if data is None:
            raise BadInput.field("ids", 'send {"ids": [...]} or {"all": true}')
        if data.all is not None and data.ids is not None:  # which one was meant: marking all is not undone
            raise BadInput.field("all", 'send {"ids": [...]} or {"all": true}, not both')
        if data.all is not None and data.all is not True:
            raise BadInput.field("all", 'must be true (or leave it out and send "ids")')
        ids = None
        if data.all is not True:
            raw = data.ids
            if not isinstance(raw, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in raw
            ):
                raise BadInput.field("ids", 'must be a list of notification ids, or send {"all": true}')
            if any(not 0 < i < 2**63 for i in raw):
                raise BadInput.field("ids", "must be notification ids")
            ids = raw
        marked = await notifications.mark_read(db_session, request.user.id, ids)
        return {"marked": marked, "unread": await notifications.unread_count(db_session, request.user.id)}

    @put("/me/notifications", name="api.me.notifications", responses=errors(401, 413, 415, 422))
    async def email_choice(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        data: JSONBody[EmailChoiceBody | None] = None,
    ) -> dict[str, Any]:
        """``{"email": true}``: notices are also e-mailed (when the server has SMTP set)."""
        if data is None or not isinstance(data.email, bool):
            raise BadInput.field("email", "must be true or false")
        await account_actions.set_email_notifications(
            db_session, request.user, data.email, ip=client_ip(request)
        )
        return {"email": data.email, "smtp": bool(request.app.state.settings.smtp_host)}
