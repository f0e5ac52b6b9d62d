"""The admin console pages (issue 7 §4–6; issue 11 §1–5): ``/admin`` (workers and queue health,
pause/resume and limits), ``/admin/audit``, ``/admin/users``, ``/admin/schedules``, the job page's
"Run now"/"Reschedule", the "Paused by …" banner, and the admin nav. Access (admin / other user /
signed out), POST-only and CSRF on every action; form errors; the C17 EXPLAIN check of the health poll."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import support_forms  # noqa: F401  (registers test.form, …)
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine
from webkit import PASSWORD, add_token, add_user, app_client, csrf_from, login

from app import server
from app.auth import CurrentUser
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings

HX = {"HX-Request": "true"}


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


@pytest.fixture
async def client(ui_settings: Settings) -> AsyncIterator[AsyncTestClient]:
    async with app_client(ui_settings) as c:
        yield c


async def as_user(client: AsyncTestClient, email: str) -> None:
    client.cookies.clear()
    r = await login(client, email)
    assert r.status_code == 303, r.text


@pytest.fixture
async def admin(client: AsyncTestClient, db_url: str) -> CurrentUser:
    user = await add_user(db_url, "root@example.com", admin=True)
    await as_user(client, "root@example.com")
    return user


async def token_of(client: AsyncTestClient, path: str = "/admin") -> str:
    return csrf_from((await client.get(path)).text)


async def post(client: AsyncTestClient, path: str, data: dict[str, Any] | None = None, **kw: Any) -> Any:
    data = dict(data or {})
    data.setdefault("_csrf_token", await token_of(client, "/jobs"))
    return await client.post(path, data=data, follow_redirects=False, **kw)


async def test_smoke_pages_render(client: AsyncTestClient, admin: CurrentUser) -> None:
    for path in ("/admin", "/admin/health", "/admin/audit", "/admin/users", "/admin/schedules"):
        r = await client.get(path)
        assert r.status_code == 200, (path, r.text[:3000])
    r = await client.get("/admin/health", headers=HX)
    assert r.status_code == 200 and r.text.lstrip().startswith("<section id=\"admin-health\"")
