"""The approvals lists page like the other lists: ``/approvals`` and ``/admin/approvals`` have "First
page" back once paged (they had only a link on, named "Older steps" in a list that goes on to steps that
waited less), through the one pager; and a person's list fills its page past the steps its query lets
through but the rule refuses them (their own), where it showed "Nothing waits for your decision" above
a link to the steps that did."""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.step)
from app.actions.approvals import PAGE
from app.settings import Settings
from tests.support.webkit import add_token, add_user, sign_in_as

NEXT = re.compile(r'<a href="(/(?:admin/)?approvals\?after=[^"]+)"[^>]*>(?:Next page|Older steps)</a>')
ROW = re.compile(r'id="approval-([0-9a-f-]{36})"')


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def _waiting(
    pg: asyncpg.Connection, owner: int, n: int, minutes: int, approvers: list[str] | None
) -> list[str]:
    """``n`` steps of ``owner`` waiting for a decision since ``minutes`` ago and later, oldest first;
    with ``approvers``, a rule naming them (``["admins"]``), else none (any admin decides)."""
    ids = [str(uuid.uuid4()) for _ in range(n)]
    for i, jid in enumerate(ids):
        await pg.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, attempts, requires_approval,"
            " updated_at) VALUES ($1, 'test.step', 'waiting_approval', $2, '{}', 1, 1, true,"
            " now() - make_interval(mins => $3))",
            uuid.UUID(jid),
            owner,
            minutes - i,
        )
        if approvers is not None:
            await pg.execute(
                "INSERT INTO job_approval_rules (job_id, approvers, admins) VALUES ($1, $2::jsonb, true)",
                uuid.UUID(jid),
                '["admins"]',
            )
    return ids


async def _walk(client: AsyncTestClient, url: str) -> tuple[list[list[str]], list[str]]:
    pages, texts = [], []
    next_url: str | None = url
    while next_url is not None:
        r = await client.get(next_url)
        assert r.status_code == 200, r.text[:300]
        pages.append(ROW.findall(r.text))
        texts.append(r.text)
        found = NEXT.search(r.text)
        next_url = html.unescape(found.group(1)) if found else None
        assert len(pages) < 6
    return pages, texts


async def test_the_approvals_lists_page_on_and_back_to_their_first_page(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "owner@example.com")
    steps = await _waiting(pg, owner.id, PAGE + 3, 600, None)
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    for path in ("/admin/approvals", "/approvals"):
        pages, texts = await _walk(client, path)
        assert [s for p in pages for s in p] == steps, path  # oldest first, each once
        assert len(pages) == 2 and len(pages[0]) == PAGE
        assert f'<a href="{path}"' not in texts[0].split("approval-rows", 1)[1]  # the first page: no way back
        assert re.search(rf'<a href="{path}"[^>]*>First page</a>', texts[1]), f"{path}: no way back"


async def test_a_persons_list_fills_its_page_past_steps_they_may_not_decide(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    owner = await add_user(db_url, "owner@example.com")
    await _waiting(pg, root.id, PAGE + 2, 600, ["admins"])  # their own: they may not decide them
    theirs = await _waiting(pg, owner.id, 1, 60, None)
    r = await client.get("/approvals")
    assert ROW.findall(r.text) == theirs, "the page is empty while a step waits for them"
    assert "Nothing waits for your decision" not in r.text and not NEXT.search(r.text)
    bearer = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    body = (await client.get("/api/approvals", headers=bearer)).json()
    assert [i["job_id"] for i in body["items"]] == theirs and body["next"] is None
