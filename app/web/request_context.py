"""A request's context and every response's headers: the request id (the client's ``X-Request-ID`` or a
new one) bound into the log lines of the request, the access-log line, and the security headers (a strict
Content Security Policy without inline scripts, with the relaxed one ``/schema``'s Swagger page needs and
a sandbox for downloads), ``X-Request-ID``, ``X-Process-ID`` and ``Cache-Control: no-store`` (except
static files). :func:`app.server.create_app` installs them; the exception handler
(:func:`app.server.make_exception_handler`) names the request id in what it answers and logs.
"""

from __future__ import annotations

import os
import re
import time
import uuid

import structlog
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger("jobdesk.web")

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
#: ``/schema`` only: Litestar's Swagger page boots from an inline script (with the spec inline).
SCHEMA_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
#: Downloads (``/files/{id}``): opened by mistake in a browser, a stored HTML file runs no script and
#: belongs to no origin, so an uploaded page cannot act in a signed-in user's session.
FILES_CSP = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"
SECURITY_HEADERS = (
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("permissions-policy", "camera=(), microphone=(), geolocation=()"),
)
_RAW_SECURITY = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS]
_RAW_CSP = {"page": CSP.encode(), "schema": SCHEMA_CSP.encode(), "files": FILES_CSP.encode()}
_SET_BY_US = {b"content-security-policy", b"x-request-id", *(k for k, _ in _RAW_SECURITY)}

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def request_id_for(scope: Scope) -> str:
    """The request's id: set by :class:`RequestContextMiddleware`, else the client's valid
    ``X-Request-ID``, else a new random one (stored on the scope so every caller agrees)."""
    state = scope.setdefault("state", {})
    rid = state.get("request_id")
    if rid is None:
        given = _header(scope, b"x-request-id")
        rid = given if given and _REQUEST_ID_RE.match(given) else uuid.uuid4().hex
        state["request_id"] = rid
        state.setdefault("started", time.perf_counter())
    return rid


class RequestContextMiddleware(ASGIMiddleware):
    """``request.state.request_id`` from ``X-Request-ID`` (or generated), bound into structlog's
    context vars for every line logged while serving the request, so its log lines can be found together."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        rid = request_id_for(scope)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=rid)
        await next_app(scope, receive, send)


async def security_headers(message: Message, scope: Scope) -> None:
    """``before_send`` hook: security headers, ``X-Request-ID`` and ``Cache-Control`` on every HTTP
    response — including those for paths no route matched, which skip route middleware — and one
    access-log line per response (``status``, ``ms`` since the request arrived)."""
    if message["type"] != "http.response.start" or scope["type"] != ScopeType.HTTP:
        return
    path = scope["path"]
    started = scope.get("state", {}).get("started")
    quiet = path.startswith(("/static/", "/healthz", "/readyz"))
    (log.debug if quiet else log.info)(
        "request",
        method=scope["method"],
        path=path,
        status=message["status"],
        ms=round((time.perf_counter() - started) * 1000, 1) if started else None,
        request_id=request_id_for(scope),
    )
    # raw (name, value) pairs: ours replace any of the same name; built without MutableScopeHeaders'
    # per-header scans, since this runs on every response (bench/pages.py)
    raw = [h for h in message.get("headers") or () if h[0].lower() not in _SET_BY_US]
    # a download's sandbox is for the stored bytes only: a missing file's error page is one of ours, and
    # under the sandbox it lost its stylesheet (a bare list of links where the page should be)
    download = path.startswith("/files/") and message["status"] < 400
    csp = "schema" if path.startswith("/schema") else "files" if download else "page"
    raw.append((b"content-security-policy", _RAW_CSP[csp]))
    raw.extend(_RAW_SECURITY)
    raw.append((b"x-request-id", request_id_for(scope).encode()))
    raw.append((b"x-process-id", str(os.getpid()).encode()))  # which of `serve --workers N` answered
    if not path.startswith("/static/") and not any(h[0].lower() == b"cache-control" for h in raw):
        raw.append((b"cache-control", b"no-store"))
    message["headers"] = raw
