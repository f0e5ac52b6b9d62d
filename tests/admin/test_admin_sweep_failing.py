"""``/admin`` shows admins a part of a worker's sweep that keeps failing, as the worker's heartbeat wrote it
in its ``workers.health`` row (:meth:`app.worker.sweep_parts.Parts.report`)."""

from __future__ import annotations

import json

import asyncpg
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from tests.support.webkit import HX

FAILING = {
    "schedules": {
        "what": "schedule firing",
        "error": "RuntimeError: bug in a <template>",
        "since": "2026-01-02T03:04:05+00:00",
        "failures": 7,
    }
}


async def test_a_failing_part_of_a_workers_sweep_is_shown_on_the_health_panel(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    await pg.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, version, running, listener_connected, health)"
        " VALUES ('w-1', 'box-a', 42, 4, 'test', 0, true, CAST($1 AS jsonb)),"
        " ('w-2', 'box-b', 43, 4, 'test', 0, true, '{\"lingering_tasks\": 0}')",
        json.dumps({"lingering_tasks": 0, "sweep_failing": FAILING}),
    )
    for path in ("/admin", "/admin/health"):
        r = await client.get(path, headers=HX if path.endswith("health") else {})
        assert r.status_code == 200, r.text
        notices = r.text.count('class="notice notice-error sweep-failing"')
        assert notices == 1, r.text
        assert 'id="sweep-failing-w-1-schedules"' in r.text
        assert "Its schedule firing keeps failing since" in r.text
        assert "(7 runs)" in r.text
        assert "<code>RuntimeError: bug in a &lt;template&gt;</code>" in r.text
