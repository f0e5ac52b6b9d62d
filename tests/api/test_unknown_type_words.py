"""An unknown job type is echoed cut, with "…", in one place (:func:`app.jobs.types.cut_type`):
``POST /api/job-types/<5,000 characters>/pause`` answered a 404 and wrote an audit entry holding the
name cut at 100 characters without a sign that it was cut; a job's ``type`` is worded the same way."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient

from tests.support.webkit import add_token, add_user

LONG = "t" * 5000
SHOWN = "t" * 100 + "…"


async def test_a_long_unknown_type_is_cut_in_the_404_and_the_audit_entry(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    api = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    for verb in ("pause", "resume"):
        r = await client.post(f"/api/job-types/{LONG}/{verb}", headers=api)
        assert r.status_code == 404, r.text
        assert r.json()["detail"] == f"No job type {SHOWN!r}.", r.text
    r = await client.put(f"/api/job-types/{LONG}/limits", json={"max_running": 1}, headers=api)
    assert r.status_code == 404 and SHOWN in r.text, r.text
    rows = await pg.fetch("SELECT target_ids, outcome FROM audit_log ORDER BY id")
    assert len(rows) == 3
    for row in rows:
        assert row["target_ids"] == [SHOWN] or SHOWN in str(row["target_ids"]), row
        assert row["outcome"] == f"refused: No job type {SHOWN!r}.", row
    r = await client.post("/api/jobs", json={"type": LONG}, headers=api)
    assert r.status_code == 422 and f"unknown job type {SHOWN!r}" in r.json()["errors"]["type"], r.text
    short = await client.post("/api/jobs", json={"type": "nope"}, headers=api)
    assert "unknown job type 'nope'" in short.json()["errors"]["type"], short.text
