"""``/api/schedules`` as the README describes it: an edit's field left out keeps its value, and a field
sent as ``null`` is refused naming it (``{"cron": null}`` answered 200 and changed nothing)."""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.support.webkit import AdminApi, add_token, add_user, app_client, login, running_server


async def test_a_null_field_in_an_edit_is_refused_naming_it(admin_api: AdminApi) -> None:
    made = await admin_api.client.post(
        "/api/schedules",
        json={"cron": "0 9 * * *", "timezone": "Europe/Berlin", "type": "noop"},
        headers=admin_api.root,
    )
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    for method in ("PATCH", "PUT"):
        for body in (
            {"cron": None},
            {"timezone": None},
            {"enabled": None},
            {"input_data": None, "cron": None},
        ):
            r = await admin_api.client.request(
                method, f"/api/schedules/{sid}", json=body, headers=admin_api.root
            )
            assert r.status_code == 422, (method, body, r.text)
            assert set(r.json()["errors"]) == set(body), (method, body, r.text)
            assert "cannot be null" in r.json()["detail"], r.text
    row = await admin_api.pg.fetchrow("SELECT cron, timezone, enabled FROM schedules WHERE id = $1", sid)
    assert tuple(row) == ("0 9 * * *", "Europe/Berlin", True)
    # each refused edit is on the trail, and none changed the schedule
    refused = "SELECT count(*) FROM audit_log WHERE action = 'schedule.update' AND outcome LIKE 'refused: %'"
    assert await admin_api.pg.fetchval(refused) == 8
    # a field left out keeps its value
    r = await admin_api.client.patch(f"/api/schedules/{sid}", json={"enabled": False}, headers=admin_api.root)
    assert r.status_code == 200, r.text
    assert (r.json()["cron"], r.json()["timezone"], r.json()["enabled"]) == (
        "0 9 * * *",
        "Europe/Berlin",
        False,
    )


async def test_a_schedule_made_through_the_api_is_recorded_as_such(admin_api: AdminApi) -> None:
    """``source`` was ``"ui"`` for a schedule created with ``POST /api/schedules``; it is ``"api"`` now
    (the check on the column allows it), and the console lists it as made through the API, editable and
    deletable like one made there."""
    made = await admin_api.client.post(
        "/api/schedules", json={"cron": "0 9 * * *", "type": "noop"}, headers=admin_api.root
    )
    assert made.status_code == 201, made.text
    assert made.json()["source"] == "api"
    sid = made.json()["id"]
    assert await admin_api.pg.fetchval("SELECT source FROM schedules WHERE id = $1", sid) == "api"
    listed = await admin_api.client.get("/api/schedules", headers=admin_api.root)
    assert [s["source"] for s in listed.json()] == ["api"]
    assert (await login(admin_api.client, "root@example.com")).status_code == 303
    page = await admin_api.client.get("/admin/schedules")
    assert "made through the API" in page.text
    assert f'id="edit-{sid}"' in page.text
    assert f"/admin/schedules/{sid}/delete" in page.text


async def test_an_input_over_the_size_limit_is_a_refusal_on_create_and_edit(
    make_settings: Any, pg: asyncpg.Connection
) -> None:
    """A 413 about the schedule's input was audited as a refused edit and not as a refused create (the
    create checked it before its audited block). Each is a refused admin action, audited alike."""
    settings = make_settings(worker_enabled=False, job_max_input_bytes=1024)
    db = settings.database_url or ""
    root = await add_user(db, "root@example.com", admin=True)
    big = {"text": "x" * 2000}
    async with app_client(settings) as client:
        h = {"Authorization": f"Bearer {await add_token(db, root.id)}"}
        made = await client.post("/api/schedules", json={"cron": "0 9 * * *", "type": "noop"}, headers=h)
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        r = await client.post(
            "/api/schedules", json={"cron": "0 9 * * *", "type": "noop", "input_data": big}, headers=h
        )
        assert r.status_code == 413 and "JOB_MAX_INPUT_BYTES" in r.json()["detail"], r.text
        r = await client.patch(f"/api/schedules/{sid}", json={"input_data": big}, headers=h)
        assert r.status_code == 413 and "JOB_MAX_INPUT_BYTES" in r.json()["detail"], r.text
    rows = await pg.fetch("SELECT action, outcome FROM audit_log ORDER BY id")
    got = [(e["action"], e["outcome"].split(":")[0]) for e in rows]
    assert got == [("schedule.create", "ok"), ("schedule.create", "refused"), ("schedule.update", "refused")]


async def test_an_edit_that_only_switches_enabled_is_recorded_as_enable_or_disable(
    admin_api: AdminApi,
) -> None:
    """``PATCH {"enabled": false}`` was audited as ``schedule.update`` ("Edited") while the Disable button
    records ``schedule.disable``: one change had two names in the trail."""
    made = await admin_api.client.post(
        "/api/schedules", json={"cron": "0 9 * * *", "type": "noop"}, headers=admin_api.root
    )
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    path = f"/api/schedules/{sid}"
    for body in ({"enabled": False}, {"enabled": True}, {"enabled": False, "cron": "0 9 * * *"}):
        r = await admin_api.client.patch(path, json=body, headers=admin_api.root)
        assert r.status_code == 200, r.text
    r = await admin_api.client.put(path, json={"enabled": True, "cron": "0 10 * * *"}, headers=admin_api.root)
    assert r.status_code == 200, r.text
    rows = await admin_api.pg.fetch(
        "SELECT action, detail FROM audit_log WHERE action LIKE 'schedule.%' AND action <> 'schedule.create'"
        " ORDER BY id"
    )
    assert [r["action"] for r in rows] == [
        "schedule.disable",
        "schedule.enable",
        "schedule.disable",
        "schedule.update",  # more than enabled changed: one edit, naming both
    ]
    assert '"enabled"' in rows[-1]["detail"] and '"cron"' in rows[-1]["detail"], rows[-1]["detail"]


async def test_a_schedule_change_that_changes_nothing_is_a_409_audited_as_refused(
    admin_api: AdminApi,
) -> None:
    """Disabling a disabled schedule, enabling an enabled one twice, ``PATCH {}`` and a ``PATCH`` of the
    values it has each answered 200 and left no audit entry; the README's rule for admin actions is a
    409 "Nothing changed" saying what was already so, audited as refused, as resuming a running type is."""
    made = await admin_api.client.post(
        "/api/schedules", json={"cron": "0 9 * * *", "type": "noop", "name": "Daily"}, headers=admin_api.root
    )
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    pg = admin_api.pg
    stamp = "SELECT updated_at, next_fire_at FROM schedules WHERE id = $1"
    trail = "SELECT action, outcome, count FROM audit_log WHERE action LIKE 'schedule.%' ORDER BY id"
    notices = "SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'"

    async def refused(method: str, path: str, body: Any, action: str, says: str) -> None:
        before, entries, announced = (
            await pg.fetchrow(stamp, sid),
            await pg.fetch(trail),
            await pg.fetchval(notices),
        )
        r = await admin_api.client.request(method, path, json=body, headers=admin_api.root)
        assert r.status_code == 409, (method, path, body, r.status_code, r.text)
        assert r.json()["detail"].startswith("Nothing changed: ") and says in r.json()["detail"], r.text
        after = await pg.fetch(trail)
        assert [tuple(e) for e in after[len(entries) :]] == [(action, f"refused: {r.json()['detail']}", 0)]
        assert await pg.fetchrow(stamp, sid) == before  # nothing written: its next run stays
        assert await pg.fetchval(notices) == announced  # a refusal sends no admin notice

    disable, enable = f"/api/schedules/{sid}/disable", f"/api/schedules/{sid}/enable"
    assert (await admin_api.client.post(disable, headers=admin_api.root)).status_code == 200
    await refused("POST", disable, None, "schedule.disable", "'Daily' is already disabled")
    assert (await admin_api.client.post(enable, headers=admin_api.root)).status_code == 200
    await refused("POST", enable, None, "schedule.enable", "'Daily' is already enabled")
    await refused("PATCH", f"/api/schedules/{sid}", {}, "schedule.update", "gives no field to change")
    await refused("PUT", f"/api/schedules/{sid}", {}, "schedule.update", "gives no field to change")
    await refused(
        "PATCH", f"/api/schedules/{sid}", {"cron": "0 9 * * *"}, "schedule.update", "already has this cron"
    )
    await refused("PATCH", f"/api/schedules/{sid}", {"enabled": True}, "schedule.update", "already has")


async def test_concurrent_repeats_of_a_schedule_action_do_it_once(
    db_url: str, pg: asyncpg.Connection, tmp_path: Any
) -> None:
    """The same Disable, edit or Delete sent several times at once (a double click, a retrying client):
    each read the schedule before any had written, so every one answered "ok", was audited as done and
    alerted the admins; a delete answered 204 three times for one schedule. One does it; the others
    see what it did: 409 "Nothing changed", or 404. (A real server: the test client runs requests one
    at a time.)"""
    import asyncio

    import httpx

    admin = await add_user(db_url, "racer@example.com", admin=True)
    root = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    with running_server(db_url, tmp_path / "data") as base:
        async with httpx.AsyncClient(base_url=base, headers=root, timeout=30) as client:
            made = await client.post("/api/schedules", json={"cron": "0 9 * * *", "type": "noop"})
            sid = made.json()["id"]
            for name, method, path, body in (
                ("schedule.disable", "POST", f"/api/schedules/{sid}/disable", None),
                ("schedule.update", "PATCH", f"/api/schedules/{sid}", {"cron": "5 9 * * *"}),
                ("schedule.delete", "DELETE", f"/api/schedules/{sid}", None),
            ):
                sent = [client.request(method, path, json=body) for _ in range(6)]
                codes = sorted(r.status_code for r in await asyncio.gather(*sent))
                done, again = (204, 404) if name == "schedule.delete" else (200, 409)
                assert codes == [done] + [again] * 5, (name, codes)
                ok = "SELECT count(*) FROM audit_log WHERE action = $1 AND outcome = 'ok'"
                assert await pg.fetchval(ok, name) == 1, name
