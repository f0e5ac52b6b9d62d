"""``POST /api/pipelines`` (a template or ad hoc) and ``POST /api/batches`` take an ``idempotency_key``
with the contract of a job's: unique per person; the same request sent again (its body as sent, without
the key) answers 200 with what it made, as its GET answers, whatever has become of it; a different
request with the key is refused (422 on ``idempotency_key``); concurrent first requests make one; a
repeat is answered over the person's limits, which do not count it; another person's key is their own.
A client whose request got no answer (a timeout, a 503 saying the change may or may not have been made)
can so send it again without making a second pipeline or batch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncSession

import tests.support.forms  # noqa: F401  (registers test.step and the template test.steps)
from app.actions import batches as batch_actions
from app.actions import pipelines as pipeline_actions
from app.actions import quotas
from app.actions.trail import Actor
from app.db import create_engine
from tests.support.webkit import add_token, add_user, app_client

NO_LIMITS = {"user_max_waiting_jobs": 0, "user_max_jobs_per_minute": 0}

BODIES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "template": (
        "/api/pipelines",
        {"template": "test.steps", "input_data": {"title": "Q3", "seconds": 1}, "name": "Report"},
        {"input_data": {"title": "Q4", "seconds": 1}},
    ),
    "steps": (
        "/api/pipelines",
        {
            "name": "two",
            "steps": [
                {"key": "a", "type": "test.step", "input_data": {"label": "a"}},
                {"key": "b", "type": "test.step", "input_data": {"label": "b"}, "depends_on": ["a"]},
            ],
        },
        {"name": "other"},
    ),
    "batch": (
        "/api/batches",
        {"type": "test.step", "rows": [{"label": "a"}, {"label": "b", "seconds": 1}], "name": "rows"},
        {"rows": [{"label": "a"}]},
    ),
}
"""Each keyed path: its URL, a request, and a change that makes it a different request."""
DIFFERS = {"template": "(input_data differs)", "steps": "(name differs)", "batch": "(rows[1] differs)"}
"""What the refusal of each change says differs."""
SIZE = {"template": 4, "steps": 2, "batch": 2}
"""How many jobs each request makes."""
TABLE = {"template": "pipelines", "steps": "pipelines", "batch": "batches"}
CANCEL = {"template": "/api/pipelines/{}/cancel", "steps": "/api/pipelines/{}/cancel"}


@dataclass
class Scene:
    client: AsyncTestClient
    pg: asyncpg.Connection
    ann: dict[str, str]
    bob: dict[str, str]
    ann_id: int


@pytest.fixture
async def scene_of(make_settings: Any, pg: asyncpg.Connection) -> AsyncIterator[Any]:
    """``await scene_of(**limits)`` → a started app with two people, each with a token."""
    clients: list[Any] = []

    async def make(**limits: Any) -> Scene:
        settings = make_settings(worker_enabled=False, **{**NO_LIMITS, **limits})
        db = settings.database_url or ""
        ann = await add_user(db, "ann@example.com")
        bob = await add_user(db, "bob@example.com")
        cm = app_client(settings)
        clients.append(cm)
        client = await cm.__aenter__()
        bearer = {"Authorization": f"Bearer {await add_token(db, ann.id)}"}
        other = {"Authorization": f"Bearer {await add_token(db, bob.id)}"}
        return Scene(client, pg, bearer, other, ann.id)

    yield make
    for cm in clients:
        await cm.__aexit__(None, None, None)


def keyed(kind: str, key: str = "order-42", **change: Any) -> tuple[str, dict[str, Any]]:
    url, body, _ = BODIES[kind]
    return url, {**body, **change, "idempotency_key": key}


async def count_in(pg: asyncpg.Connection, kind: str) -> int:
    return int(await pg.fetchval(f"SELECT count(*) FROM {TABLE[kind]}"))


async def count(s: Scene, kind: str) -> int:
    return await count_in(s.pg, kind)


@pytest.mark.parametrize("kind", list(BODIES))
async def test_the_same_request_again_answers_200_with_what_it_made_as_its_get_does(
    scene_of: Any, kind: str
) -> None:
    s = await scene_of()
    url, body = keyed(kind)
    first = await s.client.post(url, json=body, headers=s.ann)
    assert first.status_code == 201, first.text
    made = first.json()["id"]
    # Another key order, and 1.0 for 1 (JSON has one kind of number), are the same request.
    again = await s.client.post(url, json=dict(reversed(list(body.items()))), headers=s.ann)
    assert again.status_code == 200, again.text
    got = await s.client.get(f"{url}/{made}", headers=s.ann)
    assert again.json() == got.json()
    if kind in CANCEL:  # whatever its state since
        assert (await s.client.post(CANCEL[kind].format(made), headers=s.ann)).status_code == 200
        later = await s.client.post(url, json=body, headers=s.ann)
        assert (later.status_code, later.json()["id"], later.json()["status"]) == (200, made, "cancelled")
    assert await count(s, kind) == 1


async def test_a_whole_number_written_with_a_point_is_the_same_request(scene_of: Any) -> None:
    s = await scene_of()
    url, body = keyed("template")
    assert (await s.client.post(url, json=body, headers=s.ann)).status_code == 201
    body["input_data"] = {"seconds": 1.0, "title": "Q3"}
    assert (await s.client.post(url, json=body, headers=s.ann)).status_code == 200
    assert await count(s, "template") == 1


@pytest.mark.parametrize("kind", list(BODIES))
async def test_a_different_request_with_the_key_is_refused_naming_it(scene_of: Any, kind: str) -> None:
    s = await scene_of()
    url, body = keyed(kind)
    first = await s.client.post(url, json=body, headers=s.ann)
    assert first.status_code == 201, first.text
    url, other = keyed(kind, **BODIES[kind][2])
    refused = await s.client.post(url, json=other, headers=s.ann)
    assert refused.status_code == 422, refused.text
    message = refused.json()["errors"]["idempotency_key"]
    assert "already used for a different request" in message and first.json()["id"] in message, message
    assert DIFFERS[kind] in message, message
    assert await count(s, kind) == 1


async def test_the_refusal_names_each_step_and_field_that_differs(scene_of: Any) -> None:
    """A request's fields, and each item of a short list (a pipeline's steps), are named; a repeat of the
    first request is still answered with its pipeline."""
    s = await scene_of()
    url, body = keyed("steps")
    first = await s.client.post(url, json=body, headers=s.ann)
    assert first.status_code == 201, first.text
    steps = [dict(step) for step in body["steps"]]
    steps[1]["input_data"] = {"label": "changed"}
    steps.append({"key": "c", "type": "test.step", "input_data": {"label": "c"}})
    refused = await s.client.post(url, json={**body, "name": "renamed", "steps": steps}, headers=s.ann)
    assert refused.status_code == 422, refused.text
    message = refused.json()["errors"]["idempotency_key"]
    assert "(name, steps[1], steps[2] differ)" in message, message
    again = await s.client.post(url, json=body, headers=s.ann)
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"]), again.text
    # a key stored before the parts were: the request's digest alone still decides, without the names
    await s.pg.execute("UPDATE pipelines SET request_digest = split_part(request_digest, ' ', 1)")
    refused = await s.client.post(url, json={**body, "name": "renamed"}, headers=s.ann)
    message = refused.json()["errors"]["idempotency_key"]
    assert refused.status_code == 422 and "(" not in message, message
    again = await s.client.post(url, json=body, headers=s.ann)
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"]), again.text


@pytest.mark.parametrize("kind", list(BODIES))
async def test_concurrent_first_requests_with_one_key_make_one(scene_of: Any, kind: str) -> None:
    s = await scene_of()
    url, body = keyed(kind)
    answers = await asyncio.gather(*[s.client.post(url, json=body, headers=s.ann) for _ in range(2)])
    assert sorted(a.status_code for a in answers) == [200, 201], [a.text for a in answers]
    assert answers[0].json()["id"] == answers[1].json()["id"]
    assert await count(s, kind) == 1


@pytest.mark.parametrize("kind", list(BODIES))
@pytest.mark.parametrize("limit", ["user_max_jobs_per_minute", "user_max_waiting_jobs"])
async def test_a_repeat_is_answered_over_the_limits_and_not_counted(
    scene_of: Any, kind: str, limit: str
) -> None:
    # One submission a minute; or as many waiting jobs as the first request makes.
    s = await scene_of(**{limit: 1 if limit == "user_max_jobs_per_minute" else SIZE[kind]})
    url, body = keyed(kind)
    first = await s.client.post(url, json=body, headers=s.ann)
    assert first.status_code == 201, first.text
    # The person is at the limit now: a new request is refused...
    url, other = keyed(kind, "another", **BODIES[kind][2])
    assert (await s.client.post(url, json=other, headers=s.ann)).status_code == 429
    # ...and a repeat is answered with what the key made, adding nothing.
    again = await s.client.post(url, json=body, headers=s.ann)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert await count(s, kind) == 1


@pytest.mark.parametrize("kind", list(BODIES))
async def test_another_persons_key_is_their_own(scene_of: Any, kind: str) -> None:
    s = await scene_of()
    url, body = keyed(kind)
    mine = await s.client.post(url, json=body, headers=s.ann)
    url, other = keyed(kind, **BODIES[kind][2])
    theirs = await s.client.post(url, json=other, headers=s.bob)
    assert (mine.status_code, theirs.status_code) == (201, 201), theirs.text
    assert mine.json()["id"] != theirs.json()["id"]
    assert await count(s, kind) == 2


async def test_an_api_key_and_a_form_key_do_not_answer_for_each_other(scene_of: Any) -> None:
    s = await scene_of()
    url, body = keyed("batch")
    await s.pg.execute(
        "INSERT INTO batches (id, user_id, type, name, source, total, form_key) "
        "VALUES (gen_random_uuid(), $1, 'test.step', 'x', 'form', 0, 'order-42')",
        s.ann_id,
    )
    assert (await s.client.post(url, json=body, headers=s.ann)).status_code == 201
    assert await count(s, "batch") == 2


async def _submit(db: AsyncSession, actor: Actor, kind: str) -> tuple[Any, bool]:
    _, body = keyed(kind)
    if kind == "batch":
        return await batch_actions.submit(
            db, actor, body["type"], body["rows"], name=body["name"], idempotency_key=body["idempotency_key"]
        )
    return await pipeline_actions.submit_api(
        db,
        actor,
        template=body.get("template"),
        input_data=body.get("input_data") or {},
        name=body.get("name"),
        steps=body.get("steps"),
        idempotency_key=body["idempotency_key"],
    )


@pytest.mark.parametrize("kind", list(BODIES))
async def test_the_unique_index_decides_and_the_loser_answers_as_a_repeat(
    make_settings: Any, pg: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Without the person's lock around the look-up (the first request not yet committed when the second
    looks), the second's insert waits on the unique index for the first, inserts nothing, and is
    answered with the first's pipeline or batch."""

    async def unlocked(db: Any, person: Any) -> None:
        return None

    monkeypatch.setattr(quotas, "lock_person", unlocked)
    settings = make_settings(worker_enabled=False, **NO_LIMITS)
    ann = await add_user(settings.database_url or "", "ann@example.com")
    actor = Actor(ann, settings=settings)
    engine = create_engine(settings.database_url or "", pool_size=2)
    try:
        async with AsyncSession(engine) as first_db, AsyncSession(engine) as second_db:
            first, created = await _submit(first_db, actor, kind)
            assert created
            second = asyncio.create_task(_submit(second_db, actor, kind))
            # The second request looks, finds nothing committed, and waits on the index in its insert.
            for _ in range(100):
                if await pg.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                ):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the second insert never waited for the first")
            await first_db.commit()
            row, created = await second
            await second_db.commit()
    finally:
        await engine.dispose()
    assert (row["id"], created) == (first["id"], False)
    assert await count_in(pg, kind) == 1


async def test_the_openapi_document_describes_the_key(scene_of: Any) -> None:
    s = await scene_of()
    spec = (await s.client.get("/schema/openapi.json")).json()
    for schema, kind in (("PipelineCreate", "pipeline"), ("BatchCreate", "batch")):
        key = spec["components"]["schemas"][schema]["properties"]["idempotency_key"]
        assert f"answers 200 with the {kind} it started" in key["description"], key
    for path in ("/api/pipelines", "/api/batches"):
        assert "idempotency_key" in spec["paths"][path]["post"]["description"], path


@pytest.mark.parametrize("kind", list(BODIES))
async def test_a_key_that_cannot_be_one_is_refused_naming_it(scene_of: Any, kind: str) -> None:
    s = await scene_of()
    for key in ("", "k" * 201):
        url, body = keyed(kind, key)
        refused = await s.client.post(url, json=body, headers=s.ann)
        assert refused.status_code == 422, refused.text
        assert "must be 1 to 200 characters" in refused.json()["errors"]["idempotency_key"]
    assert await count(s, kind) == 0
