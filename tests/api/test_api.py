"""The JSON API: shapes, status codes, ownership (case C20), readable 4xx for bad input (cases C05, C09,
C12, C13), and a fuzz pass that finds no 500."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import tests.support.forms
import tests.support.processors  # noqa: F401  (test job types)
from tests.support.webkit import app_client, bearer
from tests.support.workers import running_worker, wait_until


@pytest.fixture
async def api(make_settings, db_url):
    """``(client, headers_of)``: an app client and a function giving Bearer headers per user."""
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        yield client, settings


async def test_enqueue_returns_201_then_200_for_an_idempotent_repeat(api, db_url) -> None:
    client, _ = api
    _, h = await bearer(db_url, "a@example.com", admin=True)
    body = {"type": "sleep", "input_data": {"seconds": 1}, "idempotency_key": "k1"}
    first = await client.post("/api/jobs", json=body, headers=h)
    assert first.status_code == 201, first.text
    job = first.json()
    assert job["status"] == "queued"
    assert job["input_data"] == {"seconds": 1.0}
    assert job["dependent_on_jobs"] == []
    assert set(job) >= {
        "id",
        "type",
        "status",
        "is_active",
        "input_data",
        "result_data",
        "error_message",
        "attempts",
        "max_attempts",
        "priority",
        "run_at",
        "pipeline_id",
        "dependent_on_jobs",
        "progress",
        "user_id",
        "created_at",
        "updated_at",
        "started_at",
        "completed_at",
    }
    again = await client.post("/api/jobs", json=body, headers=h)
    assert again.status_code == 200
    assert again.json()["id"] == job["id"]
    assert again.json()["input_data"] == {"seconds": 1.0}
    # the key with another request is refused, naming the key and the job it made
    other = await client.post("/api/jobs", json={**body, "input_data": {"seconds": 2}}, headers=h)
    assert other.status_code == 422 and job["id"] in other.json()["errors"]["idempotency_key"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"type": "nope"}, 422, "type"),
        ({"type": "sleep", "input_data": {"seconds": "soon"}}, 422, "input_data.seconds"),
        ({"type": "noop", "input_data": {"name": "a\u0000b"}}, 422, "input_data.name"),
        ({"type": "noop", "max_attempts": 10**9}, 422, "max_attempts"),
        ({"type": "noop", "max_attempts": 0}, 422, "max_attempts"),
        ({"type": "noop", "run_at": "2030-01-01T09:00:00"}, 422, "run_at"),
        ({"type": "noop", "priority": 1000}, 422, "priority"),
        ({"type": "noop", "dependent_on_jobs": [str(uuid.uuid4())]}, 422, "dependent_on_jobs"),
    ],
)
async def test_bad_input_gets_a_422_naming_the_field_and_stores_nothing(
    api, db_url, pg, body, status, field
) -> None:
    client, _ = api
    _, h = await bearer(db_url, "b@example.com", admin=True)
    response = await client.post("/api/jobs", json=body, headers=h)
    assert response.status_code == status, response.text
    payload = response.json()
    assert field in payload["detail"] or field in payload.get("errors", {})
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_input_above_the_limit_is_a_413_with_the_limit_in_words(make_settings, db_url, pg) -> None:
    settings = make_settings(worker_enabled=False, job_max_input_bytes=1024 * 1024)
    async with app_client(settings) as client:
        _, h = await bearer(db_url, "c@example.com", admin=True)
        response = await client.post(
            "/api/jobs", json={"type": "noop", "input_data": {"blob": "x" * (2 * 1024 * 1024)}}, headers=h
        )
    assert response.status_code == 413
    assert "1 MiB" in response.json()["detail"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_body_above_the_request_limit_is_a_413_too(make_settings, db_url) -> None:
    settings = make_settings(worker_enabled=False, upload_max_bytes=64 * 1024)
    async with app_client(settings) as client:
        _, h = await bearer(db_url, "c2@example.com", admin=True)
        response = await client.post(
            "/api/jobs",
            content=json.dumps({"type": "noop", "input_data": {"b": "x" * 200_000}}),
            headers={**h, "content-type": "application/json"},
        )
    assert response.status_code == 413
    assert "64 KiB" in response.json()["detail"]


async def test_owners_see_only_their_jobs_and_get_404_for_others(api, db_url) -> None:
    client, _ = api
    _, u1 = await bearer(db_url, "u1@example.com")
    u2_user, u2 = await bearer(db_url, "u2@example.com")
    _, admin = await bearer(db_url, "admin@example.com", admin=True)
    job = (await client.post("/api/jobs", json={"type": "test.step"}, headers=u1)).json()
    unknown = str(uuid.uuid4())
    for path in (f"/api/jobs/{job['id']}", f"/api/jobs/{job['id']}/events"):
        theirs, missing = (
            await client.get(path, headers=u2),
            await client.get(path.replace(job["id"], unknown), headers=u2),
        )
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["detail"].replace(job["id"], "X") == missing.json()["detail"].replace(
            unknown, "X"
        )
    for action in ("cancel", "retry", "approve", "rerun", "run-again"):
        assert (await client.post(f"/api/jobs/{job['id']}/{action}", headers=u2)).status_code == 404, action
    # someone else's jobs are refused in words, not answered with one's own as if the filter were read
    other = await client.get(f"/api/jobs?user_id={job['user_id']}", headers=u2)
    assert other.status_code == 403, other.text
    assert "Only an administrator can list another person's jobs" in other.json()["detail"]
    mine = (await client.get("/api/jobs", headers=u2)).json()["items"]
    assert mine == []
    own = await client.get(f"/api/jobs?user_id={u2_user.id}", headers=u2)
    assert own.status_code == 200 and own.json()["items"] == [], own.text
    assert (await client.get(f"/api/jobs/{job['id']}", headers=admin)).status_code == 200
    assert len((await client.get("/api/jobs", headers=admin)).json()["items"]) == 1
    assert (await client.get(f"/api/jobs/{job['id']}", headers=u1)).json()["status"] == "queued"  # unchanged


async def test_cancel_then_cancel_again_gives_a_readable_409(api, db_url) -> None:
    client, _ = api
    _, h = await bearer(db_url, "d@example.com")
    job = (await client.post("/api/jobs", json={"type": "test.step"}, headers=h)).json()
    first = await client.post(f"/api/jobs/{job['id']}/cancel", headers=h)
    assert first.status_code == 200
    assert first.json()["status"] == "cancelled"
    second = await client.post(f"/api/jobs/{job['id']}/cancel", headers=h)
    assert second.status_code == 409
    assert "it has already finished (Cancelled)" in second.json()["detail"]


async def test_retry_is_for_the_owner_or_an_admin_and_409_when_not_failed(api, db_url, pg) -> None:
    client, _ = api
    _, h = await bearer(db_url, "e@example.com")
    _, stranger = await bearer(db_url, "e-other@example.com")
    _, admin = await bearer(db_url, "e-admin@example.com", admin=True)
    job = (await client.post("/api/jobs", json={"type": "test.step"}, headers=h)).json()
    assert (await client.post(f"/api/jobs/{job['id']}/retry", headers=stranger)).status_code == 404
    mine = await client.post(f"/api/jobs/{job['id']}/retry", headers=h)
    assert mine.status_code == 409  # the owner may ask; the job has not failed
    not_failed = await client.post(f"/api/jobs/{job['id']}/retry", headers=admin)
    assert not_failed.status_code == 409
    assert "it is Waiting, not failed" in not_failed.json()["detail"]


async def test_list_is_keyset_paginated_newest_first_and_filterable(api, db_url) -> None:
    client, _ = api
    _, h = await bearer(db_url, "f@example.com")
    ids = [
        (
            await client.post(
                "/api/jobs", json={"type": "test.step", "input_data": {"label": str(i)}}, headers=h
            )
        ).json()["id"]
        for i in range(5)
    ]
    page1 = (await client.get("/api/jobs?limit=2", headers=h)).json()
    page2 = (await client.get(f"/api/jobs?limit=2&after={page1['next']}", headers=h)).json()
    page3 = (await client.get(f"/api/jobs?limit=2&after={page2['next']}", headers=h)).json()
    assert [j["id"] for j in page1["items"] + page2["items"] + page3["items"]] == ids[::-1]
    assert page3["next"] is None
    assert "input_data" not in page1["items"][0]
    assert (await client.get("/api/jobs?status=cancelled", headers=h)).json()["items"] == []
    assert (await client.get("/api/jobs?status=bogus", headers=h)).status_code == 422
    assert [
        j["id"] for j in (await client.get("/api/jobs?type=test.step", headers=h)).json()["items"]
    ] == ids[::-1]
    # a misspelt type matched nothing and answered an empty list, as if there were no such jobs
    typo = await client.get("/api/jobs?type=test_step", headers=h)
    assert typo.status_code == 422, typo.text
    assert typo.json()["errors"] == {"type": "unknown job type 'test_step': no job type has this name"}


async def test_a_template_pipeline_started_by_the_api_takes_its_name(api, db_url, pg) -> None:
    """``name`` beside ``template`` was a known field dropped silently (201, the pipeline named after the
    template), while the template form keeps its "Name this pipeline". It names the run now, held to the
    same limit, a refusal naming ``name``; without it the template's title is the name."""
    client, _ = api
    _, h = await bearer(db_url, "n@example.com")
    body = {"template": "test.steps", "input_data": {"title": "x"}}
    named = await client.post("/api/pipelines", json={**body, "name": "  my named run "}, headers=h)
    assert named.status_code == 201, named.text
    assert named.json()["name"] == "my named run"
    assert await pg.fetchval("SELECT name FROM pipelines") == "my named run"
    plain = await client.post("/api/pipelines", json=body, headers=h)
    assert plain.json()["name"] == "Four steps"
    for bad in ("x" * 201, "bad\x00name"):
        refused = await client.post("/api/pipelines", json={**body, "name": bad}, headers=h)
        assert refused.status_code == 422, refused.text
        assert list(refused.json()["errors"]) == ["name"], refused.text
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 2


async def test_pipelines_api_creates_reads_and_reports_cycles(api, db_url, pg) -> None:
    client, _ = api
    _, h = await bearer(db_url, "g@example.com")
    cycle = await client.post(
        "/api/pipelines",
        json={
            "name": "loop",
            "steps": [
                {"key": "a", "type": "test.step", "depends_on": ["b"]},
                {"key": "b", "type": "test.step", "depends_on": ["a"]},
            ],
        },
        headers=h,
    )
    assert cycle.status_code == 422
    assert "dependency cycle: a → b → a" in cycle.json()["detail"]
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0
    made = await client.post(
        "/api/pipelines",
        json={
            "name": "two steps",
            "steps": [
                {"key": "a", "type": "test.step"},
                {"key": "b", "type": "test.step", "depends_on": ["a"]},
            ],
        },
        headers=h,
    )
    assert made.status_code == 201, made.text
    p = made.json()
    assert p["status"] == "running"
    assert p["progress"] == 0
    assert [(s["key"], s["depends_on"]) for s in p["steps"]] == [("a", []), ("b", ["a"])]
    assert set(p["steps"][0]) >= {
        "job_id",
        "key",
        "type",
        "title",
        "status",
        "depends_on",
        "started_at",
        "completed_at",
    }
    _, other = await bearer(db_url, "g2@example.com")
    assert (await client.get(f"/api/pipelines/{p['id']}", headers=other)).status_code == 404
    assert (await client.post(f"/api/pipelines/{p['id']}/cancel", headers=other)).status_code == 404
    cancelled = await client.post(f"/api/pipelines/{p['id']}/cancel", headers=h)
    assert cancelled.json()["cancelled"] == 2
    assert cancelled.json()["pipeline"]["status"] == "cancelled"
    history = (await client.get(f"/api/pipelines/{p['id']}/events", headers=h)).json()
    assert [e["kind"] for e in history] == ["enqueued", "enqueued", "cancelled", "cancelled"]
    # Cancelling it again changes nothing, and says so as a finished job's cancel does: a 409.
    again = await client.post(f"/api/pipelines/{p['id']}/cancel", headers=h)
    assert again.status_code == 409, again.text
    assert "already finished" in again.json()["detail"]


async def test_a_pipeline_runs_end_to_end_through_the_api(make_settings, db_url, pg) -> None:
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client, running_worker(settings):
        _, h = await bearer(db_url, "h@example.com", admin=True)
        p = (
            await client.post(
                "/api/pipelines",
                json={
                    "name": "fan",
                    "steps": [
                        {"key": "start", "type": "noop"},
                        {"key": "left", "type": "noop", "depends_on": ["start"]},
                        {"key": "right", "type": "noop", "depends_on": ["start"]},
                        {"key": "join", "type": "test.collect", "depends_on": ["left", "right"]},
                    ],
                },
                headers=h,
            )
        ).json()

        async def done() -> bool:
            return (await client.get(f"/api/pipelines/{p['id']}", headers=h)).json()["status"] == "completed"

        await wait_until(done, what="the pipeline")
        view = (await client.get(f"/api/pipelines/{p['id']}", headers=h)).json()
    assert view["progress"] == 100
    assert all(s["status"] == "completed" for s in view["steps"])


async def test_job_types_hide_diagnostic_types_from_non_admins(api, db_url) -> None:
    client, _ = api
    _, h = await bearer(db_url, "i@example.com")
    _, admin = await bearer(db_url, "i-admin@example.com", admin=True)
    mine = {t["type"] for t in (await client.get("/api/job-types", headers=h)).json()}
    theirs = {t["type"]: t for t in (await client.get("/api/job-types", headers=admin)).json()}
    assert {"noop", "sleep", "fail"} <= set(theirs)
    assert not ({"noop", "sleep", "fail"} & mine)
    assert theirs["sleep"]["input_schema"]["properties"]["seconds"]["maximum"] == 3600


# --- fuzz: no input gets a 500 ------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
job_bodies = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["noop", "sleep", "fail", "nope", ""]) | json_values,
        "input_data": json_values
        | st.fixed_dictionaries({}, optional={"seconds": json_values, "times": json_values}),
        "priority": json_values,
        "run_at": st.sampled_from(
            [
                "2030-01-01T00:00:00Z",
                "2030-01-01T00:00:00",
                "yesterday",
                "9999-12-31T23:59:59+14:00",
                "0001-01-01T00:00:00Z",
            ]
        )
        | json_values,
        "max_attempts": st.integers() | json_values,
        "idempotency_key": st.text(max_size=300) | json_values,
        "title": json_values,
        "dependent_on_jobs": st.lists(st.uuids().map(str) | st.text(max_size=5), max_size=3) | json_values,
    },
)
pipeline_bodies = st.fixed_dictionaries(
    {},
    optional={
        "template": st.text(max_size=10) | json_values,
        "input_data": json_values,
        "name": st.text(max_size=10) | json_values,
        "steps": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "key": st.sampled_from(["a", "b", "c", ""]) | json_values,
                    "type": st.sampled_from(["noop", "sleep", "x"]) | json_values,
                    "depends_on": st.lists(st.sampled_from(["a", "b", "c", "z"]), max_size=3) | json_values,
                    "input_data": json_values,
                    "requires_approval": json_values,
                },
            ),
            max_size=4,
        )
        | json_values,
    },
)


def test_fuzzed_requests_never_get_a_500(make_settings, db_url) -> None:
    """A fuzz pass that finds no 500: random bodies for enqueue and pipeline
    creation, random ids and actions, as an admin (who may reach every handler)."""
    import asyncio

    from litestar.testing import TestClient

    from app.server import create_app

    async def setup() -> dict[str, str]:
        _, headers = await bearer(db_url, "fuzz@example.com", admin=True)
        return headers

    h = asyncio.run(setup())
    seen: list[int] = []
    with TestClient(app=create_app(make_settings(worker_enabled=False))) as client:

        @hsettings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(
            kind=st.sampled_from(["job", "pipeline", "get", "action", "list"]),
            body=job_bodies | pipeline_bodies | json_values,
            path=st.text(alphabet="abcdef0123456789-%/.?&=", max_size=40),
            action=st.sampled_from(["cancel", "retry", "approve", "reject", "rerun", "run-again", "events"]),
        )
        def run(kind: str, body: Any, path: str, action: str) -> None:
            if kind == "job":
                r = client.post("/api/jobs", json=body, headers=h)
            elif kind == "pipeline":
                r = client.post("/api/pipelines", json=body, headers=h)
            elif kind == "get":
                r = client.get(f"/api/jobs/{path}", headers=h)
            elif kind == "list":
                r = client.get(f"/api/jobs?{path}", headers=h)
            else:
                r = client.post(f"/api/jobs/{path or 'x'}/{action}", json=body, headers=h)
            seen.append(r.status_code)
            assert r.status_code < 500, (kind, body, path, action, r.status_code, r.text[:300])

        run()
    assert len(seen) >= 150
    assert any(s in (200, 201) for s in seen)
    assert any(s == 422 for s in seen)
