"""The state machine: the transition table, every allowed and forbidden transition against
the database, and a guard that no module outside the queue package (``app/jobs/queue/``) writes
``jobs.status``."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from app.errors import Conflict
from app.jobs import queue
from app.jobs.queue import NewJob, Outcome
from app.jobs.states import LIVE, TERMINAL, TRANSITIONS, Actor, Status, can, label, sources
from tests.support.factories import make_user

ROOT = Path(__file__).resolve().parents[2]

ALLOWED = {
    ("queued", "in_progress"): {"worker"},
    ("queued", "cancelled"): {"owner", "admin", "system"},
    ("in_progress", "completed"): {"worker"},
    ("in_progress", "waiting_approval"): {"worker"},
    ("in_progress", "queued"): {"worker", "sweep"},
    ("in_progress", "failed"): {"worker", "sweep"},
    ("in_progress", "cancelled"): {"worker", "sweep"},
    ("waiting_approval", "completed"): {"admin"},
    ("waiting_approval", "failed"): {"admin"},
    ("waiting_approval", "queued"): {"admin"},
    ("waiting_approval", "cancelled"): {"owner", "admin", "system"},
    ("failed", "queued"): {"owner", "admin"},  # owners retry their own failures
    ("cancelled", "queued"): {"system"},
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product([s.value for s in Status], repeat=2)))
def test_every_pair_of_statuses_is_allowed_exactly_for_its_actors(src: str, dst: str) -> None:
    expected = ALLOWED.get((src, dst), set())
    assert {a.value for a in Actor if can(src, dst, a)} == expected


def test_terminal_statuses_only_leave_by_retry_or_reopen() -> None:
    for (src, dst), (actors, _) in TRANSITIONS.items():
        if src in TERMINAL:
            assert dst == Status.QUEUED
            # an owner may retry their own failed job; a cancelled one is re-opened only by the system
            owner = {Actor.OWNER} if src == Status.FAILED else set()
            assert actors <= {Actor.ADMIN, Actor.SYSTEM} | owner
    assert TERMINAL | LIVE == set(Status)
    assert sources(Status.CANCELLED, Actor.OWNER) == (Status.QUEUED, Status.WAITING_APPROVAL)


def test_labels_are_plain_words() -> None:
    assert label("in_progress", is_active=False) == "Cancelling"
    assert label("queued", pending_parents=2) == "Waiting for earlier steps"
    assert label("queued", scheduled=True) == "Scheduled"
    assert label("queued", retrying=True, scheduled=True) == "Retrying"  # a failed attempt is not "Waiting"
    assert [label(s.value) for s in Status] == [
        "Waiting",
        "Running",
        "Done",
        "Failed",
        "Cancelled",
        "Needs approval",
    ]


# --- against the database: forbidden transitions change nothing --------------------------------------


async def _job_in(engine, settings, pg, user, status: str) -> object:
    async with engine.begin() as conn:
        job = (await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=user.id), settings)).job[
            "id"
        ]
    if status == "queued":
        return job
    # Park jobs left queued by earlier steps of the test, so the claim below takes this one.
    await pg.execute(
        "UPDATE jobs SET run_at = now() + interval '1 day' WHERE status = 'queued' AND id <> $1", job
    )
    async with engine.begin() as conn:
        [claimed] = await queue.claim(conn, "w1", 1, 30)
    assert claimed["id"] == job
    if status == "in_progress":
        return job
    outcome = {
        "completed": Outcome(job, "completed", result="{}"),
        "failed": Outcome(job, "failed", error="x", permanent=True),
        "cancelled": Outcome(job, "cancelled"),
    }.get(status)
    if status == "waiting_approval":
        await pg.execute("UPDATE jobs SET requires_approval = true WHERE id = $1", job)
        outcome = Outcome(job, "completed", result="{}")
    async with engine.begin() as conn:
        await queue.finish(conn, "w1", [outcome], settings)
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job) == status
    return job


@pytest.mark.parametrize("status", [s.value for s in Status])
async def test_people_actions_refuse_statuses_they_do_not_apply_to(engine, settings, pg, status) -> None:
    """Cancel, retry, approve, reject and rerun each either apply (allowed by the table) or raise a 409
    and leave the row exactly as it was."""
    owner = await make_user(pg)
    admin = await make_user(pg, admin=True)
    actions = {
        "cancel": (lambda c, j: queue.cancel(c, j, owner), {"queued", "waiting_approval", "in_progress"}),
        "retry": (lambda c, j: queue.retry(c, j, admin), {"failed"}),
        "approve": (lambda c, j: queue.approve(c, j, admin), {"waiting_approval"}),
        "reject": (lambda c, j: queue.reject(c, j, admin, "no"), {"waiting_approval"}),
        "rerun": (lambda c, j: queue.rerun(c, j, admin), {"waiting_approval"}),
    }
    for name, (act, applies) in actions.items():
        # noop is for admins: a retry or a rerun needs its owner to be one (app.jobs.queue.owner_rule)
        job = await _job_in(engine, settings, pg, admin if name in ("retry", "rerun") else owner, status)
        before = dict(await pg.fetchrow("SELECT * FROM jobs WHERE id = $1", job))
        if status in applies:
            async with engine.begin() as conn:
                await act(conn, job)
            continue
        with pytest.raises(Conflict):
            async with engine.begin() as conn:
                await act(conn, job)
        after = dict(await pg.fetchrow("SELECT * FROM jobs WHERE id = $1", job))
        assert after == before, name


@pytest.mark.parametrize("status", ["queued", "completed", "failed", "cancelled", "waiting_approval"])
async def test_worker_outcomes_for_jobs_not_running_change_nothing(engine, settings, pg, status) -> None:
    owner = await make_user(pg)
    job = await _job_in(engine, settings, pg, owner, status)
    before = dict(await pg.fetchrow("SELECT * FROM jobs WHERE id = $1", job))
    for kind in ("completed", "failed", "cancelled", "released"):
        async with engine.begin() as conn:
            report = await queue.finish(conn, "w1", [Outcome(job, kind, result="{}", error="e")], settings)
        assert report.lost == {job}
        assert report.status == {}
    assert dict(await pg.fetchrow("SELECT * FROM jobs WHERE id = $1", job)) == before


# --- only the queue package writes jobs.status -----------------------------------------------------------

STATUS_WRITE = re.compile(
    # An UPDATE of jobs that sets status, an INSERT into jobs naming status, or a Python statement
    # assigning to an attribute called status (one that starts its line: a SQL comparison such as
    # ``AND j.status = 'queued'`` in a WHERE clause reads the status and is not a write).
    r"(UPDATE\s+jobs\b[^;\"]{0,400}?\bSET\b[^;\"]{0,400}?\bstatus\s*=)|(INSERT\s+INTO\s+jobs\s*\([^)]*\bstatus\b)"
    r"|(^[ \t]*[A-Za-z_][\w.\[\]\"']*\.status\s*=(?!=))",
    re.IGNORECASE | re.DOTALL | re.MULTILINE,
)


def test_the_status_write_pattern_tells_writes_from_reads() -> None:
    """The guard below finds every kind of write and passes reads, so it can fail and does not cry wolf."""
    writes = [
        "UPDATE jobs SET attempts = 1, status = 'failed' WHERE id = :id",
        "INSERT INTO jobs (id, type, status) VALUES (1, 'x', 'queued')",
        "    job.status = 'completed'",
        "row.job.status = Status.FAILED",
    ]
    reads = [
        "    AND j.status = 'queued' AND j.attempts = 0",
        "WHERE status = 'queued'",
        "    if job.status == 'failed':",
    ]
    for text in writes:
        assert STATUS_WRITE.search(text), text
    for text in reads:
        assert not STATUS_WRITE.search(text), text


QUEUE_PACKAGE = ROOT / "app" / "jobs" / "queue"


def test_no_module_but_the_queue_writes_job_status() -> None:
    assert (QUEUE_PACKAGE / "__init__.py").is_file()  # the exemption names a package that exists
    offenders = []
    for path in (ROOT / "app").rglob("*.py"):
        if QUEUE_PACKAGE in path.parents:
            continue
        text = path.read_text()
        for match in STATUS_WRITE.finditer(text):
            snippet = match.group(0)
            offenders.append(f"{path.relative_to(ROOT)}: {snippet[:80]!r}")
    assert offenders == []


def test_the_guard_would_catch_a_status_write() -> None:
    # Negative control for the scan above.
    assert STATUS_WRITE.search(
        "await conn.execute(text(\"UPDATE jobs SET status = 'failed' WHERE id = :id\"))"
    )
    assert STATUS_WRITE.search("job.status = 'completed'")
    assert not STATUS_WRITE.search("if job.status == 'completed':")
