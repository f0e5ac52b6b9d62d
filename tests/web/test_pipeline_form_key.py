"""The pipeline form carries a one-time key, as the job form and the batch form do: the form sent twice (a
double click, the browser sending it again) starts one pipeline and answers both with it, and a repeat
in flight while the first is still being made waits for it (the person's lock) and finds it."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncSession

import tests.support.forms  # noqa: F401  (registers test.steps)
from app import pipelines
from app.actions import pipelines as pipeline_actions
from app.actions.trail import Actor
from app.errors import Conflict
from tests.support.webkit import add_user, csrf_from, sign_in_as, switch_to


def _form_key(html: str) -> str:
    return re.search(r'name="_form_key" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]


async def test_the_pipeline_form_sent_twice_starts_one_pipeline_and_answers_both_with_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/pipelines/new/test.steps")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "title": "Weekly"}
    answers = [
        await client.post("/pipelines/new/test.steps", data=form, follow_redirects=False) for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [303, 303], [a.text[-300:] for a in answers]
    pid = await pg.fetchval("SELECT id FROM pipelines")
    assert [a.headers["location"] for a in answers] == [f"/pipelines/{pid}"] * 2
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 1
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 4
    # a fresh form is a new key: the same input starts a second pipeline
    again = await client.get("/pipelines/new/test.steps")
    assert _form_key(again.text) != form["_form_key"]
    fresh = {**form, "_form_key": _form_key(again.text)}
    r = await client.post("/pipelines/new/test.steps", data=fresh, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] != f"/pipelines/{pid}"
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 2


async def test_a_form_with_errors_comes_back_with_its_key_and_another_persons_key_is_theirs(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/pipelines/new/test.steps")
    key = _form_key(page.text)
    form = {"_csrf_token": csrf_from(page.text), "_form_key": key, "seconds": "61"}
    r = await client.post("/pipelines/new/test.steps", data=form, follow_redirects=False)
    assert r.status_code == 422 and _form_key(r.text) == key
    r = await client.post("/pipelines/new/test.steps", data={**form, "seconds": "0"}, follow_redirects=False)
    assert r.status_code == 303
    # the key is per person: another person's form with the same key starts their own pipeline
    await add_user(db_url, "bob@example.com")
    await switch_to(client, "bob@example.com")
    token = csrf_from((await client.get("/pipelines/new/test.steps")).text)
    r = await client.post(
        "/pipelines/new/test.steps",
        data={**form, "_csrf_token": token, "seconds": "0"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    owners = await pg.fetch("SELECT u.email FROM pipelines p JOIN users u ON u.id = p.user_id ORDER BY 1")
    assert [o["email"] for o in owners] == ["ann@example.com", "bob@example.com"]


async def test_a_repeat_of_a_pipeline_form_key_in_flight_waits_for_the_first_and_finds_its_pipeline(
    engine: Any, settings: Any, owner: Any, pg: asyncpg.Connection
) -> None:
    """Both submissions of a double click in flight at once: the repeat waits for the first's
    transaction (the person's lock) and is answered with its pipeline; exactly one is made."""
    actor = Actor(owner, settings=settings)
    key = str(uuid.uuid4())
    async with AsyncSession(engine) as first, AsyncSession(engine) as repeat:
        made = await pipeline_actions.submit_template(first, actor, "test.steps", {}, form_key=key)
        sent_again = asyncio.create_task(
            pipeline_actions.submit_template(repeat, actor, "test.steps", {}, form_key=key)
        )
        await asyncio.sleep(0.5)
        assert not sent_again.done(), "the repeat did not wait for the first submission"
        await first.commit()
        found = await asyncio.wait_for(sent_again, 10)
        await repeat.commit()
    assert found["id"] == made["id"]
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 1
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 4


async def test_a_pipeline_key_is_stored_once_per_person_whatever_the_path(
    engine: Any, settings: Any, owner: Any, pg: asyncpg.Connection
) -> None:
    """The unique index holds even for a caller that does not look the key up first: the second
    pipeline with the key is refused whole (409), not half made."""
    key = str(uuid.uuid4())
    async with engine.begin() as conn:
        await pipelines.create_from_template(
            conn, "test.steps", {}, user_id=owner.id, settings=settings, form_key=key
        )
    with pytest.raises(Conflict):
        async with engine.begin() as conn:
            await pipelines.create_from_template(
                conn, "test.steps", {}, user_id=owner.id, settings=settings, form_key=key
            )
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 1
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 4
