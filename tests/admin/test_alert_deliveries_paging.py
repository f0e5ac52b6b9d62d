"""``/admin/alerts`` pages its delivery attempts (``?before=``, Older and Newest, the one cursor reader)
where it listed the newest 50 of the attempts kept for ``JOB_RETENTION_DAYS`` as if they were all."""

from __future__ import annotations

import re

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from app.settings import Settings
from app.web.admin.alerts import DELIVERIES_PAGE

OLDER = re.compile(r'<a href="(/admin/alerts\?before=\d+)#deliveries-heading" rel="next">Older</a>')
SUMMARY = re.compile(r"<small>Attempt (\d+)</small>")


@pytest.fixture
def ui_settings(make_settings: object) -> Settings:
    return make_settings(worker_enabled=False)  # type: ignore[operator]


async def test_older_reaches_the_first_delivery(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    total = DELIVERIES_PAGE + 7
    await pg.execute(
        "INSERT INTO alert_deliveries (channel, ok, at, summary)"
        " SELECT 'slack', true, now() - (100 - i) * interval '1 minute', 'Attempt ' || i FROM generate_series(1, $1) i",
        total,
    )
    first = await client.get("/admin/alerts")
    assert first.status_code == 200
    assert SUMMARY.findall(first.text) == [str(i) for i in range(total, total - DELIVERIES_PAGE, -1)]
    older = OLDER.search(first.text)
    assert older, "the page says nothing of the older deliveries"
    second = await client.get(older.group(1))
    assert second.status_code == 200
    assert SUMMARY.findall(second.text) == [str(i) for i in range(total - DELIVERIES_PAGE, 0, -1)]
    assert (
        OLDER.search(second.text) is None
        and 'href="/admin/alerts#deliveries-heading">Newest</a>' in second.text
    )
    assert (await client.get("/admin/alerts?before=zzz")).status_code == 422  # the one cursor reader
