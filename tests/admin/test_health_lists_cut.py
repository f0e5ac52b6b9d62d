"""``/admin``'s live workers and the running jobs under them are cut at a bound (the page polls, so it
does not page): past it the page says so — the count reads "100+", a line says there are more, and the
running jobs link to the full list — where it showed the first 100 workers as if they were all."""

from __future__ import annotations

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form)
from app.auth import CurrentUser
from app.settings import Settings
from app.web.admin.health import JOBS_SHOWN, WORKERS_SHOWN
from tests.support.webkit import HX


@pytest.fixture
def ui_settings(make_settings: object) -> Settings:
    return make_settings(worker_enabled=False)  # type: ignore[operator]


async def test_cut_lists_say_so(client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection) -> None:
    r = await client.get("/admin/health", headers=HX)
    assert 'id="workers-more"' not in r.text and 'id="running-more"' not in r.text
    await pg.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, version, running, listener_connected)"
        " SELECT 'w-' || i, 'box-' || i, i, 400, 'test', 0, true FROM generate_series(1, $1) i",
        WORKERS_SHOWN + 5,
    )
    await pg.execute(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, started_at,"
        " locked_by, lease_expires_at) SELECT gen_random_uuid(), 'test.form', 'in_progress', $1, '{}', 1, 1,"
        " now() - i * interval '1 second', 'w-1', now() + interval '1 hour' FROM generate_series(1, $2) i",
        admin.id,
        JOBS_SHOWN + 5,
    )
    html = (await client.get("/admin/health", headers=HX)).text
    assert f'<strong id="stat-workers">{WORKERS_SHOWN}+</strong>' in html
    assert 'id="workers-more"' in html, "the list of workers looks complete"
    assert html.count('<li class="worker">') == WORKERS_SHOWN
    assert 'id="running-more"' in html and 'href="/admin/jobs?status=in_progress"' in html
