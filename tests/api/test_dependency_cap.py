"""A job's list of dependencies is bounded by the rule that bounds a pipeline's (``PIPELINE_MAX_EDGES``),
counted as sent: a longer list is a 422 naming the limit before any id is looked up. A plain user's
list of 500,000 random ids held row locks long enough to time out and stalled everyone's requests."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app.db import create_engine
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob
from tests.api.test_body_fields import Scene
from tests.api.test_body_fields import scene as scene  # the same signed-in people

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
