"""``/admin``'s "Failed, last hour" figure and the one-hour chart's failures come from one source
(:mod:`app.throughput`), so they agree, at the edges of the hour too: the tally of the minute 59 minutes
before the current one counts in both, the minute before that in neither; a failed job no worker
tallied (a rejection) is in neither."""

from __future__ import annotations

import re

import asyncpg
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from tests.support.webkit import HX

MINUTE = "date_trunc('minute', now())"


def _figures(page: str) -> tuple[int, int]:
    panel = re.search(r'id="stat-failed">([\d,]+)<', page)
    chart = re.search(r"· ([\d,]+) failed ·", page)
    assert panel and chart, page
    return int(panel.group(1).replace(",", "")), int(chart.group(1).replace(",", ""))


async def test_the_figure_and_the_chart_count_the_same_failures_at_the_edges_of_the_hour(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    # a job failed ten minutes ago that no worker tallied (refused at submission)
    await pg.execute(
        "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, run_at, completed_at) "
        "VALUES (gen_random_uuid(), 'noop', 'failed', $1, '{}', 3, now() - interval '10 minutes', "
        "now() - interval '10 minutes')",
        admin.id,
    )
    for _attempt in range(3):  # again if the minute turned between the seeding and the page
        before = await pg.fetchval(f"SELECT {MINUTE}")
        await pg.execute("DELETE FROM throughput_samples")
        await pg.execute(
            "INSERT INTO throughput_samples (minute, worker_id, completed, failed) VALUES "
            "($1, 'w-1', 5, 3), "  # the current minute: in
            "($1 - interval '30 minutes', 'w-1', 0, 1), ($1 - interval '30 minutes', 'w-2', 0, 1), "
            "($1 - interval '59 minutes', 'w-1', 0, 2), "  # the hour's first minute: in
            "($1 - interval '60 minutes', 'w-1', 0, 100), "  # the minute before it: out
            "($1 - interval '61 minutes', 'w-2', 0, 100)",
            before,
        )
        hour = (await client.get("/admin/health", headers=HX)).text
        day = (await client.get("/admin/health?range=24h", headers=HX)).text
        if await pg.fetchval(f"SELECT {MINUTE}") == before:
            break
    assert _figures(hour) == (7, 7)
    # on the day's chart the figure is still the last hour's, by the same query
    assert _figures(day)[0] == 7
