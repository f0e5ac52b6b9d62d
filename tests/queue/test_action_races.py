"""Concurrent actors on one job, pipeline, selection or schedule: a person's action against a worker's
outcome, a sweep, or another person's action, each interleaving forced with a held lock or a pause inside
the action. One of them wins, the other sees the winner's result (a 409 saying what happened), events and
audit match the final state, and none fails on a deadlock."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app import controls, pipelines
from app.actions import bulk
from app.actions import jobs as job_actions
from app.actions import pipelines as pipeline_actions
from app.actions.trail import Actor
from app.db import asyncpg_dsn
from app.jobs import queue
from app.jobs.queue import NewJob, Outcome, common, transitions
from app.jobs.queue.approvals import expire_approvals
from app.settings import Settings
from tests.support.factories import TestUser, event_kinds, make_user

WAITING_ON_A_LOCK = """
    SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
"""


async def _until_waiting(pg: asyncpg.Connection, count: int = 1) -> None:
    """Until ``count`` other sessions wait for a lock."""
    for _ in range(500):
        if await pg.fetchval(WAITING_ON_A_LOCK) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no session came to wait for a lock")


def _pause_after_job_lock(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """Pause a person's action on a job once it holds the job's locks: ``held`` is set then, and the action
    goes on when ``go`` is."""
    held, go = asyncio.Event(), asyncio.Event()
    real = transitions.lock_job

    async def paused(*args: Any, **kw: Any) -> Any:
        row = await real(*args, **kw)
        held.set()
        await go.wait()
        return row

    monkeypatch.setattr(transitions, "lock_job", paused)
    return held, go


async def _two_steps(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, *, claim: bool = True
) -> tuple[uuid.UUID, dict[str, uuid.UUID]]:
    """A pipeline ``a`` → ``b``, with ``a`` claimed by ``test-worker`` (unless not ``claim``)."""
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name="race",
            steps=[
                {"key": "a", "type": "noop", "input_data": {}, "depends_on": []},
                {"key": "b", "type": "noop", "input_data": {}, "depends_on": ["a"]},
            ],
            user_id=owner.id,
            settings=settings,
        )
    if claim:
        async with engine.begin() as conn:
            assert len(await queue.claim(conn, "test-worker", 10, 60)) == 1
    rows = await pg.fetch("SELECT step_key, id FROM jobs WHERE pipeline_id = $1", p["id"])
    steps = {r["step_key"]: r["id"] for r in rows}
    return p["id"], steps


async def _in_transaction(engine: Any, work: Callable[[Any], Awaitable[Any]]) -> Any:
    async with engine.begin() as conn:
        return await work(conn)


async def test_cancelling_a_waiting_step_while_its_parent_completes_does_not_deadlock(
    engine, settings, owner, admin, pg, monkeypatch
) -> None:
    pid, steps = await _two_steps(engine, settings, owner, pg)
    held, go = _pause_after_job_lock(monkeypatch)
    cancel = asyncio.create_task(_in_transaction(engine, lambda c: queue.cancel(c, steps["b"], admin)))
    await held.wait()
    done = Outcome(steps["a"], "completed", result="{}", pipeline_id=pid, claim=1)
    finish = asyncio.create_task(
        _in_transaction(engine, lambda c: queue.finish(c, "test-worker", [done], settings))
    )
    await _until_waiting(pg)  # the completion waits for what the cancel holds
    go.set()
    cancelled, report = await asyncio.gather(cancel, finish)
    assert cancelled["status"] == "cancelled"
    assert report.status == {steps["a"]: "completed"}
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", steps["b"]) == "cancelled"
    assert await event_kinds(pg, steps["b"]) == ["enqueued", "cancelled"]
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "cancelled"


async def _until_waiting_or_done(pg: asyncpg.Connection, task: asyncio.Task[Any]) -> None:
    """Until ``task`` has finished or another session waits for a lock."""
    for _ in range(500):
        if task.done() or await pg.fetchval(WAITING_ON_A_LOCK):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the task neither finished nor came to wait for a lock")


LIVE_STEPS = """
    SELECT count(*) FROM jobs
    WHERE pipeline_id = $1 AND status IN ('queued', 'in_progress', 'waiting_approval') AND is_active
"""


async def test_a_pipeline_cancel_stops_the_steps_a_step_completing_meanwhile_releases(
    engine, settings, owner, pg, monkeypatch
) -> None:
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name="race",
            steps=[
                {"key": "src", "type": "noop", "input_data": {}, "depends_on": []},
                {
                    "key": "each",
                    "type": "noop",
                    "input_data": {"x": {"$item": ""}},
                    "depends_on": [],
                    "for_each": {"$ref": "src.items"},
                },
            ],
            user_id=owner.id,
            settings=settings,
        )
    async with engine.begin() as conn:
        [src] = await queue.claim(conn, "test-worker", 10, 60)
    # the cancel pauses once it has read which steps are unfinished, before it cancels the first
    listed, go = asyncio.Event(), asyncio.Event()
    real = queue.cancel

    async def paused(*args: Any, **kw: Any) -> Any:
        listed.set()
        await go.wait()
        return await real(*args, **kw)

    monkeypatch.setattr(queue, "cancel", paused)
    cancel = asyncio.create_task(_in_transaction(engine, lambda c: pipelines.cancel(c, p["id"], owner)))
    await listed.wait()
    done = Outcome(src["id"], "completed", result='{"items": [1, 2]}', pipeline_id=p["id"], claim=1)
    finish = asyncio.create_task(
        _in_transaction(engine, lambda c: queue.finish(c, "test-worker", [done], settings))
    )
    await _until_waiting_or_done(pg, finish)
    go.set()
    counts, report = await asyncio.gather(cancel, finish)
    assert await pg.fetchval(LIVE_STEPS, p["id"]) == 0
    assert counts == {"cancelled": 0, "cancelling": 1}
    assert report.status == {src["id"]: "cancelled"}  # its completion lost to the cancel
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", p["id"]) == "cancelled"


async def test_the_approval_timeout_sweep_and_an_approval_of_the_same_step_do_not_deadlock(
    engine, settings, owner, admin, pg, monkeypatch
) -> None:
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name="review",
            steps=[
                {
                    "key": "draft",
                    "type": "noop",
                    "input_data": {},
                    "requires_approval": True,
                    "approvers": ["admins"],
                    "approval_timeout": 3600,
                },
                {"key": "publish", "type": "noop", "input_data": {}, "depends_on": ["draft"]},
            ],
            user_id=owner.id,
            settings=settings,
        )
    async with engine.begin() as conn:
        [draft] = await queue.claim(conn, "test-worker", 10, 60)
        await queue.finish(conn, "test-worker", [Outcome(draft["id"], "completed", result="{}")], settings)
    await pg.execute("UPDATE jobs SET updated_at = now() - interval '2 hours' WHERE id = $1", draft["id"])
    # the approval pauses once it holds the step's pipeline
    held, go = asyncio.Event(), asyncio.Event()
    real = common.lock_pipelines

    async def paused(*args: Any, **kw: Any) -> Any:
        await real(*args, **kw)
        if not held.is_set():
            held.set()
            await go.wait()

    monkeypatch.setattr(common, "lock_pipelines", paused)
    approve = asyncio.create_task(_in_transaction(engine, lambda c: queue.approve(c, draft["id"], admin)))
    await held.wait()
    sweep = asyncio.create_task(_in_transaction(engine, expire_approvals))
    await _until_waiting_or_done(pg, sweep)
    go.set()
    approved, swept = await asyncio.gather(approve, sweep)
    assert approved["status"] == "completed"
    assert swept == {"rejected": [], "reminded": []}  # the step was being decided: left to the approval
    assert "rejected" not in await event_kinds(pg, draft["id"])
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", p["id"]) == "running"


async def test_a_bulk_cancel_across_pipelines_while_a_worker_completes_steps_of_both_does_not_deadlock(
    engine, settings, owner, admin, pg, monkeypatch
) -> None:
    two = [await _two_steps(engine, settings, owner, pg, claim=False) for _ in range(2)]
    async with engine.begin() as conn:
        assert len(await queue.claim(conn, "test-worker", 10, 60)) == 2
    low, high = sorted(two, key=lambda t: str(t[0]))
    # the bulk takes the step of the pipeline that sorts last first, and pauses after it
    first, go = asyncio.Event(), asyncio.Event()
    real = queue.cancel

    async def paused(*args: Any, **kw: Any) -> Any:
        row = await real(*args, **kw)
        if not first.is_set():
            first.set()
            await go.wait()
        return row

    monkeypatch.setattr(queue, "cancel", paused)
    plan = bulk.BulkPlan("cancel", "selected", [high[1]["b"], low[1]["b"]], 2)

    async def cancel_both() -> Any:
        async with AsyncSession(engine) as db, db.begin():
            return await bulk.run_bulk(db, Actor(admin), plan)

    cancelling = asyncio.create_task(cancel_both())
    await first.wait()
    done = [Outcome(s["a"], "completed", result="{}", pipeline_id=pid, claim=1) for pid, s in two]
    finish = asyncio.create_task(
        _in_transaction(engine, lambda c: queue.finish(c, "test-worker", done, settings))
    )
    await _until_waiting_or_done(pg, finish)
    go.set()
    outcome, report = await asyncio.gather(cancelling, finish)
    assert sorted(outcome.done) == sorted([low[1]["b"], high[1]["b"]])
    assert set(report.status.values()) == {"completed"}
    for pid, s in two:
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", s["b"]) == "cancelled"
        assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "cancelled"


async def test_two_admins_approving_rejecting_and_cancelling_one_step_at_once_make_one_decision(
    engine, settings, owner, admin, pg
) -> None:
    other_admin = await make_user(pg, admin=True)
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name="review",
            steps=[
                {"key": "draft", "type": "noop", "input_data": {}, "requires_approval": True},
                {"key": "publish", "type": "noop", "input_data": {}, "depends_on": ["draft"]},
            ],
            user_id=owner.id,
            settings=settings,
        )
    async with engine.begin() as conn:
        [draft] = await queue.claim(conn, "test-worker", 10, 60)
        await queue.finish(conn, "test-worker", [Outcome(draft["id"], "completed", result="{}")], settings)

    async def act(who: TestUser, action: str, **kw: Any) -> Any:
        async with AsyncSession(engine) as db, db.begin():
            return await job_actions.perform(db, Actor(who), action, draft["id"], **kw)

    outcomes = await asyncio.gather(
        act(admin, "approve"), act(other_admin, "reject", reason="no"), act(admin, "cancel")
    )
    won = [o for o in outcomes if o.ok]
    assert len(won) == 1
    assert sorted(o.status_code for o in outcomes) == [200, 409, 409]
    assert all(o.message.startswith("Nothing changed:") for o in outcomes if not o.ok)
    final = {"approve": "completed", "reject": "failed", "cancel": "cancelled"}[won[0].action]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", draft["id"]) == final
    kinds = await event_kinds(pg, draft["id"])
    assert len([k for k in kinds if k in ("approved", "rejected", "cancelled")]) == 1
    # one entry that did it, and one refusal for each of the others
    audit = await pg.fetch("SELECT action, outcome FROM audit_log WHERE action LIKE 'job.%' ORDER BY id")
    assert len(audit) == 3
    assert [a["action"] for a in audit if a["outcome"] == "ok"] == [f"job.{won[0].action}"]
    publish = await pg.fetchval(
        "SELECT status FROM jobs WHERE pipeline_id = $1 AND step_key = 'publish'", p["id"]
    )
    assert publish == ("queued" if final == "completed" else "cancelled")


@pytest.mark.parametrize("cancel_first", [True, False])
async def test_an_admin_cancel_and_the_worker_s_completion_of_one_running_job_end_it_once(
    engine, settings, owner, admin, pg, db_url, cancel_first: bool
) -> None:
    jid = (await queue.enqueue(engine, NewJob(type="noop", input_data={}, user_id=owner.id), settings)).job[
        "id"
    ]
    async with engine.begin() as conn:
        [claimed] = await queue.claim(conn, "test-worker", 10, 60)
    # whichever takes the job's row first wins; the other waits for it and then sees what it did
    holder = await asyncpg.connect(asyncpg_dsn(db_url))
    tx = holder.transaction()
    await tx.start()
    await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", jid)

    async def cancel() -> Any:
        async with AsyncSession(engine) as db, db.begin():
            return await job_actions.perform(db, Actor(admin), "cancel", jid)

    done = Outcome(jid, "completed", result="{}", claim=claimed["claims"])

    async def complete() -> Any:
        async with engine.begin() as conn:
            return await queue.finish(conn, "test-worker", [done], settings)

    first, second = (cancel, complete) if cancel_first else (complete, cancel)
    one = asyncio.create_task(first())
    await _until_waiting(pg)
    two = asyncio.create_task(second())
    await _until_waiting(pg, 2)
    await tx.rollback()
    await holder.close()
    outcome, report = await (asyncio.gather(one, two) if cancel_first else asyncio.gather(two, one))
    status = await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid)
    kinds = await event_kinds(pg, jid)
    if cancel_first:
        assert outcome.ok and report.status == {jid: "cancelled"}  # the completion lost to the request
        assert status == "cancelled" and kinds[-2:] == ["cancel_requested", "cancelled"]
    else:
        assert report.status == {jid: "completed"}
        assert (outcome.status_code, outcome.message) == (
            409,
            "Nothing changed: it has already finished (Done).",
        )
        assert status == "completed" and "cancel_requested" not in kinds
    assert len([k for k in kinds if k in ("completed", "cancelled")]) == 1


@pytest.mark.parametrize("change", ["disable", "delete"])
async def test_a_schedule_being_disabled_or_deleted_does_not_fire_and_one_firing_finishes_first(
    engine, settings, admin, pg, change: str
) -> None:
    async with engine.begin() as conn:
        row = await controls.create_schedule(
            conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings
        )
    await pg.execute(
        "UPDATE schedules SET next_fire_at = now() - interval '1 minute' WHERE id = $1", row["id"]
    )
    fired_jobs = "SELECT count(*) FROM jobs WHERE type = 'noop'"
    # the admin's change holds the row, uncommitted: the sweep passes it by without waiting or firing
    async with engine.connect() as admin_conn:
        tx = await admin_conn.begin()
        if change == "disable":
            await controls.set_schedule_enabled(admin_conn, row["id"], False)
        else:
            await controls.delete_schedule(admin_conn, row["id"])
        async with engine.begin() as conn:
            assert await asyncio.wait_for(controls.fire_due(conn, settings), 10) == []
        await tx.commit()
    async with engine.begin() as conn:
        assert await controls.fire_due(conn, settings) == []
    assert await pg.fetchval(fired_jobs) == 0
    # a firing that holds the row first: the change waits for it, then applies to what it left
    await pg.execute("UPDATE schedules SET enabled = true, next_fire_at = now() - interval '1 minute'")
    if change == "delete":
        async with engine.begin() as conn:
            row = await controls.create_schedule(
                conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings, name="again"
            )
        await pg.execute(
            "UPDATE schedules SET next_fire_at = now() - interval '1 minute' WHERE id = $1", row["id"]
        )
    async with engine.connect() as sweep_conn:
        tx = await sweep_conn.begin()
        assert len(await controls.fire_due(sweep_conn, settings)) == 1

        async def admin_change() -> Any:
            async with engine.begin() as conn:
                if change == "disable":
                    return await controls.set_schedule_enabled(conn, row["id"], False)
                return await controls.delete_schedule(conn, row["id"])

        changing = asyncio.create_task(admin_change())
        await _until_waiting(pg)
        await tx.commit()
    await changing
    assert await pg.fetchval(fired_jobs) == 1
    left = await pg.fetchval("SELECT enabled FROM schedules WHERE id = $1", row["id"])
    assert left is (False if change == "disable" else None)
    async with engine.begin() as conn:
        assert await controls.fire_due(conn, settings) == []


async def test_a_pipeline_cancel_that_meets_its_last_step_completing_says_the_pipeline_finished(
    engine, settings, owner, pg, monkeypatch
) -> None:
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name="race",
            steps=[{"key": "only", "type": "noop", "input_data": {}, "depends_on": []}],
            user_id=owner.id,
            settings=settings,
        )
    async with engine.begin() as conn:
        [only] = await queue.claim(conn, "test-worker", 10, 60)
    # the cancel pauses once it has read that the pipeline runs, before it cancels its steps
    read, go = asyncio.Event(), asyncio.Event()
    real = pipelines.cancel

    async def paused(*args: Any, **kw: Any) -> Any:
        read.set()
        await go.wait()
        return await real(*args, **kw)

    monkeypatch.setattr(pipelines, "cancel", paused)

    async def cancel() -> Any:
        async with AsyncSession(engine) as db, db.begin():
            return await pipeline_actions.cancel(db, Actor(owner), p["id"])

    cancelling = asyncio.create_task(cancel())
    await read.wait()
    done = Outcome(only["id"], "completed", result="{}", pipeline_id=p["id"], claim=1)
    async with engine.begin() as conn:
        await queue.finish(conn, "test-worker", [done], settings)
    go.set()
    outcome = await cancelling
    assert (outcome.status_code, outcome.message) == (
        409,
        "Nothing changed: the pipeline has already finished.",
    )
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", p["id"]) == "completed"


async def test_two_cancels_of_one_waiting_pipeline_at_once_cancel_it_once_and_the_other_hears_it_finished(
    engine, settings, owner, admin, pg
) -> None:
    pid, _ = await _two_steps(engine, settings, owner, pg, claim=False)

    async def cancel(who: TestUser) -> Any:
        async with AsyncSession(engine) as db, db.begin():
            return await pipeline_actions.cancel(db, Actor(who), pid)

    outcomes = await asyncio.gather(cancel(owner), cancel(admin))
    assert sorted(o.status_code for o in outcomes) == [200, 409]
    [lost] = [o for o in outcomes if not o.ok]
    assert lost.message == "Nothing changed: the pipeline has already finished."
    assert [o.cancelled for o in outcomes if o.ok] == [2]
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "cancelled"
    kinds = await pg.fetch("SELECT kind FROM job_events WHERE pipeline_id = $1 AND kind = 'cancelled'", pid)
    assert len(kinds) == 2  # one per step
