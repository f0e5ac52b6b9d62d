"""Pages, probes, headers and error handling of the web app (case C15)."""

from __future__ import annotations

import re
import time
from typing import Any

import asyncpg
import pytest
from litestar import Request, get, post
from litestar.params import FromQuery
from litestar.testing import AsyncTestClient

from app.errors import BadInput, Conflict
from app.server import create_app
from app.web.input_guard import READS_BODY
from app.web.request_context import CSP
from tests.support.webkit import add_token, add_user, app_client, login

# --- home --------------------------------------------------------------------------------------------------


async def test_first_run_home_says_how_to_create_the_first_admin(client: AsyncTestClient) -> None:
    r = await client.get("/")
    assert r.status_code == 200
    assert "There is no account yet" in r.text
    assert "<code>jobdesk create-user you@example.com --admin</code>" in r.text
    assert 'href="/login"' in r.text
    # this server runs on DATABASE_URL (the test database): the command needs the same one, or the
    # account lands in the embedded database and signing in here fails; the address is not shown
    said = r.text[r.text.index('id="same-database"') :][:600]
    assert "same <code>DATABASE_URL</code>" in said and "embedded database" in said
    assert "127.0.0.1:5432" not in r.text and "postgres@" not in r.text


async def test_signed_out_home_redirects_to_sign_in_once_a_user_exists(
    client: AsyncTestClient, db_url: str
) -> None:
    await add_user(db_url, "ann@example.com")
    r = await client.get("/", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login"
    r = await client.get("/")
    assert "<h1>Sign in</h1>" in r.text
    assert "create-user" not in r.text


async def test_signed_in_home_is_the_start_page_with_a_sign_out_button(
    client: AsyncTestClient, db_url: str
) -> None:
    await add_user(db_url, "ann@example.com", admin=True)
    await login(client, "ann@example.com")
    r = await client.get("/")
    assert r.status_code == 200
    assert "<h1>Start a job</h1>" in r.text
    assert 'action="/logout"' in r.text
    assert "Sign out" in r.text
    assert "ann@example.com" in r.text
    assert "admin" in r.text


async def test_base_layout_wires_htmx_css_and_csrf_without_inline_code(client: AsyncTestClient) -> None:
    html = (await client.get("/login")).text
    for asset in ("/static/vendor/pico.min.css", "/static/app.css", "/static/htmx.min.js", "/static/app.js"):
        assert asset in html
    assert '"allowEval":false' in html
    assert '"includeIndicatorStyles":false' in html
    token = client.cookies["csrftoken"]
    assert f'hx-headers=\'{{"x-csrftoken": "{token}"}}\'' in html
    # no inline script or style anywhere, no inline event handlers
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert "<style" not in html
    assert " style=" not in html
    assert not re.search(r"\son[a-z]+=", html)


async def test_static_files_are_served(client: AsyncTestClient) -> None:
    r = await client.get("/static/htmx.min.js")
    assert r.status_code == 200
    assert 'version:"2.0.11"' in r.text
    assert "no-store" not in r.headers.get("cache-control", "")
    assert (await client.get("/static/app.js")).status_code == 200
    assert (await client.get("/static/nope.js")).status_code == 404


# --- probes ---------------------------------------------------------------------------------------------------


async def test_healthz(client: AsyncTestClient) -> None:
    r = await client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


async def test_readyz_ok(client: AsyncTestClient) -> None:
    r = await client.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ready", "checks": {"database": "ok", "migrations": "ok"}}


async def test_readyz_503_when_migrations_are_missing(
    client: AsyncTestClient, pg: asyncpg.Connection
) -> None:
    await pg.execute("DROP TABLE alembic_version")
    r = await client.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable"
    assert "migrations" in body["detail"]
    assert "jobdesk migrate" in body["detail"]
    await pg.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
    await pg.execute("INSERT INTO alembic_version VALUES ('0000_older')")
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert "the schema is at 0000_older" in r.json()["detail"]


async def test_database_gone_gives_503_pages_not_500(
    client: AsyncTestClient, db_url: str, pg_server_url: str
) -> None:
    from sqlalchemy.engine import make_url

    await add_user(db_url, "ann@example.com")
    await login(client, "ann@example.com")
    assert (await client.get("/")).status_code == 200
    name = make_url(db_url).database
    admin = await asyncpg.connect(
        make_url(pg_server_url).set(drivername="postgresql", database="postgres").render_as_string(False)
    )
    try:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await admin.close()
    started = time.monotonic()
    r = await client.get("/")
    assert r.status_code == 503
    assert "The database cannot be reached right now" in r.text
    assert "Traceback" not in r.text
    assert "asyncpg" not in r.text
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert "database: unreachable" in r.json()["detail"]
    r = await client.get("/api/me", headers={"Authorization": "Bearer jd_whatever"})
    assert r.status_code == 503
    assert r.json() == {"detail": "The database cannot be reached right now. Please try again in a moment."}
    assert time.monotonic() - started < 10


async def test_pool_exhausted_gives_503_quickly(make_settings: Any, db_url: str) -> None:
    """Case C15: pool acquisition has a timeout, so the UI answers 503 quickly instead of hanging."""
    settings = make_settings(worker_enabled=False, db_pool_size=1, db_pool_timeout_secs=0.3)
    async with app_client(settings) as c:
        engine = c.app.state.engine
        held = engine.connect()
        c.blocking_portal.call(held.start)  # take the only pooled connection, in the app's loop
        try:
            started = time.monotonic()
            r = await c.get("/")
            elapsed = time.monotonic() - started
            assert r.status_code == 503
            assert "every database connection is in use" in r.text
            assert r.headers["retry-after"] == "5"
            assert elapsed < 3
            r = await c.get("/", headers={"HX-Request": "true"})
            assert r.status_code == 503
            assert r.text.startswith('<div class="notice notice-error"')
        finally:
            c.blocking_portal.call(held.close)
        assert (await c.get("/")).status_code == 200


# --- headers ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/login", "/healthz", "/api/me", "/no/such/page", "/static/app.css"])
async def test_security_headers_on_every_response(client: AsyncTestClient, path: str) -> None:
    r = await client.get(path)
    assert r.headers["content-security-policy"] == CSP
    assert "script-src 'self';" in CSP
    assert "unsafe-inline" not in CSP
    assert "frame-ancestors 'none'" in CSP
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "same-origin"
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


async def test_request_id_is_taken_from_the_request_and_echoed(client: AsyncTestClient) -> None:
    r = await client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = await client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces" + "x" * 200})
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


async def test_schema_page_is_offline_and_alone_in_its_relaxed_csp(client: AsyncTestClient) -> None:
    r = await client.get("/schema")
    assert r.status_code == 200
    assert "/static/vendor/swagger-ui-bundle.js" in r.text
    assert "/static/vendor/swagger-ui.css" in r.text
    assert "/static/vendor/swagger-ui-standalone-preset.js" in r.text
    assert not re.search(r"https?://", r.text), re.findall(r"https?://[^\s\"']+", r.text)
    assert "'unsafe-inline'" in r.headers["content-security-policy"]
    spec = (await client.get("/schema/openapi.json")).json()
    assert "/api/me" in spec["paths"]
    assert "/login" not in spec["paths"]


# --- errors --------------------------------------------------------------------------------------------------------


async def test_404_page(client: AsyncTestClient) -> None:
    r = await client.get("/no/such/page")
    assert r.status_code == 404
    assert "<h1>Page not found</h1>" in r.text
    assert 'href="/"' in r.text
    r = await client.get("/api/no/such/thing")
    assert r.status_code == 404
    assert r.json() == {"detail": "There is nothing at this address."}


async def test_wrong_method_is_405(client: AsyncTestClient) -> None:
    for method, path in (("GET", "/logout"), ("DELETE", "/login"), ("POST", "/healthz")):
        r = await client.request(method, path)
        assert r.status_code == 405, (method, path)


@get("/boom", sync_to_thread=False)
def boom() -> str:
    raise RuntimeError("secret internals /etc/passwd")


@get("/api/boom", sync_to_thread=False)
def api_boom() -> str:
    raise RuntimeError("secret internals")


@get("/conflict", sync_to_thread=False)
def conflict() -> str:
    raise Conflict("This job has already finished.")


@get("/api/bad", sync_to_thread=False)
def api_bad() -> str:
    raise BadInput("Please check the input.", errors={"input_data.seconds": "must be a number"})


@get("/api/typed", sync_to_thread=False)
def api_typed(count: FromQuery[int]) -> dict[str, int]:
    return {"count": count}


async def test_errors_are_pages_fragments_or_json_never_tracebacks(make_settings: Any) -> None:
    app = create_app(make_settings(worker_enabled=False))
    for handler in (boom, api_boom, conflict, api_bad, api_typed):
        app.register(handler)
    async with AsyncTestClient(app=app) as c:
        r = await c.get("/boom")
        assert r.status_code == 500
        assert "Something went wrong" in r.text
        assert "Reference:" in r.text
        assert "secret internals" not in r.text
        assert "Traceback" not in r.text
        r = await c.get("/api/boom")
        assert r.status_code == 500
        assert "secret" not in r.text
        assert set(r.json()) == {"detail"}
        r = await c.get("/conflict")
        assert r.status_code == 409
        assert "This job has already finished." in r.text
        assert "<html" in r.text
        r = await c.get("/conflict", headers={"HX-Request": "true"})
        assert r.status_code == 409
        assert r.text == '<div class="notice notice-error" role="alert">This job has already finished.</div>'
        r = await c.get("/api/bad")
        assert r.status_code == 422
        assert r.json() == {
            "detail": "Please check the input.",
            "errors": {"input_data.seconds": "must be a number"},
        }
        r = await c.get("/api/typed", params={"count": "many"})
        assert r.status_code == 422
        body = r.json()
        assert body["errors"] == {"count": "must be a whole number"}
        assert "count" in body["detail"]
        r = await c.get("/api/typed")
        assert r.status_code == 422
        assert "count" in r.json()["errors"]


@post("/api/upload-test", status_code=200, opt={READS_BODY: True})
async def upload_test(request: Request[Any, Any, Any]) -> dict[str, int]:
    return {"size": len(await request.body())}


async def test_request_body_limit_is_upload_max_bytes(make_settings: Any, db_url: str) -> None:
    user = await add_user(db_url, "ann@example.com")
    auth = {
        "Authorization": f"Bearer {await add_token(db_url, user.id)}",
        "Content-Type": "application/octet-stream",
    }
    app = create_app(make_settings(worker_enabled=False, upload_max_bytes=2048))
    app.register(upload_test)
    async with AsyncTestClient(app=app) as c:
        r = await c.post("/api/upload-test", content=b"x" * 2048, headers=auth)
        assert r.status_code == 200
        assert r.json() == {"size": 2048}
        r = await c.post("/api/upload-test", content=b"x" * 2049, headers=auth)
        assert r.status_code == 413
        assert r.json() == {"detail": "The request is too large: the limit is 2 KiB."}


def test_no_handler_mixes_safe_and_state_changing_methods(make_settings: Any) -> None:
    """Case C21: a state-changing handler never answers GET (GET on it gets 405). Holds for every
    route registered in create_app, including those added later."""
    app = create_app(make_settings(worker_enabled=False))
    safe = {"GET", "HEAD", "OPTIONS"}
    checked = 0
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            methods = set(handler.http_methods)
            assert methods <= safe or not (methods & {"GET", "HEAD"}), (route.path, methods)
            checked += 1
    assert checked >= 6
