"""Helpers for tests of the web layer: an app + client on the test's database, users, sign-in."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser, create_token, create_user
from app.db import create_engine
from app.server import create_app
from app.settings import Settings

PASSWORD = "correct horse battery"


@asynccontextmanager
async def app_client(
    settings: Settings, *, base_url: str = "http://testserver.local", **create_kw: Any
) -> AsyncIterator[AsyncTestClient]:
    """A started app (lifespan run) on ``settings`` and a test client for it."""
    app = create_app(settings, **create_kw)
    async with AsyncTestClient(app=app, base_url=base_url) as client:
        yield client


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
            token, _ = await create_token(conn, user_id, "test")
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
