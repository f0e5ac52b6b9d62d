"""Users of the queue and pipeline tests besides the owner: someone else, and an admin."""

from __future__ import annotations

import asyncpg
import pytest

from tests.support.factories import TestUser, make_user


@pytest.fixture
async def other(pg: asyncpg.Connection) -> TestUser:
    return await make_user(pg)


@pytest.fixture
async def admin(pg: asyncpg.Connection) -> TestUser:
    return await make_user(pg, admin=True)
