"""The batches page pages like My jobs: a person with more batches than a page follows Older (keyset,
``?after=``) to the oldest, and Newest back, where it once listed only the newest 50 with nothing to say
there were more."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app import batches
from app.processors import registry
from app.settings import Settings
from app.web.batches import PAGE_SIZE
from tests.support.webkit import sign_in_as

LINK = re.compile(r'<a href="/batches/([0-9a-f-]{36})">')
OLDER = re.compile(r'<a href="(/batches\?after=[0-9a-f-]+)" rel="next">Older</a>')


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def test_older_reaches_the_oldest_batch(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    made: list[uuid.UUID] = []
    async with engine.begin() as conn:
        for i in range(PAGE_SIZE + 10):
            row, _ = await batches.create(
                conn,
                spec=registry.get("test.form"),
                inputs=[{"name": f"Row {i}"}],
                user_id=ann.id,
                settings=settings,
                name=f"Batch {i}",
                source="test",
            )
            made.append(row["id"])
    first = await client.get("/batches")
    assert first.status_code == 200
    assert LINK.findall(first.text) == [str(i) for i in reversed(made[-PAGE_SIZE:])]
    older = OLDER.search(first.text)
    assert older, "the first page says nothing of the older batches"
    second = await client.get(older.group(1))
    assert second.status_code == 200
    assert LINK.findall(second.text) == [str(i) for i in reversed(made[:-PAGE_SIZE])]
    assert str(made[0]) in second.text and OLDER.search(second.text) is None  # the oldest, and the end
    assert '<a href="/batches">Newest</a>' in second.text
    assert (await client.get("/batches?after=zzz")).status_code == 422  # the one cursor reader
