"""Creating and editing a schedule: the job type's or pipeline template's own generated form (files
included), every error at once next to its field with what was typed kept, the next five fire times
across a daylight-saving change, and the same audited actions behind the pages and ``/api/schedules``."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, …)
from app import controls
from app import cron as cron_times
from app.actions import schedules as schedule_actions
from app.auth import CurrentUser
from app.errors import BadInput
from app.settings import Settings
from tests.admin.test_admin import post
from tests.support.webkit import add_token


def test_the_next_five_fire_times_follow_a_daylight_saving_change() -> None:
    # Berlin springs forward on 28 March 2027 at 02:00 → 03:00: 02:30 does not happen that day, and the
    # daily run comes at the moment the clocks jump to (03:00 CEST = 01:00 UTC), once
    times = cron_times.upcoming("30 2 * * *", "Europe/Berlin", datetime(2027, 3, 26, 12, 0, tzinfo=UTC), 5)
    assert [t.isoformat() for t in times] == [
        "2027-03-27T01:30:00+00:00",
        "2027-03-28T01:00:00+00:00",
        "2027-03-29T00:30:00+00:00",
        "2027-03-30T00:30:00+00:00",
        "2027-03-31T00:30:00+00:00",
    ]


@pytest.mark.parametrize(("given", "stored"), [("@daily", "0 0 * * *"), ("@Hourly", "0 * * * *")])
async def test_a_crontab_shorthand_is_stored_as_its_five_fields_and_reboot_is_refused(
    admin: CurrentUser, engine: AsyncEngine, ui_settings: Settings, given: str, stored: str
) -> None:
    """``@daily`` and its kind mean what they mean in a crontab (they were refused as "five fields");
    ``@reboot`` names no time and is refused with the shorthands there are."""
    async with engine.begin() as conn:
        row = await schedule_actions.create_schedule(
            conn,
            admin,
            cron=given,
            timezone="UTC",
            job_type="test.form",
            input_data={"name": "Ann"},
            settings=ui_settings,
        )
        assert row["cron"] == stored
        with pytest.raises(BadInput) as refused:
            await schedule_actions.create_schedule(
                conn,
                admin,
                cron="@reboot",
                timezone="UTC",
                job_type="test.form",
                input_data={"name": "Ann"},
                settings=ui_settings,
            )
    assert "@daily" in (refused.value.errors or {})["cron"]


async def _schedule(engine: AsyncEngine, admin: CurrentUser, settings: Settings) -> str:
    async with engine.begin() as conn:
        row = await schedule_actions.create_schedule(
            conn,
            admin,
            cron="0 9 * * *",
            timezone="Europe/Berlin",
            job_type="test.form",
            input_data={"name": "Ann"},
            name="Morning hello",
            settings=settings,
        )
    return str(row["id"])


async def test_edit_form_is_the_types_form_and_keeps_typed_values_with_every_error(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    sid = await _schedule(engine, admin, ui_settings)
    page = (await client.get(f"/admin/schedules/{sid}/edit")).text
    assert 'id="f-name"' in page and 'value="Ann"' in page  # the generated form, filled in
    assert 'id="s-input_json"' not in page  # not raw JSON
    assert page.count("<li>", page.index('id="fire-times"')) >= 5

    bad = {"_cron": "61 * * * *", "_timezone": "Mars/Olympus", "name": "x" * 60, "_enabled": "on"}
    r = await post(client, f"/admin/schedules/{sid}/edit", bad)
    assert r.status_code == 422
    for fid in ("e-_cron", "e-_timezone", "e-name"):  # all three at once, next to their fields
        assert f'id="{fid}"' in r.text, fid
    assert 'value="61 * * * *"' in r.text and 'value="Mars/Olympus"' in r.text and "x" * 60 in r.text
    assert await pg.fetchval("SELECT cron FROM schedules WHERE id = $1::uuid", sid) == "0 9 * * *"

    good = {"_cron": "30 2 * * *", "_timezone": "Europe/Berlin", "name": "Bea"}  # enabled unticked
    r = await post(client, f"/admin/schedules/{sid}/edit", good)
    assert r.status_code == 303, r.text
    row = await pg.fetchrow(
        "SELECT cron, enabled, input_data, next_fire_at FROM schedules WHERE id = $1::uuid", sid
    )
    assert (row["cron"], row["enabled"], row["next_fire_at"]) == ("30 2 * * *", False, None)
    assert '"name": "Bea"' in row["input_data"]
    entry = await pg.fetchrow(
        "SELECT action, detail FROM audit_log WHERE action = 'schedule.update' AND outcome = 'ok'"
    )
    assert entry is not None and "cron" in entry["detail"] and "enabled" in entry["detail"]


async def test_patch_api_goes_through_the_same_action(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    sid = await _schedule(engine, admin, ui_settings)
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    r = await client.patch(
        f"/api/schedules/{sid}", json={"cron": "bad", "timezone": "Nowhere/Zone"}, headers=headers
    )
    assert r.status_code == 422 and {"cron", "timezone"} <= set(r.json()["errors"]), r.text
    r = await client.patch(f"/api/schedules/{sid}", json={"cron": "*/5 * * * *"}, headers=headers)
    assert (
        r.status_code == 200 and r.json()["cron"] == "*/5 * * * *" and r.json()["timezone"] == "Europe/Berlin"
    )
    outcomes = [
        r["outcome"] for r in await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'schedule.update'")
    ]
    assert [o.split(":")[0] for o in outcomes] == ["refused", "ok"], outcomes


async def test_a_zone_file_that_is_no_place_is_refused_for_a_schedule_on_the_api_and_the_page(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    """``localtime`` is the zone of whichever host fires the schedule; ``right/UTC`` fires 27 seconds
    early; neither is offered by the zone picker, and the account page refuses them already."""
    sid = await _schedule(engine, admin, ui_settings)
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    for name in ("localtime", "right/UTC", "posix/Europe/Berlin", "Factory"):
        created = await client.post(
            "/api/schedules", json={"cron": "0 9 * * *", "type": "noop", "timezone": name}, headers=headers
        )
        assert created.status_code == 422 and "timezone" in created.json()["errors"], (name, created.text)
        changed = await client.patch(f"/api/schedules/{sid}", json={"timezone": name}, headers=headers)
        assert changed.status_code == 422 and "timezone" in changed.json()["errors"], (name, changed.text)
        page = await post(client, f"/admin/schedules/{sid}/edit", {"_cron": "0 9 * * *", "_timezone": name})
        assert page.status_code == 422 and 'id="e-_timezone"' in page.text, name
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 1
    assert await pg.fetchval("SELECT timezone FROM schedules") == "Europe/Berlin"


@pytest.mark.parametrize("cron", ["* * * * * *", "0 */10 * * * *", "* * * *"])
async def test_a_cron_expression_has_five_fields_on_every_path(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    db_url: str,
    pg: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
    cron: str,
) -> None:
    """croniter reads a sixth field as seconds: ``* * * * * *`` was saved and fired every few seconds,
    while the README documents five fields. The API, the page, its preview and a schedule defined in
    code now all refuse anything but five, saying how many fields it has."""
    count = len(cron.split())
    said = f"a cron expression has five fields: minute hour day month weekday, e.g. '*/15 * * * *'; this one has {count}"
    sid = await _schedule(engine, admin, ui_settings)
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    created = await client.post("/api/schedules", json={"cron": cron, "type": "noop"}, headers=headers)
    assert created.status_code == 422 and created.json()["errors"]["cron"].startswith(said), created.text
    changed = await client.patch(f"/api/schedules/{sid}", json={"cron": cron}, headers=headers)
    assert changed.status_code == 422 and changed.json()["errors"]["cron"].startswith(said), changed.text
    page = await post(client, f"/admin/schedules/{sid}/edit", {"_cron": cron, "_timezone": "UTC"})
    assert page.status_code == 422 and 'id="e-_cron"' in page.text and said in html.unescape(page.text)
    preview = await client.get("/admin/schedules/preview", params={"_cron": cron, "_timezone": "UTC"})
    assert said in html.unescape(preview.text)
    monkeypatch.setitem(
        controls.CODE_SCHEDULES,
        "too often",
        controls.ScheduleSpec(name="too often", cron=cron, owner_email=admin.email, job_type="noop"),
    )
    # A code schedule is refused by name (the worker starts all the same), its cron's problem told.
    async with engine.begin() as conn:
        assert await controls.sync_code_schedules(conn, ui_settings) == 0
    told = await pg.fetchval(
        "SELECT payload->>'outcome' FROM alert_outbox"
        " WHERE kind = 'admin_action' AND payload->>'action' = 'schedule.invalid' ORDER BY id DESC LIMIT 1"
    )
    assert f"cron: {said}" in told, told
    assert await pg.fetchval("SELECT cron FROM schedules") == "0 9 * * *"
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 1


# --- creating: the target's own form ----------------------------------------------------------------------


async def test_create_picks_a_target_then_shows_its_own_form(
    client: AsyncTestClient, admin: CurrentUser
) -> None:
    page = (await client.get("/admin/schedules")).text
    assert (
        'id="pick-target"' in page
        and 'value="type:test.form"' in page
        and 'value="template:test.steps"' in page
    )
    assert "input_data" not in page  # no JSON box left
    page = (await client.get("/admin/schedules/new?target=type:test.form")).text
    assert 'id="f-name"' in page and 'id="f-document"' in page and 'type="file"' in page  # the type's form
    assert 'id="s-cron"' in page and 'id="s-timezone-zones"' in page  # the shared zone picker
    assert 'name="_target" value="type:test.form"' in page
    for target in ("type:no.such", "template:" + "x" * 5000, "nonsense", "type:"):
        r = await client.get("/admin/schedules/new", params={"target": target})
        assert r.status_code == 404 and 'id="e-_target"' in r.text, target


async def test_create_shows_every_error_at_once_with_typed_values_kept_then_creates(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    bad = {
        "_target": "type:test.form",
        "_name": "Nightly",
        "_cron": "61 * * * *",
        "_timezone": "Mars/Olympus",
        "_owner": "ghost@example.com",
        "_enabled": "on",
        "name": "x" * 60,
        "copies": "many",
        "scale": "2.5",
    }
    r = await post(client, "/admin/schedules/new", bad)
    assert r.status_code == 422, r.text[:2000]
    for fid in ("e-_cron", "e-_timezone", "e-_owner", "e-name", "e-copies"):
        assert f'id="{fid}"' in r.text, fid
    assert "Please fix these 5 problems" in r.text
    for kept in (
        'value="61 * * * *"',
        'value="Mars/Olympus"',
        'value="ghost@example.com"',
        "x" * 60,
        'value="many"',
    ):
        assert kept in r.text, kept
    assert 'value="Nightly"' in r.text and 'value="2.5"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    # one refused create, naming the problems
    outcomes = [
        r["outcome"] for r in await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'schedule.create'")
    ]
    assert len(outcomes) == 1 and outcomes[0].startswith("refused: "), outcomes

    good = {
        **bad,
        "_cron": "0 9 * * 1-5",
        "_timezone": "Europe/Berlin",
        "_owner": "",
        "name": "Ann",
        "copies": "3",
    }
    # an input the form cannot read while the action would accept its default: still nothing is made
    r = await post(client, "/admin/schedules/new", {**good, "copies": "many"})
    assert r.status_code == 422 and 'id="e-copies"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    r = await post(client, "/admin/schedules/new", good)
    assert r.status_code == 303, r.text[:2000]
    row = await pg.fetchrow(
        "SELECT name, cron, timezone, job_type, input_data, user_id, enabled FROM schedules"
    )
    assert (row["name"], row["cron"], row["timezone"], row["job_type"]) == (
        "Nightly",
        "0 9 * * 1-5",
        "Europe/Berlin",
        "test.form",
    )
    assert row["user_id"] == admin.id and row["enabled"]
    assert '"name": "Ann"' in row["input_data"] and '"copies": 3' in row["input_data"]
    done = "SELECT count(*) FROM audit_log WHERE action = 'schedule.create' AND outcome = 'ok'"
    assert await pg.fetchval(done) == 1
    r = await post(client, "/admin/schedules/new", good)  # the name is taken: refused, not overwritten
    assert r.status_code == 422 and 'id="e-_name"' in r.text


async def test_a_missing_file_and_a_bad_cron_are_shown_together_and_an_upload_is_kept(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    form = {"_target": "type:report.csv_check", "_cron": "0 7 * * *", "_timezone": "UTC", "_enabled": "on"}
    r = await post(client, "/admin/schedules/new", {**form, "_cron": "bad"})
    assert r.status_code == 422
    assert 'id="e-file"' in r.text and 'id="e-_cron"' in r.text  # the missing file and the cron at once
    r = await post(
        client, "/admin/schedules/new", {**form, "_cron": "bad"}, files={"file": ("a.csv", b"a,b\n1,2\n")}
    )
    assert r.status_code == 422 and "Use a.csv" in r.text  # the upload is kept for the next try
    kept = r.text.split('name="_keep.file" value="')[1].split('"')[0]
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    # the uploads are committed for the next try, the schedule the action made meanwhile is not: a choice
    # the form cannot read is left out, and the action alone would accept its default
    r = await post(
        client, "/admin/schedules/new", {**form, "encoding": "klingon"}, files={"file": ("b.csv", b"a\n1\n")}
    )
    assert r.status_code == 422 and 'id="e-encoding"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    r = await post(client, "/admin/schedules/new", {**form, "_keep.file": kept})
    assert r.status_code == 303, r.text[:2000]
    assert await pg.fetchval("SELECT input_data->>'file' FROM schedules") == kept


async def test_a_pipeline_template_schedule_is_made_and_edited_through_the_templates_form(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    form = {"_target": "template:test.steps", "_cron": "0 6 * * *", "_timezone": "UTC", "_enabled": "on"}
    r = await post(client, "/admin/schedules/new", {**form, "seconds": "999", "_timezone": "Nowhere/Zone"})
    assert r.status_code == 422 and 'id="e-seconds"' in r.text and 'id="e-_timezone"' in r.text
    r = await post(
        client, "/admin/schedules/new", {**form, "title": "Daily", "seconds": "2", "fail_right": "true"}
    )
    assert r.status_code == 303, r.text[:2000]
    row = await pg.fetchrow("SELECT id, template, input_data FROM schedules")
    assert row["template"] == "test.steps" and '"seconds": 2.0' in row["input_data"]

    page = (await client.get(f"/admin/schedules/{row['id']}/edit")).text
    assert 'id="f-title"' in page and 'value="Daily"' in page and 'id="s-input_json"' not in page
    r = await post(
        client,
        f"/admin/schedules/{row['id']}/edit",
        {"_cron": "0 6 * * *", "_timezone": "UTC", "seconds": "-1"},
    )
    assert r.status_code == 422 and 'id="e-seconds"' in r.text and 'value="-1"' in r.text
    r = await post(
        client,
        f"/admin/schedules/{row['id']}/edit",
        {"_cron": "0 7 * * *", "_timezone": "UTC", "title": "Late"},
    )
    assert r.status_code == 303
    data = await pg.fetchval("SELECT input_data FROM schedules")
    assert '"title": "Late"' in data and '"fail_right": false' in data


async def test_the_json_api_creates_through_the_same_action_and_names_every_bad_field(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    bad = {"cron": "bad", "timezone": "Nowhere/Zone", "type": "test.form", "input_data": {}}
    r = await client.post("/api/schedules", json=bad, headers=headers)
    assert r.status_code == 422 and {"cron", "timezone", "input_data.name"} <= set(r.json()["errors"]), r.text
    good = {"cron": "0 9 * * *", "type": "test.form", "input_data": {"name": "Ann"}}
    r = await client.post("/api/schedules", json=good, headers=headers)
    assert r.status_code == 201, r.text
    outcomes = [
        r["outcome"] for r in await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'schedule.create'")
    ]
    assert [o.split(":")[0] for o in outcomes] == ["refused", "ok"], outcomes


async def test_a_schedule_whose_job_type_is_gone_opens_and_names_the_missing_target(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    sid = await _schedule(engine, admin, ui_settings)
    await pg.execute("UPDATE schedules SET job_type = 'gone.type' WHERE id = $1::uuid", sid)
    page = await client.get(f"/admin/schedules/{sid}/edit")
    assert page.status_code == 200 and "which no longer exists" in page.text
    r = await post(client, f"/admin/schedules/{sid}/edit", {"_cron": "0 9 * * *", "_timezone": "UTC"})
    assert r.status_code == 422 and 'id="e-_target"' in r.text and "unknown job type" in r.text


@pytest.mark.parametrize("cron", ["1-0 * * * *", "0 22-2 * * *", "0 9 * * fri-mon", "0 9 * dec-jan *"])
async def test_a_range_that_runs_backwards_is_refused(
    admin: CurrentUser, engine: AsyncEngine, ui_settings: Settings, cron: str
) -> None:
    """croniter reads ``1-0`` as a range round the end of the field (every minute); a crontab refuses it.
    Either way it is not what its writer meant: refused, saying how to write it."""
    async with engine.begin() as conn:
        with pytest.raises(BadInput) as refused:
            await schedule_actions.create_schedule(
                conn,
                admin,
                cron=cron,
                timezone="UTC",
                job_type="test.form",
                input_data={"name": "Ann"},
                settings=ui_settings,
            )
        assert "runs backwards" in (refused.value.errors or {})["cron"]
        for fine in ("0 22-23,0-2 * * *", "0 9 * * mon-fri", "*/15 9-17 * * 1-5", "0 9 * * 0-7"):
            await schedule_actions.create_schedule(
                conn,
                admin,
                cron=fine,
                timezone="UTC",
                job_type="test.form",
                input_data={"name": "Ann"},
                settings=ui_settings,
            )


async def test_an_edit_that_changes_nothing_is_refused_and_audited_on_the_page_and_the_api(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    """Saving the form as it was, a PATCH or PUT of the same values, enabling an enabled schedule: each
    was an audit entry (and an admin notice) saying the schedule was changed, then a 200 that recorded
    nothing. The rule of every admin action: a 409 "Nothing changed" saying what was already so, nothing
    written — its next run stays — audited as refused, no notice; the page shows it on the list, as the
    other admin pages show a no-op."""
    sid = await _schedule(engine, admin, ui_settings)
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    stamp = "SELECT updated_at, next_fire_at FROM schedules WHERE id = $1::uuid"
    before = await pg.fetchrow(stamp, sid)
    audits = "SELECT action, outcome FROM audit_log ORDER BY id"
    assert [a["action"] for a in await pg.fetch(audits)] == ["schedule.create"]
    notices = "SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'"
    announced = await pg.fetchval(notices)

    same = {"_cron": "0 9 * * *", "_timezone": "Europe/Berlin", "name": "Ann", "_enabled": "on"}
    r = await post(client, f"/admin/schedules/{sid}/edit", same)
    assert r.status_code == 409, r.text
    assert "Nothing changed: schedule &#39;Morning hello&#39; already has this cron" in r.text
    for call in (
        lambda: client.patch(f"/api/schedules/{sid}", json={"cron": "0 9 * * *"}, headers=headers),
        lambda: client.put(f"/api/schedules/{sid}", json={"input_data": {"name": "Ann"}}, headers=headers),
        lambda: client.patch(f"/api/schedules/{sid}", json={"enabled": True}, headers=headers),
        lambda: client.post(f"/api/schedules/{sid}/enable", headers=headers),
    ):
        answer = await call()
        assert answer.status_code == 409 and "Nothing changed" in answer.json()["detail"], answer.text
    r = await post(client, f"/admin/schedules/{sid}/enable")
    assert r.status_code == 409
    assert "Nothing changed: schedule &#39;Morning hello&#39; is already enabled." in r.text
    trail = await pg.fetch(audits)
    assert [a["action"] for a in trail] == [
        "schedule.create",
        *["schedule.update"] * 4,
        *["schedule.enable"] * 2,
    ]
    assert all(a["outcome"].startswith("refused: Nothing changed: ") for a in trail[1:]), trail
    assert await pg.fetchval(notices) == announced
    assert await pg.fetchrow(stamp, sid) == before

    # a real change is saved and recorded, once, naming what changed
    r = await post(client, f"/admin/schedules/{sid}/edit", {**same, "name": "Bea"})
    assert r.status_code == 303 and "saved" in (await client.get(r.headers["location"])).text
    assert len(await pg.fetch(audits)) == len(trail) + 1
    assert "input_data" in await pg.fetchval("SELECT detail::text FROM audit_log ORDER BY id DESC LIMIT 1")


async def test_the_page_marks_a_code_schedule_the_servers_code_no_longer_declares(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    """No worker's start switches such a schedule off (another worker's code may declare it): the page
    says so, and once disabled it may be deleted."""
    sid = await pg.fetchval(
        "INSERT INTO schedules (id, name, cron, job_type, user_id, source, next_fire_at)"
        " VALUES (gen_random_uuid(), 'retired.report', '0 * * * *', 'noop', $1, 'code', now())"
        " RETURNING id",
        admin.id,
    )
    page = (await client.get("/admin/schedules")).text
    row = page[page.index(f'id="schedule-{sid}"') :].split("</tr>", 1)[0]
    assert "no longer in this server's code" in row and "then delete it" in row, row
    r = await post(client, f"/admin/schedules/{sid}/delete", {})
    assert r.status_code == 409 and await pg.fetchval("SELECT count(*) FROM schedules") == 1
    await post(client, f"/admin/schedules/{sid}/disable", {})
    await post(client, f"/admin/schedules/{sid}/delete", {})
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0


async def test_an_over_long_schedule_field_is_refused_with_its_real_length_and_shown_as_typed(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
) -> None:
    """The form cut its own controls to 1,000 characters before the action read them: a 6,009-character
    cron expression was refused as "is 1,000 characters long" (the API says 6,009 for the same value)
    and came back holding its first 1,000. Over-long text is refused, never cut: the error gives the real
    length, and the form shows what was typed — on the new form and the edit form alike."""

    def shown(page: str, field: str) -> str:
        match = re.search(rf'<input[^>]*name="{field}"[^>]*value="([^"]*)"', page)
        assert match, field
        return html.unescape(match.group(1))

    cron = "0 9 * * *" + " 1" * 3000
    name = "N" * 1500
    owner = "o" * 2000 + "@example.com"
    assert len(cron) == 6009
    new = {"_target": "type:test.form", "_timezone": "UTC", "_enabled": "on", "name": "Ann"}
    r = await post(client, "/admin/schedules/new", {**new, "_cron": cron, "_name": name, "_owner": owner})
    assert r.status_code == 422, r.text[:2000]
    page = html.unescape(r.text)
    assert "is 6,009 characters long; at most 300 are allowed" in page
    assert "is 1,500 characters long; at most 200 are allowed" in page
    assert "is 2,012 characters long; at most 254 are allowed" in page
    assert (shown(r.text, "_cron"), shown(r.text, "_name"), shown(r.text, "_owner")) == (cron, name, owner)
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0

    sid = await _schedule(engine, admin, ui_settings)
    edit = {"_cron": cron, "_timezone": "Europe/Berlin", "name": "Ann", "_enabled": "on"}
    r = await post(client, f"/admin/schedules/{sid}/edit", edit)
    assert r.status_code == 422, r.text[:2000]
    assert "is 6,009 characters long; at most 300 are allowed" in html.unescape(r.text)
    assert shown(r.text, "_cron") == cron
    assert await pg.fetchval("SELECT cron FROM schedules WHERE id = $1::uuid", sid) == "0 9 * * *"
