"""The throughput chart on ``/admin``: a 1 h / 24 h / 7 d choice over ``throughput_samples``, with a count
axis and a time axis; each live worker's heartbeat age in seconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from app.jobs import queue
from app.web.admin.health import chart_origin, throughput_chart
from tests.support.webkit import HX


def test_bars_of_a_day_are_half_hours_with_both_axes() -> None:
    end = datetime(2026, 12, 1, 20, 17, tzinfo=UTC)
    origin = chart_origin(end, 48, 30)
    assert origin == datetime(2026, 11, 30, 20, 30, tzinfo=UTC)  # 48 half hours, the last one holding 20:17
    rows = [{"minute": datetime(2026, 12, 1, 20, 0, tzinfo=UTC), "completed": 40, "failed": 10}]
    chart = throughput_chart(rows, end, 48, 30)
    assert len(chart["bars"]) == 48 and chart["bars"][-1]["completed"] == 40
    assert [t["value"] for t in chart["y_ticks"]] == [0, 25, 50]
    assert [t["at"] for t in chart["x_ticks"]] == [
        origin,
        origin + timedelta(minutes=30 * 24),
        chart["bars"][-1]["minute"],
    ]


async def test_range_choice_and_heartbeat_age(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    await pg.execute(
        "INSERT INTO throughput_samples (minute, worker_id, completed, failed) "
        "SELECT date_trunc('minute', now()) - i * interval '1 hour', 'w-1', 7, 1 FROM generate_series(0, 100) i"
    )
    await pg.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, running, started_at, last_seen_at, version) "
        "VALUES ('w-1', 'box', 1, 4, 0, now() - interval '1 hour', now() - interval '12 seconds', '1')"
    )
    hour = (await client.get("/admin/health", headers=HX)).text
    assert "last hour" in hour and "7 done" in hour
    day = (await client.get("/admin/health?range=24h", headers=HX)).text
    assert "Finished per 30 minutes, last 24 hours" in day
    assert "168 done · 24 failed" in day  # one sample (7 done, 1 failed) per hour over 24 hours
    week = (await client.get("/admin?range=7d")).text
    assert 'id="range-7d" aria-current="true"' in week and "Finished per 4 hours, last 7 days" in week
    assert 'class="chart-y"' in week and 'class="chart-x"' in week
    age = re.search(r'class="heartbeat-age">(\d+) s ago<', week)
    assert age is not None and 12 <= int(age.group(1)) < 120  # seconds, not "just now"
    odd = (await client.get("/admin/health?range=forever", headers=HX)).text
    assert "last hour" in odd


async def test_per_type_figures_of_the_last_hour(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    # noop: 3 done in the last hour, each waited 4 s and ran 2 s; one failed; one finished two hours ago
    await pg.execute(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, run_at, started_at, completed_at) "
        "SELECT gen_random_uuid(), 'noop', CASE WHEN i = 4 THEN 'failed' ELSE 'completed' END, $1, '{}', 3, "
        "now() - interval '10 minutes' - CASE WHEN i = 5 THEN interval '2 hours' ELSE interval '0' END, "
        "now() - interval '10 minutes' + interval '4 seconds' - CASE WHEN i = 5 THEN interval '2 hours' ELSE interval '0' END, "
        "now() - interval '10 minutes' + interval '6 seconds' - CASE WHEN i = 5 THEN interval '2 hours' ELSE interval '0' END "
        "FROM generate_series(1, 5) i",
        admin.id,
    )
    page = (await client.get("/admin/health", headers=HX)).text
    row = page[page.index('id="type-noop"') :]
    row = row[: row.index("</tr>")]
    cells = re.findall(r"<td>(.*?)</td>", row.replace("\n", " "))
    assert [c.strip() for c in cells[-4:]] == ["3", "1", "2 s", "4 s"], cells


async def test_the_workers_housekeeping_keeps_the_week_the_chart_shows(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection, engine: Any
) -> None:
    """The 7-day chart reads tallies up to a week old: the housekeeping that drops old tallies keeps
    them that long (it dropped everything older than a day, so the week showed one day)."""
    await pg.execute(
        "INSERT INTO throughput_samples (minute, worker_id, completed, failed) "
        "SELECT date_trunc('minute', now()) - i * interval '1 day', 'w-1', 5, 0 FROM generate_series(0, 9) i"
    )
    async with engine.begin() as conn:
        await queue.forget_old(conn)
    left = await pg.fetchval("SELECT count(*) FROM throughput_samples")
    assert left == 8, f"{left} daily tallies kept of the last ten days"
    week = (await client.get("/admin/health?range=7d", headers=HX)).text
    assert "35 done" in week  # today and the six days before it, 5 each
