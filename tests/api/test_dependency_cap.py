"""A job's list of dependencies is bounded by the rule that bounds a pipeline's (``PIPELINE_MAX_EDGES``),
counted as sent: a longer list is a 422 naming the limit before any id is looked up. A plain user's
list of 500,000 random ids held row locks long enough to time out and stalled everyone's requests."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

import tests.support.forms  # noqa: F401  (registers the test.steps template)
from app import schedule_firing, schedules
from app.db import create_engine
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob, SystemPrincipal
from tests.api.test_body_fields import Scene
from tests.api.test_body_fields import scene as scene  # the same signed-in people
from tests.support.webkit import add_token, add_user, app_client

PING = {"url": "http://example.com/"}


async def test_a_list_over_the_limit_is_refused_naming_it(scene: Scene) -> None:
    ids = [str(uuid.uuid4()) for _ in range(2_001)]
    body = {"type": "http.request", "input_data": PING, "dependent_on_jobs": ids}
    r = await scene.client.post("/api/jobs", json=body, headers=scene.ann)
    assert r.status_code == 422, r.text
    message = r.json()["errors"]["dependent_on_jobs"]
    assert "at most 2,000" in message and "2,001" in message, message
    # the same ids repeated count as sent
    body["dependent_on_jobs"] = [ids[0]] * 2_001
    r = await scene.client.post("/api/jobs", json=body, headers=scene.ann)
    assert "at most 2,000" in r.json()["errors"]["dependent_on_jobs"], r.text
    assert await scene.pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_pipeline_step_over_the_limit_is_refused(scene: Scene) -> None:
    steps = [
        {"key": "a", "type": "http.request", "input_data": PING},
        {"key": "b", "type": "http.request", "input_data": PING, "depends_on": ["a"] * 2_001},
    ]
    r = await scene.client.post("/api/pipelines", json={"name": "p", "steps": steps}, headers=scene.ann)
    assert r.status_code == 422 and "at most 2,000" in r.json()["errors"]["steps"], r.text


async def test_the_python_api_holds_the_same_rule(make_settings: Any) -> None:
    settings = make_settings(worker_enabled=False, pipeline_max_edges=3)
    engine = create_engine(settings.database_url or "", pool_size=1)
    try:
        new = NewJob("http.request", PING, user_id=1, depends_on=[uuid.uuid4() for _ in range(4)])
        with pytest.raises(BadInput) as caught:
            await queue.enqueue(engine, new, settings)
        assert "at most 3 jobs" in caught.value.errors["dependent_on_jobs"]
    finally:
        await engine.dispose()


async def test_a_pipeline_step_made_in_python_holds_the_same_rule(make_settings: Any) -> None:
    """``queue.create_pipeline`` (a template's pipeline, a schedule's firing) read a step's list only after
    dropping its repeats, so ``["a"] * 4`` was one dependency whatever the cap."""
    settings = make_settings(worker_enabled=False, pipeline_max_edges=3)
    engine = create_engine(settings.database_url or "", pool_size=1)
    steps = [
        {"key": "a", "type": "http.request", "input_data": PING},
        {"key": "b", "type": "http.request", "input_data": PING, "depends_on": ["a"] * 4},
    ]
    try:
        async with engine.begin() as conn:
            with pytest.raises(BadInput) as caught:
                await queue.create_pipeline(conn, name="p", steps=steps, user_id=1, settings=settings)
        message = caught.value.errors["steps[1].depends_on"]
        assert "at most 3 jobs" in message and "has 4" in message, caught.value.errors
    finally:
        await engine.dispose()


def test_a_schedule_of_a_pipeline_holds_the_same_rule(make_settings: Any) -> None:
    """A schedule of a template checks the pipeline each firing will make, with the same cap: the
    template's last step waits for two steps, over a cap of one; its four dependencies in all are over
    a cap of three."""
    settings = make_settings(worker_enabled=False, pipeline_max_edges=1)
    with pytest.raises(BadInput) as caught:
        schedules.check_schedule("0 3 * * *", "UTC", None, "test.steps", {}, settings)
    assert "at most 1 job (" in caught.value.errors["steps[3].depends_on"], caught.value.errors
    three = make_settings(worker_enabled=False, pipeline_max_edges=3)
    with pytest.raises(BadInput) as caught:
        schedules.check_schedule("0 3 * * *", "UTC", None, "test.steps", {}, three)
    assert "at most 3 dependencies between its steps (this one has 4)" in caught.value.errors["steps"]
    fits = make_settings(worker_enabled=False, pipeline_max_edges=4)
    schedules.check_schedule("0 3 * * *", "UTC", None, "test.steps", {}, fits)


def test_the_limits_words_agree_with_their_counts(make_settings: Any) -> None:
    one = make_settings(worker_enabled=False, pipeline_max_edges=1, pipeline_max_steps=1)
    assert queue.dependencies_problem(one, 2) == (
        "a job may depend on at most 1 job (PIPELINE_MAX_EDGES); this list has 2"
    )
    refused = queue.pipeline_size_refusal(one, 1, 2)
    assert refused is not None and refused.errors["steps"] == (
        "a pipeline may have at most 1 dependency between its steps (this one has 2)"
    )
    refused = queue.pipeline_size_refusal(one, 2, 0)
    assert refused is not None and "at most 1 step (this one has 2)" in refused.errors["steps"]


async def test_a_schedule_of_a_template_over_the_cap_is_refused_made_changed_and_fired(
    make_settings: Any, pg: asyncpg.Connection
) -> None:
    """Each step of ``test.steps`` waits for at most two, but the pipeline has four dependencies: over a
    cap of three, ``/api/pipelines`` refused it once built while a schedule of it was made, changed and
    fired (creating the pipeline). Now each is refused with the same words, a firing by disabling the
    schedule with an admin notice naming the reason."""
    settings = make_settings(worker_enabled=False, pipeline_max_edges=3)
    db = settings.database_url or ""
    root = await add_user(db, "root@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db, root.id)}"}
    words = "a pipeline may have at most 3 dependencies between its steps (this one has 4)"
    async with app_client(settings) as client:
        r = await client.post(
            "/api/pipelines", json={"template": "test.steps", "input_data": {}}, headers=headers
        )
        assert r.status_code == 422 and r.json()["errors"]["steps"] == words, r.text
        body = {"cron": "* * * * *", "template": "test.steps", "input_data": {}, "name": "s"}
        r = await client.post("/api/schedules", json=body, headers=headers)
        assert r.status_code == 422 and r.json()["errors"]["steps"] == words, r.text
        # one made before the cap was lowered
        engine = create_engine(db, pool_size=1)
        try:
            async with engine.begin() as conn:
                owner = SystemPrincipal(id=root.id, is_admin=True, email="root@example.com")
                row = await schedules.create_schedule(
                    conn,
                    name="s",
                    cron="* * * * *",
                    template="test.steps",
                    input_data={},
                    owner=owner,
                    settings=make_settings(worker_enabled=False, pipeline_max_edges=0),
                )
            change = {"input_data": {"title": "Other"}}
            r = await client.patch(f"/api/schedules/{row['id']}", json=change, headers=headers)
            assert r.status_code == 422 and r.json()["errors"]["steps"] == words, r.text
            await pg.execute("UPDATE schedules SET next_fire_at = now() - interval '1 second'")
            async with engine.begin() as conn:
                assert await schedule_firing.fire_due(conn, settings) == []
        finally:
            await engine.dispose()
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0
    assert await pg.fetchval("SELECT enabled FROM schedules WHERE id = $1", row["id"]) is False
    notice = await pg.fetchval("SELECT payload::text FROM alert_outbox WHERE kind = 'admin_action'")
    assert "schedule.disable" in notice and words in notice, notice
