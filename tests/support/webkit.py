"""Helpers for tests of the web layer: an app + client on the test's database, users, sign-in."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from litestar import Litestar
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser, create_user
from app.db import create_engine
from app.server import create_app, rebind
from app.settings import Settings
from app.tokens import create_token

PASSWORD = "correct horse battery"
HX = {"HX-Request": "true"}
"""Headers of an htmx request (the app answers with a fragment)."""
ROOT = Path(__file__).resolve().parents[2]
FORMS_ENV = {"JOBDESK_PROCESSOR_MODULES": "tests.support.forms", "PYTHONPATH": str(ROOT)}
"""Environment for a ``jobdesk serve`` subprocess that loads the test-only form job types."""


_IDLE_APPS: list[Litestar] = []
"""Apps built by earlier tests of this process and stopped: building one costs Litestar a third of a
second of CPU, a quarter of what the web tests spent, and a stopped app starts again on other settings."""


@asynccontextmanager
async def app_client(
    settings: Settings, *, base_url: str = "http://testserver.local", fresh: bool = False, **create_kw: Any
) -> AsyncIterator[AsyncTestClient]:
    """A started app (lifespan run) on ``settings`` and a test client for it. ``fresh``: an app built
    for this test alone (one that a test changed while it was built, say), never given to another."""
    if fresh or create_kw:
        async with AsyncTestClient(app=create_app(settings, **create_kw), base_url=base_url) as client:
            yield client
        return
    app = rebind(_IDLE_APPS.pop(), settings) if _IDLE_APPS else create_app(settings)
    async with AsyncTestClient(app=app, base_url=base_url) as client:
        yield client
    _IDLE_APPS.append(app)  # not after a failure: whatever broke may have left it half-started


async def add_user(
    db_url: str, email: str, *, password: str = PASSWORD, admin: bool = False, active: bool = True
) -> CurrentUser:
    """Create a user straight in the database (committed)."""
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            user = await create_user(conn, email, password, is_admin=admin)
            if not active:
                from sqlalchemy import text

                await conn.execute(text("UPDATE users SET is_active = false WHERE id = :id"), {"id": user.id})
        return user
    finally:
        await engine.dispose()


async def add_token(db_url: str, user_id: int) -> str:
    """A new API token for ``user_id`` (plaintext)."""
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            token, _, _ = await create_token(conn, user_id, "test")
        return token
    finally:
        await engine.dispose()


def csrf_from(html: str) -> str:
    """The hidden ``_csrf_token`` value of the first form on the page."""
    match = re.search(r'name="_csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


async def login(
    client: AsyncTestClient, email: str, password: str = PASSWORD, next_path: str = "/"
) -> httpx.Response:
    """Open the sign-in page (gets the CSRF cookie and token), then submit the form."""
    page = await client.get("/login")
    assert page.status_code == 200
    return await client.post(
        "/login",
        data={"email": email, "password": password, "next": next_path, "_csrf_token": csrf_from(page.text)},
        follow_redirects=False,
    )


async def sign_in_as(client: AsyncTestClient, db_url: str, email: str, *, admin: bool = False) -> CurrentUser:
    """A new user, signed in on ``client`` (cookies of the previous user are dropped)."""
    user = await add_user(db_url, email, admin=admin)
    await switch_to(client, email)
    return user


async def switch_to(client: AsyncTestClient, email: str) -> None:
    client.cookies.clear()
    r = await login(client, email)
    assert r.status_code == 303, r.text


async def csrf(client: AsyncTestClient) -> str:
    """A CSRF token of the signed-in session (from the My jobs page)."""
    return csrf_from((await client.get("/jobs")).text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(
    db_url: str, data_dir: Path, start_timeout: float = 90, *, real_hashing: bool = False, **env: str
) -> Iterator[str]:
    """``jobdesk serve`` in a subprocess on a free loopback port; yields its base URL.

    ``env`` adds environment variables (``WORKER_ENABLED`` defaults to ``false``). The server gets
    SIGTERM on exit; its output is in ``data_dir/serve.log``. It hashes passwords as the tests do, at
    argon2's cheapest (:mod:`tests.support.cheap_hashing`); ``real_hashing``: at the app's own parameters.
    """
    port = free_port()
    jobdesk = Path(sys.executable).parent / "jobdesk"
    if not real_hashing:
        cmd = [sys.executable, "-m", "tests.support.cheap_serve"]
    else:
        cmd = [str(jobdesk)] if jobdesk.exists() else [sys.executable, "-m", "app.cli"]
    full_env = {k: v for k, v in os.environ.items() if k not in {"TEST_DATABASE_URL"}}
    if not real_hashing:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
    full_env.update(
        DATABASE_URL=db_url,
        SECRET_KEY="browser-test-secret-key-0123456789abcdef",
        JOBDESK_DATA_DIR=str(data_dir),
        JOBDESK_BASE_URL=f"http://127.0.0.1:{port}",
        WORKER_ENABLED="false",
        LOG_LEVEL="INFO",
    )
    full_env.update(env)
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / "serve.log").open("w")
    proc = subprocess.Popen(
        [*cmd, "serve", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=data_dir
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                httpx.get(base + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"jobdesk serve did not start: {(data_dir / 'serve.log').read_text()}"
                    ) from None
                time.sleep(0.2)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextmanager
def admin_server_with_worker(db_url: str, data_dir: Path, modules: str) -> Iterator[tuple[str, str]]:
    """``jobdesk serve`` with its worker, the form fields' limits (``FORMS_ENV``) and the processor
    ``modules``, for the admin ann@example.com; yields the base URL and an API token of hers."""
    user = asyncio.run(add_user(db_url, "ann@example.com", admin=True))
    token = asyncio.run(add_token(db_url, user.id))
    env = {
        "WORKER_ENABLED": "true",
        **FORMS_ENV,
        "JOBDESK_PROCESSOR_MODULES": modules,
        "JOB_PROCESSOR_POLL_INTERVAL": "0.5",
        "LOG_LEVEL": "WARNING",
        # stopped at the test's end with its long jobs still running: released after a second, not
        # waited for (30 s by default)
        "WORKER_SHUTDOWN_GRACE_SECS": "1",
    }
    with running_server(db_url, data_dir, **env) as base:
        yield base, token


async def bearer(db_url: str, email: str, admin: bool = False) -> tuple[Any, dict[str, str]]:
    """A user and the ``Authorization`` header of an API token of theirs."""
    user = await add_user(db_url, email, admin=admin)
    return user, {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}


@dataclass
class AdminApi:
    """A started app (no in-app worker), the test's database and the headers of root@example.com's API
    token (an admin): the ``admin_api`` fixture (``tests/api/conftest.py``)."""

    client: AsyncTestClient
    pg: asyncpg.Connection
    root: dict[str, str]


@dataclass
class Site:
    """A started app (no in-app worker) with an admin, boss@example.com, signed in; the headers of the
    admin's API token; and three queued ``noop`` jobs of theirs (``job_id``: the first). The ``site``
    fixture of ``tests/web``, for the walks over every route."""

    client: AsyncTestClient
    bearer: dict[str, str]
    job_ids: list[str]

    @property
    def app(self) -> Litestar:
        return self.client.app  # type: ignore[return-value]

    @property
    def job_id(self) -> str:
        return self.job_ids[0]
