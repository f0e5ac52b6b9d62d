"""Lists that said "N more" with no way to them: an audit entry's targets past the first 20 ("and 30
more") fold out on its row, and a batch's failed rows past the first 100 ("the download lists them
all") have the CSV's link right there."""

from __future__ import annotations

import html
import uuid

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app import audit
from tests.support.webkit import bearer, login, sign_in_as


async def test_an_audit_entrys_other_targets_fold_out(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine
) -> None:
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    ids = [uuid.uuid4() for _ in range(50)]
    async with engine.begin() as conn:
        entry = await audit.record(
            conn, user=root, action="jobs.bulk_retry", target_type="job", target_ids=ids, count=50
        )
    page = html.unescape((await client.get("/admin/audit")).text)
    row = page[page.index(f'id="audit-{entry["id"]}"') :].split("</tr>", 1)[0]
    fold = row[row.index(f'id="more-targets-{entry["id"]}"') :].split("</details>", 1)[0]
    assert "and 30 more" in fold
    for jid in ids[20:]:
        assert f'href="/jobs/{jid}"' in fold, jid
    for jid in ids[:20]:
        assert f'href="/jobs/{jid}"' not in fold and f'href="/jobs/{jid}"' in row


async def test_a_batchs_failed_rows_past_the_list_link_to_the_csv(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    _, auth = await bearer(db_url, "ann@example.com")
    rows = [{"url": f"http://jobs.test:9/item/{i}", "timeout": 5} for i in range(103)]
    made = await client.post("/api/batches", json={"type": "http.request", "rows": rows}, headers=auth)
    assert made.status_code == 201, made.text
    bid = made.json()["id"]
    await pg.execute(
        "UPDATE jobs SET status = 'failed', attempts = max_attempts, completed_at = now(), error_message = 'refused'"
    )
    assert (await login(client, "ann@example.com")).status_code == 303
    page = html.unescape((await client.get(f"/batches/{bid}")).text)
    more = page[page.index('id="failed-more"') :].split("</p>", 1)[0]
    assert "And 3 more" in more and f'href="/batches/{bid}/results.csv"' in more, more
