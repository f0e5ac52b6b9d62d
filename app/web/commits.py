"""Each request's ``db_session`` is committed as its answer starts (2xx and 3xx answers, redirects
included, and a 4xx refusal whose audit entry an action marked to keep: :data:`app.actions.trail.KEEP_REFUSAL`)
and rolled back otherwise — advanced-alchemy's ``autocommit_include_redirects`` — with one
difference: a commit that fails (the connection to the database broke, the server refused the
transaction at its end) turns the answer into a 503 that says nothing was saved. advanced-alchemy's own
handler logs such a failure at debug level and sends the handler's 2xx, so a person was told "done" about
a change the database never kept. A rollback that fails (its connection is gone) leaves the error answer
as it is: it already says that nothing was done.

The answer's status and headers can still change here (its start has not been sent); its body, built for
the 2xx, is replaced by the refusal as it goes out.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import structlog
from advanced_alchemy.extensions.litestar._utils import delete_aa_scope_state, get_aa_scope_state
from advanced_alchemy.extensions.litestar.plugins.init.config.common import SESSION_TERMINUS_ASGI_EVENTS
from litestar.types import BeforeMessageSendHookHandler, Message, Scope

from app.actions.trail import KEEP_REFUSAL
from app.socket_errors import is_connection_error

log = structlog.get_logger("jobdesk.web")

NOT_SAVED = (
    "Nothing was saved: the database did not confirm the change. Please check and try again in a moment."
)
NOT_CONFIRMED = (
    "The connection to the database was lost as the change was being saved, so it may or may not have been"
    " made. Please check before trying again (a request repeated with the same idempotency key or form is"
    " done once)."
)
"""The answer when the commit got no answer at all: the server may have committed before the connection
went, so "nothing was saved" could be false."""
_REFUSAL = "_jobdesk_refusal"
"""Scope key: the body that replaces the answer's, once its commit failed."""


def commit_or_refuse(session_scope_key: str) -> BeforeMessageSendHookHandler:
    """The ``before_send`` hook that commits or rolls back the request's session (kept in the scope under
    ``session_scope_key``, the advanced-alchemy config's: it differs between apps in one process) as its
    answer starts."""

    async def hook(message: Message, scope: Scope) -> None:
        refusal = scope.get(_REFUSAL)
        if isinstance(refusal, bytes) and message["type"] == "http.response.body":
            message["body"] = refusal  # the first part of the body; later parts are dropped
            scope[_REFUSAL] = b""  # type: ignore[literal-required]
            return
        session: Any = get_aa_scope_state(scope, session_scope_key)
        if session is None:
            return
        try:
            if message["type"] == "http.response.start":
                # An admin's refused action leaves its audit entry, which an error answer would roll back.
                kept = session.info.pop(KEEP_REFUSAL, False) and message["status"] < 500
                if 200 <= message["status"] < 400 or kept:
                    await session.commit()
                else:
                    await _roll_back(session, scope, message["status"])
        except Exception as exc:
            _refuse(message, scope, exc)
        finally:
            if message["type"] in SESSION_TERMINUS_ASGI_EVENTS:
                try:
                    await session.close()
                except Exception as exc:  # the connection is gone; the pool replaces it
                    log.warning("could not close a request's database session", error=repr(exc)[:300])
                delete_aa_scope_state(scope, session_scope_key)

    return hook


async def _roll_back(session: Any, scope: Scope, status: int) -> None:
    """Roll back the session of an answer that already says nothing was done (an error). A rollback that
    fails leaves that answer as it is: nothing was committed, and the server ends the transaction with its
    connection, which the pool then discards. It fails when the connection was lost under a statement run
    straight on asyncpg (a bulk enqueue's ``COPY``, :func:`app.db.fetch_dicts`), which SQLAlchemy did not
    see break; the answer is then the 503 saying the database cannot be reached, not a failed commit."""
    try:
        await session.rollback()
    except Exception as exc:
        log.warning(
            "could not roll back a refused request's changes; its connection is gone",
            path=scope["path"],
            status=status,
            error=repr(exc)[:300],
        )


def _refuse(message: Message, scope: Scope, exc: Exception) -> None:
    assert message["type"] == "http.response.start"
    log.error(
        "the request's changes could not be committed; answering 503",
        path=scope["path"],
        status_meant=message["status"],
        error=repr(exc)[:300],
    )
    api = scope["path"].startswith("/api/")
    said = NOT_CONFIRMED if _unanswered(exc) else NOT_SAVED
    body = (json.dumps({"detail": said}) if api else said).encode()
    content_type = b"application/json" if api else b"text/plain; charset=utf-8"
    dropped = (b"content-length", b"content-type", b"location", b"hx-redirect", b"hx-trigger", b"etag")
    headers = [h for h in message.get("headers") or () if h[0].lower() not in dropped]
    headers += [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    message["status"] = 503
    message["headers"] = headers
    scope[_REFUSAL] = body  # type: ignore[literal-required]


def _unanswered(exc: BaseException) -> bool:
    """Whether the commit failed without an answer from the server (its connection lost), rather than
    refused by it (a deferred constraint, a serialization failure, a shutdown), which rolls it back."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, asyncpg.PostgresError) and not isinstance(
            current, asyncpg.exceptions.PostgresConnectionError
        ):
            return False  # the server's own answer
        if is_connection_error(current) or isinstance(
            current, asyncpg.exceptions.InterfaceError | asyncpg.PostgresConnectionError
        ):
            return True
        current = current.__cause__ or current.__context__ or getattr(current, "orig", None)
    return False
