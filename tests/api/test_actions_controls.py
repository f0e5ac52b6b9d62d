"""One core for the operator controls and for who may start what.

* Pause, resume, limits and the schedule changes (create, enable, disable, delete) leave exactly one
  audit entry and one admin notice whether an admin makes them on a page or through the JSON API, and
  the notice names what was acted on.
* Pausing a paused type, resuming one that is not paused and setting the limits a type has are a 409
  that writes nothing, audited as refused.
* A diagnostic job type is refused to a non-admin on every path: the form, ``POST /api/jobs``, an
  ad-hoc pipeline step, a schedule (made for them by an admin, or re-checked at firing time once they
  lost their admin rights), and a processor's next jobs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, a public type)
from app import schedule_firing
from app.actions import schedules as schedule_actions
from app.alerts.messages import describe
from app.auth import CurrentUser
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob, Outcome
from app.jobs.types import NextJob
from app.settings import Settings
from tests.admin.test_admin_console_actions import SCHEDULE as SCHEDULE_FORM
from tests.support.webkit import add_token, add_user, csrf_from, login


@pytest.fixture
async def root(client: AsyncTestClient, db_url: str) -> CurrentUser:
    user = await add_user(db_url, "root@example.com", admin=True)
    assert (await login(client, "root@example.com")).status_code == 303
    return user


@pytest.fixture
async def root_api(root: CurrentUser, db_url: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}


NOOP_SCHEDULE_FORM = {**{k: v for k, v in SCHEDULE_FORM.items() if k != "name"}, "_target": "type:noop"}
"""The schedule form for ``noop``, which has no input fields (``name`` is test.form's)."""


async def post(client: AsyncTestClient, path: str, data: dict[str, Any] | None = None) -> Any:
    form = dict(data or {})
    form.setdefault("_csrf_token", csrf_from((await client.get("/admin/users")).text))
    return await client.post(path, data=form, follow_redirects=False)


async def counts(pg: asyncpg.Connection) -> tuple[int, int]:
    audits = await pg.fetchval("SELECT count(*) FROM audit_log")
    notices = await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'")
    return audits, notices


async def last_notice(pg: asyncpg.Connection) -> dict[str, Any]:
    raw = await pg.fetchval(
        "SELECT payload FROM alert_outbox WHERE kind = 'admin_action' ORDER BY id DESC LIMIT 1"
    )
    payload: dict[str, Any] = json.loads(raw)
    return payload


Step = tuple[str, Callable[[], Awaitable[Any]], str, str]
"""(name, the request, the audit action, the target type)."""


# --- one audit entry and one notice, from the page and from the API ---------------------------------------


def page_steps(client: AsyncTestClient, pg: asyncpg.Connection) -> list[Step]:
    async def schedule_id() -> Any:
        return await pg.fetchval("SELECT id FROM schedules WHERE name = 'Nightly'")

    async def on_schedule(verb: str) -> Any:
        return await post(client, f"/admin/schedules/{await schedule_id()}/{verb}")

    return [
        (
            "pause",
            lambda: post(client, "/admin/controls/pause", {"type": "test.form"}),
            "job_type.pause",
            "job_type",
        ),
        (
            "resume",
            lambda: post(client, "/admin/controls/resume", {"type": "test.form"}),
            "job_type.resume",
            "job_type",
        ),
        (
            "limits",
            lambda: post(
                client,
                "/admin/controls/limits",
                {"type": "test.form", "max_running": "2", "max_per_minute": ""},
            ),
            "job_type.limits",
            "job_type",
        ),
        (
            "create",
            lambda: post(client, "/admin/schedules/new", SCHEDULE_FORM),
            "schedule.create",
            "schedule",
        ),
        ("disable", lambda: on_schedule("disable"), "schedule.disable", "schedule"),
        ("enable", lambda: on_schedule("enable"), "schedule.enable", "schedule"),
        ("delete", lambda: on_schedule("delete"), "schedule.delete", "schedule"),
    ]


def api_steps(client: AsyncTestClient, pg: asyncpg.Connection, h: dict[str, str]) -> list[Step]:
    async def schedule_id() -> Any:
        return await pg.fetchval("SELECT id FROM schedules WHERE name = 'Hourly'")

    async def on_schedule(verb: str) -> Any:
        return await client.post(f"/api/schedules/{await schedule_id()}/{verb}", headers=h)

    async def delete() -> Any:
        return await client.delete(f"/api/schedules/{await schedule_id()}", headers=h)

    body = {"cron": "0 * * * *", "type": "test.form", "input_data": {"name": "Ann"}, "name": "Hourly"}
    return [
        (
            "pause",
            lambda: client.post("/api/job-types/test.form/pause", headers=h),
            "job_type.pause",
            "job_type",
        ),
        (
            "resume",
            lambda: client.post("/api/job-types/test.form/resume", headers=h),
            "job_type.resume",
            "job_type",
        ),
        (
            "limits",
            lambda: client.put("/api/job-types/test.form/limits", json={"max_running": 3}, headers=h),
            "job_type.limits",
            "job_type",
        ),
        (
            "create",
            lambda: client.post("/api/schedules", json=body, headers=h),
            "schedule.create",
            "schedule",
        ),
        ("disable", lambda: on_schedule("disable"), "schedule.disable", "schedule"),
        ("enable", lambda: on_schedule("enable"), "schedule.enable", "schedule"),
        ("delete", delete, "schedule.delete", "schedule"),
    ]


async def test_each_control_and_schedule_change_is_audited_and_announced_once_from_a_page_and_the_api(
    client: AsyncTestClient, root: CurrentUser, root_api: dict[str, str], pg: asyncpg.Connection
) -> None:
    for via, steps in (("page", page_steps(client, pg)), ("api", api_steps(client, pg, root_api))):
        for name, call, action, target_type in steps:
            before = await counts(pg)
            r = await call()
            assert r.status_code in (200, 201, 204, 303), (via, name, r.status_code, r.text[:300])
            assert await counts(pg) == (before[0] + 1, before[1] + 1), (via, name)
            entry = await pg.fetchrow(
                "SELECT action, target_type, user_id, outcome FROM audit_log ORDER BY id DESC LIMIT 1"
            )
            assert dict(entry) == {
                "action": action,
                "target_type": target_type,
                "user_id": root.id,
                "outcome": "ok",
            }
            notice = await last_notice(pg)
            assert (notice["action"], notice["target_type"], notice["admin"]) == (
                action,
                target_type,
                root.email,
            )
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0


async def test_an_admin_notice_names_the_kind_of_target_and_the_target(
    client: AsyncTestClient, root: CurrentUser, root_api: dict[str, str], db_url: str, pg: asyncpg.Connection
) -> None:
    def text_of(payload: dict[str, Any]) -> tuple[str, dict[str, str]]:
        message = describe("admin_action", payload, created_at=None, owner_email=None, base_url="http://x")
        return message.headline, {f.label: f.value for f in message.facts}

    assert (await client.post("/api/job-types/test.form/pause", headers=root_api)).status_code == 200
    headline, facts = text_of(await last_notice(pg))
    assert headline == "Admin action: job type test.form paused"
    assert facts["Job type"] == "test.form"
    assert (await client.post("/api/job-types/*/pause", headers=root_api)).status_code == 200
    assert text_of(await last_notice(pg))[0] == "Admin action: every job type paused"
    await client.put("/api/job-types/test.form/limits", json={"max_per_minute": 5}, headers=root_api)
    assert text_of(await last_notice(pg))[0] == "Admin action: limits of job type test.form changed"
    assert (await post(client, "/admin/schedules/new", SCHEDULE_FORM)).status_code == 303
    headline, facts = text_of(await last_notice(pg))
    sid = await pg.fetchval("SELECT id FROM schedules")
    assert headline == "Admin action: schedule created"
    assert facts["Schedule"] == f"Nightly ({sid})"
    bob = await add_user(db_url, "bob@example.com")
    assert (await post(client, f"/admin/users/{bob.id}/make-admin")).status_code in (200, 303)
    headline, facts = text_of(await last_notice(pg))
    assert headline == "Admin action: admin rights granted to a user"
    assert facts["User"] == f"bob@example.com ({bob.id})"
    # an action on jobs still counts its jobs
    legacy = {
        "admin": "root@example.com",
        "action": "jobs.bulk_cancel",
        "count": 3,
        "job_ids": ["a", "b", "c"],
    }
    assert text_of(legacy)[0] == "Admin action: 3 jobs cancelled"


async def refused(pg: asyncpg.Connection) -> list[tuple[str, str]]:
    rows = await pg.fetch("SELECT action, outcome FROM audit_log WHERE outcome LIKE 'refused:%' ORDER BY id")
    return [(r["action"], r["outcome"]) for r in rows]


async def test_resuming_a_type_that_is_not_paused_answers_409_and_is_audited_as_refused(
    client: AsyncTestClient, root: CurrentUser, root_api: dict[str, str], pg: asyncpg.Connection
) -> None:
    before = await counts(pg)
    page = await post(client, "/admin/controls/resume", {"type": "test.form"})
    assert page.status_code == 409
    assert "test.form is not paused" in page.text
    api = await client.post("/api/job-types/test.form/resume", headers=root_api)
    assert api.status_code == 409
    assert "not paused" in api.json()["detail"]
    every = await client.post("/api/job-types/*/resume", headers=root_api)
    assert every.status_code == 409
    # not "every job type is not paused", which reads as if some were
    assert every.json()["detail"] == "Nothing changed: job types are not paused all at once (*)."
    # three refusals on record, no notice, nothing written
    assert await counts(pg) == (before[0] + 3, before[1])
    assert [a for a, _ in await refused(pg)] == ["job_type.resume"] * 3
    assert await pg.fetchval("SELECT count(*) FROM job_type_controls") == 0
    # a type held only by the pause of every type: resuming it alone would change nothing either
    assert (await client.post("/api/job-types/*/pause", headers=root_api)).status_code == 200
    held = await client.post("/api/job-types/test.form/resume", headers=root_api)
    assert held.status_code == 409
    assert "every job type is paused" in held.json()["detail"]
    assert (await client.post("/api/job-types/*/resume", headers=root_api)).status_code == 200
    assert await counts(pg) == (before[0] + 6, before[1] + 2)


async def test_pausing_a_paused_type_or_setting_the_same_limits_changes_nothing_as_resuming_does(
    client: AsyncTestClient, root: CurrentUser, root_api: dict[str, str], pg: asyncpg.Connection
) -> None:
    """Pausing a paused type answered 200, wrote who paused it and when again and left a second "Paused a
    job type" entry, while resuming a running type was a 409 "Nothing changed"."""
    for path in ("/api/job-types/test.form/pause", "/api/job-types/*/pause"):
        assert (await client.post(path, headers=root_api)).status_code == 200
    await pg.execute("UPDATE job_type_controls SET paused_at = paused_at - interval '1 hour'")
    stamped = await pg.fetch(
        "SELECT type, paused_by, paused_at, updated_at FROM job_type_controls ORDER BY type"
    )
    before = await counts(pg)
    for label, path in (
        ("test.form", "/api/job-types/test.form/pause"),
        ("every job type", "/api/job-types/*/pause"),
    ):
        again = await client.post(path, headers=root_api)
        assert again.status_code == 409, again.text
        assert again.json()["detail"] == f"Nothing changed: {label} is already paused."
    page = await post(client, "/admin/controls/pause", {"type": "test.form"})
    assert page.status_code == 409 and "test.form is already paused" in page.text, page.text
    assert (
        await pg.fetch("SELECT type, paused_by, paused_at, updated_at FROM job_type_controls ORDER BY type")
        == stamped
    )
    # limits: the same values again (and no limits for a type that has none) change nothing
    assert (
        await client.put("/api/job-types/test.form/limits", json={"max_running": 2}, headers=root_api)
    ).status_code == 200
    after_limits = (await counts(pg))[0]
    same = await client.put("/api/job-types/test.form/limits", json={"max_running": 2}, headers=root_api)
    assert same.status_code == 409, same.text
    assert same.json()["detail"].startswith("Nothing changed"), same.text
    none = await client.put("/api/job-types/sleep/limits", json={}, headers=root_api)
    assert none.status_code == 409, none.text
    form = {"type": "test.form", "max_running": "2", "max_per_minute": ""}
    page = await post(client, "/admin/controls/limits", form)
    assert page.status_code == 409 and "Nothing changed" in page.text, page.text
    assert await pg.fetchval("SELECT count(*) FROM job_type_controls WHERE type = 'sleep'") == 0
    assert [a for a, _ in await refused(pg)] == ["job_type.pause"] * 3 + ["job_type.limits"] * 3
    assert await counts(pg) == (after_limits + 3, before[1] + 1)


# --- a non-admin's diagnostic type, on every path ---------------------------------------------------------


async def test_a_non_admin_may_not_start_a_diagnostic_type_by_form_api_or_ad_hoc_pipeline(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    h = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    assert (await login(client, "bob@example.com")).status_code == 303
    assert (await client.get("/jobs/new/noop")).status_code == 404
    assert 'href="/jobs/new/noop"' not in (await client.get("/")).text
    api = await client.post("/api/jobs", json={"type": "noop"}, headers=h)
    assert api.status_code == 422
    assert "only admins" in api.json()["errors"]["type"]
    steps = {"name": "x", "steps": [{"key": "a", "type": "noop"}]}
    pipeline = await client.post("/api/pipelines", json=steps, headers=h)
    assert pipeline.status_code == 422
    assert "only admins" in json.dumps(pipeline.json()["errors"])
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_schedule_of_a_diagnostic_type_is_refused_for_a_non_admin_owner_on_the_page_and_the_api(
    client: AsyncTestClient, root: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    form = {**NOOP_SCHEDULE_FORM, "_owner": "bob@example.com"}
    r = await post(client, "/admin/schedules/new", form)
    assert r.status_code == 422
    assert "only admins may start" in r.text
    assert 'id="e-_target"' in r.text
    assert (await post(client, "/admin/schedules/new", {**form, "_owner": root.email})).status_code == 303
    h = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    api = await client.post("/api/schedules", json={"cron": "* * * * *", "type": "noop"}, headers=h)
    assert api.status_code == 403
    assert [r["user_id"] for r in await pg.fetch("SELECT user_id FROM schedules")] == [root.id]


async def test_a_schedule_refused_for_its_owners_access_is_audited(
    client: AsyncTestClient,
    root: CurrentUser,
    db_url: str,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    """A schedule whose owner may not start its target was refused before the audited block began, so
    it left no entry, while the refusals the change itself meets (an owner whose account is disabled)
    did. A form to correct (a bad cron alone) is still not a refusal. (The API makes schedules of the
    caller, an admin, so only the page and the action itself can name such an owner.)"""
    await add_user(db_url, "bob@example.com")
    form = {**NOOP_SCHEDULE_FORM, "_owner": "bob@example.com"}
    r = await post(client, "/admin/schedules/new", form)
    assert r.status_code == 422 and "only admins may start" in r.text, r.text[-800:]

    async def create(cron: str, owner: str) -> BadInput:
        with pytest.raises(BadInput) as refused:
            async with engine.connect() as conn:
                try:
                    await schedule_actions.create_schedule(
                        conn, root, cron=cron, job_type="noop", owner_email=owner, settings=ui_settings
                    )
                finally:
                    await conn.commit()  # what the action wrote, its audit entry, is kept
        return refused.value

    assert set((await create("* * * * *", "bob@example.com")).errors) == {"type"}
    assert set((await create("nope", "bob@example.com")).errors) == {"cron", "type"}
    rows = await pg.fetch("SELECT action, count, outcome FROM audit_log ORDER BY id")
    assert [(e["action"], e["count"]) for e in rows] == [("schedule.create", 0)] * 3, rows
    assert all(e["outcome"].startswith("refused: ") for e in rows), rows
    assert all("only admins may start 'noop'" in e["outcome"] for e in rows), rows
    assert set((await create("nope", root.email)).errors) == {"cron"}
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == 4  # a bad cron alone is a refusal too
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0


async def test_a_schedule_whose_owner_lost_admin_rights_is_disabled_at_firing_with_the_reason(
    engine: AsyncEngine, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    root = await add_user(db_url, "root@example.com", admin=True)
    carol = await add_user(db_url, "carol@example.com", admin=True)
    async with engine.begin() as conn:
        row = await schedule_actions.create_schedule(
            conn, root, cron="* * * * *", job_type="noop", owner_email=carol.email, settings=ui_settings
        )
    await pg.execute("UPDATE users SET is_admin = false WHERE id = $1", carol.id)
    await pg.execute("UPDATE schedules SET next_fire_at = now() - interval '1 minute'")
    async with engine.begin() as conn:
        assert await schedule_firing.fire_due(conn, ui_settings) == []
    state = await pg.fetchrow("SELECT enabled, next_fire_at FROM schedules WHERE id = $1", row["id"])
    assert dict(state) == {"enabled": False, "next_fire_at": None}
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    notice = await last_notice(pg)
    assert (notice["admin"], notice["action"], notice["targets"]) == (
        "system",
        "schedule.disable",
        [str(row["id"])],
    )
    assert notice["outcome"].startswith("its owner may no longer start it: only admins may start 'noop'")
    # an admin owner's schedule of the same type fires
    await pg.execute("UPDATE users SET is_admin = true WHERE id = $1", carol.id)
    await pg.execute("UPDATE schedules SET enabled = true, next_fire_at = now() - interval '1 minute'")
    async with engine.begin() as conn:
        assert len(await schedule_firing.fire_due(conn, ui_settings)) == 1


async def completed_with_next(engine: AsyncEngine, settings: Settings, owner_id: int, next_type: str) -> Any:
    """A public ``test.form`` job of ``owner_id`` whose processor returned a next job of ``next_type``."""
    async with engine.begin() as conn:
        job = (
            await queue.enqueue(
                conn, NewJob(type="test.form", input_data={"name": "Ann"}, user_id=owner_id), settings
            )
        ).job
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.claim(conn, "w1", 1, 60)] == [job["id"]]
    outcome = Outcome(job["id"], "completed", result="{}", next_jobs=[NextJob(type=next_type)])
    async with engine.begin() as conn:
        await queue.finish(conn, "w1", [outcome], settings)
    return job["id"]


async def test_a_public_processor_may_not_create_a_diagnostic_next_job_for_a_non_admin(
    engine: AsyncEngine, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await add_user(db_url, "bob@example.com")
    with pytest.raises(BadInput) as refused:
        await completed_with_next(engine, ui_settings, bob.id, "noop")
    assert "next_jobs[0].type" in refused.value.errors
    assert "only admins may start 'noop'" in refused.value.errors["next_jobs[0].type"]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE type = 'noop'") == 0
    await pg.execute("DELETE FROM jobs")
    root = await add_user(db_url, "root@example.com", admin=True)
    await completed_with_next(engine, ui_settings, root.id, "noop")
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE type = 'noop'") == 1
