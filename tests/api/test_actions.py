"""The actions layer (app/actions): an admin's action leaves exactly one audit entry and one admin notice
whether it comes from a page or from the JSON API; the web modules never write to the queue themselves;
diagnostic and internal job types are for admins on every submission path, while templates keep using
their internal steps."""

from __future__ import annotations

import ast
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (test.form, test.step, test.steps, test.approval)
from app import pipelines
from app.actions import access
from app.auth import CurrentUser
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.procs import upload
from tests.support.webkit import HX, add_token, add_user, csrf, sign_in_as, switch_to

APP = Path(__file__).resolve().parents[2] / "app"

# --- web modules never write to the queue ---------------------------------------------------------------

QUEUE_WRITERS = frozenset(
    {
        "enqueue",
        "enqueue_many",
        "cancel",
        "retry",
        "approve",
        "reject",
        "rerun",
        "run_again",
        "reschedule",
        "delete",
        "finish",
        "claim",
        "claim_within_limits",
        "lock_limits",
        "heartbeat",
        "set_progress",
        "rescue_expired",
        "prune",
        "add_event",
        "refresh_pipelines",
        "lock_pipelines",
        "notify_jobs",
        "register_worker",
        "touch_worker",
        "unregister_worker",
        "forget_old",
    }
)
"""Functions of :mod:`app.jobs.queue` that change rows; only :mod:`app.actions` may call them for a
person."""
PIPELINE_WRITERS = frozenset({"create", "create_from_template", "cancel", "insert_next_jobs"})
WRITER_MODULES = {"app.jobs.queue": QUEUE_WRITERS, "app.pipelines": PIPELINE_WRITERS}


def _writers_of(module: str) -> frozenset[str]:
    for name, writers in WRITER_MODULES.items():
        if module == name or module.startswith(name + "."):
            return writers
    return frozenset()


def queue_writes(source: str) -> list[str]:
    """Every import of a queue or pipeline writing function in ``source``, and every ``queue.<writer>`` /
    ``pipelines.<writer>`` reached through a module imported whole."""
    found: list[str] = []
    aliases: dict[str, frozenset[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                whole = f"{node.module}.{a.name}"
                if _writers_of(whole) and not _writers_of(node.module):
                    aliases[a.asname or a.name] = _writers_of(whole)  # the module itself
                elif a.name in _writers_of(node.module):
                    found.append(f"from {node.module} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _writers_of(a.name):
                    aliases[a.asname or a.name] = _writers_of(a.name)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            base = ast.unparse(node.value)
            if node.attr in aliases.get(base, frozenset()):
                found.append(f"{base}.{node.attr}")
    return found


def test_the_checker_finds_every_way_of_reaching_a_writer() -> None:
    """Negative controls: each form of import is caught; reads are not."""
    assert queue_writes("from app.jobs.queue import cancel, get_job") == ["from app.jobs.queue import cancel"]
    assert queue_writes("from app.jobs.queue.transitions import retry") != []
    assert queue_writes("from app.jobs import queue\nqueue.approve(db, 1, u)") == ["queue.approve"]
    assert queue_writes("from app.jobs import queue as q\nq.enqueue(db, j, s)") == ["q.enqueue"]
    assert queue_writes("import app.jobs.queue\napp.jobs.queue.finish(c)") == ["app.jobs.queue.finish"]
    assert queue_writes("from app import pipelines\npipelines.cancel(db, p, u)") == ["pipelines.cancel"]
    assert queue_writes("from app.jobs import queue\nqueue.get_job(db, 1)\nqueue.NewJob") == []
    assert queue_writes("from app import pipelines\npipelines.get(db, p)") == []


def test_web_modules_never_import_the_queues_writing_functions() -> None:
    """Pages and the API reach the queue's writes only through app.actions."""
    problems = {
        str(path.relative_to(APP.parent)): found
        for path in sorted((APP / "web").rglob("*.py"))
        if (found := queue_writes(path.read_text()))
    }
    assert problems == {}


# --- one audit entry and one admin notice, from a page and from the API -----------------------------------


@pytest.fixture
def settings(client: AsyncTestClient) -> Settings:
    return client.app.state.settings


async def waiting_step(engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection, owner_id: int) -> Any:
    async with engine.begin() as conn:
        p = await pipelines.create_from_template(
            conn, "test.approval", {"title": "T"}, user_id=owner_id, settings=settings
        )
    step = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'draft'", p["id"])
    await claim(engine, step)
    await finish(engine, settings, step, "completed", result={"draft": "text"})
    return step


async def failed(engine: AsyncEngine, settings: Settings, owner_id: int, error: str = "Boom") -> Any:
    """A failed job (other jobs claimed along the way are left running)."""
    jid = await enqueue(engine, settings, owner_id, max_attempts=1)
    await claim(engine, jid)
    await finish(engine, settings, jid, "failed", error=error)
    return jid


async def counts(pg: asyncpg.Connection) -> tuple[int, int]:
    audit = await pg.fetchval("SELECT count(*) FROM audit_log")
    notices = await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'")
    return audit, notices


Setup = Callable[[], Awaitable[Any]]


async def test_every_admin_action_is_audited_and_announced_once_from_a_page_and_from_the_api(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}

    async def queued() -> Any:
        return await enqueue(engine, settings, owner.id)

    async def failed_one() -> Any:
        return await failed(engine, settings, owner.id)

    async def waiting() -> Any:
        return await waiting_step(engine, settings, pg, owner.id)

    async def pipeline() -> Any:
        async with engine.begin() as conn:
            p = await pipelines.create_from_template(
                conn, "test.steps", {}, user_id=owner.id, settings=settings
            )
        return p["id"]

    cases: list[tuple[str, Setup, str, dict[str, Any], str]] = [
        ("cancel", queued, "/jobs/{id}/cancel", {}, "job.cancel"),
        ("retry", failed_one, "/jobs/{id}/retry", {}, "job.retry"),
        ("run-again", failed_one, "/jobs/{id}/run-again", {}, "job.run_again"),
        ("approve", waiting, "/jobs/{id}/approve", {}, "job.approve"),
        ("reject", waiting, "/jobs/{id}/reject", {"reason": "Not good enough"}, "job.reject"),
        ("rerun", waiting, "/jobs/{id}/rerun", {}, "job.rerun"),
        ("pipeline cancel", pipeline, "/pipelines/{id}/cancel", {}, "pipeline.cancel"),
    ]
    for name, setup, path, body, audit_action in cases:
        for via in ("page", "api"):
            target = await setup()
            before = await counts(pg)
            if via == "page":
                r = await client.post(path.format(id=target), data=body, headers=page_h)
            else:
                r = await client.post("/api" + path.format(id=target), json=body or None, headers=api_h)
            assert r.status_code in (200, 201), (name, via, r.status_code, r.text[:300])
            assert await counts(pg) == (before[0] + 1, before[1] + 1), (name, via)
            last = await pg.fetchrow(
                "SELECT action, outcome, target_ids FROM audit_log ORDER BY id DESC LIMIT 1"
            )
            assert (last["action"], last["outcome"]) == (audit_action, "ok"), (name, via)
            assert str(target) in last["target_ids"], (name, via)
            notice = await pg.fetchval(
                "SELECT payload->>'action' FROM alert_outbox WHERE kind = 'admin_action' ORDER BY id DESC LIMIT 1"
            )
            assert notice == audit_action, (name, via)


async def test_a_bulk_action_is_audited_and_announced_once_from_the_console_and_from_the_api(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    page_h = {**HX, "x-csrftoken": await csrf(client)}
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    for via in ("page", "api"):
        ids = [await failed(engine, settings, owner.id, f"Boom {i}") for i in range(3)]
        before = await counts(pg)
        if via == "page":
            body = {"action": "retry", "scope": "selected", "ids": [str(i) for i in ids]}
            r = await client.post("/admin/jobs/bulk", data=body, headers=page_h)
            assert r.status_code == 200, r.text[:300]
            assert "Retried 3 jobs" in r.text, r.text[:300]
        else:
            r = await client.post(
                "/api/jobs/bulk", json={"action": "retry", "ids": [str(i) for i in ids]}, headers=api_h
            )
            assert r.status_code == 200, r.text
            assert sorted(r.json()["done"]) == sorted(str(i) for i in ids)
            assert r.json()["skipped"] == []
        assert await counts(pg) == (before[0] + 1, before[1] + 1), via
        entry = await pg.fetchrow("SELECT action, count, outcome FROM audit_log ORDER BY id DESC LIMIT 1")
        assert (entry["action"], entry["count"], entry["outcome"]) == (
            "jobs.bulk_retry",
            3,
            "3 done, 0 skipped",
        )
        assert (
            await pg.fetchval("SELECT count(*) FROM jobs WHERE id = ANY($1) AND status = 'queued'", ids) == 3
        )


async def test_the_api_bulk_route_takes_a_filter_is_for_admins_and_names_bad_input(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await add_user(db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    owner_h = {"Authorization": f"Bearer {await add_token(db_url, owner.id)}"}
    waiting = [await enqueue(engine, settings, owner.id) for _ in range(2)]
    r = await client.post(
        "/api/jobs/bulk", json={"action": "cancel", "ids": [str(waiting[0])]}, headers=owner_h
    )
    assert r.status_code == 403
    # a condition that cannot be read is an error, never left out (which would select every job)
    for wrong, field in (
        ({"owner": "ann@example.com", "stauts": "failed"}, "filter.stauts"),
        ({"status": "broken"}, "filter.status"),
        ({"status": ["failed"]}, "filter.status"),
        ({"type": {"eq": "noop"}}, "filter.type"),
    ):
        r = await client.post("/api/jobs/bulk", json={"action": "cancel", "filter": wrong}, headers=api_h)
        assert r.status_code == 422 and field in r.json()["errors"], (wrong, r.text)
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'cancelled'") == 0
    # a group named wrongly is an error too, never "Retried 0 jobs"
    for wrong, field in (
        ({"type": ["noop"], "signature": ""}, "group.type"),
        ({"type": "noop", "signature": "", "typo": 1}, "group.typo"),
        ({"type": "noop"}, "group.signature"),
        ({"typ": "noop", "signature": ""}, "group.typ"),
        ({}, "group.type"),
        ({"type": "", "signature": "x"}, "group.type"),
    ):
        r = await client.post("/api/jobs/bulk", json={"action": "retry", "group": wrong}, headers=api_h)
        assert r.status_code == 422 and field in r.json()["errors"], (wrong, r.text)
    r = await client.post(
        "/api/jobs/bulk", json={"action": "cancel", "filter": {"owner": "ann@example.com"}}, headers=api_h
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["done"]) == 2, r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'cancelled'") == 2
    bad = await client.post(
        "/api/jobs/bulk", json={"action": "cancel", "filter": {"owner": "x@y.z"}}, headers=api_h
    )
    assert bad.status_code == 422
    assert "filter.owner" in bad.json()["errors"]
    both = await client.post("/api/jobs/bulk", json={"action": "explode", "ids": []}, headers=api_h)
    assert both.status_code == 422
    assert "action" in both.json()["errors"]


async def test_a_refused_api_action_answers_409_and_keeps_its_audit_entry(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await add_user(db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    jid = await enqueue(engine, settings, owner.id)
    assert (await client.post(f"/api/jobs/{jid}/cancel", headers=api_h)).status_code == 200
    again = await client.post(f"/api/jobs/{jid}/cancel", headers=api_h)
    assert again.status_code == 409
    assert "it has already finished (Cancelled)" in again.json()["detail"]
    rows = await pg.fetch("SELECT action, outcome FROM audit_log ORDER BY id")
    assert [r["action"] for r in rows] == ["job.cancel", "job.cancel"]
    assert rows[1]["outcome"].startswith("refused: Nothing changed")
    assert (await counts(pg))[1] == 1  # a refusal is audited, not announced


async def test_owners_actions_through_the_api_are_not_audited(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    h = {"Authorization": f"Bearer {await add_token(db_url, owner.id)}"}
    jid = await enqueue(engine, settings, owner.id)
    assert (await client.post(f"/api/jobs/{jid}/cancel", headers=h)).status_code == 200
    assert await counts(pg) == (0, 0)


async def test_run_now_reschedule_and_delete_through_the_api(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await add_user(db_url, "root@example.com", admin=True)
    api_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    owner_h = {"Authorization": f"Bearer {await add_token(db_url, owner.id)}"}
    jid = await enqueue(engine, settings, owner.id, run_at=datetime(2031, 1, 1, tzinfo=UTC))
    assert (await client.post(f"/api/jobs/{jid}/run-now", headers=owner_h)).status_code == 403
    moved = await client.post(
        f"/api/jobs/{jid}/reschedule", json={"run_at": "2032-02-03T04:05:00+00:00"}, headers=api_h
    )
    assert moved.status_code == 200
    assert moved.json()["run_at"].startswith("2032-02-03T04:05")
    naive = await client.post(
        f"/api/jobs/{jid}/reschedule", json={"run_at": "2032-02-03T04:05:00"}, headers=api_h
    )
    assert naive.status_code == 422
    assert "run_at" in naive.json()["errors"]
    now = await client.post(f"/api/jobs/{jid}/run-now", headers=api_h)
    assert now.status_code == 200
    assert await pg.fetchval("SELECT run_at <= now() FROM jobs WHERE id = $1", jid)
    assert (await client.delete(f"/api/jobs/{jid}", headers=owner_h)).status_code == 403
    assert (await client.delete(f"/api/jobs/{jid}", headers=api_h)).status_code == 204
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE id = $1", jid) == 0
    actions = [r["action"] for r in await pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    # the time without an offset is a refused reschedule: on the trail, with no notice
    assert actions == ["job.reschedule", "job.reschedule", "job.run_now", "job.delete"]
    assert (await counts(pg))[1] == 3


# --- diagnostic and internal types are for admins, on every path -------------------------------------------


async def test_a_non_admin_cannot_submit_diagnostic_or_internal_types_by_any_path_and_admins_can(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    admin = await add_user(db_url, "root@example.com", admin=True)
    ann_h = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    admin_h = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    token = await csrf(client)

    assert (await client.get("/jobs/new/noop")).status_code == 404
    form = await client.post("/jobs/new/sleep", data={"_csrf_token": token, "seconds": "1"})
    assert form.status_code == 404
    for type_ in ("noop", "sleep", "images.batch", "report.csv_report"):
        r = await client.post("/api/jobs", json={"type": type_}, headers=ann_h)
        assert r.status_code == 422, (type_, r.text)
        assert "only admins" in r.json()["errors"]["type"], (type_, r.text)
    adhoc = {
        "name": "sneaky",
        "steps": [{"key": "a", "type": "test.step"}, {"key": "b", "type": "noop", "depends_on": ["a"]}],
    }
    r = await client.post("/api/pipelines", json=adhoc, headers=ann_h)
    assert r.status_code == 422, r.text
    assert "only admins" in r.json()["errors"]["steps[1].type"], r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0

    # admins may, by every path
    assert (await client.post("/api/jobs", json={"type": "noop"}, headers=admin_h)).status_code == 201
    assert (await client.post("/api/pipelines", json=adhoc, headers=admin_h)).status_code == 201
    await switch_to(client, "root@example.com")
    token = await csrf(client)
    made = await client.post(
        "/jobs/new/sleep", data={"_csrf_token": token, "seconds": "1"}, follow_redirects=False
    )
    assert made.status_code == 303, made.text[:300]


async def test_templates_still_run_their_internal_steps_for_anyone(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    ann_h = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    fid = await upload(engine, settings, ann.id, data=b"state,crimes\nOhio,12\nUtah,3\n", name="crime.csv")
    r = await client.post(
        "/api/pipelines", json={"template": "csv_report_review", "input_data": {"file": fid}}, headers=ann_h
    )
    assert r.status_code == 201, r.text
    types = {s["type"] for s in r.json()["steps"]}
    assert "report.csv_report" in types  # an internal type, as a template's step
    token = await csrf(client)
    page = await client.post(
        "/pipelines/new/test.steps", data={"_csrf_token": token, "title": "Mine"}, follow_redirects=False
    )
    assert page.status_code == 303, page.text[:300]


async def test_run_again_of_a_diagnostic_job_is_refused_to_a_non_admin_owner(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com")
    h = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    jid = await enqueue(engine, settings, ann.id, "noop")  # e.g. made when ann was still an admin
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result={})
    r = await client.post(f"/api/jobs/{jid}/run-again", headers=h)
    assert r.status_code == 403
    assert "only admins" in r.json()["detail"].lower()
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
    # The new job would be Ann's, so an admin's "run again" is refused too, on the API and the page, as
    # a schedule of a diagnostic type for her is; an admin's own such job runs again.
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    root_h = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    r = await client.post(f"/api/jobs/{jid}/run-again", headers=root_h)
    assert r.status_code == 403, r.text
    assert "owner, who is not an admin" in r.json()["detail"], r.json()
    r = await client.post(f"/jobs/{jid}/run-again", headers={**HX, "x-csrftoken": await csrf(client)})
    assert r.status_code == 403 and "who is not an admin" in r.text, r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
    own = await enqueue(engine, settings, root.id, "noop")
    assert (await client.post(f"/api/jobs/{own}/run-again", headers=root_h)).status_code == 201


def test_the_catalogue_and_next_job_rules() -> None:
    """The rules themselves: an internal step is a next job only of a step of its own group (or of a
    type that declares it); a public type cannot turn into a diagnostic one for a non-admin."""
    ann = CurrentUser(id=1, email="ann@example.com", is_admin=False)
    root = CurrentUser(id=2, email="root@example.com", is_admin=True)
    public = {s.type for s in access.submittable_types(ann)}
    assert {"noop", "sleep", "images.batch", "report.csv_report"}.isdisjoint(public)
    assert {"http.request", "images.thumbnail", "test.step"} <= public
    assert {"noop", "images.batch"} <= {s.type for s in access.submittable_types(root)}
    assert access.may_create_next(ann, "images.batch", "images.thumbnail")
    assert not access.may_create_next(ann, "test.step", "images.batch")  # another pipeline's step
    assert access.may_create_next(ann, "images.batch", "report.csv_report")  # a step of its own group
    assert not access.may_create_next(ann, "test.step", "noop")
    assert access.may_create_next(root, "test.step", "noop")
    assert not access.may_create_next(ann, "test.step", "no.such.type")


async def test_run_again_of_a_step_that_reads_its_parents_results_runs_with_the_values_they_gave(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    """A new job runs on its own, without the parents its input's ``$ref`` reads: Run again gives it the
    values the parents gave (the page and the API alike); when a parent gave none, it says why."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    h = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}

    async def pipeline(label: str) -> tuple[uuid.UUID, uuid.UUID]:
        steps = [
            {"key": "first", "type": "test.step", "input_data": {"label": label}},
            {
                "key": "second",
                "type": "test.step",
                "depends_on": ["first"],
                "input_data": {"label": {"$ref": "first.label"}},
            },
        ]
        r = await client.post("/api/pipelines", json={"name": label, "steps": steps}, headers=h)
        assert r.status_code == 201, r.text
        ids = {s["key"]: uuid.UUID(s["job_id"]) for s in r.json()["steps"]}
        return ids["first"], ids["second"]

    first, second = await pipeline("one")
    await claim(engine, first)
    await finish(engine, settings, first, "completed", result={"label": "from first"})
    await claim(engine, second)
    await finish(engine, settings, second, "completed", result={"label": "done"})
    r = await client.post(f"/api/jobs/{second}/run-again", headers=h)
    assert r.status_code == 201, r.text
    assert r.json()["input_data"] == {"label": "from first", "seconds": 0.0}
    r = await client.post(f"/jobs/{second}/run-again", headers={**HX, "x-csrftoken": await csrf(client)})
    assert r.status_code == 200, r.text
    made = await pg.fetch("SELECT input_data FROM jobs WHERE pipeline_id IS NULL ORDER BY id")
    assert [json.loads(x["input_data"])["label"] for x in made] == ["from first"] * 2

    # A first step that failed gave no result: the second step (cancelled) cannot run again; why is said.
    first, second = await pipeline("two")
    await claim(engine, first)
    await finish(engine, settings, first, "failed", error="Boom", permanent=True)
    r = await client.post(f"/api/jobs/{second}/run-again", headers=h)
    assert r.status_code == 422, r.text
    assert "reads its parents' results" in r.text, r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE pipeline_id IS NULL") == 2
