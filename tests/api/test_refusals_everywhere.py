"""Every admin action's refusal leaves one audit entry ``refused: …``, whatever refused it and whichever
path it came by (the JSON API or the page).

A schedule with an unknown ``type`` was written as refused, but a bad cron expression, an unknown zone, a
name over 200 characters, a bad edit, a pause of an unknown type, limits out of range, a bulk action on
an empty filter and a page's reschedule with a bad time were not written at all; disabling a disabled
user was written "ok" twice, and unlocking a user with no failed sign-ins answered 200 "ok, failures
cleared 0" where every other no-op is a 409 "Nothing changed".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form)
from app.auth import CurrentUser
from tests.admin.test_admin_console_actions import SCHEDULE
from tests.api.test_actions_controls import root, root_api  # noqa: F401  (fixtures)
from tests.support.webkit import add_token, add_user, csrf, csrf_from, switch_to


@dataclass
class Refusal:
    """One refused request: ``action`` is the audit entry's, ``{sid}``, ``{job}`` and ``{bob}`` in the
    paths are filled in; ``api`` is ``(method, path, json)``, ``web`` is ``(path, form)``."""

    action: str
    api: tuple[str, str, dict[str, Any]] | None
    web: tuple[str, dict[str, str]] | None
    status: set[int] = field(default_factory=lambda: {422})


def _schedule(**changes: str) -> dict[str, str]:
    return {**SCHEDULE, **changes}


API_SCHEDULE = {"type": "test.form", "input_data": {"name": "Ann"}}

REFUSALS = [
    *(
        Refusal(
            "schedule.create",
            ("POST", "/api/schedules", {**API_SCHEDULE, "cron": cron}),
            ("/admin/schedules/new", _schedule(_cron=cron)),
        )
        for cron in ("61 * * * *", "0 0 31 2 *", "@reboot", "*/0 * * * *")
    ),
    Refusal(
        "schedule.create",
        ("POST", "/api/schedules", {**API_SCHEDULE, "cron": "0 3 * * *", "timezone": "Mars/Base"}),
        ("/admin/schedules/new", _schedule(_timezone="Mars/Base")),
    ),
    Refusal(
        "schedule.create",
        ("POST", "/api/schedules", {**API_SCHEDULE, "cron": "0 3 * * *", "name": "n" * 201}),
        ("/admin/schedules/new", _schedule(_name="n" * 201)),
    ),
    Refusal(
        "schedule.create",
        ("POST", "/api/schedules", {"type": "test.form", "cron": "0 3 * * *", "input_data": {"name": 5}}),
        ("/admin/schedules/new", _schedule(name="")),
    ),
    Refusal(
        "schedule.create",
        ("POST", "/api/schedules", {**API_SCHEDULE, "cron": "0 3 * * *", "name": "Taken"}),
        ("/admin/schedules/new", _schedule(_name="Taken")),
        {409, 422},
    ),
    Refusal(
        "schedule.update",
        ("PATCH", "/api/schedules/{sid}", {"cron": "0 0 31 2 *"}),
        ("/admin/schedules/{sid}/edit", _schedule(_name="Taken", _cron="0 0 31 2 *")),
    ),
    Refusal(
        "schedule.update",
        ("PATCH", "/api/schedules/{sid}", {"timezone": "Mars/Base"}),
        ("/admin/schedules/{sid}/edit", _schedule(_name="Taken", _timezone="Mars/Base")),
    ),
    Refusal(
        "job_type.pause",
        ("POST", "/api/job-types/no.such.type/pause", {}),
        ("/admin/controls/pause", {"type": "no.such.type"}),
        {404},
    ),
    Refusal(
        "job_type.limits",
        ("PUT", "/api/job-types/test.form/limits", {"max_running": -1}),
        ("/admin/controls/limits", {"type": "test.form", "max_running": "-1"}),
    ),
    Refusal("job_type.limits", None, ("/admin/controls/limits", {"type": "test.form", "max_running": "abc"})),
    Refusal(
        "jobs.bulk_cancel",
        ("POST", "/api/jobs/bulk", {"action": "cancel", "filter": {}}),
        ("/admin/jobs/bulk", {"action": "cancel", "scope": "filter"}),
    ),
    Refusal(
        "job.reschedule",
        ("POST", "/api/jobs/{job}/reschedule", {"run_at": "9500-01-01T00:00:00+00:00"}),
        ("/jobs/{job}/reschedule", {"date": "9500-01-01", "time": "09:00", "tz": "UTC"}),
    ),
    Refusal("job.reschedule", None, ("/jobs/{job}/reschedule", {"date": "soon", "time": "", "tz": "UTC"})),
    Refusal("user.create", None, ("/admin/users", {"email": "not an email", "password": "long enough pw"})),
    Refusal("user.disable", None, ("/admin/users/{bob}/disable", {}), {409}),
    Refusal("user.enable", None, ("/admin/users/{carl}/enable", {}), {409}),
    Refusal("user.unlock", ("POST", "/api/users/{bob}/unlock", {}), ("/admin/users/{bob}/unlock", {}), {409}),
]


async def _entries(pg: asyncpg.Connection, after: int) -> list[tuple[str, str]]:
    rows = await pg.fetch("SELECT action, outcome FROM audit_log WHERE id > $1 ORDER BY id", after)
    return [(r["action"], r["outcome"]) for r in rows]


async def test_every_admin_refusal_leaves_one_refused_entry_on_the_api_and_the_page(
    client: AsyncTestClient,
    root: CurrentUser,  # noqa: F811
    root_api: dict[str, str],  # noqa: F811
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    bob = await add_user(db_url, "bob@example.com", active=False)
    carl = await add_user(db_url, "carl@example.com")
    made = await client.post(
        "/api/schedules", json={**API_SCHEDULE, "cron": "0 3 * * *", "name": "Taken"}, headers=root_api
    )
    assert made.status_code == 201, made.text
    r = await client.post(
        "/api/jobs",
        json={"type": "test.form", "input_data": {"name": "Ann"}, "run_at": "2099-01-01T00:00:00+00:00"},
        headers=root_api,
    )
    assert r.status_code in (200, 201), r.text
    ids = {"sid": made.json()["id"], "job": r.json()["id"], "bob": bob.id, "carl": carl.id}
    token = csrf_from((await client.get("/admin/users")).text)
    failures: list[str] = []
    for refusal in REFUSALS:
        for via in ("api", "web"):
            last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
            if via == "api" and refusal.api is not None:
                method, path, body = refusal.api
                path = path.format(**ids)
                r = await client.request(method, path, json=body, headers=root_api)
            elif via == "web" and refusal.web is not None:
                path, form = refusal.web
                path = path.format(**ids)
                r = await client.post(path, data={**form, "_csrf_token": token}, follow_redirects=False)
            else:
                continue
            entries = await _entries(pg, last)
            label = f"{via} {path} {refusal.action}"
            if r.status_code not in refusal.status:
                failures.append(f"{label}: answered {r.status_code}: {r.text[:200]}")
            elif (
                len(entries) != 1
                or entries[0][0] != refusal.action
                or not entries[0][1].startswith("refused: ")
            ):
                failures.append(f"{label}: audit {entries}")
    assert not failures, "\n".join(failures)
    # nothing a refusal touched was changed: still one schedule, Bob still disabled
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 1
    assert await pg.fetchval("SELECT is_active FROM users WHERE id = $1", bob.id) is False


UNREAD_BODIES = [
    # (method, path, raw body, status, the entry's action, its target ids)
    ("POST", "/api/jobs/bulk", '{"action": "retry", "ids": ["not a job id"]}', 422, "jobs.bulk_retry", []),
    ("POST", "/api/jobs/bulk", '{"action": "cancel", "ids": "{job}"}', 422, "jobs.bulk_cancel", []),
    ("POST", "/api/jobs/bulk", '{"action": 5, "ids": []}', 422, "jobs.bulk", []),
    ("POST", "/api/jobs/bulk", '{"action": "retry", "ids": [', 400, "jobs.bulk", []),
    ("POST", "/api/jobs/bulk", '{"action": "delete", "ids": ["{job}"]}', 422, "jobs.bulk", []),
    ("PUT", "/api/job-types/test.form/limits", '{"max_running": "3"}', 422, "job_type.limits", ["test.form"]),
    ("POST", "/api/job-types/test.form/pause", '{"paused": false}', 422, "job_type.pause", ["test.form"]),
    ("POST", "/api/jobs/{job}/reject", '{"reason": "a", "comment": "b"}', 422, "job.reject", ["{job}"]),
    ("POST", "/api/jobs/{job}/reschedule", '{"run_at": 5}', 422, "job.reschedule", ["{job}"]),
    ("POST", "/api/schedules", '{"type": "test.form", "cron": 5}', 422, "schedule.create", []),
]


async def test_an_admin_request_refused_before_its_action_is_known_is_audited_once(
    client: AsyncTestClient,
    root: CurrentUser,  # noqa: F811
    root_api: dict[str, str],  # noqa: F811
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    """A body the decoder refused (422, or 400 for one that is not JSON) was refused before the route's
    handler ran, and an action that is neither retry nor cancel was refused by a bulk block that named no
    entry: neither left one. Each is now one ``refused: …`` entry; a plain user's refusal still none."""
    r = await client.post(
        "/api/jobs",
        json={"type": "test.form", "input_data": {"name": "Ann"}, "run_at": "2099-01-01T00:00:00+00:00"},
        headers=root_api,
    )
    job = r.json()["id"]
    failures: list[str] = []
    headers = {**root_api, "Content-Type": "application/json"}
    for method, path, body, status, action, targets in UNREAD_BODIES:
        path, body = path.replace("{job}", job), body.replace("{job}", job)
        last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
        r = await client.request(method, path, content=body.encode(), headers=headers)
        rows = await pg.fetch(
            "SELECT action, target_ids, outcome FROM audit_log WHERE id > $1 ORDER BY id", last
        )
        got = [(e["action"], json.loads(e["target_ids"] or "[]"), e["outcome"].split(":")[0]) for e in rows]
        want = [(action, [t.replace("{job}", job) for t in targets], "refused")]
        if r.status_code != status or got != want:
            failures.append(f"{method} {path} {body}: {r.status_code} {got} {r.text[:150]}")
    assert not failures, "\n".join(failures)
    # a plain user's own refusal is not an admin's: no entry
    ann = await add_user(db_url, "ann@example.com")
    ann_api = {
        "Authorization": f"Bearer {await add_token(db_url, ann.id)}",
        "Content-Type": "application/json",
    }
    r = await client.post(
        "/api/jobs", json={"type": "test.form", "input_data": {"name": "A"}}, headers=ann_api
    )
    last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
    r = await client.post(f"/api/jobs/{r.json()['id']}/cancel", content=b'{"now": true}', headers=ann_api)
    assert r.status_code == 422, r.text
    assert await pg.fetchval("SELECT count(*) FROM audit_log WHERE id > $1", last) == 0


async def test_a_bulk_action_refused_at_its_confirm_step_is_audited_once(
    client: AsyncTestClient,
    root: CurrentUser,  # noqa: F811
    pg: asyncpg.Connection,
) -> None:
    """The confirm step of a bulk action (the console's and a failed group's) refused a form with a 422
    in the panel and left no entry, where the same form at the next step left one."""
    token = csrf_from((await client.get("/admin/users")).text)
    refusals = [
        ("/admin/jobs/bulk/confirm", {"action": "retry", "scope": "selected"}, "jobs.bulk_retry"),
        (
            "/admin/jobs/bulk/confirm",
            {"action": "cancel", "scope": "filter", "status": "nope"},
            "jobs.bulk_cancel",
        ),
        ("/admin/jobs/bulk/confirm", {"action": "delete", "scope": "filter"}, "jobs.bulk"),
        ("/admin/failed/retry/confirm", {"type": "", "signature": "boom"}, "jobs.bulk_retry"),
        (
            "/admin/failed/retry/confirm",
            {"type": "test.form", "signature": "b", "priority": "5"},
            "jobs.bulk_retry",
        ),
    ]
    for path, form, action in refusals:
        last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
        r = await client.post(path, data={**form, "_csrf_token": token})
        assert r.status_code == 422, (path, form, r.status_code, r.text[-300:])
        entries = await _entries(pg, last)
        assert len(entries) == 1 and entries[0][0] == action, (path, form, entries)
        assert entries[0][1].startswith("refused: "), entries


PERSONS_OWN = {
    # the JSON API
    "api.jobs.create",
    "api.pipelines.create",
    "api.batches.create",
    "api.files.upload",
    "api.me.update",
    "api.me.notifications",
    "api.me.tokens.create",
    "api.me.tokens.revoke",
    "api.notifications.read",
    # the pages
    "auth.login_submit",
    "auth.logout",
    "account.password",
    "account.theme",
    "account.timezone",
    "account.tokens.create",
    "account.tokens.revoke",
    "jobs.create",
    "pipelines.create",
    "batches.create",
    "notifications.email",
    "notifications.read",
}
"""Routes that change only what is the person's own (their jobs, files, tokens, settings, sign-in): no
admin action, nothing to audit."""


def test_every_route_that_changes_something_names_its_audited_action(client: AsyncTestClient) -> None:
    """A route added later cannot slip past the audit of refused requests: each route that changes
    something, on the API and the pages alike, is either an admin's audited action (each of its paths
    in ``ROUTE_ACTIONS``) or changes only the person's own. The pages' routes were in neither, so an
    admin's page form refused before its handler ran (a body over the limit) left no entry."""
    from app.web.refused_requests import ROUTE_ACTIONS, route_key

    unplaced = sorted(
        f"{sorted(handler.http_methods)} {route.path} {handler.name}"
        for route in client.app.routes
        for handler in getattr(route, "route_handlers", [])
        if set(handler.http_methods) - {"GET", "HEAD", "OPTIONS"}
        and handler.name not in PERSONS_OWN
        and route_key({"route_handler": handler, "path": route.path}) not in ROUTE_ACTIONS  # type: ignore[typeddict-item]
    )
    assert not unplaced, unplaced


async def test_an_admin_request_refused_for_its_size_is_audited_once(
    client: AsyncTestClient,
    root: CurrentUser,  # noqa: F811
    root_api: dict[str, str],  # noqa: F811
    pg: asyncpg.Connection,
) -> None:
    """A body over the limit is refused from its ``Content-Length`` before anything reads it; the
    refusal is an admin's refused action like any other, so the audit must know who sent it."""
    from app.web.input_guard import body_limit

    limit = body_limit(client.app.state.settings, {"path": "/api/jobs/bulk"})
    body = b'{"action": "retry", "ids": [' + b" " * limit + b"]}"
    headers = {**root_api, "Content-Type": "application/json"}
    cases = [
        ("POST", "/api/jobs/bulk", "jobs.bulk"),
        ("POST", "/api/schedules", "schedule.create"),
        ("PUT", "/api/job-types/test.form/limits", "job_type.limits"),
    ]
    for method, path, action in cases:
        last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
        r = await client.request(method, path, content=body, headers=headers)
        assert r.status_code == 413, (path, r.text[:200])
        entries = await _entries(pg, last)
        assert len(entries) == 1 and entries[0][0] == action, (path, entries)
        assert entries[0][1].startswith("refused: "), entries


FORM = "application/x-www-form-urlencoded"
NO_BOUNDARY = "multipart/form-data"
NOT_UTF8 = (
    b'--b\r\nContent-Disposition: form-data; name="note"\r\n\r\n\xff\xfe\r\n--b--\r\n',
    "multipart/form-data; boundary=b",
)


def _page_refusals(ids: dict[str, Any], limit: int) -> list[tuple[str, bytes, str, int]]:
    """(path, body, Content-Type, status) of page forms refused before their handler reads them."""
    big = b"reason=" + b"x" * limit
    return [
        (f"/admin/users/{ids['bob']}/disable", big, FORM, 413),
        ("/admin/jobs/bulk", big, FORM, 413),
        ("/admin/controls/limits", big, FORM, 413),
        (f"/jobs/{ids['job']}/cancel", big, FORM, 413),
        (f"/admin/jobs/{ids['job']}/reject", b"", NO_BOUNDARY, 422),
        (f"/admin/schedules/{ids['sid']}/disable", *NOT_UTF8, 422),
        # a field sent to a button form: refused before anything looks the id up
        (f"/pipelines/{ids['job']}/cancel", b"now=1", FORM, 422),
    ]


async def test_an_admin_page_form_refused_before_its_handler_is_audited_once(
    client: AsyncTestClient,
    root: CurrentUser,  # noqa: F811
    root_api: dict[str, str],  # noqa: F811
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    """A page form refused for its size (413), or one that cannot be read (a multipart body without its
    boundary, a part that is not text, a field sent to a button form), was refused before its handler
    ran and left no entry, where the same refusal on the API left one. Each is now one ``refused: …``
    entry of the route's action for an admin; an error the action audited itself is not written again;
    a plain user's refusals leave none."""
    from app.web.input_guard import body_limit

    bob = await add_user(db_url, "bob@example.com")
    made = await client.post("/api/schedules", json={**API_SCHEDULE, "cron": "0 3 * * *"}, headers=root_api)
    r = await client.post(
        "/api/jobs", json={"type": "test.form", "input_data": {"name": "Ann"}}, headers=root_api
    )
    ids = {"bob": str(bob.id), "job": r.json()["id"], "sid": made.json()["id"]}
    limit = body_limit(client.app.state.settings, {"path": "/admin/jobs/bulk"})  # type: ignore[typeddict-item]
    wanted = {
        f"/admin/users/{ids['bob']}/disable": ("user.disable", "user", [ids["bob"]]),
        "/admin/jobs/bulk": ("jobs.bulk", "job", []),
        "/admin/controls/limits": ("job_type.limits", "job_type", []),
        f"/jobs/{ids['job']}/cancel": ("job.cancel", "job", [ids["job"]]),
        f"/admin/jobs/{ids['job']}/reject": ("job.reject", "job", [ids["job"]]),
        f"/admin/schedules/{ids['sid']}/disable": ("schedule.disable", "schedule", [ids["sid"]]),
        f"/pipelines/{ids['job']}/cancel": ("pipeline.cancel", "pipeline", [ids["job"]]),
    }
    token = csrf_from((await client.get("/admin/users")).text)
    failures: list[str] = []
    for path, body, kind, status in _page_refusals(ids, limit):
        last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
        headers = {"Content-Type": kind, "x-csrftoken": token}
        r = await client.post(path, content=body, headers=headers, follow_redirects=False)
        rows = await pg.fetch(
            "SELECT action, target_type, target_ids, outcome FROM audit_log WHERE id > $1 ORDER BY id", last
        )
        got = [
            (e["action"], e["target_type"], json.loads(e["target_ids"] or "[]"), e["outcome"].split(":")[0])
            for e in rows
        ]
        if r.status_code != status or got != [(*wanted[path], "refused")]:
            failures.append(f"{path} {kind}: {r.status_code} {got} {r.text[:150]}")
    # refused by the action itself (an unknown token), after its handler began: its own entry only
    last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
    r = await client.post("/admin/tokens/987654/revoke", data={"_csrf_token": token})
    got = await _entries(pg, last)
    if r.status_code != 404 or len(got) != 1 or got[0][0] != "token.revoke":
        failures.append(f"/admin/tokens/987654/revoke: {r.status_code} {got}")
    assert not failures, "\n".join(failures)
    assert await pg.fetchval("SELECT is_active FROM users WHERE id = $1", bob.id) is True

    # a plain user's refused page forms, on her own job and on an admin's page: no entry
    ann = await add_user(db_url, "ann@example.com")
    ann_api = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    r = await client.post(
        "/api/jobs", json={"type": "test.form", "input_data": {"name": "A"}}, headers=ann_api
    )
    ids["job"] = r.json()["id"]
    await switch_to(client, "ann@example.com")
    token = await csrf(client)
    last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
    for path, body, kind, status in _page_refusals(ids, limit):
        headers = {"Content-Type": kind, "x-csrftoken": token}
        r = await client.post(path, content=body, headers=headers, follow_redirects=False)
        assert r.status_code == status, (path, r.status_code, r.text[:200])
    assert await _entries(pg, last) == []


async def test_a_page_request_refused_before_its_csrf_check_is_audited_only_with_the_sessions_token(
    client: AsyncTestClient,
    root: CurrentUser,  # noqa: F811
    db_url: str,
    pg: asyncpg.Connection,
) -> None:
    """A page's post refused before the CSRF check had passed — over the body limit by its
    ``Content-Length``, or a form the check could not parse to find its token — was audited as the
    admin's refused action: a page of another site on this host, posting with the admin's session cookie
    alone, could write entries in their name. Such a refusal is audited only when the ``X-CSRFToken``
    header (htmx's) is the session's token; a token only in the refused body is never read."""
    from app.web.input_guard import body_limit

    bob = await add_user(db_url, "bob@example.com")
    path = f"/admin/users/{bob.id}/disable"
    limit = body_limit(client.app.state.settings, {"path": path})  # type: ignore[typeddict-item]
    token = csrf_from((await client.get("/admin/users")).text)
    big = b"reason=" + b"x" * limit
    cases = [
        # (body, Content-Type, header token, status, audited)
        (big, FORM, None, 413, False),
        (b"_csrf_token=" + token.encode() + b"&" + big, FORM, None, 413, False),
        (big, FORM, token, 413, True),
        (b"", NO_BOUNDARY, None, 422, False),
        (b"", NO_BOUNDARY, "s" + "0" * 64, 403, False),  # a wrong header: the check refuses first
        (b"", NO_BOUNDARY, token, 422, True),
    ]
    failures = []
    for body, kind, header, status, audited in cases:
        last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
        headers = {"Content-Type": kind, **({"x-csrftoken": header} if header else {})}
        r = await client.post(path, content=body, headers=headers, follow_redirects=False)
        got = await _entries(pg, last)
        wanted = [("user.disable", "refused")] if audited else []
        if r.status_code != status or [(a, o.split(":")[0]) for a, o in got] != wanted:
            failures.append(f"{kind} {body[:20]!r} header={header is not None}: {r.status_code} {got}")
    assert not failures, "\n".join(failures)
    assert await pg.fetchval("SELECT is_active FROM users WHERE id = $1", bob.id) is True


async def test_a_bulk_request_refused_before_its_action_is_read_says_so_in_its_entry(
    client: AsyncTestClient,
    root: CurrentUser,  # noqa: F811
    root_api: dict[str, str],  # noqa: F811
    pg: asyncpg.Connection,
) -> None:
    """The console's bulk form names its action by the button pressed, in the body: refused before the
    body was read (over the limit), the entry was "Asked for a bulk action on jobs" with nothing to say
    which or why not. Its detail now says the action is not known because nothing was read; a body that
    was read names the action it asked for, known or not."""
    from app.web.input_guard import body_limit

    not_read = "not known: the request was refused before it was read"
    limit = body_limit(client.app.state.settings, {"path": "/admin/jobs/bulk"})  # type: ignore[typeddict-item]
    token = csrf_from((await client.get("/admin/users")).text)
    cases = [
        (
            "/admin/jobs/bulk",
            {"Content-Type": FORM, "x-csrftoken": token},
            b"action=retry&reason=" + b"x" * limit,
            413,
            ("jobs.bulk", {"action": not_read}),
        ),
        (
            "/api/jobs/bulk",
            {**root_api, "Content-Type": "application/json"},
            json.dumps({"action": "delete", "ids": [], "colour": "red"}).encode(),
            422,
            ("jobs.bulk", {"action": "delete"}),
        ),
        (
            "/api/jobs/bulk",
            {**root_api, "Content-Type": "application/json"},
            json.dumps({"action": "retry", "ids": [], "colour": "red"}).encode(),
            422,
            ("jobs.bulk_retry", None),
        ),
    ]
    for path, headers, body, status, wanted in cases:
        last = await pg.fetchval("SELECT coalesce(max(id), 0) FROM audit_log")
        r = await client.post(path, content=body, headers=headers, follow_redirects=False)
        assert r.status_code == status, (path, r.status_code, r.text[:200])
        rows = await pg.fetch("SELECT action, detail, outcome FROM audit_log WHERE id > $1", last)
        got = [(e["action"], json.loads(e["detail"]) if e["detail"] else None) for e in rows]
        assert got == [wanted], (path, got)
    page = (await client.get("/admin/audit")).text
    assert not_read in page
    assert "Asked for a bulk action on jobs, not retry or cancel (or not known)" in page
