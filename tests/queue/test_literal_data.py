"""Data from a parent's result is literal: a value in it shaped like ``{"$ref": …}`` (an HTTP response's
body, say) is never read as a reference to another step's result, whether a step's input takes it by a
``$ref`` or a ``for_each`` list's item puts it in by ``$item``. Only what the person wrote is resolved."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

import tests.support.processors  # noqa: F401  (test.echo)
from app.errors import BadInput
from app.jobs import queue
from app.jobs.graph import plan_next_jobs
from app.jobs.queue import Outcome
from app.jobs.types import NextJob
from app.settings import Settings
from tests.queue.test_for_each import create, jobs_of, step
from tests.support.factories import TestUser
from tests.support.workers import running_worker, wait_until

LURE = {"$ref": "secret.token"}


@pytest.mark.parametrize(
    "marker",
    [LURE, {"$item": ""}, {"$literal": 1}],
    ids=["ref", "item", "literal"],
)
async def test_a_marker_shaped_value_in_a_parents_result_stays_data(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, marker: dict[str, Any]
) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("secret"),
            step("src"),
            step("child", "test.echo", {"got": {"$ref": "src.body"}}, ["src", "secret"]),
            step("each", "test.echo", {"v": {"$item": ""}}, ["secret"], for_each={"$ref": "src.items"}),
            step("named", "test.echo", {"k": {"$item": "k"}}, ["secret"], for_each={"$ref": "src.items"}),
            step("fin", "test.echo", {"all": {"$ref": "each.v"}}, ["each"]),
        ],
    )
    # the parents end as a worker would record them: src's result is data a remote server gave
    async with engine.begin() as conn:
        claimed = {r["step_key"]: r["id"] for r in await queue.claim(conn, "test-worker", 10, 60)}
    results = {
        "secret": {"token": "s3cret"},
        "src": {"body": LURE, "items": [{"k": LURE}, {"k": [marker, {"x": marker}]}]},
    }
    async with engine.begin() as conn:
        outcomes = [Outcome(claimed[k], "completed", result=json.dumps(v)) for k, v in results.items()]
        await queue.finish(conn, "test-worker", outcomes, settings)
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status IN ('completed', 'failed') FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    jobs = await jobs_of(pg, pid)
    assert {k: j["status"] for k, j in jobs.items()} == dict.fromkeys(jobs, "completed"), {
        k: j["error_message"] for k, j in jobs.items()
    }
    items = results["src"]["items"]
    assert jobs["child"]["result_data"] == {"got": LURE}
    assert jobs["each[0]"]["result_data"] == {"v": items[0]}
    assert jobs["each[1]"]["result_data"] == {"v": items[1]}
    assert jobs["named[0]"]["result_data"] == {"k": LURE}
    assert jobs["named[1]"]["result_data"] == {"k": items[1]["k"]}
    assert jobs["fin"]["result_data"] == {"all": items}
    assert "s3cret" not in json.dumps([j["result_data"] for k, j in jobs.items() if k != "secret"])


async def test_an_item_of_a_literal_list_is_data_too(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """An item is substituted, never looked into: a ``$ref`` written inside a literal list's item is a
    value as well, with or without parents to read (a step reads a parent through its own input)."""
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("secret", "test.echo", {"token": "s3cret"}),
            step("alone", "test.echo", {"v": {"$item": ""}}, for_each=[LURE, {"k": LURE}]),
            step("after", "test.echo", {"v": {"$item": ""}}, ["secret"], for_each=[LURE]),
        ],
    )
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status IN ('completed', 'failed') FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    jobs = await jobs_of(pg, pid)
    assert jobs["alone[0]"]["result_data"] == {"v": LURE}, jobs["alone[0]"]["error_message"]
    assert jobs["alone[1]"]["result_data"] == {"v": {"k": LURE}}
    assert jobs["after[0]"]["result_data"] == {"v": LURE}, jobs["after[0]"]["error_message"]


WRITTEN = {
    "ref": {"$ref": "src.body"},
    "literal": {"$literal": "x"},
    "item": {"$item": ""},
    "nested": [{"$ref": "src.body", "k": 1}, {"deep": {"$literal": {"$ref": "x.y"}}}],
}
"""Values written inside ``{"$literal": …}``, each shaped like a marker: data the step gets as it is."""


async def test_a_literal_written_in_a_step_s_input_reaches_the_step_as_it_is(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    wrapped = {k: {"$literal": v} for k, v in WRITTEN.items()}
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("src", "test.echo", {"body": "from src"}),
            step("after", "test.echo", wrapped, ["src"]),
            step("alone", "test.echo", wrapped),
        ],
    )
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status IN ('completed', 'failed') FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    jobs = await jobs_of(pg, pid)
    assert jobs["after"]["result_data"] == WRITTEN, jobs["after"]["error_message"]
    assert jobs["alone"]["result_data"] == WRITTEN, jobs["alone"]["error_message"]


def test_a_processor_s_next_job_reads_a_literal_as_data_too(settings: Settings) -> None:
    """The check of a processor's next jobs is the pipeline's: a marker inside a literal is refused in
    the words any object of its shape is, and taken where the field takes an object."""
    email = {"to": ["a@example.com"], "subject": "s", "body": {"$literal": {"$ref": "x.y"}}}
    with pytest.raises(BadInput) as refused:
        plan_next_jobs(None, [NextJob(type="email.send", input_data=email)], settings)
    assert refused.value.errors == {
        "next_jobs[0].input_data.body": "the next job 1 (email.send) was given an object for 'body'; it must be text"
    }
    echo = NextJob(type="test.echo", input_data={"v": {"$literal": {"$literal": "x"}}})
    assert plan_next_jobs(None, [echo], settings) == [echo]
