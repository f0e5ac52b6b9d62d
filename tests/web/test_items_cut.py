"""A job's result and input are shown as items up to 100 fields: the page said nothing of the rest. It
says how many are left out and points to "Details", the JSON (an input has one once it is cut), and
"Details" says its own cut (past 100,000 characters) beside its summary, with where the whole is."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def _done(engine: AsyncEngine, settings: Settings, user_id: int, result: Any, input_data: Any) -> Any:
    jid = await enqueue(engine, settings, user_id)
    assert await claim(engine) == jid
    await finish(engine, settings, jid, "completed", result={})
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE jobs SET result_data = CAST(:r AS jsonb), input_data = CAST(:i AS jsonb) WHERE id = :id"
            ),
            {"r": json.dumps(result), "i": json.dumps(input_data), "id": jid},
        )
    return jid


async def test_items_and_details_say_what_they_leave_out(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    wide = {f"field_{i:03}": i for i in range(130)}
    jid = await _done(engine, settings, root.id, wide, {**wide, "name": "Ann"})
    page = html.unescape((await client.get(f"/jobs/{jid}")).text)
    assert 'id="result-cut"' in page, page
    words = re.sub(r"<[^>]+>", "", page)
    assert "The first 100 fields are shown here; 30 more are in Details below." in words
    assert 'href="#result-details"' in page and 'id="result-details"' in page
    # the input: 131 fields, cut the same way, with a Details of its own holding them all
    assert "The first 100 fields are shown here; 31 more are in Details below." in words
    box = page[page.index('id="input-details"') :].split("</details>", 1)[0]
    assert '"field_129": 129' in box
    assert 'id="result-json-cut"' not in page

    # a result past Details' 100,000 characters: its cut is said beside the summary
    big = {"rows": ["x" * 1000 for _ in range(150)]}
    jid = await _done(engine, settings, root.id, big, {"name": "Ann"})
    page = html.unescape((await client.get(f"/jobs/{jid}")).text)
    assert "<summary>Details (cut)</summary>" in page
    assert 'id="result-json-cut"' in page and f"GET /api/jobs/{jid}" in page
    assert 'id="result-cut"' not in page and 'id="input-details"' not in page


async def test_the_approvals_pages_say_what_a_waiting_steps_result_leaves_out(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    """A step waiting for a decision shows its result as items on /approvals, its own page and the admins'
    inbox: past 100 fields they said nothing of the rest, which an approver may not read elsewhere."""
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    wide = {f"field_{i:03}": i for i in range(130)}
    jid = await _done(engine, settings, root.id, wide, {"name": "Ann"})
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE jobs SET status = 'waiting_approval', requires_approval = true, completed_at = NULL WHERE id = :id"
            ),
            {"id": jid},
        )
    for url, box in (
        (f"/approvals/{jid}", "result"),
        ("/approvals", f"result-{jid}"),
        ("/admin/approvals", f"result-{jid}"),
    ):
        r = await client.get(url)
        assert r.status_code == 200, (url, r.text)
        page = html.unescape(r.text)
        words = re.sub(r"<[^>]+>", "", page)
        assert "The first 100 fields are shown here; 30 more are in Details below." in words, url
        assert f'href="#{box}-details"' in page and f'id="{box}-details"' in page, url
        details = page[page.index(f'id="{box}-details"') :].split("</details>", 1)[0]
        assert '"field_129": 129' in details, url
