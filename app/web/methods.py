"""HEAD on every GET route, and an ``Allow`` header that lists what a path takes.

Litestar answers a method only where a handler declares it: HEAD was a 405 on every page and API route
(static files alone declare it), though a client (a link checker, a monitor, ``curl -I``) asks with HEAD
to learn what a GET would answer without its body. :class:`HeadAsGet` serves such a HEAD as the GET, and
sends its status and headers (``Content-Length`` included) without the body.

Litestar also lists a path's methods in two places, and each got them wrong in its own way: a 405 left out
HEAD, and the ``OPTIONS`` answer listed only the handlers of the first controller that registered the path
(``OPTIONS /api/jobs`` said ``OPTIONS, POST``: GET is another controller's). Both now come from
:func:`allow_value`, over every handler of the path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from litestar.enums import ScopeType
from litestar.utils import normalize_path

if TYPE_CHECKING:
    from litestar import Litestar
    from litestar.types import ASGIApp, HTTPScope, Message, Receive, Scope, Send


def allow_value(methods: Iterable[str]) -> str:
    """The ``Allow`` header of a path whose handlers take ``methods``: with HEAD wherever GET is (it is
    answered as the GET without its body), sorted."""
    found = {m.strip().upper() for m in methods if m.strip()}
    if "GET" in found:
        found.add("HEAD")
    return ", ".join(sorted(found))


def allow_of_405(headers: dict[str, str]) -> dict[str, str]:
    """A 405's headers with its ``Allow`` as :func:`allow_value` writes it (Litestar lists the methods of
    the handlers at the path, without HEAD)."""
    out = {k: v for k, v in headers.items() if k.lower() != "allow"}
    given = next((v for k, v in headers.items() if k.lower() == "allow"), "")
    out["Allow"] = allow_value(given.split(","))
    return out


class HeadAsGet:
    """Wraps the app's ASGI handler (outside its routing, whose 405 would come first): a HEAD to a path
    with a GET handler is served by the GET handler, and every HEAD answer goes out without its body. Static
    files too: Litestar's own HEAD for them left out the ``Content-Type`` their GET sends. An ``OPTIONS``
    answer's ``Allow`` lists every handler of its path."""

    def __init__(self, app: Litestar, inner: ASGIApp) -> None:
        self._app = app
        self._inner = inner
        self._methods: dict[str, frozenset[str]] | None = None

    def _path_methods(self, template: str) -> frozenset[str]:
        if self._methods is None:  # built at the first request: routes registered after create_app count
            methods: dict[str, set[str]] = {}
            for route in self._app.routes:  # one per path, holding every controller's handlers for it
                for handler in getattr(route, "route_handlers", ()):
                    # keyed as the router's ``path_template`` names it: without the parameters' types
                    methods.setdefault(route.path_format, set()).update(handler.http_methods)
            self._methods = {path: frozenset(found) for path, found in methods.items()}
        return self._methods.get(template, frozenset())

    def _has_get(self, scope: HTTPScope) -> bool:
        """Whether a GET handler answers the request's path."""
        path = scope["path"]
        if root_path := scope.get("root_path", ""):
            path = path.split(root_path, maxsplit=1)[-1]
        try:
            self._app.asgi_router.handle_routing(path=normalize_path(path), method="GET")
        except Exception:  # no GET here (a 405) or no route (a 404): the router answers HEAD as it would
            return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope["method"] not in ("HEAD", "OPTIONS"):
            await self._inner(scope, receive, send)
            return
        http = scope
        if http["method"] == "OPTIONS":
            await self._inner(scope, receive, self._options_send(http, send))
            return
        as_get = self._has_get(http)
        if as_get:
            http["method"] = "GET"

        async def bodyless(message: Message) -> None:
            if message["type"] == "http.response.start":
                # The server reads the method from this same scope: it must see HEAD again to send the
                # GET's Content-Length with no body after it.
                http["method"] = "HEAD"
            elif message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self._inner(scope, receive, bodyless)

    def _options_send(self, scope: HTTPScope, send: Send) -> Send:
        async def with_allow(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[Any] = list(message.get("headers") or ())
                if any(k.lower() == b"allow" for k, _ in headers):
                    methods = self._path_methods(scope.get("path_template", ""))
                    if methods:
                        value = allow_value(methods).encode()
                        headers = [(k, v) for k, v in headers if k.lower() != b"allow"]
                        headers.append((b"allow", value))
                        message["headers"] = headers
            await send(message)

        return with_allow
