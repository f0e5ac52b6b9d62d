"""The worker's one-statement completion of standalone jobs (:func:`app.jobs.queue.complete_standalone`,
used by the completer for batches of plain completions) leaves the database exactly as the general
transaction (:func:`app.jobs.queue.finish`) does: the same statuses, events, released dependents,
folded notices; and it leaves to ``finish`` every outcome whose meaning it does not know (a cancel
requested meanwhile, a lost attempt, a step waiting for approval)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.jobs import queue
from app.jobs.queue import Outcome
from app.settings import Settings
from app.worker.completer import Completer
from tests.support.factories import make_job, make_user
from tests.support.workers import standalone_completer, wait_until

WORKER = "test-worker"


async def _scenario(engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection, write: Any) -> Any:
    """One owner's jobs through two batches of outcomes recorded by ``write``; returns what the database
    holds afterwards, with ids replaced by the jobs' labels."""
    owner = await make_user(pg)
    await pg.execute("UPDATE users SET email_notifications = true WHERE id = $1", owner.id)
    jobs: dict[str, uuid.UUID] = {}
    for label in ("plain", "fenced", "cancelled", "approval", "second", "third", "untitled"):
        kw: dict[str, Any] = {"title": f"Job {label}" if label != "untitled" else ""}
        if label == "approval":
            kw["requires_approval"] = True
        jobs[label] = (await make_job(engine, settings, owner, priority=10, **kw))["id"]
    jobs["child"] = (await make_job(engine, settings, owner, depends_on=[jobs["plain"]]))["id"]
    jobs["grandchild"] = (
        await make_job(engine, settings, owner, depends_on=[jobs["plain"], jobs["second"]])
    )["id"]
    async with engine.begin() as conn:
        claimed = await queue.claim(conn, WORKER, 7, 60)
    assert {r["id"] for r in claimed} == {jobs[k] for k in list(jobs)[:7]}
    attempt = {r["id"]: r["claims"] for r in claimed}
    await pg.execute("UPDATE jobs SET is_active = false WHERE id = $1", jobs["cancelled"])

    def done(label: str, **kw: Any) -> Outcome:
        jid = jobs[label]
        return Outcome(jid, "completed", result='{"n": 1}', claim=kw.get("attempt", attempt[jid]))

    first = [done("plain"), done("fenced", attempt=99), done("cancelled"), done("approval")]
    reports = [
        await write(first),
        await write([done("second"), done("third")]),
        await write([done("untitled")]),
    ]
    label_of = {v: k for k, v in jobs.items()}
    rows = await pg.fetch("SELECT id, status, pending_parents, result_data FROM jobs ORDER BY id")
    events = await pg.fetch(
        "SELECT job_id, kind, from_status, to_status, actor FROM job_events WHERE kind <> 'enqueued' ORDER BY id"
    )
    notes = await pg.fetch(
        "SELECT kind, count, text, job_id, email_due FROM notifications WHERE user_id = $1 ORDER BY id",
        owner.id,
    )
    return {
        "jobs": sorted(
            (label_of[r["id"]], r["status"], r["pending_parents"], r["result_data"]) for r in rows
        ),
        "events": sorted(
            (label_of[e["job_id"]], e["kind"], e["from_status"], e["to_status"], e["actor"]) for e in events
        ),
        "notices": sorted(
            (n["kind"], n["count"], n["text"], label_of.get(n["job_id"]), n["email_due"]) for n in notes
        ),
        "reports": [(sorted((label_of[k], v) for k, v in r.status.items()), r.notify) for r in reports],
    }


@pytest.fixture
async def completer(engine: AsyncEngine, settings: Settings) -> AsyncIterator[Completer]:
    async with standalone_completer(settings, engine, WORKER) as completer:
        yield completer


async def test_the_one_statement_completion_writes_what_the_transaction_writes(
    engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection, completer: Completer
) -> None:
    async def in_a_transaction(batch: list[Outcome]) -> queue.FinishReport:
        async with engine.begin() as conn:
            return await queue.finish(conn, WORKER, batch, settings)

    general = await _scenario(engine, settings, pg, in_a_transaction)
    await pg.execute("TRUNCATE jobs, notifications CASCADE")
    fast = await _scenario(engine, settings, pg, completer.write)
    assert fast == general
    # and what that is: the lost attempt is not applied, the cancel wins, the approval waits, the
    # child is released (a NOTIFY), the grandchild after its second parent, and one folded notice
    assert ("fenced", "in_progress", 0, None) in fast["jobs"]
    assert ("cancelled", "cancelled", 0, None) in fast["jobs"]
    assert ("approval", "waiting_approval", 0, '{"n": 1}') in fast["jobs"]
    assert ("child", "queued", 0, None) in fast["jobs"] and ("grandchild", "queued", 0, None) in fast["jobs"]
    assert fast["notices"] == [
        ("job_cancelled", 1, "Your job “Job cancelled” was cancelled.", "cancelled", True),
        ("job_completed", 4, "4 of your jobs have finished.", None, True),
    ]
    assert fast["reports"][0] == (
        [("approval", "waiting_approval"), ("cancelled", "cancelled"), ("plain", "completed")],
        True,
    )


async def test_a_lone_completion_names_its_job_and_a_new_window_starts_a_new_notice(
    engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection, completer: Completer
) -> None:
    owner = await make_user(pg)
    ids = [(await make_job(engine, settings, owner, title=t))["id"] for t in ("Quarterly", "")]
    for jid in ids:
        async with engine.begin() as conn:
            [row] = await queue.claim(conn, WORKER, 1, 60)
        assert row["id"] == jid
        report = await completer.write([Outcome(jid, "completed", result="null", claim=1)])
        assert report.status == {jid: "completed"} and not report.notify
        await pg.execute("UPDATE notifications SET read_at = now()")  # read: the next one is new
    notes = await pg.fetch("SELECT text, job_id, count FROM notifications ORDER BY id")
    assert [tuple(n) for n in notes] == [
        ("Your job “Quarterly” has finished.", ids[0], 1),
        ("Your job “Do nothing” has finished.", ids[1], 1),
    ]
    assert queue.standalone([Outcome(ids[0], "completed")])
    assert not queue.standalone([Outcome(ids[0], "completed", pipeline_id=uuid.uuid4())])
    assert not queue.standalone([Outcome(ids[0], "failed")])
    assert not queue.standalone([])


async def test_a_dependency_committed_while_the_completion_waits_for_its_parent_is_released(
    engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection, completer: Completer
) -> None:
    """The statement's snapshot predates a child enqueued (its parent locked ``FOR SHARE``) while the
    completion waits for that lock; the release must still see the child's dependency, or the child
    waits forever."""
    owner = await make_user(pg)
    parent = (await make_job(engine, settings, owner))["id"]
    async with engine.begin() as conn:
        [row] = await queue.claim(conn, WORKER, 1, 60)
    async with engine.connect() as child_conn:
        tx = await child_conn.begin()
        child = await queue.enqueue(
            child_conn,
            queue.NewJob(type="noop", input_data={}, user_id=owner.id, depends_on=[parent]),
            settings,
        )
        assert child.job["pending_parents"] == 1  # the parent still runs
        completing = asyncio.create_task(completer.write([Outcome(parent, "completed", claim=row["claims"])]))
        await wait_until(
            lambda: pg.fetchval(
                "SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
            ),
            what="the completion waiting for the parent's row",
        )
        heard: asyncio.Queue[str] = asyncio.Queue()
        await pg.add_listener(queue.JOBS_CHANNEL, lambda *args: heard.put_nowait(args[2]))
        await tx.commit()
    report = await completing
    assert report.status == {parent: "completed"} and report.notify
    assert await pg.fetchval("SELECT pending_parents FROM jobs WHERE id = $1", child.job["id"]) == 0
    await asyncio.wait_for(heard.get(), 5)  # the schema function wakes the workers on their channel
