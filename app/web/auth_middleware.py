"""The middleware that finds who is making a request: ``scope["user"]`` from the API token or the session
cookie (the lookups themselves are :mod:`app.auth`'s).

It lives apart from :mod:`app.auth` because it needs Litestar, and the worker and the command line use
:mod:`app.auth` (users, tokens, the sweep of old sessions) without serving pages: importing Litestar
would cost them about a second at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.response import Template

from app.auth import (
    API_PREFIX,
    PASSWORD_FORM,
    SESSION_COOKIE,
    secret_digest,
    user_for_session,
)
from app.errors import AppError
from app.tokens import token_holder
from app.web.csrf import scope_cookie

if TYPE_CHECKING:
    from litestar.types import ASGIApp, HTTPResponseBodyEvent, HTTPResponseStartEvent, Receive, Scope, Send
    from sqlalchemy.ext.asyncio import AsyncEngine


MANY_AUTHORIZATIONS = (
    "This request has more than one Authorization header, so it is not clear whose it is; nothing was "
    "done. Send one header: 'Authorization: Bearer <token>'."
)


def authorization(scope: Scope) -> str | None:
    """The value of the request's ``Authorization`` header, or ``None``: the one rule for every route that
    reads it (the API's tokens here, ``/metrics``' scraper token).

    Raises:
        AppError: (400, :data:`MANY_AUTHORIZATIONS`) the header is there more than once, or once with
            values a proxy joined with a comma (no token holds one): taking one of them (the first, as
            before) acted for whoever it named while the request also named someone else.
    """
    values = [value for key, value in scope["headers"] if key == b"authorization"]
    if len(values) > 1 or (values and b"," in values[0]):
        raise AppError(MANY_AUTHORIZATIONS)
    return values[0].decode("latin-1") if values else None


def _bearer(scope: Scope) -> str | None:
    """The request's bearer token (:func:`authorization`), or ``None`` (no header, or another scheme)."""
    scheme, _, token = (authorization(scope) or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


#: Where a person whose password an administrator reset may still go before choosing a new one: the
#: account page (its password form) and signing out. Every other page answers with a redirect there.
#: The JSON API is not affected: it never accepts the browser session, and API tokens stay valid.
MUST_CHANGE_OPEN = ("/account", "/logout", "/login")


async def _send_to_password_form(scope: Scope, send: Send) -> None:
    """303 to the password form; an htmx request gets ``HX-Redirect`` instead (it would swap the form
    into the fragment's place otherwise)."""
    htmx = any(k == b"hx-request" and v == b"true" for k, v in scope["headers"])
    where = (b"hx-redirect" if htmx else b"location", PASSWORD_FORM.encode())
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": 200 if htmx else 303,
        "headers": [(b"content-length", b"0"), (b"cache-control", b"no-store"), where],
    }
    body: HTTPResponseBodyEvent = {"type": "http.response.body", "body": b"", "more_body": False}
    await send(start)
    await send(body)


class AuthenticationMiddleware(ASGIMiddleware):
    """Sets ``scope["user"]`` (``request.user``) to a :class:`CurrentUser` or ``None`` (anonymous), and
    the request state's ``session_hash`` to the signed-in session's id hash (CSRF tokens are bound to it:
    :func:`session_hash_of`).

    ``/api/…`` requests: only ``Authorization: Bearer <token>``; other requests: only the session cookie
    (so API calls need no CSRF token, and a page can never act through the API with the browser's cookie).
    Never rejects a request itself (the guards below do), except two: an API request with more than one
    ``Authorization`` header is a 400 (:func:`authorization`), and a person who must change the password an
    administrator reset is sent to the password form from every page but :data:`MUST_CHANGE_OPEN`.
    Static files and health probes are skipped. At most one indexed query per request.
    """

    scopes = (ScopeType.HTTP,)
    skip_prefixes = ("/static/", "/healthz", "/readyz", "/schema")

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        scope["user"] = None
        scope["auth"] = None
        state = scope.setdefault("state", {})
        state["session_hash"] = None
        path = scope["path"]
        if not path.startswith(self.skip_prefixes):
            engine: AsyncEngine = scope["litestar_app"].state.engine
            if path.startswith(API_PREFIX):
                token = _bearer(scope)
                if token:
                    holder = await token_holder(engine, token)
                    if isinstance(holder, str):  # why a token that exists was refused: the 401's words
                        state["token_refusal"] = holder
                    else:
                        scope["user"] = holder
                    scope["auth"] = "token"
            else:
                cookie = scope_cookie(scope, SESSION_COOKIE)
                if cookie:
                    scope["user"] = await user_for_session(engine, cookie)
                    scope["auth"] = "session"
                    if scope["user"] is not None:
                        state["session_hash"] = secret_digest(cookie)
                        if scope["user"].must_change_password and not path.startswith(MUST_CHANGE_OPEN):
                            await _send_to_password_form(scope, send)
                            return
        await next_app(scope, receive, send)


class UnroutedPage(Template):
    """A page answering a path no route matched (the 404 of ``/nonexistent``): Litestar answers it before
    any middleware runs, so this middleware did not find the signed-in person, and the page's top bar said
    "Sign in" to them. The person is looked up from the session cookie as the page is sent."""

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Any:
        parent = super().to_asgi_response

        async def send_page(scope: Scope, receive: Receive, send: Send) -> None:
            cookie = None if scope["path"].startswith(API_PREFIX) else scope_cookie(scope, SESSION_COOKIE)
            if cookie:
                user = await user_for_session(scope["litestar_app"].state.engine, cookie)
                if user is not None:
                    scope["user"] = user
                    scope.setdefault("state", {})["session_hash"] = secret_digest(cookie)
                    self.context = {**(self.context or {}), "user": user}
            await parent(*args, **kwargs)(scope, receive, send)

        return send_page
