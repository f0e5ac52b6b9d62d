"""``/admin``'s health panel names a job by what tells it apart — its title (else its type's title) and
its id, linked to its page — where "Oldest waiting" gave the type alone (two ``noop`` jobs read alike)."""

from __future__ import annotations

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from app.jobs.queue import new_id
from app.settings import Settings
from tests.support.webkit import HX


@pytest.fixture
def ui_settings(make_settings: object) -> Settings:
    return make_settings(worker_enabled=False)  # type: ignore[operator]


async def test_the_oldest_waiting_and_running_jobs_are_named_and_linked(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    waiting, running = new_id(), new_id()
    await pg.execute(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title, run_at)"
        " VALUES ($1, 'noop', 'queued', $2, '{}', 1, 'Weekly report', now() - interval '1 minute')",
        waiting,
        admin.id,
    )
    await pg.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, version, running, listener_connected)"
        " VALUES ('w-1', 'box-1', 1, 4, 'test', 1, true)"
    )
    await pg.execute(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, started_at,"
        " locked_by, lease_expires_at) VALUES ($1, 'noop', 'in_progress', $2, '{}', 1, 1, now(), 'w-1',"
        " now() + interval '1 hour')",
        running,
        admin.id,
    )
    html = (await client.get("/admin/health", headers=HX)).text
    oldest = html.split('id="stat-oldest"', 1)[1].split("</article>", 1)[0]
    assert f'<a href="/jobs/{waiting}">Weekly report</a>' in oldest, oldest
    assert str(waiting)[-8:] in oldest, oldest
    jobs = html.split('class="plain running-jobs"', 1)[1].split("</ul>", 1)[0]
    # untitled: its type's title, told apart from others of its type by its id
    assert f'<a href="/jobs/{running}">Do nothing</a>' in jobs and str(running)[-8:] in jobs, jobs
