"""One step per item (``for_each``): literal lists expanded at creation, lists from a parent's result
expanded in the completing transaction (exactly once, also when parents complete at the same time),
``$item`` substitution, dependents reading every instance's result as a list, empty lists skipped, and
clear errors for bad lists, cycles and lists over ``PIPELINE_MAX_STEPS``."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

import tests.support.processors  # noqa: F401  (test.echo)
from app import pipelines
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob, Outcome
from app.jobs.queue.common import SystemPrincipal
from app.settings import Settings
from tests.support.factories import TestUser, make_user
from tests.support.webkit import app_client, bearer
from tests.support.workers import running_worker, wait_until


def step(key: str, type_: str = "noop", input_data: Any = None, depends_on: Any = None, **kw: Any) -> dict:
    return {"key": key, "type": type_, "input_data": input_data or {}, "depends_on": depends_on or [], **kw}


async def create(engine: Any, settings: Settings, user: TestUser, steps: list[dict[str, Any]]) -> uuid.UUID:
    async with engine.begin() as conn:
        row = await pipelines.create(conn, name="each", steps=steps, user_id=user.id, settings=settings)
    return row["id"]


async def jobs_of(pg: asyncpg.Connection, pid: uuid.UUID) -> dict[str, dict[str, Any]]:
    rows = await pg.fetch(
        """SELECT j.*, ARRAY(SELECT p.step_key FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on
                             WHERE d.job_id = j.id ORDER BY p.step_key) AS parent_keys
           FROM jobs j WHERE pipeline_id = $1""",
        pid,
    )
    out = {}
    for r in rows:
        d = dict(r)
        for k in ("input_data", "result_data"):
            if isinstance(d[k], str):
                d[k] = json.loads(d[k])
        out[r["step_key"]] = d
    return out


async def run_claimable(engine: Any, settings: Settings) -> list[str]:
    """Claim every claimable job and complete it with its input as result (what ``noop`` does);
    returns the step keys run, sorted."""
    async with engine.begin() as conn:
        rows = await queue.claim(conn, "test-worker", 100, 60)
    if not rows:
        return []
    outcomes = [
        Outcome(job_id=r["id"], kind="completed", result=json.dumps(_input(r["input_data"], r["parents"])))
        for r in rows
    ]
    async with engine.begin() as conn:
        await queue.finish(conn, "test-worker", outcomes, settings)
    return sorted(r["step_key"] for r in rows)


def _input(data: Any, parents: Any) -> Any:
    data = json.loads(data) if isinstance(data, str) else data
    return pipelines.resolve_refs(data, parents or {})


async def test_a_literal_list_runs_one_step_per_item_and_dependents_read_all_results(
    engine, settings, owner, pg
) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("each", "noop", {"x": {"$item": ""}, "fixed": 1}, for_each=[3, 1, 2]),
            step("names", "noop", {"n": {"$item": "name"}}, for_each=[{"name": "ann"}, {"name": "bo"}]),
            step(
                "all", "test.echo", {"xs": {"$ref": "each.x"}, "ns": {"$ref": "names.n"}}, ["each", "names"]
            ),
        ],
    )
    jobs = await jobs_of(pg, pid)
    assert set(jobs) == {"each[0]", "each[1]", "each[2]", "names[0]", "names[1]", "all"}  # no step "each"
    assert jobs["each[1]"]["input_data"] == {"x": 1, "fixed": 1}
    assert jobs["names[1]"]["input_data"] == {"n": "bo"}
    assert jobs["all"]["parent_keys"] == ["each[0]", "each[1]", "each[2]", "names[0]", "names[1]"]
    assert jobs["all"]["pending_parents"] == 5
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    result = (await jobs_of(pg, pid))["all"]["result_data"]
    assert result == {"xs": [3, 1, 2], "ns": ["ann", "bo"]}  # in item order


async def test_a_list_from_a_parent_result_is_expanded_when_the_parent_completes(
    engine, settings, owner, pg
) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("src", "noop", {"items": [{"n": "a"}, {"n": "b"}, {"n": "c"}]}),
            step("each", "noop", {"name": {"$item": "n"}}, for_each={"$ref": "src.items"}),
            step("fin", "noop", {"names": {"$ref": "each.name"}}, ["each"]),
        ],
    )
    jobs = await jobs_of(pg, pid)
    assert set(jobs) == {"src", "fin"}  # nothing for "each" before its list exists
    assert await run_claimable(engine, settings) == ["src"]  # fin waits although src was its stand-in
    jobs = await jobs_of(pg, pid)
    assert set(jobs) == {"src", "each[0]", "each[1]", "each[2]", "fin"}
    assert jobs["each[2]"]["input_data"] == {"name": "c"}
    assert jobs["fin"]["status"] == "queued" and jobs["fin"]["pending_parents"] == 3
    assert await run_claimable(engine, settings) == ["each[0]", "each[1]", "each[2]"]
    assert await run_claimable(engine, settings) == ["fin"]
    assert (await jobs_of(pg, pid))["fin"]["result_data"] == {"names": ["a", "b", "c"]}
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "completed"
    assert (
        await pg.fetchval(
            "SELECT count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id "
            "WHERE j.pipeline_id = $1 AND j.step_key LIKE 'each[%' AND e.kind = 'enqueued'",
            pid,
        )
        == 3
    )  # each instance has its event


@pytest.mark.parametrize("source", ["literal", "ref"])
async def test_an_empty_list_skips_the_step_and_dependents_read_an_empty_list(
    engine, settings, owner, pg, source
) -> None:
    each = (
        step("each", "noop", {"x": {"$item": ""}}, for_each=[])
        if source == "literal"
        else step("each", "noop", {"x": {"$item": ""}}, for_each={"$ref": "src.items"})
    )
    pid = await create(
        engine,
        settings,
        owner,
        [step("src", "noop", {"items": []}), each, step("fin", "noop", {"xs": {"$ref": "each.x"}}, ["each"])],
    )
    ran = await run_claimable(engine, settings)
    ran += await run_claimable(engine, settings)
    assert ran == (["fin", "src"] if source == "literal" else ["src", "fin"])
    jobs = await jobs_of(pg, pid)
    assert set(jobs) == {"src", "fin"}
    assert jobs["fin"]["result_data"] == {"xs": []}
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "completed"


async def test_parents_completing_at_the_same_time_expand_the_step_exactly_once(
    engine, settings, owner, pg
) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("p1", "noop", {"items": [1, 2]}),
            step("p2", "noop", {}),
            step("each", "noop", {"x": {"$item": ""}}, ["p1", "p2"], for_each={"$ref": "p1.items"}),
        ],
    )
    async with engine.begin() as conn:
        rows = await queue.claim(conn, "test-worker", 10, 60)
    assert sorted(r["step_key"] for r in rows) == ["p1", "p2"]

    async def complete(row: Any) -> None:
        result = json.dumps(
            json.loads(row["input_data"]) if isinstance(row["input_data"], str) else row["input_data"]
        )
        async with engine.begin() as conn:
            await queue.finish(
                conn, "test-worker", [Outcome(job_id=row["id"], kind="completed", result=result)], settings
            )
            await asyncio.sleep(0.3)  # hold the transaction open while the other one completes

    await asyncio.gather(*(complete(r) for r in rows))
    keys = sorted(await pg.fetchval("SELECT array_agg(step_key) FROM jobs WHERE pipeline_id = $1", pid))
    assert keys == ["each[0]", "each[1]", "p1", "p2"]
    assert (await jobs_of(pg, pid))["each[0]"]["parent_keys"] == ["p1", "p2"]


async def test_a_list_that_is_not_a_list_fails_the_step_and_cancels_its_dependents(
    engine, settings, owner, pg
) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("src", "noop", {"items": "not a list"}),
            step("each", "noop", {"x": {"$item": ""}}, for_each={"$ref": "src.items"}),
            step("fin", "noop", {}, ["each"]),
        ],
    )
    await run_claimable(engine, settings)
    jobs = await jobs_of(pg, pid)
    assert jobs["each"]["status"] == "failed"
    assert "'src.items' is not a list but text" in jobs["each"]["error_message"]
    assert jobs["fin"]["status"] == "cancelled"
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "failed"
    assert await run_claimable(engine, settings) == []


async def test_an_item_of_a_parents_list_holding_an_item_marker_is_data(engine, settings, owner, pg) -> None:
    """An item from a result is data (tests/queue/test_literal_data.py): a marker in it is stored as
    literal and reaches the step as it was, never read as an ``$item`` or a ``$ref``."""
    pid = await create(
        engine,
        settings,
        owner,
        [step("src"), step("each", "noop", {"x": {"$item": ""}}, for_each={"$ref": "src.items"})],
    )
    async with engine.begin() as conn:
        [src] = await queue.claim(conn, "test-worker", 1, 60)
    result = json.dumps({"items": ["fine", {"u": {"$item": ""}}]})
    async with engine.begin() as conn:
        await queue.finish(conn, "test-worker", [Outcome(src["id"], "completed", result=result)], settings)
    jobs = await jobs_of(pg, pid)
    assert jobs["each[1]"]["input_data"] == {"x": {"u": {"$literal": {"$item": ""}}}}
    assert await run_claimable(engine, settings) == ["each[0]", "each[1]"]
    assert (await jobs_of(pg, pid))["each[1]"]["result_data"] == {"x": {"u": {"$item": ""}}}


async def test_a_list_longer_than_a_pipeline_may_be_fails_the_step(engine, make_settings, owner, pg) -> None:
    settings = make_settings(pipeline_max_steps=5)
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("src", "noop", {"items": list(range(10))}),
            step("each", "noop", {"x": {"$item": ""}}, for_each={"$ref": "src.items"}),
        ],
    )
    await run_claimable(engine, settings)
    jobs = await jobs_of(pg, pid)
    assert set(jobs) == {"src", "each"}
    assert "at most 5 steps" in jobs["each"]["error_message"]


async def test_an_item_naming_another_users_file_fails_the_step_naming_the_item(
    engine, settings, owner, pg
) -> None:
    """The file check runs when the instances are inserted; its error names the item, not the position
    of the instance among the jobs inserted (``jobs[1]``, a name the person never wrote)."""
    other = await pg.fetchval(
        "INSERT INTO users (email, password_hash) VALUES ('someone@example.com', 'x') RETURNING id"
    )
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    for fid, uid in ((mine, owner.id), (theirs, other)):
        await pg.execute(
            "INSERT INTO files (id, user_id, name, content_type, size, sha256) "
            "VALUES ($1, $2, 'a.png', 'image/png', 10, '')",
            fid,
            uid,
        )
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("src", "noop", {"items": [str(mine), str(theirs)]}),
            step("each", "images.thumbnail", {"image": {"$item": ""}}, for_each={"$ref": "src.items"}),
        ],
    )
    await run_claimable(engine, settings)
    jobs = await jobs_of(pg, pid)
    assert jobs["each"]["status"] == "failed"
    assert f"for_each[1].image: no such file ({theirs}); upload it first" in jobs["each"]["error_message"]


@pytest.mark.parametrize(
    ("scheduled", "admin", "expands"), [(2, False, True), (3, False, False), (3, True, True)]
)
async def test_a_list_that_would_take_its_owner_past_the_waiting_limit_fails_the_step(
    engine, make_settings, pg, scheduled, admin, expands
) -> None:
    """The per-person waiting limit holds for the jobs a list from a parent's result adds, as for jobs
    submitted: every small pipeline could add ``PIPELINE_MAX_STEPS`` waiting jobs past it. Admins are
    exempt, as from the limit itself. The owner has ``scheduled`` jobs waiting for tomorrow."""
    settings = make_settings(user_max_waiting_jobs=5)
    person = await make_user(pg, admin=admin)
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    async with engine.begin() as conn:
        for _ in range(scheduled):
            await queue.enqueue(
                conn, NewJob(type="noop", input_data={}, user_id=person.id, run_at=tomorrow), settings
            )
    pid = await create(
        engine,
        settings,
        person,
        [
            step("src", "noop", {"items": [1, 2, 3]}),
            step("each", "noop", {"x": {"$item": ""}}, for_each={"$ref": "src.items"}),
        ],
    )
    await run_claimable(engine, settings)
    jobs = await jobs_of(pg, pid)
    if expands:
        assert sorted(jobs) == ["each[0]", "each[1]", "each[2]", "src"]
        return
    assert set(jobs) == {"src", "each"}
    assert jobs["each"]["status"] == "failed"
    assert jobs["each"]["error_message"] == (
        "step 'each' could not run once per item: its list has 3 items, and with them its owner would "
        "have 6 jobs waiting; the limit is 5 per person"
    )


async def test_a_retried_parent_reopens_dependents_that_still_wait_for_the_whole_list(
    engine, settings, owner, admin, pg
) -> None:
    pid = await create(
        engine,
        settings,
        admin,  # noop is for admins: a retry needs its owner to be one (app.jobs.queue.owner_rule)
        [
            step("src", "noop", {"items": [1, 2]}, max_attempts=1),
            step("each", "noop", {"x": {"$item": ""}}, for_each={"$ref": "src.items"}),
            step("fin", "noop", {}, ["each"]),
        ],
    )
    async with engine.begin() as conn:
        (row,) = await queue.claim(conn, "test-worker", 10, 60)
        await queue.finish(
            conn, "test-worker", [Outcome(job_id=row["id"], kind="failed", error="boom")], settings
        )
    assert (await jobs_of(pg, pid))["fin"]["status"] == "cancelled"
    async with engine.begin() as conn:
        await queue.retry(conn, row["id"], SystemPrincipal(admin.id))
    assert (await jobs_of(pg, pid))["fin"]["pending_parents"] == 2  # its stand-in parent and the list
    assert await run_claimable(engine, settings) == ["src"]
    assert await run_claimable(engine, settings) == ["each[0]", "each[1]"]
    assert await run_claimable(engine, settings) == ["fin"]


@pytest.mark.parametrize(
    ("steps", "field", "words"),
    [
        ([step("a", for_each="x")], "steps[0].for_each", "must be a list"),
        ([step("a", input_data={"x": {"$item": ""}})], "steps[0].input_data", "only allowed in a step with"),
        ([step("a", for_each={"$ref": "a.x"})], "steps[0].for_each", "cycle"),
        (
            [step("a", for_each={"$ref": "b.x"}), step("b", depends_on=["a"])],
            "steps",
            "dependency cycle: a → b → a",
        ),
        ([step("a", for_each=list(range(300)))], "steps[0].for_each", "at most 200 steps"),
        # A pipeline left without any job would say "running" for ever.
        (
            [step("a", for_each=[]), step("b", for_each=[], depends_on=["a"])],
            "steps",
            "every step's for_each list is empty",
        ),
        (
            [step("a", "sleep", {"seconds": {"$item": ""}}, for_each=[1, "x"])],
            "steps[0].for_each[1].seconds",
            "",
        ),
        (
            [step("a", input_data={"v": {"$item": "k"}}, for_each=[1])],
            "steps[0].for_each[0].v",
            "no field 'k'",
        ),
        # an item is a value: a marker in it would be put into the input as it is, to fail when it runs
        (
            [step("a", "test.echo", {"u": {"$item": ""}}, for_each=[1, {"u": [2, {"$item": ""}]}])],
            "steps[0].for_each[1].u[1]",
            'an item cannot hold {"$item": …}',
        ),
        (
            [
                step("s", input_data={"l": [[1]]}),
                step("a", for_each={"$ref": "s.l"}),
                step("b", for_each={"$ref": "a.x"}),
            ],
            "steps[2].depends_on",
            "cannot depend on another such step",
        ),
    ],
)
async def test_bad_lists_are_refused_with_their_path(
    engine, settings, owner, pg, steps, field, words
) -> None:
    with pytest.raises(BadInput) as err:
        await create(engine, settings, owner, steps)
    assert field in err.value.errors, err.value.errors
    assert words in err.value.errors[field]
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0


async def test_the_api_takes_for_each_and_counts_literal_items_against_the_size_limit(
    make_settings, db_url
) -> None:
    settings = make_settings(pipeline_max_steps=4, worker_enabled=False)
    _, headers = await bearer(db_url, "each@example.com", admin=True)
    async with app_client(settings) as client:
        ok = await client.post(
            "/api/pipelines",
            json={"name": "each", "steps": [step("a", "noop", {"v": {"$item": ""}}, for_each=[1, 2, 3])]},
            headers=headers,
        )
        assert ok.status_code == 201, ok.text
        keys = [
            s["key"]
            for s in (await client.get(f"/api/pipelines/{ok.json()['id']}", headers=headers)).json()["steps"]
        ]
        assert sorted(keys) == ["a[0]", "a[1]", "a[2]"]
        big = await client.post(
            "/api/pipelines",
            json={"name": "each", "steps": [step("a", "noop", {}, for_each=list(range(5)))]},
            headers=headers,
        )
        assert big.status_code == 422
        assert "at most 4 steps" in big.text


async def test_instances_of_a_list_from_a_parent_result_carry_the_steps_approval_rule(
    engine, settings, owner, pg
) -> None:
    """The same rule on every instance whether the list is literal or comes at run time: each waits for
    approval, and only a listed approver may decide it."""
    from app.errors import Forbidden
    from tests.support.factories import make_user

    ann = await make_user(pg, email="ann@example.com")
    stranger = await make_user(pg, admin=True)
    rule = {
        "requires_approval": True,
        "approvers": ["ann@example.com"],
        "approvals_needed": 1,
        "approval_timeout": 3600,
        "on_approval_timeout": "remind",
    }
    ref = await create(
        engine,
        settings,
        owner,
        [
            step("src", "noop", {"items": [{"n": "a"}, {"n": "b"}]}),
            step("each", "noop", {"name": {"$item": "n"}}, for_each={"$ref": "src.items"}, **rule),
        ],
    )
    literal = await create(
        engine,
        settings,
        owner,
        [step("each", "noop", {"name": {"$item": "n"}}, for_each=[{"n": "a"}, {"n": "b"}], **rule)],
    )
    assert await run_claimable(engine, settings) == ["each[0]", "each[1]", "src"]  # literal ones and src
    assert await run_claimable(engine, settings) == ["each[0]", "each[1]"]  # the expanded ones
    rules_sql = """
        SELECT j.step_key, j.status, r.approvers, r.user_ids, r.admins, r.owner, r.approvals_needed,
               r.timeout_seconds, r.on_timeout
        FROM jobs j LEFT JOIN job_approval_rules r ON r.job_id = j.id
        WHERE j.pipeline_id = $1 AND j.step_key LIKE 'each[%' ORDER BY j.step_key
    """
    expanded = [dict(r) for r in await pg.fetch(rules_sql, ref)]
    assert expanded == [dict(r) for r in await pg.fetch(rules_sql, literal)]
    assert [(r["status"], r["user_ids"], r["timeout_seconds"]) for r in expanded] == [
        ("waiting_approval", [ann.id], 3600)
    ] * 2
    first = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'each[0]'", ref)
    with pytest.raises(Forbidden, match="not one of the approvers"):
        async with engine.begin() as conn:
            await queue.approve(conn, first, stranger)
    async with engine.begin() as conn:
        assert (await queue.approve(conn, first, ann))["status"] == "completed"


async def test_instances_of_a_titled_step_are_named_after_their_file_or_numbered(
    engine, settings, owner, pg
) -> None:
    """Five steps all called "Thumbnails" said nothing of which picture each one makes: an instance is
    named after the first file its input names, else numbered, on both paths (literal, parent's result)."""
    from tests.support.procs import EXAMPLES, upload

    pictures = [
        await upload(engine, settings, owner.id, path=EXAMPLES / "images" / name)
        for name in ("rocket.jpg", "horse.png")
    ]
    pid = await create(
        engine,
        settings,
        owner,
        [
            step(
                "thumb", "images.thumbnail", {"image": {"$item": ""}}, for_each=pictures, title="Thumbnails"
            ),
            step("count", "noop", {"x": {"$item": ""}}, for_each=[1, 2], title="Count"),
            step("plain", "noop", {"x": {"$item": ""}}, for_each=[1]),
            step("src", "noop", {"items": [str(p) for p in reversed(pictures)]}),
            step(
                "later",
                "images.thumbnail",
                {"image": {"$item": ""}},
                for_each={"$ref": "src.items"},
                title="Later",
            ),
        ],
    )
    await run_claimable(engine, settings)  # src completes; thumb[…] may fail (no real processor here)
    titles = {k: j["title"] for k, j in (await jobs_of(pg, pid)).items()}
    assert titles["thumb[0]"] == "Thumbnails: rocket.jpg" and titles["thumb[1]"] == "Thumbnails: horse.png"
    assert titles["count[0]"] == "Count (1)" and titles["count[1]"] == "Count (2)"
    assert titles["plain[0]"] is None
    assert titles["later[0]"] == "Later: horse.png" and titles["later[1]"] == "Later: rocket.jpg"


async def test_an_item_whose_instance_is_over_the_input_limit_fails_the_step_not_its_parent(
    engine, make_settings, owner, pg
) -> None:
    """An instance's input is the step's input with the item put in: each within ``JOB_MAX_INPUT_BYTES``,
    together over it. The step fails with the limit in words, naming the item, as for any other bad
    item; its parent, whose completion expands the list, completes (through the worker, it failed with
    "the outcome could not be recorded" and a traceback)."""
    settings = make_settings(job_max_input_bytes=1024)
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("src", "test.echo", {"items": ["x" * 600]}),
            step("each", "test.echo", {"x": {"$item": ""}, "pad": "y" * 600}, for_each={"$ref": "src.items"}),
        ],
    )
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status IN ('completed', 'failed') FROM pipelines WHERE id = $1", pid),
            what="the pipeline's end",
        )
    jobs = await jobs_of(pg, pid)
    assert jobs["src"]["status"] == "completed", jobs["src"]["error_message"]
    assert jobs["each"]["status"] == "failed"
    assert jobs["each"]["error_message"] == (
        "step 'each' could not run once per item: for_each[0] is 1.2 KiB; the limit is 1 KiB "
        "(JOB_MAX_INPUT_BYTES). Upload large data as a file and pass its id instead."
    )
