"""The Litestar application: :func:`create_app`.

Start-up (the lifespan, in this order):

1. resolve the database (``DATABASE_URL`` or the embedded PostgreSQL) and create the web engine with its
   pool limits and per-connection timeouts (so a burst of requests or a stuck query answers 503 in
   seconds instead of piling up);
2. check the connection, then the schema: behind → apply the migrations when ``auto_migrate`` (what
   ``jobdesk serve`` does by default) or refuse to start, saying to run ``jobdesk migrate``;
3. advanced-alchemy's plugin provides ``db_session: AsyncSession`` to handlers, committing on 2xx/3xx
   responses and rolling back otherwise;
4. when ``WORKER_ENABLED``, start the in-app worker in a thread of its own
   (:func:`app.worker.threaded.start_in_thread`) — in one web process per host
   (:mod:`app.worker.host_lock`); on shutdown it is stopped, and awaited, before the engine is disposed.

Before any handler: :class:`app.web.input_guard.BodyLimitMiddleware` refuses a body over its route's
limit (413), :class:`app.web.auth_middleware.AuthenticationMiddleware` finds the user,
:class:`app.web.csrf.CsrfMiddleware` checks the session-bound CSRF token of every form post, and
:class:`app.web.input_guard.InputGuardMiddleware` refuses NUL characters, lone surrogates and over-deep
JSON with a 422 naming the field, and :class:`app.web.form_shape.ButtonFormMiddleware` a field sent to a
page form that reads none.

Outside the routing, :class:`app.web.methods.HeadAsGet` serves a HEAD as its path's GET without the body,
and makes an ``OPTIONS`` answer's ``Allow`` (like a 405's) list every method of the path.

Every response carries security headers (a strict Content Security Policy without inline scripts; ``/schema`` alone gets the relaxed policy its Swagger page needs), ``X-Request-ID``, ``X-Process-ID`` and
``Cache-Control: no-store`` (except static files): :mod:`app.web.request_context`. Errors become JSON ``{"detail": …}`` under ``/api/``,
a small fragment for htmx, and a page otherwise — never a traceback.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import structlog
from advanced_alchemy.extensions.litestar import AsyncSessionConfig, SQLAlchemyAsyncConfig, SQLAlchemyPlugin
from litestar import Litestar, MediaType, Request, Response
from litestar.config.app import AppConfig
from litestar.datastructures import CacheControlHeader, State
from litestar.exceptions import (
    HTTPException,
    InternalServerException,
    MethodNotAllowedException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.plugins import InitPluginProtocol
from litestar.plugins.htmx import HTMXPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig
from litestar.types import ControllerRouterHandler, Message, Scope
from sqlalchemy import exc as sa_exc

from app import __version__
from app.auth import API_PREFIX, LoginRequired, dummy_hash, login_url
from app.db import (
    DatabaseUnavailable,
    check_connection,
    create_engine,
    describe_url,
    driver_errors,
    head_revision,
    migration_status,
    referent_deleted,
    run_migrations,
)
from app.embedded import resolve_database_url
from app.errors import GONE_MESSAGE, AppError, BadInput, KeyReused
from app.formatting import format_bytes
from app.settings import Settings, get_settings
from app.socket_errors import is_connection_error
from app.web import admin, current_user, is_htmx, param_words, register_filters
from app.web.account import AccountController
from app.web.api import (
    AccountApiController,
    ApprovalsApiController,
    BatchesApiController,
    ControlsApiController,
    JobsApiController,
    JobTypesApiController,
    PipelinesApiController,
    UsersApiController,
)
from app.web.api.notifications import NotificationsApiController
from app.web.approvals import ApprovalsController
from app.web.auth import AuthController
from app.web.auth_middleware import AuthenticationMiddleware, UnroutedPage
from app.web.batches import BatchesController
from app.web.commits import commit_or_refuse
from app.web.csrf import FAILED as CSRF_FAILED
from app.web.csrf import CsrfMiddleware
from app.web.deps import REFUSAL_WORDS, REFUSALS
from app.web.files import FilesApiController, FilesController
from app.web.form_shape import ButtonFormMiddleware
from app.web.health import HealthController
from app.web.home import HomeController
from app.web.input_guard import BodyLimitMiddleware, InputGuardMiddleware
from app.web.job_log import JobLogApiController, JobLogController
from app.web.jobs import JobsController
from app.web.json_body import JsonBodyRequest
from app.web.methods import HeadAsGet, allow_of_405
from app.web.metrics import MetricsController
from app.web.notifications import NotificationsController
from app.web.openapi import plain_descriptions
from app.web.pipelines import PipelinesController
from app.web.refused_requests import audit_refused_request
from app.web.request_context import RequestContextMiddleware, request_id_for, security_headers
from app.worker.host_lock import InAppWorkerSlot
from app.worker.threaded import start_in_thread

log = structlog.get_logger("jobdesk.web")

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"

CSRF_EXCLUDE = ["^/api/", "^/healthz", "^/readyz", "^/metrics", "^/static/"]


class StartupRefused(DatabaseUnavailable):
    """The server will not start; the message says why and what to run (e.g. ``jobdesk migrate``)."""


# --- errors -------------------------------------------------------------------------------------------------

CSRF_MESSAGE = (
    "This form has expired or was sent from another site, so nothing was changed. "
    "Reload the page and try again."
)
BUSY_MESSAGE = (
    "The server is busy right now (every database connection is in use). Please try again in a moment."
)
DB_DOWN_MESSAGE = "The database cannot be reached right now. Please try again in a moment."
SLOW_MESSAGE = "The database took too long to answer. Please try again in a moment."

_DISCONNECT_TYPES: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InvalidCatalogNameError,
    DatabaseUnavailable,
)


def _database_trouble(exc: BaseException) -> str | None:
    """A readable 503 message when ``exc`` means the database is busy, down or too slow; else None."""
    if isinstance(exc, sa_exc.TimeoutError):
        return BUSY_MESSAGE
    if isinstance(exc, DatabaseUnavailable | ConnectionError | TimeoutError):
        return DB_DOWN_MESSAGE
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return DB_DOWN_MESSAGE
    for candidate in driver_errors(exc):
        if isinstance(candidate, asyncpg.QueryCanceledError):
            return SLOW_MESSAGE
        if isinstance(candidate, _DISCONNECT_TYPES) or is_connection_error(candidate):
            return DB_DOWN_MESSAGE  # a file's OSError (the files folder, a full disk) is not the database's
    if isinstance(exc, sa_exc.InterfaceError):
        return DB_DOWN_MESSAGE
    return None


UNSTORABLE_MESSAGE = (
    "Part of what was sent cannot be stored: a number out of range, or text with a NUL character or a "
    "lone surrogate. Nothing was changed."
)


def _unstorable_input(exc: BaseException) -> bool:
    """Whether the database refused a value of the request itself, not the query: a number too large
    for its column or text PostgreSQL cannot hold (checked once the value reaches the driver, so an
    input that slipped past a form's checks still answers 422 instead of 500)."""
    errors = driver_errors(exc)
    if not errors:
        return False
    cause = errors[-1]
    if isinstance(cause, asyncpg.CharacterNotInRepertoireError | asyncpg.UntranslatableCharacterError):
        return True
    if type(cause) is not asyncpg.DataError:
        return False
    return isinstance(cause.__cause__, OverflowError | UnicodeEncodeError)


CLIENT_GONE = "client disconnected prematurely"
"""Litestar's words (a 500) when the connection ends before the body it announced."""
BODY_CUT_SHORT = "The request's body ended before the length it announced (Content-Length); send it again."


def _classify(
    exc: Exception, settings: Settings, handler: Any = None
) -> tuple[int, str, dict[str, str], dict[str, str]]:
    """``(status, detail, field errors, extra headers)`` for any exception; ``handler``, the route's
    handler, describes what its parameters take."""
    errors: dict[str, str]
    if isinstance(exc, AppError):
        errors = exc.errors if isinstance(exc, BadInput) else dict(exc.extra.get("errors") or {})
        return exc.status_code, exc.detail, errors, dict(exc.extra.get("headers") or {})
    if isinstance(exc, ValidationException):
        detail, errors = param_words.refusal(exc, handler)
        return 422, detail, errors, {}
    if isinstance(exc, NotFoundException):
        return 404, "There is nothing at this address.", {}, {}
    if isinstance(exc, PermissionDeniedException) and exc.detail == CSRF_FAILED:
        return 403, CSRF_MESSAGE, {}, {}
    if isinstance(exc, MethodNotAllowedException):
        return (
            405,
            "This address does not accept that kind of request.",
            {},
            allow_of_405(dict(exc.headers or {})),
        )
    if isinstance(exc, InternalServerException) and exc.detail == CLIENT_GONE:
        # The client's fault (a Content-Length longer than the body it sent, or the connection closed
        # mid-body; uvicorn has already answered a malformed request with its own 400): a 400, logged
        # as a request like any other, not as an error of ours with a traceback.
        return 400, BODY_CUT_SHORT, {}, {}
    if isinstance(exc, HTTPException):
        if exc.status_code == 413:
            limit = format_bytes(settings.upload_max_bytes)
            return 413, f"The request is too large: the limit is {limit}.", {}, {}
        if isinstance(exc, NotAuthorizedException):
            return 401, exc.detail or "Please sign in.", {}, {}
        return exc.status_code, exc.detail, {}, dict(exc.headers or {})
    if _unstorable_input(exc):
        return 422, UNSTORABLE_MESSAGE, {}, {}
    if referent_deleted(exc):
        return 409, GONE_MESSAGE, {}, {}
    trouble = _database_trouble(exc)
    if trouble is not None:
        return 503, trouble, {}, {"Retry-After": "5"}
    return 500, "Something went wrong on our side. The error has been logged.", {}, {}


def make_exception_handler() -> Callable[[Request[Any, Any, Any], Exception], Response[Any]]:
    """The one exception handler: JSON for ``/api/``, a fragment for htmx, a page otherwise."""

    def handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        settings: Settings = request.app.state.settings
        route = request.scope.get("route_handler")
        status, detail, errors, headers = _classify(exc, settings, route)
        reword = getattr(route, "opt", {}).get(REFUSAL_WORDS)
        if reword is not None and status in REFUSALS and not isinstance(exc, KeyReused):
            # a reused key says what the first request made, not what this one did not
            detail = reword(detail)
        rid = request_id_for(request.scope)
        if status == 500:
            log.error("unhandled error", exc_info=exc, path=request.scope["path"], request_id=rid)
        elif status == 503:
            log.warning("database trouble", error=f"{type(exc).__name__}: {exc}"[:500], request_id=rid)
        elif status == 409 and referent_deleted(exc):
            # The answer says only that something was deleted; the database's words (the constraint, the
            # row) tell a deletion from a foreign key that a request of ours breaks on its own.
            log.warning(
                "a row the request refers to was deleted",
                error=f"{type(exc).__name__}: {exc}"[:500],
                request_id=rid,
            )
        path = request.scope["path"]

        if path.startswith((API_PREFIX, "/schema")):
            body: dict[str, Any] = {"detail": detail}
            if errors:
                body["errors"] = errors
            if status == 401:
                headers.setdefault("WWW-Authenticate", "Bearer")
            return Response(body, status_code=status, media_type=MediaType.JSON, headers=headers)

        if isinstance(exc, LoginRequired):
            if is_htmx(request):
                back = request.headers.get("hx-current-url") or "/"
                back_path = re.sub(r"^https?://[^/]+", "", back)
                return Response("", status_code=401, headers={"HX-Redirect": login_url(back_path)})
            next_path = exc.next_path if request.method == "GET" else "/"
            return Redirect(login_url(next_path), status_code=303)

        if is_htmx(request):
            fragment = (
                f'<div class="notice notice-error" role="alert">{html.escape(detail)}'
                + (f" <small>(reference {html.escape(rid)})</small>" if status >= 500 else "")
                + "</div>"
            )
            return Response(fragment, status_code=status, media_type=MediaType.HTML, headers=headers)

        template = "404.html" if status == 404 else "error.html"
        return (Template if "user" in request.scope else UnroutedPage)(
            template_name=template,
            context={
                "user": current_user(request),
                "status": status,
                "title": _TITLES.get(status, "Something went wrong"),
                "detail": detail,
                "errors": errors,
                "request_id": rid,
            },
            status_code=status,
            headers=headers,
        )

    return handler


_TITLES = {
    400: "That request could not be understood",
    401: "Please sign in",
    403: "Not allowed",
    404: "Page not found",
    405: "Not allowed here",
    409: "That cannot be done right now",
    413: "Too large",
    422: "Please check what you entered",
    429: "Over a limit",
    500: "Something went wrong",
    503: "Temporarily unavailable",
}


# --- lifespan -----------------------------------------------------------------------------------------------


class _AfterPlugins(InitPluginProtocol):
    """Appends a lifespan after the plugins listed before it (so it starts later and stops sooner)."""

    def __init__(self, lifespan: Callable[[Litestar], AbstractAsyncContextManager[None]]) -> None:
        self._lifespan = lifespan

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.lifespan.append(self._lifespan)
        return app_config


def _database_lifespan(
    sa_config: SQLAlchemyAsyncConfig, *, auto_migrate: bool
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        settings: Settings = app.state.settings
        url = await asyncio.to_thread(resolve_database_url, settings)
        engine = create_engine(
            url,
            pool_size=settings.db_pool_size,
            pool_timeout=settings.db_pool_timeout_secs,
            application_name="jobdesk-web",
            statement_timeout_ms=settings.db_statement_timeout_ms,
            idle_in_transaction_timeout_ms=settings.db_idle_in_transaction_timeout_ms,
            pooler=settings.database_pooler,
        )
        sa_config.engine_instance = engine
        # advanced-alchemy keeps the session maker it made, bound to the engine it was made with: a
        # started-again app (new settings, or the same database after a restart) needs one on this engine
        sa_config.session_maker = None
        app.state.engine = engine
        app.state.database_url = url
        try:
            await check_connection(engine)
            current, message = await migration_status(engine)
            if not current:
                if not auto_migrate:
                    raise StartupRefused(f"Refusing to start: {message}.")
                log.info("applying migrations", database=describe_url(url), reason=message)
                await run_migrations(url)
                current, message = await migration_status(engine)
                if not current:
                    raise StartupRefused(f"Refusing to start: {message}.")
            app.state.head_revision = head_revision()
            log.info("database ready", database=describe_url(url), schema=app.state.head_revision)
            yield
        finally:
            await engine.dispose()

    return lifespan


def _worker_lifespan() -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        settings: Settings = app.state.settings
        app.state.worker = None
        app.state.worker_task = None
        if not settings.worker_enabled:
            yield
            return
        # The in-app worker runs in a thread with its own event loop (and its own engines), so that a
        # processor blocking its loop cannot block the pages; one web process per host runs it.
        slot = InAppWorkerSlot(settings, lambda: start_in_thread(settings, app.state.database_url), app.state)
        await slot.start()
        try:
            yield
        finally:
            await slot.stop()  # graceful: running jobs drain; the handle logs a worker that died

    return lifespan


# --- the app ------------------------------------------------------------------------------------------------


CONTROLLERS: list[ControllerRouterHandler] = [
    HomeController,
    AuthController,
    AccountController,
    HealthController,
    MetricsController,
    AccountApiController,
    ApprovalsApiController,
    JobsApiController,
    PipelinesApiController,
    BatchesApiController,
    JobTypesApiController,
    ControlsApiController,
    UsersApiController,
    *admin.CONTROLLERS,
    JobsController,
    JobLogController,
    JobLogApiController,
    NotificationsController,
    NotificationsApiController,
    PipelinesController,
    BatchesController,
    FilesController,
    FilesApiController,
    ApprovalsController,
]
"""Every page and API controller, in the order Litestar registers them."""


async def _committed_already(message: Message, scope: Scope) -> None:
    """advanced-alchemy's ``before_send`` slot: the session is committed and closed by the hook of
    :func:`~app.web.commits.commit_or_refuse`."""


def _sqlalchemy_config() -> SQLAlchemyAsyncConfig:
    """A ``db_session`` per request, committed on 2xx and 3xx answers (redirects included), rolled back
    otherwise; a failed commit is a 503 (:mod:`app.web.commits`)."""
    return SQLAlchemyAsyncConfig(
        # The engine is created in the lifespan (the embedded database may have to start first) and
        # handed to this config there, before advanced-alchemy's own lifespan reads it.
        # Committed by commit_or_refuse, which the app runs before the security headers and the access log
        # (a failed commit changes the status they see); advanced-alchemy appends this one after them.
        before_send_handler=_committed_already,
        session_dependency_key="db_session",
        # advanced-alchemy's cache and FileObject listeners are unused here; each commit of each
        # request paid for their checks (about a tenth of a page's CPU in bench/pages.py)
        session_config=AsyncSessionConfig(
            info={"enable_cache_listener": False, "enable_file_object_listener": False}
        ),
    )


def _openapi() -> OpenAPIConfig:
    """``/schema``: the API's OpenAPI document and its Swagger page, served from our own static files."""
    return OpenAPIConfig(
        title="Jobdesk API",
        version=__version__,
        path="/schema",
        render_plugins=[
            SwaggerRenderPlugin(
                path="/",
                js_url="/static/vendor/swagger-ui-bundle.js",
                css_url="/static/vendor/swagger-ui.css",
                standalone_preset_js_url="/static/vendor/swagger-ui-standalone-preset.js",
                favicon="<link rel='icon' type='image/svg+xml' href='/static/favicon.svg'>",
            )
        ],
        components=Components(security_schemes={"BearerToken": SecurityScheme(type="http", scheme="bearer")}),
        security=[{"BearerToken": []}],
        use_handler_docstrings=True,
    )


def create_app(settings: Settings | None = None, *, auto_migrate: bool = False) -> Litestar:
    """The Jobdesk web application.

    ``settings`` defaults to :func:`app.settings.get_settings` (the environment). ``auto_migrate``: apply
    pending migrations at start-up (``jobdesk serve`` passes ``True`` unless ``--no-migrate``); otherwise
    a database whose schema is behind makes start-up fail with :class:`StartupRefused`, whose message
    says to run ``jobdesk migrate``. Connection failures raise :class:`app.db.DatabaseUnavailable`.

    The app reads its settings from ``app.state.settings`` when its lifespan starts and per request,
    never while it is built: :func:`rebind` gives a stopped app other settings. ``app.state`` gets
    ``engine``, ``database_url``, ``worker`` and ``worker_task`` (both ``None`` without an in-app
    worker), once the lifespan has started.
    """
    sa_config = _sqlalchemy_config()
    static = create_static_files_router(
        path="/static",
        directories=[STATIC_DIR],
        name="static",
        include_in_schema=False,
        cache_control=CacheControlHeader(max_age=300),
    )
    app = Litestar(
        route_handlers=[*CONTROLLERS, static],
        lifespan=[_database_lifespan(sa_config, auto_migrate=auto_migrate)],
        plugins=[SQLAlchemyPlugin(config=sa_config), HTMXPlugin(), _AfterPlugins(_worker_lifespan())],
        middleware=[
            RequestContextMiddleware(),
            # after the sign-in check (which reads no body), so that an admin's request refused for its size
            # is audited as theirs; before anything reads a body (the CSRF check reads a form's)
            AuthenticationMiddleware(),
            BodyLimitMiddleware(),
            CsrfMiddleware(exclude=CSRF_EXCLUDE),
            InputGuardMiddleware(),
            ButtonFormMiddleware(),
        ],
        before_send=[commit_or_refuse(sa_config.session_scope_key), security_headers],
        after_exception=[audit_refused_request(sa_config.session_scope_key)],
        template_config=TemplateConfig(
            directory=TEMPLATES_DIR, engine=JinjaTemplateEngine, engine_callback=register_filters
        ),
        openapi_config=_openapi(),
        on_startup=[plain_descriptions, dummy_hash],  # dummy_hash: made here, not at the first sign-in
        exception_handlers={Exception: make_exception_handler()},
        # BodyLimitMiddleware applies UPLOAD_MAX_BYTES and the smaller limits, from the settings of the day
        request_max_body_size=None,
        request_class=JsonBodyRequest,
        logging_config=None,
        debug=False,
    )
    app.asgi_handler = HeadAsGet(app, app.asgi_handler)
    return rebind(app, settings or get_settings())


def rebind(app: Litestar, settings: Settings) -> Litestar:
    """``app`` (not running) with ``settings`` and a new, empty state: its next start reads them.

    Building an app costs Litestar a third of a second or more (it inspects every handler), many times
    what starting one costs; one process that serves several databases in turn, as the tests do, builds
    it once."""
    app.state = State({"settings": settings, "engine": None, "worker": None, "worker_task": None})
    return app
