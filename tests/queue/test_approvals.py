"""Approvals by named people, in the queue: the rule checked when the pipeline is made, who may decide
(named people, ``admins``, ``owner``), ``approvals_needed`` distinct people, and the timeout sweep that
rejects or reminds. A step is moved to ``waiting_approval`` by a pretend worker (no worker process)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from app import pipelines
from app.errors import BadInput, Conflict, Forbidden, NotFound
from app.jobs import approvals, queue
from app.jobs.queue.approvals import expire_approvals
from app.settings import Settings
from tests.support.factories import TestUser, event_kinds, make_user
from tests.support.jobsteps import claim, finish


@dataclass(frozen=True)
class Who:
    """A principal as the queue sees it."""

    id: int
    is_admin: bool = False


def who(user: TestUser) -> Who:
    return Who(user.id, user.is_admin)


def review(**kw: Any) -> list[dict[str, Any]]:
    return [
        {"key": "draft", "type": "noop", "input_data": {}, "requires_approval": True, **kw},
        {"key": "publish", "type": "noop", "input_data": {}, "depends_on": ["draft"]},
    ]


async def create(engine: Any, settings: Settings, owner: TestUser, steps: list[dict[str, Any]]) -> uuid.UUID:
    async with engine.begin() as conn:
        row = await pipelines.create(conn, name="review", steps=steps, user_id=owner.id, settings=settings)
    return row["id"]


async def waiting_step(
    engine: Any, settings: Settings, pg: asyncpg.Connection, owner: TestUser, **kw: Any
) -> uuid.UUID:
    """The ``draft`` step of a new pipeline, run by a pretend worker: now waiting for approval."""
    pid = await create(engine, settings, owner, review(**kw))
    jid = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'draft'", pid)
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result={"words": 120})
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
    return jid


async def decide(engine: Any, action: str, jid: uuid.UUID, user: TestUser, **kw: Any) -> Any:
    async with engine.begin() as conn:
        if action == "approve":
            return await queue.approve(conn, jid, who(user), **kw)
        return await queue.reject(conn, jid, who(user), kw.get("reason", "no"))


async def later(pg: asyncpg.Connection, jid: uuid.UUID, interval: str) -> None:
    """As if ``interval`` had passed for a waiting step: its waiting start and last reminder move back."""
    await pg.execute(
        "UPDATE jobs SET updated_at = updated_at - CAST(CAST($2 AS text) AS interval) WHERE id = $1",
        jid,
        interval,
    )
    await pg.execute(
        "UPDATE job_approval_rules SET reminded_at = reminded_at - CAST(CAST($2 AS text) AS interval) WHERE job_id = $1",
        jid,
        interval,
    )


BAD_RULES = [
    ({"approvers": ["nobody@example.com"]}, "steps[0].approvers[0]", "no account"),
    # a disabled account can neither sign in nor decide: a step only it could decide would wait for ever
    (
        {"approvers": ["admins", "gone@example.com"]},
        "steps[0].approvers[1]",
        "the account gone@example.com is disabled, so it cannot approve",
    ),
    ({"approvers": ["ann@example.com"], "approvals_needed": 2}, "steps[0].approvals_needed", "only 1 person"),
    ({"approvers": ["ann@example.com"], "approvals_needed": 0}, "steps[0].approvals_needed", "from 1"),
    ({"approvers": "ann@example.com"}, "steps[0].approvers", "must be a list"),
    ({"approvers": ["ann"]}, "steps[0].approvers[0]", "not an e-mail"),
    ({"approval_timeout": 60, "on_approval_timeout": "later"}, "steps[0].on_approval_timeout", "reject"),
    ({"on_approval_timeout": "remind"}, "steps[0].on_approval_timeout", "needs an approval_timeout"),
    (
        {"approvers": ["owner"], "approval_timeout": 3599, "on_approval_timeout": "remind"},
        "steps[0].approval_timeout",
        "at least 3,600",
    ),
]


async def test_a_bad_approval_rule_is_refused_with_the_steps_path(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    await make_user(pg, email="ann@example.com")
    gone = await make_user(pg, email="gone@example.com")
    await pg.execute("UPDATE users SET is_active = false WHERE id = $1", gone.id)
    for fields, path, words in BAD_RULES:
        with pytest.raises(BadInput) as err:
            await create(engine, settings, owner, review(**fields))
        assert path in err.value.errors, (fields, err.value.errors)
        assert words in err.value.errors[path], (fields, err.value.errors)
    # approvers on a step that needs no approval
    with pytest.raises(BadInput) as err:
        await create(engine, settings, owner, [{"key": "a", "type": "noop", "approvers": ["admins"]}])
    assert "steps[0].approvers" in err.value.errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_named_approver_who_is_not_an_admin_approves_and_others_are_refused(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, other: TestUser, pg: asyncpg.Connection
) -> None:
    ann = await make_user(pg, email="ann@example.com")
    jid = await waiting_step(engine, settings, pg, owner, approvers=["ann@example.com"])
    # Not listed (an admin only counts with "admins"). Those who may see the job are told why; someone
    # who may not gets the unknown id's answer, so that other people's step ids cannot be probed.
    for stranger, refusal in ((other, NotFound), (admin, Forbidden), (owner, Forbidden)):
        with pytest.raises(refusal):
            await decide(engine, "approve", jid, stranger)
        with pytest.raises(refusal):
            await decide(engine, "reject", jid, stranger)
    row = await decide(engine, "approve", jid, ann, comment="looks right")
    assert row["status"] == "completed"
    decision = await pg.fetchrow("SELECT * FROM job_approvals WHERE job_id = $1", jid)
    assert (decision["user_id"], decision["decision"], decision["comment"]) == (
        ann.id,
        "approved",
        "looks right",
    )
    assert await pg.fetchval("SELECT status FROM jobs WHERE step_key = 'publish'") == "queued"
    assert "approved" in await event_kinds(pg, jid)


async def test_two_approvals_need_two_distinct_people_and_one_rejection_rejects(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, pg: asyncpg.Connection
) -> None:
    ann = await make_user(pg, email="ann@example.com")
    bob = await make_user(pg, email="bob@example.com")
    jid = await waiting_step(
        engine, settings, pg, owner, approvers=["ann@example.com", "admins"], approvals_needed=2
    )
    row = await decide(engine, "approve", jid, ann)
    assert row["status"] == "waiting_approval"
    with pytest.raises(Conflict, match="already approved"):
        await decide(engine, "approve", jid, ann)  # the same person never counts twice
    with pytest.raises(NotFound):  # not named, and not someone who may see the job
        await decide(engine, "approve", jid, bob)
    assert (await decide(engine, "approve", jid, admin))["status"] == "completed"
    assert await pg.fetchval("SELECT count(*) FROM job_approvals WHERE job_id = $1", jid) == 2

    second = await waiting_step(
        engine, settings, pg, owner, approvers=["ann@example.com", "bob@example.com"], approvals_needed=2
    )
    await decide(engine, "approve", second, ann)
    row = await decide(engine, "reject", second, bob, reason="numbers are off")
    assert row["status"] == "failed"
    assert (
        await pg.fetchval(
            "SELECT comment FROM job_approvals WHERE job_id = $1 AND user_id = $2", second, bob.id
        )
        == "numbers are off"
    )


async def test_a_rejection_after_ones_own_approval_counts_the_approvals_still_missing(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    ann = await make_user(pg, email="ann@example.com")
    await make_user(pg, email="bob@example.com")
    jid = await waiting_step(
        engine, settings, pg, owner, approvers=["ann@example.com", "bob@example.com"], approvals_needed=2
    )
    await decide(engine, "approve", jid, ann)
    for action in ("approve", "reject"):
        with pytest.raises(Conflict) as err:
            await decide(engine, action, jid, ann)
        assert str(err.value).endswith("it waits for 1 more approval from other people."), (action, err.value)
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"


async def test_the_submitter_may_approve_only_when_owner_is_listed(
    engine: Any, settings: Settings, pg: asyncpg.Connection
) -> None:
    boss = await make_user(pg, admin=True, email="boss@example.com")
    await make_user(pg, admin=True, email="root@example.com")
    jid = await waiting_step(engine, settings, pg, boss, approvers=["admins", "boss@example.com"])
    with pytest.raises(Forbidden, match="You submitted this job"):
        await decide(engine, "approve", jid, boss)
    own = await waiting_step(engine, settings, pg, boss, approvers=["owner"])
    assert (await decide(engine, "approve", own, boss))["status"] == "completed"
    # without named approvers an admin still approves their own step, as before
    legacy = await waiting_step(engine, settings, pg, boss)
    assert (await decide(engine, "approve", legacy, boss))["status"] == "completed"


def test_the_rule_in_one_function() -> None:
    rule = approvals.Rule(frozenset({7}), admins=True, owner=False, approvals_needed=1)
    assert approvals.may_decide(rule, user_id=7, is_admin=False, owner_id=1)
    assert approvals.may_decide(rule, user_id=8, is_admin=True, owner_id=1)
    assert not approvals.may_decide(rule, user_id=8, is_admin=False, owner_id=1)
    assert not approvals.may_decide(rule, user_id=1, is_admin=True, owner_id=1)
    assert not approvals.may_decide(None, user_id=8, is_admin=False, owner_id=1)


async def test_the_sweep_rejects_or_reminds_after_the_timeout(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, pg: asyncpg.Connection
) -> None:
    rejecting = await waiting_step(engine, settings, pg, owner, approvers=["admins"], approval_timeout=3600)
    reminding = await waiting_step(
        engine, settings, pg, owner, approvers=["admins"], approval_timeout=3600, on_approval_timeout="remind"
    )
    fresh = await waiting_step(engine, settings, pg, owner, approvers=["admins"], approval_timeout=3600)
    async with engine.begin() as conn:
        assert await expire_approvals(conn) == {"rejected": [], "reminded": []}
    await pg.execute(
        "UPDATE jobs SET updated_at = now() - interval '2 hours' WHERE id = ANY($1)", [rejecting, reminding]
    )
    async with engine.begin() as conn:
        swept = await expire_approvals(conn)
    assert swept == {"rejected": [rejecting], "reminded": [reminding]}
    row = await pg.fetchrow("SELECT status, error_message FROM jobs WHERE id = $1", rejecting)
    assert (row["status"], row["error_message"]) == ("failed", "rejected: no decision within 1 hour")
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", reminding) == "waiting_approval"
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", fresh) == "waiting_approval"
    reminders = (
        "SELECT count(*) FROM alert_outbox WHERE kind = 'approval_needed' AND payload->>'reminder' = 'true'"
    )
    assert await pg.fetchval(reminders) == 1
    # not again until the step has waited twice as long as at the first reminder (2 hours, then 4)
    async with engine.begin() as conn:
        assert await expire_approvals(conn) == {"rejected": [], "reminded": []}
    await later(pg, reminding, "1 hour")
    async with engine.begin() as conn:
        assert await expire_approvals(conn) == {"rejected": [], "reminded": []}
    await later(pg, reminding, "61 minutes")
    async with engine.begin() as conn:
        assert (await expire_approvals(conn))["reminded"] == [reminding]
    assert await pg.fetchval(reminders) == 2
    assert "rejected" in await event_kinds(pg, rejecting)


async def test_a_step_nobody_decides_sends_a_few_reminders_not_one_per_period(
    engine: Any, settings: Settings, owner: TestUser, admin: TestUser, pg: asyncpg.Connection
) -> None:
    """A week of sweeps every half hour over a step reminding hourly: each reminder waits as long as the
    step had waited at the one before, so 7 reminders (the first after the hour, the last after about 4
    days), not one per hour; a rule stored with a shorter timeout (before the minimum) waits the hour too."""
    jid = await waiting_step(
        engine, settings, pg, owner, approvers=["admins"], approval_timeout=3600, on_approval_timeout="remind"
    )
    await pg.execute("UPDATE job_approval_rules SET timeout_seconds = 1 WHERE job_id = $1", jid)
    await later(pg, jid, "50 minutes")
    async with engine.begin() as conn:
        assert (await expire_approvals(conn))["reminded"] == []
    await later(pg, jid, "15 minutes")  # sweeps off the hour: never a few milliseconds early
    seen = []
    for i in range(2 * 24 * 7 - 2):
        async with engine.begin() as conn:
            if (await expire_approvals(conn))["reminded"]:
                seen.append(65 + 30 * i)  # minutes waited
        await later(pg, jid, "30 minutes")
    counted = "SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = 'approval_reminder'"
    assert all(b >= 2 * a for a, b in zip(seen, seen[1:], strict=False)), seen  # each waits as long again
    assert seen == [65, 155, 335, 695, 1415, 2855, 5735]
    assert await pg.fetchval(counted, jid) == 7
    alerts = (
        "SELECT count(*) FROM alert_outbox WHERE kind = 'approval_needed' AND payload->>'reminder' = 'true'"
    )
    assert await pg.fetchval(alerts) == 7
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"


async def test_a_template_step_names_its_approvers(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    tpl = pipelines.Template(
        name="test.reviewed",
        title="Reviewed",
        description="A step its owner approves.",
        steps=(pipelines.TemplateStep("draft", "noop", requires_approval=True, approvers=("owner",)),),
    )
    _, steps = tpl.build({})
    assert steps[0]["approvers"] == ["owner"]
    async with engine.begin() as conn:
        row = await pipelines.create(conn, name="reviewed", steps=steps, user_id=owner.id, settings=settings)
    rule = await pg.fetchrow(
        "SELECT r.* FROM job_approval_rules r JOIN jobs j ON j.id = r.job_id WHERE j.pipeline_id = $1",
        row["id"],
    )
    assert (rule["owner"], rule["admins"], rule["approvals_needed"]) == (True, False, 1)
