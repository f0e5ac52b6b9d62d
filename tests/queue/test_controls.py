"""Operator controls: pause/resume, per-type concurrency and rate limits held across worker
processes, cron schedules firing exactly once per due time, no back-fill after downtime unless asked,
and clear errors for every bad input."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from app import controls
from app.actions import controls as control_actions
from app.db import asyncpg_dsn
from app.errors import BadInput, Conflict, NotFound
from app.jobs import queue
from app.jobs.queue import NewJob
from tests.support.factories import fire_by_seconds, make_user
from tests.support.processors import SIDE_EFFECTS_DDL
from tests.support.webkit import add_token, add_user, app_client
from tests.support.workers import WorkerProcess, running_worker, wait_until


class Admin:
    def __init__(self, uid: int, email: str) -> None:
        self.id, self.email, self.is_admin = uid, email, True


@pytest.fixture
async def admin(pg: asyncpg.Connection) -> Admin:
    await pg.execute(SIDE_EFFECTS_DDL)
    u = await make_user(pg, admin=True)
    return Admin(u.id, u.email)


async def enqueue_many(
    engine: Any, settings: Any, user: Any, type_: str, input_data: dict[str, Any], n: int
) -> None:
    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn, [NewJob(type=type_, input_data=input_data, user_id=user.id) for _ in range(n)], settings
        )


class RunningSampler:
    """Samples, every few milliseconds on its own connection, how many jobs of a type are running (in
    committed state) and keeps the peak. Event timestamps cannot be used for this: ``job_events.at`` is
    its transaction's start, and a claim that waited for the type's lock is stamped before the
    completion it waited for."""

    def __init__(self, dsn: str, job_type: str) -> None:
        self.dsn, self.job_type, self.peak, self.samples = dsn, job_type, 0, 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunningSampler:
        conn = await asyncpg.connect(self.dsn)
        sql = "SELECT count(*) FROM jobs WHERE status = 'in_progress' AND type = $1"

        async def run() -> None:
            try:
                while not self._stop.is_set():
                    n = await conn.fetchval(sql, self.job_type)
                    self.peak, self.samples = max(self.peak, n), self.samples + 1
                    await asyncio.sleep(0.003)
            finally:
                await conn.close()

        self._task = asyncio.create_task(run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


async def test_a_paused_type_accepts_jobs_but_none_is_claimed_until_resumed(
    engine, settings, admin, pg
) -> None:
    async with engine.begin() as conn:
        row = await control_actions.pause(conn, admin, "noop")
    assert row["paused"]
    assert row["paused_by"] == admin.email
    assert row["paused_at"] is not None
    async with running_worker(settings):
        await enqueue_many(engine, settings, admin, "noop", {}, 5)
        await enqueue_many(engine, settings, admin, "sleep", {"seconds": 0}, 2)
        await wait_until(
            lambda: pg.fetchval(
                "SELECT count(*) = 2 FROM jobs WHERE type = 'sleep' AND status = 'completed'"
            ),
            what="sleep jobs",
        )
        await asyncio.sleep(1.0)
        assert await pg.fetchval("SELECT count(*) FROM jobs WHERE type = 'noop' AND status = 'queued'") == 5
        async with engine.begin() as conn:
            await control_actions.resume(conn, admin, "noop")
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 5 FROM jobs WHERE type = 'noop' AND status = 'completed'"),
            timeout=5,
            what="resumed",
        )
    actions = [r["action"] for r in await pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    assert actions == ["job_type.pause", "job_type.resume"]


async def test_pausing_every_type_stops_all_claims_and_survives_a_worker_restart(
    engine, settings, admin, pg
) -> None:
    async with engine.begin() as conn:
        await controls.set_paused(conn, "*", True, admin)
    await enqueue_many(engine, settings, admin, "noop", {}, 3)
    for _ in range(2):  # two worker lifetimes: the pause is in the database
        async with running_worker(settings):
            await asyncio.sleep(1.0)
        assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 3
    async with engine.begin() as conn:
        await controls.set_paused(conn, "*", False, admin)
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 3 FROM jobs WHERE status = 'completed'"), what="resumed"
        )


# Case N08 (docs/cases.md).
async def test_a_concurrency_limit_is_never_exceeded_by_four_worker_processes(
    make_settings, engine, admin, pg, tmp_path, db_url
) -> None:
    settings = make_settings(max_concurrent_jobs=5)
    async with engine.begin() as conn:
        await controls.set_limits(conn, "test.effect", max_running=3, max_per_minute=None, admin=admin)
    async with RunningSampler(asyncpg_dsn(db_url), "test.effect") as sampler:
        procs = [WorkerProcess(settings, tmp_path / f"w{i}.log") for i in range(4)]
        try:
            # Work appears only once all four are up, so that they compete for it: on a busy machine
            # the first one to start could otherwise finish everything alone.
            await wait_until(
                lambda: pg.fetchval("SELECT count(*) >= 4 FROM workers"), timeout=60, what="four workers"
            )
            await enqueue_many(engine, settings, admin, "test.effect", {"seconds": 0.4}, 24)
            await enqueue_many(engine, settings, admin, "noop", {}, 50)  # unlimited work alongside
            await wait_until(
                lambda: pg.fetchval("SELECT count(*) = 74 FROM jobs WHERE status = 'completed'"),
                timeout=90,
                interval=0.3,
                what="all jobs",
            )
        finally:
            for p in procs:
                p.close()
    assert sampler.samples > 100
    assert sampler.peak == 3, f"peak {sampler.peak} running at once; the limit is 3"
    # Several processes really competed for the work (the limited jobs may all land on one of them).
    assert await pg.fetchval("SELECT count(DISTINCT actor) FROM job_events WHERE kind = 'claimed'") >= 2


async def test_a_concurrency_limit_can_change_while_jobs_run(engine, settings, admin, pg, db_url) -> None:
    async with engine.begin() as conn:
        await controls.set_limits(conn, "sleep", max_running=1, max_per_minute=None, admin=admin)
    await enqueue_many(engine, settings, admin, "sleep", {"seconds": 0.5}, 6)
    async with running_worker(settings):
        async with RunningSampler(asyncpg_dsn(db_url), "sleep") as limited:
            await wait_until(
                lambda: pg.fetchval("SELECT count(*) >= 2 FROM jobs WHERE status = 'completed'"),
                what="two done one at a time",
            )
        assert limited.peak == 1
        async with RunningSampler(asyncpg_dsn(db_url), "sleep") as unlimited:
            async with engine.begin() as conn:
                await controls.set_limits(conn, "sleep", max_running=None, max_per_minute=None, admin=admin)
            await wait_until(
                lambda: pg.fetchval("SELECT count(*) = 6 FROM jobs WHERE status = 'completed'"),
                what="the rest",
            )
    assert unlimited.peak > 1


async def test_a_rate_limit_caps_starts_per_minute(engine, settings, admin, pg) -> None:
    async with engine.begin() as conn:
        await controls.set_limits(conn, "noop", max_running=None, max_per_minute=5, admin=admin)
    await enqueue_many(engine, settings, admin, "noop", {}, 12)
    async with running_worker(settings):
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 5 FROM jobs WHERE status = 'completed'"),
            what="five starts",
        )
        await asyncio.sleep(1.5)
        assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'completed'") == 5
        assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 7


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_running": -1, "max_per_minute": None}, "max_running"),
        ({"max_running": None, "max_per_minute": 10**9}, "max_per_minute"),
        ({"max_running": 0, "max_per_minute": None}, "max_running"),  # stopping a type is a pause
    ],
)
async def test_bad_limits_are_refused_naming_the_field(engine, admin, kwargs, field) -> None:
    with pytest.raises(BadInput) as err:
        async with engine.begin() as conn:
            await controls.set_limits(conn, "noop", admin=admin, **kwargs)
    assert field in err.value.errors


async def test_unknown_types_cannot_be_paused_or_limited(engine, admin) -> None:
    with pytest.raises(NotFound):
        async with engine.begin() as conn:
            await controls.set_paused(conn, "nope", True, admin)
    with pytest.raises(BadInput):
        async with engine.begin() as conn:
            await controls.set_limits(conn, "*", max_running=1, max_per_minute=None, admin=admin)


# --- schedules ----------------------------------------------------------------------------------------


# Case N06 (docs/cases.md).
async def test_a_schedule_fires_exactly_once_per_due_time_across_two_worker_processes(
    make_settings, engine, admin, pg, tmp_path
) -> None:
    """Cron with a seconds field (``* * * * * */2``: every 2 s) as the short clock; two worker processes
    sweep concurrently; every fire time has exactly one job."""
    settings = make_settings(worker_sweep_interval_secs=0.2)
    async with engine.begin() as conn:
        row = await controls.create_schedule(
            conn, cron="* * * * *", job_type="noop", input_data={"hi": 1}, owner=admin, settings=settings
        )
    await fire_by_seconds(pg, row["id"], "* * * * * */2")
    procs = [WorkerProcess(settings, tmp_path / f"w{i}.log") for i in range(2)]
    try:
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) >= 4 FROM jobs WHERE status = 'completed'"),
            timeout=30,
            what="four fires",
        )
    finally:
        for p in procs:
            p.close()
    keys = [r["idempotency_key"] for r in await pg.fetch("SELECT idempotency_key FROM jobs ORDER BY id")]
    assert len(keys) == len(set(keys))
    assert all(k.startswith(f"schedule:{row['id']}:") for k in keys)
    fire_times = sorted(datetime.fromisoformat(k.split(":", 2)[2]) for k in keys)
    gaps = {(b - a).total_seconds() for a, b in zip(fire_times, fire_times[1:], strict=False)}
    assert gaps <= {2.0}, f"one job per 2-second fire time, got gaps {gaps}"
    sched = await pg.fetchrow(
        "SELECT last_fire_at, next_fire_at, last_job_id FROM schedules WHERE id = $1", row["id"]
    )
    assert sched["last_job_id"] is not None
    assert sched["next_fire_at"] > sched["last_fire_at"]


# Case N07 (docs/cases.md).
@pytest.mark.parametrize("catch_up", [False, True])
async def test_after_downtime_a_schedule_fires_once_unless_catch_up_is_set(
    engine, settings, admin, pg, catch_up
) -> None:
    async with engine.begin() as conn:
        row = await controls.create_schedule(
            conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings, catch_up=catch_up
        )
    # Ten minutes of downtime: the next fire time is long past.
    await pg.execute(
        "UPDATE schedules SET next_fire_at = date_trunc('minute', now()) - interval '10 minutes' WHERE id = $1",
        row["id"],
    )
    async with engine.begin() as conn:
        fired = await controls.fire_due(conn, settings)
    assert len(fired) == (11 if catch_up else 1)
    assert await pg.fetchval("SELECT count(*) FROM jobs") == len(fired)
    nxt = await pg.fetchval("SELECT next_fire_at FROM schedules WHERE id = $1", row["id"])
    assert nxt > await pg.fetchval("SELECT now()")
    async with engine.begin() as conn:
        assert await controls.fire_due(conn, settings) == []  # nothing due any more


async def test_a_schedule_can_start_a_pipeline_template(engine, settings, admin, pg) -> None:
    from app.pipelines import Template, TemplateStep, template

    template(
        Template(
            name="test.sched", title="Scheduled pipeline", description="x", steps=(TemplateStep("a", "noop"),)
        )
    )
    async with engine.begin() as conn:
        row = await controls.create_schedule(
            conn, cron="*/5 * * * *", template="test.sched", owner=admin, settings=settings
        )
    await pg.execute(
        "UPDATE schedules SET next_fire_at = now() - interval '1 second' WHERE id = $1", row["id"]
    )
    async with engine.begin() as conn:
        fired = await controls.fire_due(conn, settings)
    assert len(fired) == 1
    assert fired[0]["pipeline_id"]
    assert await pg.fetchval("SELECT template FROM pipelines") == "test.sched"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "every day"}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": ""}, "cron"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "* * * * *", "job_type": "nope"}, "type"),
        ({"cron": "* * * * *", "job_type": None}, "type"),
        ({"cron": "* * * * *", "job_type": "sleep", "input_data": {"seconds": -5}}, "input_data.seconds"),
        ({"cron": "* * * * *", "job_type": None, "template": "nope"}, "template"),
    ],
)
async def test_invalid_schedules_are_refused_naming_the_field(
    engine, settings, admin, pg, kwargs, field
) -> None:
    values = {"job_type": "noop", **kwargs}
    with pytest.raises(BadInput) as err:
        async with engine.begin() as conn:
            await controls.create_schedule(conn, owner=admin, settings=settings, **values)
    assert field in err.value.errors, err.value.errors
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0


async def test_the_controls_api_is_for_admins_and_validates(make_settings, db_url, pg) -> None:
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        user = await add_user(db_url, "plain@example.com")
        admin = await add_user(db_url, "boss@example.com", admin=True)
        plain = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
        boss = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
        assert (await client.post("/api/job-types/noop/pause", headers=plain)).status_code == 403
        paused = await client.post("/api/job-types/noop/pause", headers=boss)
        assert paused.status_code == 200
        assert paused.json()["paused_by"] == "boss@example.com"
        assert (await client.post("/api/job-types/nope/pause", headers=boss)).status_code == 404
        limits = await client.put(
            "/api/job-types/noop/limits", json={"max_running": 3, "max_per_minute": None}, headers=boss
        )
        assert limits.status_code == 200
        assert limits.json()["max_running"] == 3
        bad = await client.put("/api/job-types/noop/limits", json={"max_running": -2}, headers=boss)
        assert bad.status_code == 422
        assert "max_running" in bad.json()["errors"]
        assert (await client.post("/api/job-types/noop/resume", headers=boss)).json()["paused"] is False
        created = await client.post(
            "/api/schedules",
            json={"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "type": "noop"},
            headers=boss,
        )
        assert created.status_code == 201, created.text
        nxt = datetime.fromisoformat(created.json()["next_fire_at"])
        assert nxt.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin")).hour == 9
        bad_cron = await client.post(
            "/api/schedules", json={"cron": "nonsense", "type": "noop"}, headers=boss
        )
        assert bad_cron.status_code == 422
        assert "cron" in bad_cron.json()["errors"]
        listed = (await client.get("/api/schedules", headers=boss)).json()
        assert [s["name"] for s in listed] == [created.json()["name"]]
        assert (
            await client.delete(f"/api/schedules/{created.json()['id']}", headers=boss)
        ).status_code == 204
        assert (
            await client.delete(f"/api/schedules/{created.json()['id']}", headers=boss)
        ).status_code == 404
    # the changes, each once; the refused requests (bad limits, a bad cron, a second delete) are on the
    # trail as refusals
    actions = [
        r["action"] for r in await pg.fetch("SELECT action FROM audit_log WHERE outcome = 'ok' ORDER BY id")
    ]
    assert actions == [
        "job_type.pause",
        "job_type.limits",
        "job_type.resume",
        "schedule.create",
        "schedule.delete",
    ]


async def test_next_fire_is_computed_in_the_schedules_time_zone() -> None:
    # 09:00 in Berlin on a winter weekday is 08:00 UTC.
    after = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
    assert controls.next_fire("0 9 * * *", "Europe/Berlin", after) == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    times, nxt = controls.fire_times("0 * * * *", "UTC", after - timedelta(hours=3), after, catch_up=True)
    assert len(times) == 4
    assert nxt == after + timedelta(hours=1)


def test_a_fired_jobs_title_fits_however_long_the_schedules_name() -> None:
    """A trial found a 190-character schedule name accepted, then every firing refused ("title: must be
    at most 200 characters") and the schedule disabled by the system."""
    from datetime import UTC, datetime

    from app.controls import fired_title

    at = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    assert fired_title("Nightly", at) == "Nightly (2026-11-30 09:00 UTC)"
    long = fired_title("x" * 200, at)
    assert len(long) == 200
    assert long.endswith("… (2026-11-30 09:00 UTC)")


async def test_enabling_or_disabling_a_schedule_reads_it_once(engine, settings, admin, pg) -> None:
    """``set_enabled`` read the schedule before its audited block, again inside it, and a third time in
    :func:`app.schedules.set_schedule_enabled`: one read is enough (its id for the audit entry, its state
    and its owner for the change)."""
    from sqlalchemy import event

    from app.actions import schedules as schedule_actions

    async with engine.begin() as conn:
        row = await schedule_actions.create_schedule(
            conn, admin, cron="0 9 * * *", job_type="noop", settings=settings
        )
    reads: list[str] = []

    def capture(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM schedules" in statement:
            reads.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", capture)
    try:
        for enabled, written in ((False, True), (False, False), (True, True), (True, False)):
            reads.clear()
            async with engine.begin() as conn:
                before = await pg.fetchval("SELECT updated_at FROM schedules WHERE id = $1", row["id"])
                if written:
                    after = await schedule_actions.set_enabled(conn, admin, str(row["id"]), enabled)
                    assert after["enabled"] is enabled
                    assert after["updated_at"] != before
                else:  # already so: refused, nothing written (the refusal is audited)
                    with pytest.raises(Conflict, match="Nothing changed"):
                        await schedule_actions.set_enabled(conn, admin, str(row["id"]), enabled)
                    assert (
                        await pg.fetchval("SELECT updated_at FROM schedules WHERE id = $1", row["id"])
                        == before
                    )
            assert len(reads) == 1, reads
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", capture)
    actions = [
        (r["action"], r["outcome"][:24]) for r in await pg.fetch("SELECT * FROM audit_log ORDER BY id")
    ]
    assert actions == [
        ("schedule.create", "ok"),
        ("schedule.disable", "ok"),
        ("schedule.disable", "refused: Nothing changed"),
        ("schedule.enable", "ok"),
        ("schedule.enable", "refused: Nothing changed"),
    ]
