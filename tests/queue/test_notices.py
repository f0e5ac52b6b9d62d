"""Notices the queue writes with a transition, beyond finishing and failing: a cancel by someone else
(an admin, the system) tells the owner, one by the owner does not; a step waiting for approval, and each
reminder, tells every person who may decide it (named people, every admin for ``admins``, the submitter
for ``owner``), by e-mail too when they chose it."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

import tests.support.forms  # noqa: F401  (registers test.form)
from app import pipelines
from app.jobs import queue
from app.jobs.queue.approvals import expire_approvals
from app.settings import Settings
from tests.support.factories import TestUser, make_user
from tests.support.jobsteps import claim, enqueue, finish


async def notices(pg: asyncpg.Connection, user_id: int) -> list[dict[str, Any]]:
    rows = await pg.fetch("SELECT * FROM notifications WHERE user_id = $1 ORDER BY id", user_id)
    return [dict(r) for r in rows]


async def kinds(pg: asyncpg.Connection, user_id: int) -> list[tuple[str, int]]:
    return [(n["kind"], n["count"]) for n in await notices(pg, user_id)]


async def cancel(engine: Any, jid: uuid.UUID, who: TestUser) -> None:
    async with engine.begin() as conn:
        await queue.cancel(conn, jid, who)


async def test_a_cancel_by_someone_else_notifies_the_owner_and_their_own_does_not(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, pg: asyncpg.Connection
) -> None:
    mine = await enqueue(engine, settings, owner.id, title="Mine")
    await cancel(engine, mine, owner)
    assert await notices(pg, owner.id) == []

    theirs = await enqueue(engine, settings, owner.id, title="Quarterly")
    await cancel(engine, theirs, admin)
    [row] = await notices(pg, owner.id)
    assert (row["kind"], row["job_id"], row["text"]) == (
        "job_cancelled",
        theirs,
        "Your job “Quarterly” was cancelled.",
    )
    assert await notices(pg, admin.id) == []

    # a running job: the admin asks, the worker stops it; the notice folds into the first
    running = await enqueue(engine, settings, owner.id, priority=100)
    await claim(engine, running)
    await cancel(engine, running, admin)
    assert await kinds(pg, owner.id) == [("job_cancelled", 1)]  # not yet: it still runs
    await finish(engine, settings, running, "cancelled")
    [row] = await notices(pg, owner.id)
    assert (row["count"], row["job_id"], row["text"]) == (2, None, "2 of your jobs were cancelled.")

    # the owner stops their own running job: nothing new
    own_running = await enqueue(engine, settings, owner.id, priority=100)
    await claim(engine, own_running)
    await cancel(engine, own_running, owner)
    await finish(engine, settings, own_running, "cancelled")
    assert await kinds(pg, owner.id) == [("job_cancelled", 2)]


async def test_a_pipeline_cancelled_by_an_admin_notifies_its_owner(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, pg: asyncpg.Connection
) -> None:
    steps = [
        {"key": "a", "type": "noop", "input_data": {}},
        {"key": "b", "type": "noop", "input_data": {}, "depends_on": ["a"]},
    ]
    ids = []
    for name in ("Own", "Nightly"):
        async with engine.begin() as conn:
            ids.append(
                (await pipelines.create(conn, name=name, steps=steps, user_id=owner.id, settings=settings))[
                    "id"
                ]
            )
    async with engine.begin() as conn:
        await pipelines.cancel(conn, ids[0], owner)
    assert await notices(pg, owner.id) == []
    async with engine.begin() as conn:
        await pipelines.cancel(conn, ids[1], admin)
    rows = await notices(pg, owner.id)
    assert [(n["kind"], n["pipeline_id"], n["job_id"], n["text"]) for n in rows] == [
        ("pipeline_cancelled", ids[1], None, "Your pipeline “Nightly” was cancelled.")
    ]


def review(**kw: Any) -> list[dict[str, Any]]:
    return [
        {"key": "draft", "type": "noop", "input_data": {}, "requires_approval": True, **kw},
        {"key": "publish", "type": "noop", "input_data": {}, "depends_on": ["draft"]},
    ]


async def waiting_step(
    engine: Any, settings: Settings, pg: asyncpg.Connection, owner: TestUser, **kw: Any
) -> uuid.UUID:
    async with engine.begin() as conn:
        p = await pipelines.create(
            conn, name="review", steps=review(**kw), user_id=owner.id, settings=settings
        )
    jid = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'draft'", p["id"])
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result={})
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
    return jid


async def test_a_waiting_step_and_its_reminders_notify_each_approver(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, other: TestUser, pg: asyncpg.Connection
) -> None:
    ann = await make_user(pg, email="ann@example.com")
    second_admin = await make_user(pg, admin=True)
    await pg.execute("UPDATE users SET email_notifications = true WHERE id = $1", ann.id)
    jid = await waiting_step(
        engine,
        settings,
        pg,
        owner,
        approvers=["ann@example.com", "admins"],
        approval_timeout=3600,
        on_approval_timeout="remind",
    )
    for person in (ann, admin, second_admin):
        [row] = await notices(pg, person.id)
        assert (row["kind"], row["job_id"], row["text"]) == (
            "approval_waiting",
            jid,
            "“Do nothing” waits for your approval.",
        )
        assert row["email_due"] is (person is ann)  # e-mail only for who chose it
    assert await notices(pg, owner.id) == []  # the owner is not listed: they may not decide
    assert await notices(pg, other.id) == []

    await pg.execute("UPDATE jobs SET updated_at = now() - interval '2 hours' WHERE id = $1", jid)
    async with engine.begin() as conn:
        assert (await expire_approvals(conn))["reminded"] == [jid]
    for person in (ann, admin, second_admin):
        assert await kinds(pg, person.id) == [("approval_waiting", 1), ("approval_reminder", 1)]
    assert await notices(pg, owner.id) == [] and await notices(pg, other.id) == []
    reminder = (await notices(pg, ann.id))[-1]
    assert (
        reminder["text"] == "Reminder: “Do nothing” still waits for your approval." and reminder["email_due"]
    )


async def test_owner_listed_is_told_and_a_step_without_approvers_tells_every_admin(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, pg: asyncpg.Connection
) -> None:
    jid = await waiting_step(engine, settings, pg, owner, approvers=["owner"])
    assert [(n["kind"], n["job_id"]) for n in await notices(pg, owner.id)] == [("approval_waiting", jid)]
    assert await notices(pg, admin.id) == []

    legacy = await waiting_step(engine, settings, pg, owner)
    assert [(n["kind"], n["job_id"]) for n in await notices(pg, admin.id)] == [("approval_waiting", legacy)]
    assert len(await notices(pg, owner.id)) == 1  # a non-admin owner cannot decide a step without approvers
