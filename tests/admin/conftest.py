"""The admin console's tests act as an admin signed in on the test client."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from tests.support.webkit import sign_in_as


@pytest.fixture
async def admin(client: AsyncTestClient, db_url: str) -> CurrentUser:
    """``root@example.com``, an admin, signed in on ``client``."""
    return await sign_in_as(client, db_url, "root@example.com", admin=True)
