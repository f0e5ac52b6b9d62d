"""Time: cron schedules across daylight-saving changes, local times that do not exist or happen twice in
forms, the database's clock deciding when things run, schedules of a paused type, and retention of files
that something can still run with.

The daylight-saving rule (one for every schedule): a cron expression names wall-clock times in its zone
and each fires at most once — a repeated time at its first occurrence, a skipped time once at the moment
the clocks jump to.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import httpx
import pytest
from croniter import croniter

import tests.support.forms  # noqa: F401  (registers test.form, whose input has file and datetime fields)
from app import controls, dbclock, localtime, schedules
from app import cron as cron_times
from app.files import FileStore
from app.jobs import queue
from app.jobs.queue import NewJob
from tests.support.factories import fire_by_seconds, make_user
from tests.support.webkit import FORMS_ENV, add_token, add_user, app_client, csrf_from, login, running_server
from tests.support.workers import WorkerProcess, wait_until

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
FAKED = FAKETIME_LIB.exists()
"""Whether web servers here can run with a clock that is off (libfaketime)."""


def clock_off(offset: str) -> dict[str, str]:
    """Environment that sets a process's clock ``offset`` (``+10m``) from the real one, if possible."""
    if not FAKED:
        return {}
    return {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


# --- the daylight-saving changes of a zone ------------------------------------------------------------


def changes(tz: str, year: int) -> list[tuple[datetime, timedelta]]:
    """``[(instant of the change, how far the clocks move)]`` in ``year``: positive forward, negative back."""
    zone = ZoneInfo(tz)
    out = []
    at = datetime(year, 1, 1, tzinfo=UTC)
    while at.year == year:
        later = at + timedelta(hours=6)
        before, after = at.astimezone(zone).utcoffset(), later.astimezone(zone).utcoffset()
        assert before is not None and after is not None
        if before != after:
            out.append((localtime.transition(at, later, zone), after - before))
        at = later
    return out


ZONES = ["America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe"]
CRONS = ["30 1 * * *", "30 2 * * *", "45 1 * * *", "0 2 * * *", "*/15 * * * *", "0 * * * *", "*/10 * * * *"]
YEAR = datetime.now(UTC).year + 1


def _fires(cron: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    out, at = [], start
    while True:
        at = cron_times.next_fire(cron, tz, at)
        if at >= end:
            return out
        out.append(at)


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("cron", CRONS)
def test_each_wall_clock_time_fires_once_across_both_changes(tz: str, cron: str) -> None:
    """Around each change (forward and back) of each zone: fire times strictly increase, no wall-clock
    time fires twice, every wall time of the cron that exists fires, and the cron's times the clocks
    skipped fire once, at the moment the clocks jump to."""
    zone = ZoneInfo(tz)
    found = changes(tz, YEAR)
    assert {d > timedelta(0) for _, d in found} == {True, False}, found
    for change, _shift in found:
        start, end = change - timedelta(hours=26), change + timedelta(hours=26)
        fires = _fires(cron, tz, start, end)
        assert fires == sorted(set(fires)), "fire times strictly increase"
        walls = [f.astimezone(zone).replace(tzinfo=None) for f in fires]
        assert len(walls) == len(set(walls)), f"a wall time fired twice: {walls}"
        expected = croniter(cron, start.astimezone(zone).replace(tzinfo=None))
        wanted, skipped = [], []
        while (w := expected.get_next(datetime)) < end.astimezone(zone).replace(tzinfo=None) - timedelta(
            hours=1
        ):
            (skipped if localtime.resolve(w, zone).skipped else wanted).append(w)
        assert set(wanted) <= set(walls), f"missing: {sorted(set(wanted) - set(walls))}"
        extra = [w for w in walls if w not in wanted and w < max(wanted)]
        if skipped:
            assert extra == [change.astimezone(zone).replace(tzinfo=None)] or (
                extra == [] and change.astimezone(zone).replace(tzinfo=None) in wanted
            ), f"skipped {skipped} should fire once at the jump, got extra {extra}"
        else:
            assert extra == [], extra


def inside(change: datetime, shift: timedelta, zone: ZoneInfo) -> datetime:
    """A naive wall time in the middle of the gap (clocks forward) or the repeated span (back)."""
    if shift > timedelta(0):
        return (
            (change - timedelta(seconds=1)).astimezone(zone).replace(tzinfo=None)
            + timedelta(seconds=1)
            + shift / 2
        )
    return change.astimezone(zone).replace(tzinfo=None) - shift / 2


@pytest.mark.parametrize("tz", ZONES)
def test_a_daily_schedule_fires_once_on_every_day_around_the_changes(tz: str) -> None:
    zone = ZoneInfo(tz)
    for change, shift in changes(tz, YEAR):
        wall = inside(change, shift, zone)
        cron = f"{wall.minute} {wall.hour} * * *"
        fires = _fires(cron, tz, change - timedelta(days=3), change + timedelta(days=3))
        days = [f.astimezone(zone).date() for f in fires]
        shown = (cron, [f.astimezone(zone).isoformat() for f in fires])
        assert days == [days[0] + timedelta(days=i) for i in range(len(days))], shown  # once a day, every day
        assert change.astimezone(zone).date() in days and len(days) >= 5, shown


def test_new_york_examples_from_the_report() -> None:
    """``30 1 * * *`` fires at 01:30 EDT on the fall-back day and not again at 01:30 EST; ``30 2 * * *``
    fires at 03:00 EDT on the spring-forward day; ``*/15`` never fires a wall time twice."""
    ny = ZoneInfo("America/New_York")
    (spring, _), (fall, _) = changes("America/New_York", YEAR)

    def local(fires: list[datetime]) -> list[str]:
        return [f.astimezone(ny).strftime("%H:%M %Z") for f in fires]

    day = fall - timedelta(hours=12)
    assert local(_fires("30 1 * * *", "America/New_York", day, day + timedelta(days=1))) == ["01:30 EDT"]
    day = spring - timedelta(hours=12)
    assert local(_fires("30 2 * * *", "America/New_York", day, day + timedelta(days=1))) == ["03:00 EDT"]
    hour = timedelta(minutes=61)
    around = local(_fires("*/15 * * * *", "America/New_York", fall - hour, fall + hour))
    assert around == ["01:00 EDT", "01:15 EDT", "01:30 EDT", "01:45 EDT", "02:00 EST"]
    # a sweep that runs during the second 01:xx (EST) does not fire those wall times again
    assert cron_times.next_fire(
        "*/15 * * * *", "America/New_York", fall + timedelta(minutes=10)
    ) == fall + timedelta(hours=1)


def test_catch_up_across_the_repeated_hour_fires_each_wall_time_once() -> None:
    (_, _), (fall, _) = changes("Europe/Berlin", YEAR)
    due = fall - timedelta(hours=2)
    times, nxt = controls.fire_times("*/30 * * * *", "Europe/Berlin", due, fall + timedelta(hours=2), True)
    walls = [t.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") for t in times]
    assert len(walls) == len(set(walls)) and nxt > fall + timedelta(hours=2)


# --- forms: local times that do not exist or happen twice ---------------------------------------------


def berlin_gap_and_repeat() -> tuple[datetime, datetime]:
    """Naive Berlin wall times next year: one the clocks skip, one that happens twice."""
    zone = ZoneInfo("Europe/Berlin")
    (spring, _), (fall, _) = changes("Europe/Berlin", YEAR)
    gap, repeat = inside(spring, timedelta(hours=1), zone), inside(fall, timedelta(hours=-1), zone)
    assert localtime.resolve(gap, zone).skipped and localtime.resolve(repeat, zone).repeated
    return gap, repeat


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    """``jobdesk serve`` with the test job types, its clock 10 minutes fast (when libfaketime is there)."""
    env = {
        **FORMS_ENV,
        **clock_off("+10m"),
    }
    with running_server(db_url, tmp_path / "data", **env) as base:
        yield base


@pytest.fixture
async def web(
    server: str, db_url: str, pg: asyncpg.Connection
) -> AsyncIterator[tuple[httpx.AsyncClient, str, Any]]:
    """An admin (time zone Europe/Berlin) signed in to ``server``: ``(client, CSRF token, user)``."""
    admin = await add_user(db_url, "root@example.com", admin=True)
    await pg.execute("UPDATE users SET timezone = 'Europe/Berlin' WHERE id = $1", admin.id)
    async with httpx.AsyncClient(base_url=server, timeout=20) as client:
        assert (await login(client, "root@example.com")).status_code == 303  # type: ignore[arg-type]
        token = csrf_from((await client.get("/jobs/new/test.form")).text)
        yield client, token, admin


async def test_forms_refuse_a_skipped_time_and_note_a_repeated_one(
    web: tuple[httpx.AsyncClient, str, Any], pg: asyncpg.Connection, engine: Any, settings: Any
) -> None:
    """``jobdesk serve``: "Run later", a datetime field and reschedule refuse a time the clocks skip
    (an error next to the field) and read a repeated time as the first, saying so on the next page."""
    gap, repeat = berlin_gap_and_repeat()
    client, token, admin = web
    if True:
        base = {"_csrf_token": token, "name": "Ann"}
        run_at = {
            "_run_at_tz": "Europe/Berlin",
            "_run_at_date": f"{gap:%Y-%m-%d}",
            "_run_at_time": f"{gap:%H:%M}",
        }
        r = await client.post("/jobs/new/test.form", data={**base, **run_at})
        assert (
            r.status_code == 422
            and f"{gap:%H:%M} does not exist on {gap:%Y-%m-%d} in Europe/Berlin" in r.text
        )
        assert 'id="run-at-error"' in r.text and "the clocks jump from 02:00 to 03:00 CEST" in r.text
        r = await client.post("/jobs/new/test.form", data={**base, "remind_at": f"{gap:%Y-%m-%dT%H:%M}"})
        assert r.status_code == 422 and 'id="e-remind_at"' in r.text and "does not exist" in r.text
        assert await pg.fetchval("SELECT count(*) FROM jobs") == 0

        run_at.update(_run_at_date=f"{repeat:%Y-%m-%d}", _run_at_time=f"{repeat:%H:%M}")
        r = await client.post(
            "/jobs/new/test.form", data={**base, **run_at, "remind_at": f"{repeat:%Y-%m-%dT%H:%M}"}
        )
        assert r.status_code == 303 and "done=" not in r.headers["location"]  # the note is a flash
        job = await pg.fetchrow("SELECT id, run_at, input_data FROM jobs")
        local_first = repeat.replace(tzinfo=ZoneInfo("Europe/Berlin"), fold=0)
        first = local_first.astimezone(UTC)  # (a repeated local time never compares equal across zones)
        assert job["run_at"] == first and local_first.utcoffset() == timedelta(hours=2)
        assert '"remind_at": "' + local_first.isoformat() + '"' in job["input_data"]
        page = (await client.get(r.headers["location"])).text
        assert (
            "happens twice in Europe/Berlin" in page and "the first was used: 02:30 CEST (UTC+02:00)" in page
        )

        later = await queue_job(engine, settings, admin.id, datetime(YEAR + 1, 1, 1, tzinfo=UTC))
        h = {"HX-Request": "true", "x-csrftoken": token}
        moved = {"date": f"{gap:%Y-%m-%d}", "time": f"{gap:%H:%M}", "tz": "Europe/Berlin"}
        r = await client.post(f"/jobs/{later}/reschedule", data=moved, headers=h)
        assert r.status_code == 422 and "does not exist" in r.text
        moved.update(date=f"{repeat:%Y-%m-%d}", time=f"{repeat:%H:%M}")
        r = await client.post(f"/jobs/{later}/reschedule", data=moved, headers=h)
        assert r.status_code == 200 and "happens twice" in r.text
        assert await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", later) == first


async def queue_job(
    engine: Any, settings: Any, user_id: int, run_at: datetime | None = None, **kw: Any
) -> Any:
    async with engine.begin() as conn:
        new = NewJob(
            type=kw.pop("type", "noop"), input_data=kw.pop("input_data", {}), user_id=user_id, run_at=run_at
        )
        return (await queue.enqueue(conn, new, settings)).job["id"]


# Case N13 (docs/cases.md).
async def test_a_past_run_at_is_refused_alike_by_form_and_api_on_the_database_clock(
    web: tuple[httpx.AsyncClient, str, Any], db_url: str, pg: asyncpg.Connection, engine: Any, settings: Any
) -> None:
    """More than a minute in the past (by the database's clock) is refused on the job form, the
    reschedule form and both JSON endpoints; a moment a little ahead is accepted even when the web
    host's own clock (10 minutes fast, with libfaketime) says it has passed."""
    client, token, admin = web
    berlin = ZoneInfo("Europe/Berlin")
    db_now = await pg.fetchval("SELECT now()")
    past, soon = (
        (db_now - timedelta(minutes=5)).astimezone(berlin),
        (db_now + timedelta(minutes=5)).astimezone(berlin),
    )

    def run_at(at: datetime) -> dict[str, str]:
        return {
            "_run_at_tz": "Europe/Berlin",
            "_run_at_date": f"{at:%Y-%m-%d}",
            "_run_at_time": f"{at:%H:%M}",
        }

    r = await client.post("/jobs/new/test.form", data={"_csrf_token": token, "name": "Ann", **run_at(past)})
    assert (
        r.status_code == 422 and "That moment has already passed" in r.text and 'id="run-at-error"' in r.text
    )
    bearer = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    r = await client.post("/api/jobs", json={"type": "noop", "run_at": past.isoformat()}, headers=bearer)
    assert r.status_code == 422 and "already passed" in r.json()["errors"]["run_at"]
    if FAKED:  # the web host's clock is 10 minutes fast: "soon" is past to it, not to the database
        r = await client.post(
            "/jobs/new/test.form", data={"_csrf_token": token, "name": "Ann", **run_at(soon)}
        )
        assert r.status_code == 303, r.text
    r = await client.post("/api/jobs", json={"type": "noop", "run_at": soon.isoformat()}, headers=bearer)
    assert r.status_code == 201, r.text

    later = await queue_job(engine, settings, admin.id, datetime(YEAR + 1, 1, 1, tzinfo=UTC))
    moved = {"date": f"{past:%Y-%m-%d}", "time": f"{past:%H:%M}", "tz": "Europe/Berlin"}
    r = await client.post(
        f"/jobs/{later}/reschedule", data=moved, headers={"HX-Request": "true", "x-csrftoken": token}
    )
    assert r.status_code == 422 and "already passed" in r.text
    r = await client.post(f"/api/jobs/{later}/reschedule", json={"run_at": past.isoformat()}, headers=bearer)
    assert r.status_code == 422 and "already passed" in r.json()["errors"]["run_at"]
    assert await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", later) == datetime(
        YEAR + 1, 1, 1, tzinfo=UTC
    )


# --- the database's clock -------------------------------------------------------------------------------


@pytest.mark.skipif(
    not FAKETIME_LIB.exists(), reason="libfaketime is not installed (apt-get install faketime)"
)
# Case N13 (docs/cases.md).
@pytest.mark.parametrize("offset", ["+10m", "-10m"])
async def test_a_new_schedules_first_fire_follows_the_database_clock_not_the_web_hosts(
    db_url: str, pg: asyncpg.Connection, tmp_path: Path, offset: str
) -> None:
    """``jobdesk serve`` with its clock 10 minutes fast or slow (libfaketime): a schedule made through
    the API (and one disabled and enabled again) fires next within the minute by the database's clock —
    not 630 s away, nor at once for a stale time."""
    admin = await add_user(db_url, "root@example.com", admin=True)
    bearer = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    with running_server(db_url, tmp_path / "data", **clock_off(offset)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            r = await client.post(
                "/api/schedules", json={"cron": "* * * * *", "type": "noop"}, headers=bearer
            )
            assert r.status_code == 201, r.text
    seconds = await pg.fetchval("SELECT extract(epoch FROM next_fire_at - updated_at) FROM schedules")
    assert 0 < seconds <= 60, f"first fire {seconds:.0f} s after the database's now when it was made"


@pytest.mark.skipif(not FAKED, reason="needs libfaketime (Debian's faketime, installed by .ci/run)")
@pytest.mark.parametrize("offset", ["-10m", "+10m"])
async def test_job_ids_and_the_per_minute_limit_follow_the_database_clock_not_the_web_hosts(
    make_settings: Any, db_url: str, pg: asyncpg.Connection, tmp_path: Path, offset: str
) -> None:
    """Two web hosts, one of them 10 minutes off (libfaketime): ids carry the database's time whichever
    host made the job, so jobs keep their order and each host counts the other's in the per-minute
    limit (a person alternating hosts had twice the limit)."""
    settings = make_settings(worker_enabled=False, user_max_jobs_per_minute=2)
    user = await add_user(db_url, "ann@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    call = {"type": "test.step", "input_data": {"label": "x"}}
    env = {**FORMS_ENV, **clock_off(offset), "USER_MAX_JOBS_PER_MINUTE": "2"}
    with running_server(db_url, tmp_path / "data", **env) as base:
        async with httpx.AsyncClient(base_url=base, timeout=20) as off, app_client(settings) as right:
            first = await off.post("/api/jobs", json=call, headers=bearer)
            second = await right.post("/api/jobs", json=call, headers=bearer)
            assert first.status_code == second.status_code == 201, (first.text, second.text)
            for host in (off, right):
                assert (await host.post("/api/jobs", json=call, headers=bearer)).status_code == 429
    rows = await pg.fetch("SELECT id, created_at FROM jobs ORDER BY id")
    assert [str(r["id"]) for r in rows] == [first.json()["id"], second.json()["id"]]
    for r in rows:
        made = datetime.fromtimestamp((r["id"].int >> 80) / 1000, UTC)
        assert abs(made - r["created_at"]) < timedelta(seconds=5), (made, r["created_at"])


def test_ids_made_on_a_corrected_clock_still_increase_and_carry_its_time() -> None:
    """An offset under a second is not corrected (the plain generator); over it, ids carry the database's
    time and still increase strictly, many in one millisecond included."""
    sent = time.time_ns()
    try:
        dbclock.observe(datetime.now(UTC) + timedelta(milliseconds=300), sent, sent)
        assert dbclock.offset_ns() == 0
        dbclock.observe(datetime.now(UTC) - timedelta(hours=1), sent, sent)
        assert abs(dbclock.offset_ns() + 3600 * 10**9) < 10**9
        ids = [dbclock.new_id() for _ in range(20_000)]
        assert ids == sorted(set(ids), key=lambda u: u.int)
        assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in ids)
        made = datetime.fromtimestamp((ids[-1].int >> 80) / 1000, UTC)
        assert abs(made - (datetime.now(UTC) - timedelta(hours=1))) < timedelta(seconds=2)
    finally:
        dbclock.observe(datetime.now(UTC), time.time_ns(), time.time_ns())
    assert dbclock.offset_ns() == 0


async def test_schedule_times_read_no_process_clock(
    engine: Any, settings: Any, pg: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same without libfaketime: the module's clock source set 10 minutes fast changes nothing."""

    class Fast(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(minutes=10)

    monkeypatch.setattr(schedules, "datetime", Fast)
    monkeypatch.setattr(cron_times, "datetime", Fast)
    admin = await make_user(pg, admin=True)
    async with engine.begin() as conn:
        row = await controls.create_schedule(
            conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings
        )
        await controls.set_schedule_enabled(conn, row["id"], False)
        await controls.set_schedule_enabled(conn, row["id"], True)
    seconds = await pg.fetchval("SELECT extract(epoch FROM next_fire_at - updated_at) FROM schedules")
    assert 0 < seconds <= 60


# --- a paused type's schedules ------------------------------------------------------------------------------


# Case N10 (docs/cases.md).
async def test_a_paused_types_schedule_keeps_one_waiting_job_and_resumes_without_a_burst(
    make_settings: Any, engine: Any, pg: asyncpg.Connection, tmp_path: Path
) -> None:
    """A real worker process fires an every-second schedule into a paused type for 4 s: one job waits
    (not one per second); after the resume it runs and the schedule goes on once per second."""
    settings = make_settings(worker_sweep_interval_secs=0.2)
    admin = await make_user(pg, admin=True)
    async with engine.begin() as conn:
        await controls.set_paused(conn, "noop", True, admin)
        row = await controls.create_schedule(
            conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings
        )
    await fire_by_seconds(pg, row["id"], "* * * * * *")
    proc = WorkerProcess(settings, tmp_path / "worker.log")
    try:
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) > 0 FROM jobs"), timeout=45, what="a first fire"
        )
        await asyncio.sleep(4)
        assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'") == 1
        advanced = await pg.fetchval("SELECT next_fire_at > now() - interval '2 seconds' FROM schedules")
        assert advanced, "the due times passed (skipped), not piled up"
        async with engine.begin() as conn:
            await controls.set_paused(conn, "noop", False, admin)
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) >= 3 FROM jobs WHERE status = 'completed'"),
            timeout=45,
            what="runs",
        )
    finally:
        proc.close()
    starts = await pg.fetch("SELECT started_at FROM jobs WHERE started_at IS NOT NULL ORDER BY started_at")
    burst = sum(1 for s in starts if s["started_at"] - starts[0]["started_at"] < timedelta(milliseconds=500))
    assert burst <= 2, f"{burst} jobs started within half a second of the resume"
    assert row["id"] is not None


# Case N10 (docs/cases.md).
async def test_a_catch_up_into_a_paused_type_adds_one_job(
    engine: Any, settings: Any, pg: asyncpg.Connection
) -> None:
    admin = await make_user(pg, admin=True)
    async with engine.begin() as conn:
        await controls.set_paused(conn, "*", True, admin)
        await controls.create_schedule(
            conn, cron="* * * * *", job_type="noop", owner=admin, settings=settings, catch_up=True
        )
    await pg.execute("UPDATE schedules SET next_fire_at = now() - interval '10 minutes'")
    for _ in range(2):
        async with engine.begin() as conn:
            await controls.fire_due(conn, settings)
        await pg.execute("UPDATE schedules SET next_fire_at = now() - interval '3 minutes'")
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


# --- retention keeps files that can still be used -----------------------------------------------------------


async def test_retention_keeps_files_a_waiting_job_a_recent_job_or_a_schedule_names(
    settings: Any, engine: Any, pg: asyncpg.Connection, tmp_path: Path
) -> None:
    """A real worker's retention pass, with every upload 40 days old (retention: 30): the one nothing
    names is deleted; those named by a waiting job, by a job finished today ("Run again") and by a
    schedule's input stay, with their bytes — even after the old job they were attached to is pruned."""
    user = await make_user(pg)
    store = FileStore(settings.files_dir)
    async with engine.begin() as conn:
        ids = [
            str((await store.save(conn, user_id=user.id, name=f"f{i}.txt", data=b"x"))["id"])
            for i in range(4)
        ]
    waiting_for, recent, scheduled, unused = ids
    old = await queue_job(
        engine,
        settings,
        user.id,
        type="test.form",
        input_data={"name": "a", "document": waiting_for, "attachments": [recent]},
    )
    waiting = await queue_job(
        engine,
        settings,
        user.id,
        datetime(YEAR + 1, 1, 1, tzinfo=UTC),
        type="test.form",
        input_data={"name": "b", "document": waiting_for},
    )
    today = await queue_job(
        engine, settings, user.id, type="test.form", input_data={"name": "c", "attachments": [recent]}
    )
    async with engine.begin() as conn:
        await controls.create_schedule(
            conn,
            cron="0 0 1 1 *",
            job_type="test.form",
            input_data={"name": "d", "document": scheduled},
            owner=user,
            settings=settings,
        )
    await pg.execute(
        "UPDATE jobs SET status = 'completed', completed_at = now() - interval '40 days' WHERE id = $1", old
    )
    await pg.execute("UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1", today)
    await pg.execute("UPDATE files SET created_at = now() - interval '40 days'")
    assert await pg.fetchval("SELECT count(*) FROM files WHERE job_id = $1", old) == 2
    proc = WorkerProcess(settings, tmp_path / "worker.log", JOBDESK_PROCESSOR_MODULES="tests.support.forms")
    try:
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 0 FROM files WHERE id = $1", unused),
            timeout=45,
            what="retention",
        )
    finally:
        proc.close()
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE id = $1", old) == 0, "the old job was pruned"
    kept = {str(r["id"]) for r in await pg.fetch("SELECT id FROM files")}
    assert kept == {waiting_for, recent, scheduled}
    assert all(store.path(i).exists() for i in kept) and not store.path(unused).exists()
    holders = {str(r["id"]): r["job_id"] for r in await pg.fetch("SELECT id, job_id FROM files")}
    assert holders == {waiting_for: waiting, recent: today, scheduled: None}, (
        "taken over by the jobs that name them"
    )
