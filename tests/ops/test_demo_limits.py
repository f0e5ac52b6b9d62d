"""``jobdesk demo`` submits through the same actions as the pages and the API, so the person's limits
hold for it: jobs per minute, waiting jobs, stored bytes. A refusal is the same 429 in words and leaves
nothing behind (no job, pipeline, batch or stored file); within the limits everything is submitted."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from app import demo
from app.errors import RateLimited
from tests.support.factories import make_user

COUNTS = (
    "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM pipelines) AS pipelines, "
    "(SELECT count(*) FROM batches) AS batches, (SELECT count(*) FROM files) AS files"
)


@pytest.fixture(autouse=True)
def _no_server_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # the demo first makes sure a server answers at JOBDESK_BASE_URL; none runs here
    async def answered(base: str, timeout_secs: float = 3.0) -> None:
        return None

    monkeypatch.setattr(demo, "check_base_url", answered)


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"user_max_jobs_per_minute": 5}, "5 a minute"),
        ({"user_max_waiting_jobs": 5}, "waiting"),
        ({"user_max_upload_bytes": 50_000}, "not enough room"),
    ],
)
async def test_the_demo_is_held_to_the_person_s_limits(
    make_settings: Any, engine: Any, pg: asyncpg.Connection, limits: dict[str, int], words: str
) -> None:
    await make_user(pg, email="ann@example.com")
    settings = make_settings(smtp_host="127.0.0.1", **limits)
    with pytest.raises(RateLimited) as refused:
        await demo.submit(engine, settings, "ann@example.com")
    assert words in str(refused.value.detail).lower(), refused.value.detail
    assert dict(await pg.fetchrow(COUNTS)) == {"jobs": 0, "pipelines": 0, "batches": 0, "files": 0}
    assert not [p for p in settings.files_dir.rglob("*") if p.is_file()]


async def test_within_the_limits_the_demo_submits_everything(
    make_settings: Any, engine: Any, pg: asyncpg.Connection
) -> None:
    await make_user(pg, email="ann@example.com")
    settings = make_settings(smtp_host="127.0.0.1")
    run = await demo.submit(engine, settings, "ann@example.com")
    kinds = [i.kind for i in run.items]
    assert kinds.count("job") == 8 and kinds.count("pipeline") == 3 and kinds.count("batch") == 1, kinds
    counts = dict(await pg.fetchrow(COUNTS))
    assert counts["pipelines"] == 3 and counts["batches"] == 1 and counts["files"] > 0, counts
    # every job the demo made is the person's, as it would be from a page
    assert await pg.fetchval("SELECT count(DISTINCT user_id) FROM jobs") == 1
