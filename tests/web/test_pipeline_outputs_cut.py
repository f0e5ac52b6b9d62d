"""A pipeline's page shows its first ``OUTPUTS_MAX`` result files at the top; past them it says how many
more there are and where they are, where the list stopped as if those were all."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.steps)
from app import pipelines
from app.files import FileStore, file_ref
from app.settings import Settings
from app.web.pipeline_page import OUTPUTS_MAX
from tests.support.jobsteps import claim, finish
from tests.support.webkit import sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def test_a_pipeline_with_more_outputs_than_shown_says_so(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        p = await pipelines.create_from_template(
            conn, "test.steps", {}, user_id=user.id, settings=ui_settings
        )
    files = []
    async with engine.begin() as conn:
        for i in range(OUTPUTS_MAX + 3):
            row = await FileStore(ui_settings.files_dir).save(
                conn, user_id=user.id, name=f"part-{i}.txt", data=b"x"
            )
            files.append(file_ref(row))
    for key in ("prepare", "left", "right", "finish"):
        jid = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = $2", p["id"], key)
        if await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "queued":
            await claim(engine, jid)
        await finish(
            engine, ui_settings, jid, "completed", result={"files": files if key == "finish" else []}
        )
    page = (await client.get(f"/pipelines/{p['id']}")).text
    top = page[page.index('id="outputs"') : page.index('class="steps"')]
    assert "part-0.txt" in top and f"part-{OUTPUTS_MAX}.txt" not in top
    assert "And 3 more files" in top, "the results stop as if those were all"
