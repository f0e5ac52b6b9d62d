"""Test helpers: users and jobs made directly in a test database (River's testfactory style)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cron import next_fire
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings

_seq = itertools.count(1)

SIDE_EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS side_effects (
    id bigserial PRIMARY KEY, job_id uuid NOT NULL, attempt int NOT NULL, worker text NOT NULL,
    pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
"""The table the test job type ``test.effect`` appends one row to per run: one row per job means it ran
exactly once."""


@dataclass(frozen=True)
class TestUser:
    __test__ = False
    id: int
    email: str
    is_admin: bool = False


async def make_user(pg: asyncpg.Connection, *, admin: bool = False, email: str | None = None) -> TestUser:
    """Insert a user (password hash is a placeholder: these users sign in through tokens or sessions
    made by the test itself)."""
    email = email or f"user{next(_seq)}@example.com"
    uid = await pg.fetchval(
        "INSERT INTO users (email, password_hash, is_admin) VALUES ($1, 'x', $2) RETURNING id", email, admin
    )
    return TestUser(id=uid, email=email, is_admin=admin)


async def make_job(
    engine: AsyncEngine,
    settings: Settings,
    user: Any,
    type_: str = "noop",
    input_data: dict[str, Any] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Enqueue a job for ``user`` (a user or its id) through the queue, as every entry path does, and
    return its row. A ``noop`` with empty input unless told otherwise; ``overrides`` are
    :class:`NewJob` fields (``priority``, ``run_at``, ``max_attempts``, ``depends_on``, ``title``…)."""
    user_id = user if isinstance(user, int) else user.id
    job = NewJob(
        type=type_, input_data=input_data if input_data is not None else {}, user_id=user_id, **overrides
    )
    async with engine.begin() as conn:
        result = await queue.enqueue(conn, job, settings)
    return dict(result.job)


async def job_row(pg: asyncpg.Connection, job_id: Any) -> dict[str, Any]:
    row = await pg.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert row is not None, f"no job {job_id}"
    return dict(row)


async def events(pg: asyncpg.Connection, job_id: Any) -> list[dict[str, Any]]:
    rows = await pg.fetch("SELECT * FROM job_events WHERE job_id = $1 ORDER BY id", job_id)
    return [dict(r) for r in rows]


async def event_kinds(pg: asyncpg.Connection, job_id: Any) -> list[str]:
    return [e["kind"] for e in await events(pg, job_id)]


async def fire_by_seconds(pg: asyncpg.Connection, schedule_id: Any, cron: str) -> None:
    """Give a stored schedule a cron expression with a seconds field (``* * * * * */2``), due now. No
    path takes one (a schedule fires at most once a minute), but a stored row fires as written, and a
    test of firing by real workers needs a clock shorter than a minute. Its next run is the cron's next
    time after the database's now, as the sweep would compute it: a first run at ``now()`` itself would
    fall between two of the cron's times."""
    now = await pg.fetchval("SELECT now()")
    due = next_fire(cron, "UTC", now)
    await pg.execute(
        "UPDATE schedules SET cron = $2, next_fire_at = $3 WHERE id = $1", schedule_id, cron, due
    )
