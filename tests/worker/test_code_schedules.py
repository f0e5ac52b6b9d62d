"""Schedules defined in code (:func:`app.schedules.schedule`), used as an engineer would: a module loaded
through ``JOBDESK_PROCESSOR_MODULES`` declares them, and ``jobdesk worker`` syncs them at its start.

What a user of the feature counts on: the row appears when a worker starts and fires as its owner's
jobs; a change in the code and a restart update the same row; a schedule removed from the code stops
firing; workers starting at once make one row and one job per due time; an admin's Disable lasts across
restarts and an Edit the next start would overwrite is refused; a bad schedule in the code is an error
naming it, and the worker still starts; fire times across daylight-saving changes follow the rule of
every schedule.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import pytest

from app import schedule_firing, schedules
from app.actions import schedules as schedule_actions
from app.code_schedules import sync_code_schedules
from app.errors import Conflict
from app.schedules import ScheduleSpec, declared_code_schedules
from tests.support.factories import fire_by_seconds, make_user
from tests.support.workers import ROOT, WorkerProcess, wait_until


class Person:
    def __init__(self, uid: int, email: str, admin: bool) -> None:
        self.id, self.email, self.is_admin = uid, email, admin


MODULE_HEAD = """
from pydantic import Field

from app.processors import Input, JobContext, processor
from app.schedules import ScheduleSpec, schedule


class CountInput(Input):
    n: int = Field(0, ge=0, le=100)


@processor("report.count", title="Count", description="Returns its input.", input=CountInput)
async def count(ctx: JobContext[CountInput]) -> dict:
    return {"n": ctx.input.n}

"""
"""The head of a module an engineer writes: a job type anyone may start, then its schedules."""


def write_module(folder: Path, name: str, specs: list[dict[str, Any]]) -> None:
    """A module in ``folder`` that declares a job type and ``specs`` the documented way."""
    lines = [f"schedule(ScheduleSpec(**{spec!r}))" for spec in specs]
    (folder / f"{name}.py").write_text(MODULE_HEAD + "\n".join(lines) + "\n")


class CodeWorkers:
    """Worker processes loading a module of schedules from a temporary folder."""

    def __init__(self, settings: Any, folder: Path, pg: asyncpg.Connection) -> None:
        self.settings, self.folder, self.pg = settings, folder, pg
        self.module = f"codesched_{uuid.uuid4().hex[:8]}"
        self.procs: list[WorkerProcess] = []

    def declare(self, *specs: dict[str, Any]) -> None:
        write_module(self.folder, self.module, list(specs))

    async def start(self, count: int = 1) -> list[WorkerProcess]:
        before = await self.pg.fetchval("SELECT count(*) FROM workers")
        started = [
            WorkerProcess(
                self.settings,
                self.folder / f"w{len(self.procs) + i}.log",
                JOBDESK_PROCESSOR_MODULES=f"tests.support.processors,{self.module}",
                PYTHONPATH=f"{ROOT}:{self.folder}",
            )
            for i in range(count)
        ]
        self.procs += started
        await wait_until(
            lambda: self.pg.fetchval("SELECT count(*) >= $1 FROM workers", before + count),
            timeout=30,
            what=f"{count} worker(s) registered",
        )
        return started

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.proc.poll() is None:
                proc.terminate()
                proc.wait(30)
        for proc in self.procs:
            proc.close()

    def output(self) -> str:
        return "\n".join(p.output() for p in self.procs)


@pytest.fixture
async def code_workers(make_settings: Any, tmp_path: Path, pg: asyncpg.Connection) -> Any:
    workers = CodeWorkers(make_settings(worker_sweep_interval_secs=0.2), tmp_path, pg)
    try:
        yield workers
    finally:
        workers.stop_all()


async def schedule_rows(pg: asyncpg.Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in await pg.fetch("SELECT * FROM schedules ORDER BY name")]


async def test_a_code_schedule_appears_at_worker_start_and_fires_as_its_owners_jobs(
    code_workers: CodeWorkers, pg: asyncpg.Connection
) -> None:
    owner = await make_user(pg)
    code_workers.declare(
        {
            "name": "every two seconds",
            "cron": "* * * * *",
            "owner_email": owner.email.upper(),  # e-mails are matched as the sign-in does
            "job_type": "report.count",
            "input_data": {"n": 1},
        }
    )
    await code_workers.start()
    (row,) = await schedule_rows(pg)
    assert (row["source"], row["cron"], row["user_id"], row["enabled"]) == (
        "code",
        "* * * * *",
        owner.id,
        True,
    )
    await fire_by_seconds(pg, row["id"], "* * * * * */2")  # a clock shorter than the cron's minute
    await wait_until(
        lambda: pg.fetchval("SELECT count(*) >= 2 FROM jobs WHERE status = 'completed'"),
        timeout=30,
        what="two fires",
    )
    jobs = await pg.fetch("SELECT * FROM jobs ORDER BY id")
    assert {j["user_id"] for j in jobs} == {owner.id}
    assert all(j["idempotency_key"].startswith(f"schedule:{row['id']}:") for j in jobs)
    assert all(j["title"].startswith("every two seconds (") for j in jobs)
    first = await pg.fetchrow(
        "SELECT kind, actor FROM job_events WHERE job_id = $1 ORDER BY id LIMIT 1", jobs[0]["id"]
    )
    assert dict(first) == {"kind": "enqueued", "actor": f"schedule:{row['id']}"}


async def test_a_change_in_the_code_updates_the_same_row_at_the_next_start(
    code_workers: CodeWorkers, pg: asyncpg.Connection
) -> None:
    owner, other = await make_user(pg), await make_user(pg)
    spec = {"name": "nightly", "cron": "30 2 * * *", "owner_email": owner.email, "job_type": "report.count"}
    code_workers.declare({**spec, "input_data": {"n": 1}})
    (first,) = await code_workers.start()
    (before,) = await schedule_rows(pg)
    first.terminate()
    first.wait(30)
    code_workers.declare(
        {
            **spec,
            "cron": "0 4 * * 1-5",
            "timezone": "Europe/Berlin",
            "owner_email": other.email,
            "input_data": {"n": 2},
            "catch_up": True,
        }
    )
    await code_workers.start()
    (after,) = await schedule_rows(pg)
    assert after["id"] == before["id"]
    assert (after["cron"], after["timezone"], after["user_id"], after["input_data"], after["catch_up"]) == (
        "0 4 * * 1-5",
        "Europe/Berlin",
        other.id,
        json.dumps({"n": 2}),
        True,
    )
    local = after["next_fire_at"].astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute, local.weekday() < 5) == (4, 0, True)


async def admin_notices(pg: asyncpg.Connection, action: str) -> list[dict[str, Any]]:
    rows = await pg.fetch(
        "SELECT payload FROM alert_outbox WHERE kind = 'admin_action' AND payload->>'action' = $1 ORDER BY id",
        action,
    )
    return [json.loads(r["payload"]) for r in rows]


async def test_a_bad_schedule_in_the_code_is_an_error_naming_it_and_the_worker_still_starts(
    code_workers: CodeWorkers, pg: asyncpg.Connection, engine: Any, settings: Any
) -> None:
    owner, boss = await make_user(pg), await make_user(pg, admin=True)
    async with engine.begin() as conn:
        await schedules.create_schedule(
            conn,
            cron="0 * * * *",
            job_type="noop",
            name="made in the console",
            owner=Person(boss.id, boss.email, True),
            settings=settings,
        )
    good = {"name": "good", "cron": "0 * * * *", "owner_email": owner.email, "job_type": "report.count"}
    bad = {
        "bad cron": {"cron": "61 * * * *"},
        "bad zone": {"timezone": "Mars/Olympus"},
        "bad type": {"job_type": "no.such.type"},
        "bad input": {"input_data": {"n": "many"}},
        "no owner": {"owner_email": "nobody@example.com"},
        "not allowed": {"job_type": "noop"},  # admins only, and the owner is not one
        "made in the console": {},  # the name of a schedule made in the console
    }
    code_workers.declare(good, *({**good, "name": name, **change} for name, change in bad.items()))
    await code_workers.start()
    rows = {r["name"]: r for r in await schedule_rows(pg)}
    assert set(rows) == {"good", "made in the console"}
    assert rows["made in the console"]["source"] == "ui"
    errors = [
        json.loads(line)
        for line in code_workers.output().splitlines()
        if line.startswith("{") and '"code schedule' in line
    ]
    assert {e["schedule"] for e in errors} == set(bad)
    assert all(e["level"] == "error" for e in errors)
    by_name = {e["schedule"]: e["error"] for e in errors}
    assert "cron" in by_name["bad cron"] and "Mars/Olympus" in by_name["bad zone"]
    assert "no.such.type" in by_name["bad type"] and "input_data.n" in by_name["bad input"]
    assert "nobody@example.com" in by_name["no owner"] and "only admins" in by_name["not allowed"]
    assert "already exists" in by_name["made in the console"]
    assert "Traceback" not in code_workers.output()
    assert {n["detail"]["name"] for n in await admin_notices(pg, "schedule.invalid")} == set(bad)


async def test_two_workers_starting_at_once_make_one_row_and_one_job_per_due_time(
    code_workers: CodeWorkers, pg: asyncpg.Connection
) -> None:
    owner = await make_user(pg)
    code_workers.declare(
        {"name": "fast", "cron": "* * * * *", "owner_email": owner.email, "job_type": "report.count"}
    )
    await code_workers.start(count=2)
    (row,) = await schedule_rows(pg)
    await fire_by_seconds(pg, row["id"], "* * * * * */2")
    await wait_until(
        lambda: pg.fetchval("SELECT count(*) >= 3 FROM jobs WHERE status = 'completed'"),
        timeout=30,
        what="three fires",
    )
    keys = [r["idempotency_key"] for r in await pg.fetch("SELECT idempotency_key FROM jobs ORDER BY id")]
    assert len(keys) == len(set(keys))
    times = sorted(datetime.fromisoformat(k.split(":", 2)[2]) for k in keys)
    assert {(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)} <= {2.0}
    assert all(k.startswith(f"schedule:{row['id']}:") for k in keys)


async def test_a_schedule_missing_from_a_workers_code_is_left_to_an_admin(
    code_workers: CodeWorkers, pg: asyncpg.Connection, engine: Any
) -> None:
    """A worker whose code lacks a schedule (an old version during a rolling deploy, or a worker loading
    other modules) does not switch it off: a disabled code schedule stays disabled, so that would stop it
    for good. The schedules page marks it, and once an admin disables it, it may be deleted."""
    owner = await make_user(pg)
    kept = {"name": "kept", "cron": "0 * * * *", "owner_email": owner.email, "job_type": "report.count"}
    gone = {**kept, "name": "gone", "cron": "30 * * * *"}
    code_workers.declare(kept, gone)
    (first,) = await code_workers.start()
    first.terminate()
    first.wait(30)
    code_workers.declare(kept)
    await code_workers.start()
    rows = {r["name"]: r for r in await schedule_rows(pg)}
    assert (rows["kept"]["enabled"], rows["gone"]["enabled"]) == (True, True)
    assert rows["gone"]["next_fire_at"] is not None
    assert await admin_notices(pg, "schedule.disable") == []
    # This process declares neither (its code is the test's): both are marked, and neither may be
    # deleted while enabled.
    assert declared_code_schedules().isdisjoint({"kept", "gone"})
    boss = await make_user(pg, admin=True)
    admin = Person(boss.id, boss.email, True)
    async with engine.begin() as conn:
        with pytest.raises(Conflict, match="defined in code"):
            await schedule_actions.delete_schedule(conn, admin, rows["gone"]["id"])
    async with engine.begin() as conn:
        await schedule_actions.set_enabled(conn, admin, rows["gone"]["id"], False)
    async with engine.begin() as conn:
        await schedule_actions.delete_schedule(conn, admin, rows["gone"]["id"])
    assert [r["name"] for r in await schedule_rows(pg)] == ["kept"]


async def test_an_admins_disable_lasts_across_restarts_and_an_edit_of_a_code_schedule_is_refused(
    code_workers: CodeWorkers, pg: asyncpg.Connection, engine: Any, settings: Any
) -> None:
    boss = await make_user(pg, admin=True)
    admin = Person(boss.id, boss.email, True)
    code_workers.declare(
        {"name": "hourly", "cron": "0 * * * *", "owner_email": boss.email, "job_type": "noop"}
    )
    (first,) = await code_workers.start()
    (row,) = await schedule_rows(pg)
    async with engine.begin() as conn:
        await schedule_actions.set_enabled(conn, admin, row["id"], False)
    first.terminate()
    first.wait(30)
    await code_workers.start()
    (after,) = await schedule_rows(pg)
    assert (after["enabled"], after["next_fire_at"]) == (False, None), "the restart undid the admin's Disable"
    # An edit the next worker start would silently undo is refused, naming where to change it.
    with pytest.raises(Conflict, match="defined in code"):
        async with engine.begin() as conn:
            await schedule_actions.update_schedule(
                conn,
                admin,
                row["id"],
                cron="*/5 * * * *",
                timezone="UTC",
                input_data={"hi": 3},
                enabled=True,
                settings=settings,
            )
    assert (await schedule_rows(pg))[0]["cron"] == "0 * * * *"


@pytest.mark.parametrize(
    ("cron", "first", "expected", "following"),
    [
        # Spring forward (2026-03-29, 02:00 CET -> 03:00 CEST): the skipped 02:30 fires once, at 03:00.
        (
            "30 2 28-30 3 *",
            "2026-03-28T01:30:00+00:00",
            ["2026-03-28T01:30:00+00:00", "2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00"],
            "2027-03-28T01:00:00+00:00",  # 2027's change falls on the 28th: 03:00 CEST again
        ),
        # Fall back (2026-10-25, 03:00 CEST -> 02:00 CET): the repeated 02:30 fires once, in summer time.
        (
            "30 2 24-26 10 *",
            "2026-10-24T00:30:00+00:00",
            ["2026-10-24T00:30:00+00:00", "2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00"],
            "2027-10-24T00:30:00+00:00",
        ),
    ],
)
async def test_a_code_schedule_in_berlin_fires_once_per_wall_time_across_daylight_saving_changes(
    pg: asyncpg.Connection,
    engine: Any,
    settings: Any,
    monkeypatch: Any,
    cron: str,
    first: str,
    expected: list[str],
    following: str,
) -> None:
    """The worker's own sync and sweep functions on the real database; the days of the change are in
    the past, so a catch-up schedule whose next run is set back to the first of them fires every one of
    its times at once (the database's clock cannot be moved), each stamped in its job's key."""
    boss = await make_user(pg, admin=True)
    spec = ScheduleSpec(
        name="berlin",
        cron=cron,
        owner_email=boss.email,
        job_type="noop",
        timezone="Europe/Berlin",
        catch_up=True,
    )
    monkeypatch.setitem(schedules.CODE_SCHEDULES, spec.name, spec)
    async with engine.begin() as conn:
        assert await sync_code_schedules(conn, settings) == 1
    await pg.execute("UPDATE schedules SET next_fire_at = $1", datetime.fromisoformat(first))
    async with engine.begin() as conn:
        fired = await schedule_firing.fire_due(conn, settings)
    assert [f["fired_at"].isoformat() for f in fired] == expected
    keys = sorted(
        r["idempotency_key"].split(":", 2)[2] for r in await pg.fetch("SELECT idempotency_key FROM jobs")
    )
    assert [datetime.fromisoformat(k) for k in keys] == [datetime.fromisoformat(e) for e in expected]
    nxt = await pg.fetchval("SELECT next_fire_at FROM schedules")
    assert nxt.astimezone(UTC).isoformat() == following


async def test_a_code_schedule_made_invalid_by_a_new_version_stops_firing_the_old_one(
    pg: asyncpg.Connection, engine: Any, settings: Any, monkeypatch: Any
) -> None:
    boss = await make_user(pg, admin=True)
    spec = ScheduleSpec(name="hourly", cron="0 * * * *", owner_email=boss.email, job_type="noop")
    monkeypatch.setitem(schedules.CODE_SCHEDULES, spec.name, spec)
    async with engine.begin() as conn:
        assert await sync_code_schedules(conn, settings) == 1
    monkeypatch.setitem(
        schedules.CODE_SCHEDULES, spec.name, ScheduleSpec(**{**vars(spec), "cron": "0 25 * * *"})
    )
    async with engine.begin() as conn:
        assert await sync_code_schedules(conn, settings) == 0
    row = await pg.fetchrow("SELECT cron, enabled, next_fire_at FROM schedules")
    assert dict(row) == {"cron": "0 * * * *", "enabled": False, "next_fire_at": None}
    (notice,) = await admin_notices(pg, "schedule.invalid")
    assert "cron" in notice["outcome"] and notice["detail"] == {"name": "hourly"}
