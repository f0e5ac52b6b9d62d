"""One rule for every one-time key, on every path: a key sent again with the same request is answered
with what the first request made; sent again with a different request it is refused, naming the key
(``KeyReused``, a 422), never answered with the first request's job, pipeline or batch as if the second
one had gone in. The paths: ``queue.enqueue`` (on the engine and in a transaction), ``enqueue_many``,
``POST /api/jobs``, the job form, the pipeline form and the batch form (``POST /api/pipelines`` and
``POST /api/batches``: tests/api/test_api_keys_pipelines_batches.py). Concurrent first requests with one key and different contents make
one job and refuse the others."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, test.step, test.steps)
from app.errors import KeyReused
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support.factories import TestUser
from tests.support.webkit import add_token, csrf_from, sign_in_as


def _form_key(html: str) -> str:
    return re.search(r'name="_form_key" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]


def _job(owner: TestUser, **kw: Any) -> NewJob:
    fields: dict[str, Any] = {"type": "sleep", "input_data": {"seconds": 1}, "idempotency_key": "order-42"}
    return NewJob(user_id=owner.id, **{**fields, **kw})


LATER = datetime(2031, 1, 2, 9, 0, tzinfo=UTC)
CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("type", {"type": "noop", "input_data": {}}),
    ("input_data", {"input_data": {"seconds": 2}}),
    ("priority", {"priority": 5}),
    ("max_attempts", {"max_attempts": 9}),
    ("title", {"title": "Another name"}),
    ("run_at", {"run_at": LATER + timedelta(hours=1)}),
    ("requires_approval", {"requires_approval": True}),
]
"""Each field of a job's request, and a repeat that changes only it (the first request has ``run_at``
:data:`LATER`)."""


@pytest.mark.parametrize("in_transaction", [False, True], ids=["engine", "transaction"])
async def test_queue_enqueue_answers_the_same_request_and_refuses_each_different_field(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection, in_transaction: bool
) -> None:
    async def enqueue(job: NewJob) -> queue.Enqueued:
        if not in_transaction:
            return await queue.enqueue(engine, job, settings)
        async with engine.begin() as conn:
            return await queue.enqueue(conn, job, settings)

    first = await enqueue(_job(owner, run_at=LATER))
    # the same request: the same moment in another zone, the input as sent (normalised: 1 is 1.0)
    same = await enqueue(_job(owner, run_at=LATER.astimezone(timezone(timedelta(hours=5)))))
    assert (first.created, same.created, same.job["id"]) == (True, False, first.job["id"])
    for field, change in CHANGES:
        with pytest.raises(KeyReused) as refused:
            await enqueue(_job(owner, **{"run_at": LATER, **change}))
        assert field in refused.value.differs, field
        assert str(first.job["id"]) in refused.value.errors["idempotency_key"], field
    with pytest.raises(KeyReused) as refused:  # "now" is not the moment the first asked for
        await enqueue(_job(owner))
    assert refused.value.differs == ("run_at",)
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_queue_enqueue_compares_dependencies_and_keeps_the_run_at_asked_for(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    parent = (await queue.enqueue(engine, _job(owner, idempotency_key=None), settings)).job["id"]
    other = (await queue.enqueue(engine, _job(owner, idempotency_key=None), settings)).job["id"]
    first = await queue.enqueue(engine, _job(owner, depends_on=[parent]), settings)
    assert not (await queue.enqueue(engine, _job(owner, depends_on=[parent]), settings)).created
    for deps in ([], [other], [parent, other]):
        with pytest.raises(KeyReused) as refused:
            await queue.enqueue(engine, _job(owner, depends_on=deps), settings)
        assert refused.value.differs == ("dependent_on_jobs",)
    # the job's run_at column moves (a reschedule); the repeat is compared with the moment asked for
    await pg.execute("UPDATE jobs SET run_at = now() + interval '1 day' WHERE id = $1", first.job["id"])
    assert not (await queue.enqueue(engine, _job(owner, depends_on=[parent]), settings)).created


async def test_enqueue_many_skips_the_same_request_and_refuses_a_different_one_by_index(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    async with engine.begin() as conn:
        made = await queue.enqueue_many(conn, [_job(owner)], settings)
    async with engine.begin() as conn:
        again = await queue.enqueue_many(conn, [_job(owner, idempotency_key=None), _job(owner)], settings)
    assert len(again) == 1 and made[0] not in again
    with pytest.raises(KeyReused) as refused:
        async with engine.begin() as conn:
            await queue.enqueue_many(
                conn,
                [
                    _job(owner, idempotency_key=None),
                    _job(owner, priority=3),
                    _job(owner, idempotency_key="new"),
                ],
                settings,
            )
    assert list(refused.value.errors) == ["jobs[1].idempotency_key"]
    assert str(made[0]) in refused.value.errors["jobs[1].idempotency_key"]
    # two jobs of one call with one key: the second is a repeat of the first
    with pytest.raises(KeyReused) as refused:
        async with engine.begin() as conn:
            await queue.enqueue_many(
                conn,
                [_job(owner, idempotency_key="pair"), _job(owner, idempotency_key="pair", title="B")],
                settings,
            )
    assert list(refused.value.errors) == ["jobs[1].idempotency_key"]
    # nothing of a refused call was inserted
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 2


async def test_post_api_jobs_answers_200_for_the_same_request_and_422_for_a_different_one(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    body = {"type": "test.step", "input_data": {"label": "a"}, "idempotency_key": "k", "tags": ["x", "y"]}
    first = await client.post("/api/jobs", json=body, headers=headers)
    assert first.status_code == 201, first.text
    again = await client.post("/api/jobs", json={**body, "tags": ["y", "x"]}, headers=headers)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"], again.text
    for change in ({"input_data": {"label": "b"}}, {"priority": -1}, {"tags": ["x"]}, {"title": "Mine"}):
        other = await client.post("/api/jobs", json={**body, **change}, headers=headers)
        assert other.status_code == 422, (change, other.text)
        message = other.json()["errors"]["idempotency_key"]
        assert "already used for a different request" in message and first.json()["id"] in message, message
    # every field that differs is named, the API's own (tags) with the job's
    both = await client.post("/api/jobs", json={**body, "priority": -3, "tags": ["x"]}, headers=headers)
    assert "(priority, tags differ)" in both.json()["errors"]["idempotency_key"], both.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_the_job_form_sent_again_is_the_same_job_and_with_other_values_comes_back_saying_so(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "name": "Ann"}
    document = {"document": ("notes.txt", b"the same bytes", "text/plain")}
    first = await client.post("/jobs/new/test.form", data=form, files=document, follow_redirects=False)
    # a double click sends the upload again: the same bytes are the file stored the first time
    twice = await client.post("/jobs/new/test.form", data=form, files=document, follow_redirects=False)
    assert first.status_code == twice.status_code == 303, twice.text[-500:]
    assert first.headers["location"] == twice.headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM files") == 1
    changed = await client.post(
        "/jobs/new/test.form", data={**form, "name": "Bo"}, files=document, follow_redirects=False
    )
    assert changed.status_code == 422
    assert "This form was sent already" in changed.text
    assert "Please fix" not in changed.text  # nothing to fix: sending it again starts a new job
    assert f'<a href="{first.headers["location"]}">a job</a>' in changed.text
    assert _form_key(changed.text) != form["_form_key"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_the_pipeline_form_sent_again_is_the_same_pipeline_and_with_other_values_comes_back_saying_so(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/pipelines/new/test.steps")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "title": "Weekly"}
    first = await client.post("/pipelines/new/test.steps", data=form, follow_redirects=False)
    twice = await client.post("/pipelines/new/test.steps", data=form, follow_redirects=False)
    assert first.status_code == twice.status_code == 303
    assert first.headers["location"] == twice.headers["location"]
    for change in ({"title": "Monthly"}, {"seconds": "3"}, {"_title": "My run"}):
        changed = await client.post(
            "/pipelines/new/test.steps", data={**form, **change}, follow_redirects=False
        )
        assert changed.status_code == 422, (change, changed.status_code)
        assert "This form was sent already" in changed.text, change
        assert f'<a href="{first.headers["location"]}">a pipeline</a>' in changed.text
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 1


async def test_the_batch_form_sent_again_is_the_same_batch_and_with_other_rows_comes_back_saying_so(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/test.step")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text)}
    sheet = {"sheet": ("rows.csv", b"label,other\na,x\nb,y\n", "text/csv")}
    mapped = await client.post("/batches/new/test.step", data=form, files=sheet)
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text).group(1)  # type: ignore[union-attr]
    start = {
        **form,
        "_form_key": _form_key(mapped.text),
        "sheet_id": sheet_id,
        "map.label": "0",
        "_name": "B",
    }
    first = await client.post("/batches/new/test.step", data=start, follow_redirects=False)
    twice = await client.post("/batches/new/test.step", data=start, follow_redirects=False)
    assert first.status_code == twice.status_code == 303, twice.text[-500:]
    assert first.headers["location"] == twice.headers["location"]
    for change in ({"map.label": "1"}, {"_name": "C"}):
        changed = await client.post(
            "/batches/new/test.step", data={**start, **change}, follow_redirects=False
        )
        assert changed.status_code == 422, (change, changed.status_code)
        assert "This form was sent already" in changed.text, change
        assert f'<a href="{first.headers["location"]}">a batch</a>' in changed.text
    assert await pg.fetchval("SELECT count(*) FROM batches") == 1
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 2


async def test_a_form_with_files_sent_again_names_the_files_it_stored_and_other_files_are_refused(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """The pipeline form and the batch form with files: read whole when sent again (the files it repeats
    are the ones the first sending stored, by the form's key: ``store_upload``), so a double click asks
    for the same pipeline or batch and is answered with it; other bytes under the same key are a
    different request and come back with the notice."""
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/pipelines/new/csv_report_review")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text)}
    sheet = {"file": ("rows.csv", b"a,b\n1,2\n", "text/csv")}
    answers = [
        await client.post("/pipelines/new/csv_report_review", data=form, files=sheet, follow_redirects=False)
        for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [303, 303], answers[1].text[-500:]
    assert answers[0].headers["location"] == answers[1].headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM files") == 1
    other = {"file": ("rows.csv", b"a,b\n3,4\n", "text/csv")}
    changed = await client.post(
        "/pipelines/new/csv_report_review", data=form, files=other, follow_redirects=False
    )
    assert changed.status_code == 422
    assert f'<a href="{answers[0].headers["location"]}">a pipeline</a>' in changed.text
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 1

    stored = await pg.fetchval("SELECT count(*) FROM files")  # the refused form's file is kept for it
    page = await client.get("/batches/new/report.csv_check")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text)}
    files = [("files", (f"t{i}.csv", f"a,b\n{i},2\n".encode(), "text/csv")) for i in range(2)]
    answers = [
        await client.post("/batches/new/report.csv_check", data=form, files=files, follow_redirects=False)
        for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [303, 303], answers[1].text[-500:]
    assert answers[0].headers["location"] == answers[1].headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM files") == stored + 2
    changed = await client.post(
        "/batches/new/report.csv_check", data=form, files=files[:1], follow_redirects=False
    )
    assert changed.status_code == 422
    assert f'<a href="{answers[0].headers["location"]}">a batch</a>' in changed.text
    assert await pg.fetchval("SELECT count(*) FROM batches") == 1


async def test_concurrent_first_requests_with_one_key_and_different_contents_make_one_job(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """Twenty requests with one key at once, half asking for one input and half for another: one job,
    every request of its input answered with it, every other one refused — none answered with a job it
    did not ask for."""
    jobs = [_job(owner, input_data={"seconds": i % 2}) for i in range(20)]
    results = await asyncio.gather(
        *(queue.enqueue(engine, j, settings) for j in jobs), return_exceptions=True
    )
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
    made = await pg.fetchrow("SELECT id, input_data::text AS input FROM jobs")
    winner = 1 if '"seconds": 1' in made["input"] else 0
    for job, result in zip(jobs, results, strict=True):
        if job.input_data["seconds"] == winner:
            assert isinstance(result, queue.Enqueued) and result.job["id"] == made["id"], result
        else:
            assert isinstance(result, KeyReused), result
    assert sum(isinstance(r, queue.Enqueued) and r.created for r in results) == 1


async def test_a_key_of_only_spaces_is_refused_on_every_route_that_takes_one(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """``"  "`` was taken as a key; the one reader of keys (jobs, pipelines, batches) refuses it."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    step = {"type": "test.step", "input_data": {"label": "a"}}
    for path, body in (
        ("/api/jobs", step),
        ("/api/pipelines", {"name": "p", "steps": [{"key": "a", **step}]}),
        ("/api/batches", {"type": "test.step", "rows": [{"label": "a"}]}),
    ):
        for key in ("  ", "\t \n"):
            r = await client.post(path, json={**body, "idempotency_key": key}, headers=headers)
            assert r.status_code == 422, (path, r.text)
            assert "only spaces" in r.json()["errors"]["idempotency_key"], (path, r.text)
        ok = await client.post(path, json={**body, "idempotency_key": " k "}, headers=headers)
        assert ok.status_code == 201, (path, ok.text)
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 3
