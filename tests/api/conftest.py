"""Fixtures shared by the API tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.support.webkit import AdminApi, add_token, add_user, app_client


@pytest.fixture
async def admin_api(make_settings: Any, pg: asyncpg.Connection) -> AsyncIterator[AdminApi]:
    """The app, started without its worker, with an admin (root@example.com) and that admin's token."""
    settings = make_settings(worker_enabled=False)
    db = settings.database_url or ""
    root = await add_user(db, "root@example.com", admin=True)
    async with app_client(settings) as client:
        yield AdminApi(client, pg, {"Authorization": f"Bearer {await add_token(db, root.id)}"})
