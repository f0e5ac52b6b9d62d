"""A processor's next jobs get the checks a pipeline's steps get, through the real worker: a ``{"$ref": …}``
names a job the next job depends on, as it will read that job's result (step key, or id for a job
without one), and a file id names one of the owner's files. A refusal fails the creating job, naming the
field (``next_jobs[i]…``), and creates nothing. A next job waits for all its parents, the creating job
included."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import tests.support.forms  # registers test.form
import tests.support.processors  # noqa: F401  (registers the test job types)
from app.errors import BadInput
from app.jobs import queue
from app.jobs.error_text import error_text_for
from app.jobs.graph import plan_next_jobs
from app.jobs.payload import check_input
from app.jobs.queue import NewJob, new_id
from app.processors import NextJob
from app.settings import Settings
from tests.support.factories import TestUser, make_user
from tests.support.workers import running_worker, wait_status, wait_until


async def enqueue_next(
    engine: Any, settings: Settings, user: TestUser, jobs: list[dict[str, Any]], job_id: uuid.UUID
) -> uuid.UUID:
    """A ``test.next`` job (id ``job_id``) asking for ``jobs`` as its next jobs."""
    new = NewJob(type="test.next", input_data={"jobs": jobs, "out": 7}, user_id=user.id, id=job_id)
    async with engine.begin() as conn:
        return (await queue.enqueue(conn, new, settings)).job["id"]


def _bad_refs(creator: uuid.UUID) -> dict[str, tuple[list[dict[str, Any]], str, str]]:
    """Next jobs whose second one reads a result it cannot read: (jobs, field, what the error says)."""
    a = {"type": "test.echo", "key": "a", "input_data": {"v": 1}}
    return {
        # a step that is nowhere
        "unknown step": (
            [
                a,
                {
                    "type": "test.echo",
                    "key": "b",
                    "depends_on": ["a"],
                    "input_data": {"xs": [1, {"$ref": "c.v"}]},
                },
            ],
            "next_jobs[1].input_data.xs[1]",
            "reads step 'c', which this step does not depend on",
        ),
        # a sibling it does not wait for: it could run before the sibling has a result
        "sibling not waited for": (
            [a, {"type": "test.echo", "key": "b", "input_data": {"xs": [1, {"$ref": "a.v"}]}}],
            "next_jobs[1].input_data.xs[1]",
            "reads step 'a', which this step does not depend on",
        ),
        # the creator, waited for by its id, but read by its id: its result is read under its step key
        "a parent read by id": (
            [
                a,
                {
                    "type": "test.echo",
                    "key": "b",
                    "depends_on": [str(creator)],
                    "input_data": {"deep": {"x": {"$ref": f"{creator}.out"}}},
                },
            ],
            "next_jobs[1].input_data.deep.x",
            f"reads step '{creator}', which this step does not depend on",
        ),
    }


@pytest.mark.parametrize("case", ["unknown step", "sibling not waited for", "a parent read by id"])
async def test_a_next_jobs_ref_to_a_result_it_cannot_read_fails_its_creator_and_creates_nothing(
    engine, settings, owner, pg, case
) -> None:
    creator = new_id()
    jobs, field, says = _bad_refs(creator)[case]
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    assert row["status"] == "failed"
    assert f"{field}: " in row["error_message"] and says in row["error_message"], row["error_message"]
    # what the owner reads: the field and the reason, without the traceback
    shown = error_text_for(row["error_message"], owner)
    assert shown is not None and f"{field}: " in shown and says in shown and "Traceback" not in shown, shown
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_next_jobs_read_a_new_sibling_and_an_existing_job_by_step_key(
    engine, settings, owner, pg
) -> None:
    """The rule lets through what the job will read when it runs: a sibling by its key, and the creator
    (depended on by its id) by its step key (``start`` for a creator that had none). The next job waits
    for both: the creator's completion, recorded with the next jobs, does not count for the sibling, and
    a parent named twice (by key and by id, or the same key twice) is one parent."""
    creator = new_id()
    jobs = [
        {"type": "test.echo", "key": "a", "input_data": {"v": 1}},
        {
            "type": "test.echo",
            "key": "b",
            "depends_on": ["a", str(creator), "a", "start"],
            "input_data": {"from_a": {"$ref": "a.v"}, "from_start": [{"$ref": "start.out"}]},
        },
    ]
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        assert (await wait_status(pg, creator, {"completed", "failed"}))["status"] == "completed"
        b = await wait_until(
            lambda: pg.fetchrow(
                "SELECT * FROM jobs WHERE step_key = 'b' AND status IN ('completed', 'failed')"
            ),
            what="the next job b",
        )
    assert b["status"] == "completed", b["error_message"]
    assert json.loads(b["result_data"]) == {"from_a": 1, "from_start": [7]}


async def test_a_next_job_naming_another_users_file_is_refused(engine, settings, owner, pg) -> None:
    someone = await make_user(pg)
    theirs = uuid.uuid4()
    await pg.execute(
        "INSERT INTO files (id, user_id, name, content_type, size, sha256) "
        "VALUES ($1, $2, 'horse.png', 'image/png', 10, '')",
        theirs,
        someone.id,
    )
    creator = new_id()
    jobs = [{"type": "images.thumbnail", "key": "thumb", "input_data": {"image": str(theirs)}}]
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    assert row["status"] == "failed"
    assert row["error_message"] == (
        f"could not create the next jobs: next_jobs[0].input_data.image: no such file ({theirs}); upload it first"
    )
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_next_jobs_whose_keys_are_taken_read_each_other_under_their_new_keys(
    engine, settings, owner, pg
) -> None:
    """A processor run a second time in its pipeline (a retry, Run again) asks for next jobs whose keys
    its first run's took: they are stored as ``a'``, ``b'``, and ``b'`` reads ``a'``, the sibling it
    waits for, not the first run's ``a``."""

    def jobs(v: int) -> list[dict[str, Any]]:
        return [
            {"type": "test.echo", "key": "a", "input_data": {"v": v}},
            {"type": "test.echo", "key": "b", "depends_on": ["a"], "input_data": {"from_a": {"$ref": "a.v"}}},
        ]

    first = new_id()
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs(1), first)
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) FROM jobs WHERE step_key = 'b' AND status = 'completed'"),
            what="the first run's b",
        )
        pipeline = await pg.fetchval("SELECT pipeline_id FROM jobs WHERE id = $1", first)
        again = NewJob(
            type="test.next",
            input_data={"jobs": jobs(2), "out": 7},
            user_id=owner.id,
            pipeline_id=pipeline,
            step_key="again",
        )
        async with engine.begin() as conn:
            second = (await queue.enqueue(conn, again, settings)).job["id"]
        assert (await wait_status(pg, second, {"completed", "failed"}))["status"] == "completed"
        b2 = await wait_until(
            lambda: pg.fetchrow(
                "SELECT * FROM jobs WHERE step_key = $1 AND status IN ('completed', 'failed')", "b'"
            ),
            what="the second run's b",
        )
    assert b2["status"] == "completed", b2["error_message"]
    assert json.loads(b2["result_data"]) == {"from_a": 2}


async def test_a_next_jobs_dependency_list_is_capped_as_sent(engine, settings, owner, pg) -> None:
    """Next jobs did not go through the cap a submitted job's list has (``PIPELINE_MAX_EDGES``): a list of
    any length was taken, its repeats dropped. Over the cap, counted as sent, the creator fails naming the
    list, and nothing is created."""
    capped = settings.model_copy(update={"pipeline_max_edges": 3})
    creator = new_id()
    jobs = [
        {"type": "test.echo", "key": "a", "input_data": {"v": 1}},
        {"type": "test.echo", "key": "b", "depends_on": ["a"] * 4, "input_data": {"v": 2}},
    ]
    async with running_worker(capped):
        await enqueue_next(engine, capped, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    assert row["status"] == "failed", row["error_message"]
    assert "next_jobs[1].depends_on: " in row["error_message"], row["error_message"]
    assert "at most 3 jobs" in row["error_message"], row["error_message"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


NEXT_JOBS_REFUSED = {
    # refused by the plan, before the outcome is written (app.worker.executor)
    "unknown type, at planning": ([{"type": "test.nosuch", "input_data": {}}], "next_jobs[0].type"),
    "a cycle, at planning": (
        [
            {"type": "test.echo", "key": "a", "depends_on": ["b"], "input_data": {}},
            {"type": "test.echo", "key": "b", "depends_on": ["a"], "input_data": {}},
        ],
        "next_jobs",
    ),
    # refused by the queue while the outcome is written (app.worker.completer)
    "a title too long, when written": (
        [{"type": "test.echo", "title": "t" * 300, "input_data": {}}],
        "next_jobs[0].title",
    ),
}


@pytest.mark.parametrize("case", list(NEXT_JOBS_REFUSED))
async def test_refused_next_jobs_store_the_refusals_words_without_a_traceback(
    engine, settings, owner, pg, case
) -> None:
    """Next jobs refused at planning stored "could not create the next jobs: BadInput: …" and the
    traceback of the check; refused when the outcome is written, only the words. Both store the words."""
    jobs, field = NEXT_JOBS_REFUSED[case]
    creator = new_id()
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    assert row["status"] == "failed"
    error = row["error_message"]
    assert error.startswith(f"could not create the next jobs: {field}"), error
    assert "Traceback" not in error and "BadInput" not in error and "\n" not in error, error
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_next_jobs_over_the_input_limit_as_written_fail_their_creator_with_the_limit_in_words(
    engine, settings, make_settings, owner, pg
) -> None:
    """The input limit (``JOB_MAX_INPUT_BYTES``) is met by next jobs as planned and again as written, where
    a ``$ref`` to a sibling stored under a primed key (``a'``, its own key taken by a first run) is one
    character longer: a next job at the limit goes over it then. Its creator fails with the limit in words
    naming the next job, as a refusal at planning does, not with "the outcome could not be recorded" and a
    traceback. (The creators are submitted under the default limit: their input holds the next jobs'.)"""
    limit = 1024
    small = make_settings(job_max_input_bytes=limit)
    base = {"from_a": {"$ref": "a.v"}, "pad": ""}
    base["pad"] = "x" * (limit - len(check_input(base, settings.job_max_input_bytes).encode()))
    assert len(check_input(base, limit).encode()) == limit
    first, second = new_id(), new_id()
    a = {"type": "test.echo", "key": "a", "input_data": {"v": 1}}
    async with running_worker(small):
        await enqueue_next(engine, settings, owner, [a], first)
        assert (await wait_status(pg, first, {"completed", "failed"}))["status"] == "completed"
        pipeline = await pg.fetchval("SELECT pipeline_id FROM jobs WHERE id = $1", first)
        again = NewJob(
            id=second,
            type="test.next",
            input_data={
                "jobs": [a, {"type": "test.echo", "key": "b", "depends_on": ["a"], "input_data": base}]
            },
            user_id=owner.id,
            pipeline_id=pipeline,
            step_key="again",
        )
        async with engine.begin() as conn:
            await queue.enqueue(conn, again, settings)
        row = await wait_status(pg, second, {"completed", "failed"})
    assert row["status"] == "failed"
    assert row["error_message"] == (
        "could not create the next jobs: next_jobs[1].input_data is 1,025 bytes; the limit is 1,024 bytes "
        "(JOB_MAX_INPUT_BYTES). Upload large data as a file and pass its id instead."
    ), row["error_message"]
    # the second run created nothing: the first run's creator and its a, and the second creator
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 3


@pytest.mark.parametrize(
    ("scheduled", "admin", "created"), [(2, False, True), (3, False, False), (3, True, True)]
)
async def test_next_jobs_that_would_take_their_owner_past_the_waiting_limit_are_recorded_failed(
    engine, make_settings, pg, scheduled, admin, created
) -> None:
    """The per-person waiting limit (``USER_MAX_WAITING_JOBS``) holds for a processor's next jobs, run by
    a worker, as for jobs submitted and for a ``for_each`` list read from a result: a job that waited as
    one could add any number past it once it ran. Over it the next jobs are recorded failed, saying why,
    and the job that asked for them stays completed. Admins are exempt, as from the limit itself. The
    owner has ``scheduled`` jobs waiting for tomorrow; the creator asks for three."""
    settings = make_settings(user_max_waiting_jobs=5)
    person = await make_user(pg, admin=admin)
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    async with engine.begin() as conn:
        for _ in range(scheduled):
            await queue.enqueue(
                conn, NewJob(type="noop", input_data={}, user_id=person.id, run_at=tomorrow), settings
            )
    jobs = [{"type": "test.echo", "key": k, "input_data": {"v": 1}} for k in "abc"]
    creator = new_id()
    async with running_worker(settings):
        await enqueue_next(engine, settings, person, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    made = await pg.fetch("SELECT status, error_message FROM jobs WHERE created_by_job = $1", creator)
    assert row["status"] == "completed", row["error_message"]
    assert len(made) == 3
    if created:
        assert {r["status"] for r in made} <= {"queued", "in_progress", "completed"}
        return
    assert {(r["status"], r["error_message"]) for r in made} == {
        (
            "failed",
            f"could not create the next jobs: job {creator} asked for 3 next jobs, and with them its owner "
            "would have 6 jobs waiting; the limit is 5 per person",
        )
    }


@pytest.mark.parametrize(("asked", "created"), [(2, True), (3, False)])
async def test_next_jobs_that_would_take_their_pipeline_past_its_size_fail_their_creator(
    engine, make_settings, owner, pg, asked, created
) -> None:
    """``PIPELINE_MAX_STEPS`` holds for a processor's next jobs as for a ``for_each`` list read from a
    result: a processor (or one retried, whose next jobs join the same pipeline again) could grow a
    pipeline past any size. The creator is the pipeline's first step; the limit is 3."""
    settings = make_settings(pipeline_max_steps=3)
    jobs = [{"type": "test.echo", "key": k, "input_data": {"v": 1}} for k in "abc"[:asked]]
    creator = new_id()
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    made = await pg.fetchval("SELECT count(*) FROM jobs WHERE created_by_job = $1", creator)
    if created:
        assert row["status"] == "completed", row["error_message"]
        assert made == asked
        return
    assert row["status"] == "failed"
    assert row["error_message"] == (
        "could not create the next jobs: next_jobs: 3 next jobs would give their pipeline 4 steps; "
        "a pipeline may have at most 3 steps"
    )
    assert made == 0


async def test_a_next_job_left_without_what_only_parents_give_fails_its_creator_in_the_processors_words(
    engine, settings, owner, pg
) -> None:
    """A contact sheet asked for as a next job with no pictures and no job before it is refused by the
    rule a form applies (the sheet could only fail), but worded for this path: which next job, which
    field, and what the processor left out — not the form's "choose at least one picture", an instruction
    its owner cannot follow."""
    creator = new_id()
    jobs = [{"type": "images.contact_sheet", "key": "sheet", "input_data": {}}]
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    assert row["status"] == "failed"
    error = row["error_message"]
    assert error.startswith(
        "could not create the next jobs: next job 1 (images.contact_sheet, key 'sheet'): the processor left "
        "'Pictures' empty for the steps before this job to fill, and gave it no steps before it"
    ), error
    assert "choose" not in error.lower() and "\n" not in error, error
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_a_next_jobs_input_that_fails_its_schema_fails_its_creator_in_words_for_a_processor(
    engine, settings, owner, pg
) -> None:
    """A next job missing a required input or given a value of another kind is refused in words for what
    the processor wrote (which next job, which input, what it was given and what it must be), not the
    form's "Fill this in." or "Enter a whole number", instructions its owner cannot follow."""
    creator = new_id()
    jobs = [
        {"type": "test.form", "key": "x", "input_data": {"copies": 12}},
        {"type": "test.form", "input_data": {"name": "Ann", "copies": "many"}},
    ]
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    assert row["status"] == "failed"
    assert row["error_message"] == (
        "could not create the next jobs: the next job 1 (test.form, key 'x') is missing its input 'name'"
    ), row["error_message"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
    with pytest.raises(BadInput) as refused:
        plan_next_jobs(None, [NextJob(**jobs[1])], settings)
    assert refused.value.errors == {
        "next_jobs[0].input_data.copies": "the next job 1 (test.form) was given 'many' for 'copies'; it must "
        "be a whole number"
    }
    with pytest.raises(BadInput) as refused:
        plan_next_jobs(None, [NextJob(type="test.form", input_data={"name": "Ann", "copies": 12})], settings)
    assert str(refused.value) == "the next job 1 (test.form) was given 12 for 'copies'; it must be at most 10"
    odd = {"name": "Ann", "copies": {"$ref": "x.y", "z": 1}}
    with pytest.raises(BadInput) as refused:
        plan_next_jobs(None, [NextJob(type="test.form", input_data=odd)], settings)
    assert str(refused.value) == (
        "the next job 1 (test.form) has an object in 'copies' that is not read: an object with \"$ref\" "
        "must have that one key only, like {\"$ref\": …}; remove the others ('z')"
    )


async def test_a_next_job_its_types_own_check_refuses_fails_its_creator_in_words_for_a_processor(
    engine, settings, owner, pg
) -> None:
    """The type's own check at submission (``http.request``: where jobs may connect) refuses a next job
    naming it, its field and the value the processor gave, as the schema's refusals do; the queue's
    refusal at insert said only the form's words, with no word of which next job they were about."""
    creator = new_id()
    jobs = [{"type": "http.request", "key": "call", "input_data": {"url": "http://10.0.0.1/x"}}]
    async with running_worker(settings):
        await enqueue_next(engine, settings, owner, jobs, creator)
        row = await wait_status(pg, creator, {"failed", "completed"})
    assert row["status"] == "failed"
    assert row["error_message"].startswith(
        "could not create the next jobs: the next job 1 (http.request, key 'call') was given "
        "'http://10.0.0.1/x' for 'url', which cannot be used: "
    ), row["error_message"]
    assert "private address" in row["error_message"], row["error_message"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
