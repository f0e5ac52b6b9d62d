"""A job that failed with a permanent error (a ``PermanentError``: a retry does not fix it by itself)
may still be retried — what it depends on may have changed — but its button says what will happen:
"Retry anyway", with the warning beside it and in its question, on the job's page, a pipeline's step
and the admin list, where all three offered a plain "Retry" as for a job that ran out of tries. Whether
the button is there at all is the actions layer's rule (``retry_offered``), the one the API's retry
answers by: the API retries the same job."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, test.steps)
from app import pipelines
from app.actions.jobs import RETRY_WARNING, RETRY_WARNING_CONFIRM
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import add_token, sign_in_as


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False)


async def _failed(
    engine: AsyncEngine, settings: Settings, user_id: int, *, permanent: bool, **kw: Any
) -> Any:
    jid = await enqueue(engine, settings, user_id, max_attempts=3 if permanent else 1, priority=100, **kw)
    assert await claim(engine) == jid
    await finish(engine, settings, jid, "failed", error="The page was not found (404).", permanent=permanent)
    return jid


def words(html: str) -> str:
    return html.replace("&#39;", "'").replace("&quot;", '"')


async def test_a_permanent_failures_retry_says_what_it_will_do_on_every_page(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    gone = await _failed(engine, settings, root.id, permanent=True, title="Fetch the price list")
    tired = await _failed(engine, settings, root.id, permanent=False, title="Ping the warehouse")

    page = words((await client.get(f"/jobs/{gone}")).text)
    assert 'id="act-retry"' in page and ">Retry anyway</button>" in page
    assert RETRY_WARNING in page and RETRY_WARNING_CONFIRM in page
    page = words((await client.get(f"/jobs/{tired}")).text)
    assert ">Retry</button>" in page and RETRY_WARNING not in page and "Retry anyway" not in page

    listed = words((await client.get("/admin/jobs?status=failed")).text)
    row = listed[listed.index(f'id="row-{gone}"') :].split("</tr>", 1)[0]
    assert ">Retry anyway</button>" in row and RETRY_WARNING_CONFIRM in row, row
    row = listed[listed.index(f'id="row-{tired}"') :].split("</tr>", 1)[0]
    assert ">Retry</button>" in row and "Retry anyway" not in row, row

    # a pipeline's step that failed for good
    async with engine.begin() as conn:
        pid = (
            await pipelines.create_from_template(conn, "test.steps", {}, user_id=root.id, settings=settings)
        ).id
    step = await claim(engine)
    await finish(engine, settings, step, "failed", error="Refused.", permanent=True)
    shown = words((await client.get(f"/pipelines/{pid}")).text)
    box = shown[shown.index(f'id="step-{step}"') :].split("</li>", 1)[0]
    assert ">Retry anyway</button>" in box and RETRY_WARNING_CONFIRM in box, box

    # the rule allows the retry: the API retries it, and its page then offers no retry at all
    token = await add_token(db_url, root.id)
    r = await client.post(f"/api/jobs/{gone}/retry", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    assert 'id="act-retry"' not in (await client.get(f"/jobs/{gone}")).text
