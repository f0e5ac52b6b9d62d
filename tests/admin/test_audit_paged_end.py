"""A page of the audit trail past its oldest entry (a ``before`` older than every entry) says there are
no older entries, with Newest back, where it said "No admin action yet" above entries that exist."""

from __future__ import annotations

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from app.settings import Settings


@pytest.fixture
def ui_settings(make_settings: object) -> Settings:
    return make_settings(worker_enabled=False)  # type: ignore[operator]


async def test_a_page_past_the_oldest_entry_says_so(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    await pg.execute(
        "INSERT INTO audit_log (user_email, action, outcome)"
        " SELECT 'other@example.com', 'job_type.resume', 'ok' FROM generate_series(1, 3)"
    )
    oldest = await pg.fetchval("SELECT min(id) FROM audit_log")
    r = await client.get(f"/admin/audit?before={oldest}")
    assert r.status_code == 200
    assert "No admin action yet" not in r.text, "the trail reads as empty"
    assert "No older entries." in r.text and '<a href="/admin/audit?"' in r.text
    r = await client.get(f"/admin/audit?before={oldest}&action=job_type.resume")
    assert "No entry matches these filters further back." in r.text
