"""Pipelines: DAG order, parallel steps, failure propagation on every path (case C08), cycles
and foreign ids refused (case C09), approval gates, cancel, and retry re-opening dependents (case C23)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from app import pipelines
from app.errors import BadInput, Conflict, Forbidden, NotFound
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support.factories import TestUser, event_kinds
from tests.support.processors import FLAGS_DDL
from tests.support.workers import WorkerProcess, running_worker, wait_status, wait_until


def step(
    key: str,
    type_: str = "noop",
    input_data: dict[str, Any] | None = None,
    depends_on: list[str] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    return {"key": key, "type": type_, "input_data": input_data or {}, "depends_on": depends_on or [], **kw}


async def create(
    engine: Any, settings: Settings, user: TestUser, steps: list[dict[str, Any]], name: str = "test"
) -> uuid.UUID:
    async with engine.begin() as conn:
        row = await pipelines.create(conn, name=name, steps=steps, user_id=user.id, settings=settings)
    return row["id"]


async def steps_by_key(pg: asyncpg.Connection, pipeline_id: uuid.UUID) -> dict[str, dict[str, Any]]:
    rows = await pg.fetch("SELECT * FROM jobs WHERE pipeline_id = $1", pipeline_id)
    return {r["step_key"]: dict(r) for r in rows}


async def stuck(engine: Any) -> list[uuid.UUID]:
    async with engine.connect() as conn:
        return await queue.stuck_dependents(conn)


async def test_a_diamond_runs_in_order_with_the_middle_steps_overlapping(engine, settings, owner, pg) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("a", "sleep", {"seconds": 0.2}),
            step("b", "sleep", {"seconds": 1.0}, ["a"]),
            step("c", "sleep", {"seconds": 1.0}, ["a"]),
            step("d", "test.collect", {}, ["b", "c"]),
        ],
    )
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    s = await steps_by_key(pg, pid)
    assert s["a"]["completed_at"] <= s["b"]["started_at"]
    assert s["a"]["completed_at"] <= s["c"]["started_at"]
    assert s["b"]["started_at"] < s["c"]["completed_at"]  # overlap
    assert s["c"]["started_at"] < s["b"]["completed_at"]
    assert max(s["b"]["completed_at"], s["c"]["completed_at"]) <= s["d"]["started_at"]
    assert s["d"]["result_data"] == '{"parents": ["b", "c"]}'  # a step reads its parents' results
    async with engine.connect() as conn:
        view = await pipelines.get(conn, pid, owner)
    assert view["status"] == "completed"
    assert view["progress"] == 100
    assert [[x["key"] for x in layer] for layer in view["layers"]] == [["a"], ["b", "c"], ["d"]]


async def test_a_step_can_take_an_input_field_from_a_parent_result(engine, settings, owner, pg) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("first", "noop", {"seconds": 0.1}),
            step("second", "sleep", {"seconds": {"$ref": "first.seconds"}}, ["first"]),
        ],
    )
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    assert (await steps_by_key(pg, pid))["second"]["result_data"] == '{"slept_seconds": 0.1}'


# --- case C08: failure propagation on every path -----------------------------------------------------------


async def _c08(
    engine: Any,
    settings: Settings,
    owner: TestUser,
    a_type: str = "fail",
    a_input: dict[str, Any] | None = None,
) -> uuid.UUID:
    # A fails for good; B depends on [A]; C depends on [A, X]; X succeeds.
    return await create(
        engine,
        settings,
        owner,
        [
            step(
                "A", a_type, a_input if a_input is not None else {"message": "upstream broke"}, max_attempts=1
            ),
            step("X", "noop"),
            step("B", "noop", {}, ["A"]),
            step("C", "noop", {}, ["A", "X"]),
            step("D", "noop", {}, ["B"]),
        ],
    )


async def _assert_propagated(
    pg: asyncpg.Connection,
    engine: Any,
    pid: uuid.UUID,
    a_status: str,
    reason: str,
    x_status: str = "completed",
    pipeline_status: str = "failed",
) -> None:
    s = await steps_by_key(pg, pid)
    a = s["A"]
    assert a["status"] == a_status
    for key in ("B", "C", "D"):
        assert s[key]["status"] == "cancelled", key
        assert s[key]["error_message"] == f"upstream fail {a['id']} {reason}"
        assert s[key]["blocked_by"] == a["id"]
    assert s["X"]["status"] == x_status  # an independent step is not cancelled
    assert await stuck(engine) == []
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == pipeline_status


async def test_a_failed_upstream_cancels_everything_downstream_and_fails_the_pipeline_with_one_alert(
    engine, settings, owner, pg
) -> None:
    pid = await _c08(engine, settings, owner)
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT finished_at IS NOT NULL FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    await _assert_propagated(pg, engine, pid, "failed", "failed")
    alerts = await pg.fetch("SELECT kind, payload FROM alert_outbox")
    assert [a["kind"] for a in alerts] == ["pipeline_failed"]  # one for the pipeline, not one per step
    assert '"key": "A"' in alerts[0]["payload"]


async def test_an_upstream_failed_by_the_rescue_sweep_propagates_too(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    # Variant: A runs out of attempts through the lease-expiry sweep (its worker killed).
    settings = make_settings(worker_visibility_timeout_secs=2, worker_sweep_interval_secs=0.3)
    pid = await _c08(engine, settings, owner, "test.effect", {"seconds": 30})
    a_id = (await steps_by_key(pg, pid))["A"]["id"]
    proc = WorkerProcess(settings, tmp_path / "w.log")
    try:
        await wait_status(pg, a_id, {"in_progress"}, timeout=30)
        proc.kill()
    finally:
        proc.close()
    async with running_worker(settings):
        await wait_status(pg, a_id, {"failed"}, timeout=15)
        await wait_until(
            lambda: pg.fetchval("SELECT finished_at IS NOT NULL FROM pipelines WHERE id = $1", pid),
            what="the pipeline",
        )
    s = await steps_by_key(pg, pid)
    for key in ("B", "C", "D"):
        assert s[key]["status"] == "cancelled"
        assert s[key]["error_message"] == f"upstream test.effect {a_id} failed"
    assert await stuck(engine) == []
    # One alert, for the pipeline (not one for the rescued step plus one per cancelled step).
    assert await pg.fetchval("SELECT array_agg(kind) FROM alert_outbox") == ["pipeline_failed"]


async def test_cancelling_an_upstream_cancels_its_dependents(engine, settings, owner, pg) -> None:
    pid = await _c08(engine, settings, owner)
    a_id = (await steps_by_key(pg, pid))["A"]["id"]
    async with engine.begin() as conn:
        await queue.cancel(conn, a_id, owner)
    await _assert_propagated(
        pg, engine, pid, "cancelled", "was cancelled", x_status="queued", pipeline_status="running"
    )


async def test_deleting_an_upstream_cancels_its_dependents(engine, settings, owner, admin, pg) -> None:
    pid = await _c08(engine, settings, owner)
    a_id = (await steps_by_key(pg, pid))["A"]["id"]
    async with engine.begin() as conn:
        await queue.delete(conn, a_id, admin)
    s = await steps_by_key(pg, pid)
    assert "A" not in s
    for key in ("B", "C", "D"):
        assert s[key]["status"] == "cancelled"
        assert s[key]["error_message"] == f"upstream fail {a_id} was removed"
    assert await stuck(engine) == []


async def test_a_manual_retry_of_the_failed_upstream_reopens_what_it_cancelled(
    engine, settings, owner, admin, pg
) -> None:
    """Documented rule (README "Pipelines"; case C23 + C08): retrying the failed step re-opens the steps
    its failure cancelled; they wait for it again and run once it completes."""
    await pg.execute(FLAGS_DDL)
    await pg.execute("INSERT INTO test_flags (name) VALUES ('downstream')")
    # an admin's: the type is for admins, and a retry needs its owner to be one (app.jobs.queue.owner_rule)
    pid = await _c08(engine, settings, admin, "test.until_fixed", {})
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT finished_at IS NOT NULL FROM pipelines WHERE id = $1", pid),
            what="failure",
        )
        a_id = (await steps_by_key(pg, pid))["A"]["id"]
        await pg.execute("UPDATE test_flags SET fixed = true")  # the downstream fault is fixed
        async with engine.begin() as conn:
            await queue.retry(conn, a_id, admin)
        await wait_until(
            lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1", pid),
            what="the pipeline to complete",
        )
    s = await steps_by_key(pg, pid)
    assert all(v["status"] == "completed" for v in s.values())
    assert (await event_kinds(pg, s["B"]["id"]))[:3] == ["enqueued", "cancelled", "reopened"]


async def test_no_job_ever_waits_on_a_parent_that_can_no_longer_complete(
    engine, settings, owner, admin, pg
) -> None:
    """The invariant query of case C08 stays empty through a mix of failures, cancels and deletes."""
    for variant in range(3):
        pid = await _c08(engine, settings, owner)
        a_id = (await steps_by_key(pg, pid))["A"]["id"]
        async with engine.begin() as conn:
            if variant == 0:
                await queue.cancel(conn, a_id, owner)
            elif variant == 1:
                await queue.delete(conn, a_id, admin)
        assert await stuck(engine) == []
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 0 FROM jobs WHERE status IN ('queued', 'in_progress')"),
            what="quiet",
        )
    assert await stuck(engine) == []


# --- case C09: cycles and unknown ids ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([step("j1", depends_on=["j1"])], "dependency cycle: j1 → j1"),
        ([step("j2", depends_on=["j3"]), step("j3", depends_on=["j2"])], "dependency cycle: j2 → j3 → j2"),
        (
            [step("a", depends_on=["c"]), step("b", depends_on=["a"]), step("c", depends_on=["b"])],
            "dependency cycle: a → c → b → a",
        ),
        ([step("a", depends_on=["ghost"])], "unknown dependency 'ghost'"),
        ([step("a"), step("a")], "duplicate step key 'a'"),
        ([step("a", "nope")], "unknown job type 'nope'"),
        ([step("a", "sleep", {"seconds": -1})], "steps[0].input_data.seconds"),
        # a $ref reads only the steps the step depends on: anything else could only fail when it runs
        ([step("a"), step("b", "sleep", {"seconds": {"$ref": "a.n"}})], "steps[1].input_data.seconds"),
        ([step("b", "sleep", {"seconds": {"$ref": "ghost.n"}})], "reads step 'ghost'"),
        ([step("a"), step("b", "noop", {"xs": [1, {"$ref": "c.x"}]}, ["a"])], "steps[1].input_data.xs[1]"),
        ([step("a"), step("b", "sleep", {"seconds": {"$ref": 5}}, ["a"])], "steps[1].input_data.seconds"),
        # a dot in a key: the $ref would read step 'a', so the key is refused
        ([step("a.v2"), step("b", "noop", {"x": {"$ref": "a.v2.n"}}, ["a.v2"])], "must not contain '.'"),
    ],
)
async def test_a_bad_spec_is_refused_naming_the_problem_and_nothing_is_stored(
    engine, settings, owner, pg, steps, message
) -> None:
    with pytest.raises(BadInput) as err:
        await create(engine, settings, owner, steps)
    assert message in err.value.detail or message in err.value.errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0


async def test_depending_on_another_users_job_looks_exactly_like_an_unknown_id(
    engine, settings, owner, other, pg
) -> None:
    async with engine.begin() as conn:
        theirs = (
            await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=other.id), settings)
        ).job["id"]
    errors = []
    for dep in (theirs, uuid.uuid4()):
        with pytest.raises(BadInput) as err:
            async with engine.begin() as conn:
                await queue.enqueue(
                    conn, NewJob(type="noop", input_data={}, user_id=owner.id, depends_on=[dep]), settings
                )
        errors.append(err.value.detail.replace(str(dep), "<id>"))
    assert errors[0] == errors[1] == "dependent_on_jobs: unknown dependency <id>"
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1", owner.id) == 0


async def test_depending_on_a_job_that_ended_without_completing_says_how_it_ended(
    engine, settings, owner, pg
) -> None:
    said = {}
    for status in ("failed", "cancelled"):
        async with engine.begin() as conn:
            parent = (
                await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=owner.id), settings)
            ).job["id"]
        await pg.execute("UPDATE jobs SET status = $2, completed_at = now() WHERE id = $1", parent, status)
        with pytest.raises(BadInput) as err:
            async with engine.begin() as conn:
                await queue.enqueue(
                    conn, NewJob(type="noop", input_data={}, user_id=owner.id, depends_on=[parent]), settings
                )
        said[status] = err.value.errors["dependent_on_jobs"].replace(str(parent), "<id>")
    assert said == {
        "failed": "dependency <id> has failed and can never complete",
        "cancelled": "dependency <id> was cancelled and can never complete",
    }


async def test_a_job_enqueued_with_dependencies_waits_for_them(engine, settings, owner, pg) -> None:
    async with engine.begin() as conn:
        parent = (
            await queue.enqueue(
                conn, NewJob(type="sleep", input_data={"seconds": 0.5}, user_id=owner.id), settings
            )
        ).job["id"]
        child = (
            await queue.enqueue(
                conn, NewJob(type="noop", input_data={}, user_id=owner.id, depends_on=[parent]), settings
            )
        ).job
    assert child["pending_parents"] == 1
    async with running_worker(settings):
        row = await wait_status(pg, child["id"], {"completed"})
    parent_row = await pg.fetchrow("SELECT completed_at FROM jobs WHERE id = $1", parent)
    assert row["started_at"] >= parent_row["completed_at"]


async def test_edges_added_concurrently_with_a_parent_finishing_are_never_lost(
    engine, settings, owner, pg
) -> None:
    """A child enqueued while its parent completes must still be released: the enqueue locks the parent
    row, so the completion's dependent release always sees the new edge (or the child sees it done)."""
    async with running_worker(settings):
        for _ in range(30):
            async with engine.begin() as conn:
                parent = (
                    await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=owner.id), settings)
                ).job["id"]
            async with engine.begin() as conn:
                child = (
                    await queue.enqueue(
                        conn,
                        NewJob(type="noop", input_data={}, user_id=owner.id, depends_on=[parent]),
                        settings,
                    )
                ).job["id"]
            await wait_status(pg, child, {"completed"}, timeout=10)


# --- approval ----------------------------------------------------------------------------------------------


async def _approval_pipeline(engine: Any, settings: Settings, owner: TestUser) -> uuid.UUID:
    return await create(
        engine,
        settings,
        owner,
        [
            step("draft", "noop", {"text": "hello"}, requires_approval=True),
            step("publish", "noop", {}, ["draft"]),
        ],
    )


async def test_an_approval_step_waits_then_proceeds_on_approve(engine, settings, owner, admin, pg) -> None:
    pid = await _approval_pipeline(engine, settings, owner)
    async with running_worker(settings):
        draft = (await steps_by_key(pg, pid))["draft"]["id"]
        row = await wait_status(pg, draft, {"waiting_approval"})
        assert row["result_data"] == '{"text": "hello"}'  # its result is visible while it waits
        assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "waiting_approval"
        assert await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'approval_needed'") == 1
        with pytest.raises(Forbidden):
            async with engine.begin() as conn:
                await queue.approve(conn, draft, owner)
        async with engine.begin() as conn:
            await queue.approve(conn, draft, admin)
        await wait_until(
            lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1", pid),
            what="completion",
        )
    approved = await pg.fetchrow(
        "SELECT actor, at FROM job_events WHERE job_id = $1 AND kind = 'approved'", draft
    )
    assert approved["actor"] == f"user:{admin.id}"
    with pytest.raises(Conflict, match=f"already approved by {admin.email} at "):
        async with engine.begin() as conn:
            await queue.reject(conn, draft, admin, "too late")


async def test_rejecting_fails_the_step_and_cancels_its_dependents(
    engine, settings, owner, admin, pg
) -> None:
    pid = await _approval_pipeline(engine, settings, owner)
    async with running_worker(settings):
        draft = (await steps_by_key(pg, pid))["draft"]["id"]
        await wait_status(pg, draft, {"waiting_approval"})
        with pytest.raises(BadInput):
            async with engine.begin() as conn:
                await queue.reject(conn, draft, admin, "  ")
        with pytest.raises(BadInput, match="at most 2,000 characters"):  # the form's limit, also here
            async with engine.begin() as conn:
                await queue.reject(conn, draft, admin, "x" * 2001)
        async with engine.begin() as conn:
            await queue.reject(conn, draft, admin, "wrong tone")
    s = await steps_by_key(pg, pid)
    assert s["draft"]["status"] == "failed"
    assert s["draft"]["error_message"] == "rejected: wrong tone"
    assert s["publish"]["status"] == "cancelled"
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "failed"


async def test_a_rerun_runs_only_that_step_again_and_waits_again(engine, settings, admin, pg) -> None:
    # an admin's: noop is for admins, and a rerun needs its owner to be one (app.jobs.queue.owner_rule)
    pid = await _approval_pipeline(engine, settings, admin)
    async with running_worker(settings):
        draft = (await steps_by_key(pg, pid))["draft"]["id"]
        await wait_status(pg, draft, {"waiting_approval"})
        async with engine.begin() as conn:
            await queue.rerun(conn, draft, admin)
        await wait_until(
            lambda: pg.fetchval(
                "SELECT count(*) = 2 FROM job_events WHERE job_id = $1 AND kind = 'claimed'", draft
            ),
            what="rerun",
        )
        await wait_status(pg, draft, {"waiting_approval"})
    assert (await steps_by_key(pg, pid))["publish"]["status"] == "queued"
    with pytest.raises(
        Conflict
    ):  # a second, stale decision on the old run: it is waiting again, so this works...
        async with engine.begin() as conn:
            await queue.approve(conn, draft, admin)
            await queue.approve(conn, draft, admin)  # ...but a double approve in a row is refused


# --- cancel a pipeline, ownership -------------------------------------------------------------------------


async def test_cancelling_a_pipeline_mid_run_stops_every_unfinished_step(
    engine, settings, owner, other, pg
) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("a", "sleep", {"seconds": 30}),
            step("b", "noop", {}, ["a"]),
            step("x", "noop"),
        ],
    )
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval(
                "SELECT status = 'in_progress' FROM jobs WHERE pipeline_id = $1 AND step_key = 'a'", pid
            ),
            what="a running",
        )
        await wait_until(
            lambda: pg.fetchval(
                "SELECT status = 'completed' FROM jobs WHERE pipeline_id = $1 AND step_key = 'x'", pid
            ),
            what="x done",
        )
        with pytest.raises(NotFound):
            async with engine.begin() as conn:
                await pipelines.cancel(conn, pid, other)
        async with engine.begin() as conn:
            counts = await pipelines.cancel(conn, pid, owner)
        assert counts == {"cancelled": 1, "cancelling": 1}
        await wait_until(
            lambda: pg.fetchval("SELECT finished_at IS NOT NULL FROM pipelines WHERE id = $1", pid),
            what="finished",
            timeout=5,
        )
    s = await steps_by_key(pg, pid)
    assert (s["a"]["status"], s["b"]["status"], s["x"]["status"]) == ("cancelled", "cancelled", "completed")
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "cancelled"


async def test_pipeline_events_tell_the_whole_story(engine, settings, owner, pg) -> None:
    pid = await create(engine, settings, owner, [step("a"), step("b", depends_on=["a"])])
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1", pid),
            what="completion",
        )
    async with engine.connect() as conn:
        history = await pipelines.events(conn, pid, owner)
    assert [(e["step_key"], e["kind"]) for e in history[::-1]] == [
        ("a", "enqueued"),
        ("b", "enqueued"),
        ("a", "claimed"),
        ("a", "completed"),
        ("b", "claimed"),
        ("b", "completed"),
    ]


async def test_templates_build_a_pipeline_from_validated_input(engine, settings, owner, pg) -> None:
    from app.pipelines import Template, TemplateStep, template

    class DemoInput(__import__("app.processors", fromlist=["Input"]).Input):
        seconds: float = 0.1

    template(
        Template(
            name="test.demo",
            title="Demo",
            description="Two steps.",
            input_model=DemoInput,
            steps=(
                TemplateStep("wait", "sleep", lambda i: {"seconds": i["seconds"]}),
                TemplateStep("done", "noop", {}, ("wait",)),
            ),
        )
    )
    with pytest.raises(BadInput) as err:
        async with engine.begin() as conn:
            await pipelines.create_from_template(
                conn, "test.demo", {"seconds": "soon"}, user_id=owner.id, settings=settings
            )
    assert "input_data.seconds" in err.value.errors
    async with engine.begin() as conn:
        row = await pipelines.create_from_template(
            conn, "test.demo", {"seconds": 0.2}, user_id=owner.id, settings=settings
        )
    assert row["template"] == "test.demo"
    assert row["name"] == "Demo"
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1", row["id"]),
            what="completion",
        )
    await asyncio.sleep(0)


async def test_a_file_error_names_the_step_as_given_not_as_ordered(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """The steps are inserted parents first, and literal ``for_each`` steps as their instances; an error
    found then (a file that is not the owner's) names the step where the person wrote it."""
    other = await pg.fetchval(
        "INSERT INTO users (email, password_hash) VALUES ('someone@example.com', 'x') RETURNING id"
    )
    theirs = uuid.uuid4()
    await pg.execute(
        "INSERT INTO files (id, user_id, name, content_type, size, sha256) "
        "VALUES ($1, $2, 'horse.png', 'image/png', 10, '')",
        theirs,
        other,
    )
    later = step("later", depends_on=["thumb"])
    thumb = step("thumb", "images.thumbnail", {"image": str(theirs)})
    with pytest.raises(BadInput) as caught:
        await create(engine, settings, owner, [later, thumb])
    assert caught.value.errors == {"steps[1].input_data.image": f"no such file ({theirs}); upload it first"}
    mine = uuid.uuid4()
    await pg.execute(
        "INSERT INTO files (id, user_id, name, content_type, size, sha256) "
        "VALUES ($1, $2, 'cart.png', 'image/png', 10, '')",
        mine,
        owner.id,
    )
    each = step("each", "images.thumbnail", {"image": {"$item": ""}}, for_each=[str(mine), str(theirs)])
    with pytest.raises(BadInput) as caught:
        await create(engine, settings, owner, [later, thumb | {"input_data": {}, "type": "noop"}, each])
    assert list(caught.value.errors) == ["steps[2].for_each[1].image"], caught.value.errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
