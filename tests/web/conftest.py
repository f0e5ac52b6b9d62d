"""Fixtures of the web tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.jobsteps import enqueue
from tests.support.webkit import Site, add_token, add_user, app_client, login


@pytest.fixture
async def site(make_settings: Any, db_url: str, engine: AsyncEngine) -> AsyncIterator[Site]:
    """:class:`tests.support.webkit.Site`."""
    settings = make_settings(worker_enabled=False)
    boss = await add_user(db_url, "boss@example.com", admin=True)
    bearer = {"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
    jobs = [str(await enqueue(engine, settings, boss.id, "noop", input_data={})) for _ in range(3)]
    async with app_client(settings) as client:
        assert (await login(client, "boss@example.com")).status_code == 303
        yield Site(client, bearer, jobs)
