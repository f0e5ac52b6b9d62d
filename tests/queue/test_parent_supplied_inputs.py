"""An input that is valid only when the job's parents supply what it lacks (a contact sheet with no
pictures chosen shows its parents' thumbnails; a CSV report page reads an earlier step's summary) is
refused at submission on every path where the job has no parents — the job form next to its field, the
API, a spreadsheet's row, a schedule, a pipeline step without ``depends_on``, a processor's next job —
and accepted where it has them, instead of a job that fails when it runs."""

from __future__ import annotations

import re
import uuid
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app import pipelines
from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob
from app.jobs.queue import pipelines as queue_pipelines
from app.jobs.types import NextJob
from app.settings import Settings
from tests.support.procs import EXAMPLES, upload
from tests.support.webkit import HX, add_token, add_user, csrf, csrf_from, sign_in_as

NO_PICTURES = "choose at least one picture to put on the sheet"
PICTURE = EXAMPLES / "images" / "coffee.jpg"


def _form_key(html: str) -> str:
    return re.search(r'name="_form_key" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]


async def test_the_api_refuses_a_contact_sheet_without_pictures_naming_the_field(
    client: AsyncTestClient, db_url: str, ui_settings: Settings, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    for data in ({}, {"images": [], "columns": 3}):
        r = await client.post(
            "/api/jobs", json={"type": "images.contact_sheet", "input_data": data}, headers=bearer
        )
        assert r.status_code == 422, r.text
        assert r.json()["errors"] == {"input_data.images": NO_PICTURES}, r.text
    # a spreadsheet's rows and a schedule are jobs without parents too
    r = await client.post(
        "/api/batches", json={"type": "images.contact_sheet", "rows": [{"columns": 3}]}, headers=bearer
    )
    assert r.status_code == 422, r.text
    assert NO_PICTURES in r.json()["errors"]["rows[0].images"], r.text
    boss = await add_user(db_url, "boss@example.com", admin=True)  # schedules are admins' to make
    r = await client.post(
        "/api/schedules",
        json={"cron": "0 * * * *", "type": "images.contact_sheet", "input_data": {}, "name": "Sheet"},
        headers={"Authorization": f"Bearer {await add_token(db_url, boss.id)}"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["errors"]["input_data.images"] == NO_PICTURES, r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
    # with a picture it is accepted
    fid = await upload(engine, ui_settings, ann.id, path=PICTURE)
    r = await client.post(
        "/api/jobs", json={"type": "images.contact_sheet", "input_data": {"images": [fid]}}, headers=bearer
    )
    assert r.status_code == 201, r.text


async def test_the_job_form_shows_the_refusal_next_to_the_pictures_field(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/images.contact_sheet")
    assert "Photo batch" not in page.text  # the help does not assume a pipeline the person is not using
    assert "As a pipeline step after thumbnail steps it may be left empty" in page.text
    sent = await client.post(
        "/jobs/new/images.contact_sheet",
        data={"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "columns": "4"},
        files={"images": ("", b"", "application/octet-stream")},
        follow_redirects=False,
    )
    assert sent.status_code == 422, sent.status_code
    errors = re.findall(r'<small id="([^"]*)" class="field-error"[^>]*>([^<]*)<', sent.text)
    assert errors == [("e-images", "Choose at least one picture to put on the sheet.")], errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


def _sheet(depends_on: list[str]) -> dict[str, Any]:
    return {"key": "sheet", "type": "images.contact_sheet", "input_data": {}, "depends_on": depends_on}


async def test_a_pipeline_step_without_pictures_needs_parents(
    engine: AsyncEngine, settings: Settings, owner: Any, pg: asyncpg.Connection
) -> None:
    fid = await upload(engine, settings, owner.id, path=PICTURE)
    thumb = {"key": "thumb", "type": "images.thumbnail", "input_data": {"image": fid}}
    async with engine.begin() as conn:
        row = await pipelines.create(
            conn, name="sheet", steps=[thumb, _sheet(["thumb"])], user_id=owner.id, settings=settings
        )
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE pipeline_id = $1", row["id"]) == 2
    for steps, path in (([_sheet([])], "steps[0]"), ([thumb, _sheet([])], "steps[1]")):
        with pytest.raises(BadInput) as refused:
            async with engine.begin() as conn:
                await pipelines.create(conn, name="sheet", steps=steps, user_id=owner.id, settings=settings)
        assert refused.value.errors == {f"{path}.input_data.images": NO_PICTURES}
    # a job with parents named by id is accepted; on its own, the queue refuses it
    parent = uuid.UUID(
        str(await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'thumb'", row["id"]))
    )
    async with engine.begin() as conn:
        await queue.enqueue(conn, NewJob("images.contact_sheet", {}, owner.id, depends_on=[parent]), settings)
        with pytest.raises(BadInput) as refused:
            await queue.enqueue(conn, NewJob("images.contact_sheet", {}, owner.id), settings)
    assert refused.value.errors == {"input_data.images": NO_PICTURES}


async def test_a_next_job_without_pictures_needs_parents(
    engine: AsyncEngine, settings: Settings, owner: Any, pg: asyncpg.Connection
) -> None:
    async with engine.begin() as conn:
        made = await queue.enqueue(conn, NewJob("noop", {}, owner.id), settings)
    creator = dict(made.job)
    with pytest.raises(BadInput) as refused:
        async with engine.begin() as conn:
            await queue_pipelines.insert_next_jobs(
                conn, creator, [NextJob("images.contact_sheet", {}, key="alone")], settings
            )
    # the rule of the form, in the words of this path: the processor, not the owner, left it out
    said = refused.value.errors["next_jobs[0].input_data.images"]
    assert said.startswith("the processor left 'Pictures' empty") and NO_PICTURES not in said, said
    assert str(refused.value).startswith("next job 1 (images.contact_sheet, key 'alone'): "), refused.value
    async with engine.begin() as conn:
        await queue_pipelines.insert_next_jobs(
            conn,
            creator,
            [NextJob("images.contact_sheet", {}, key="sheet", depends_on=[made.job["id"]])],
            settings,
        )
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE type = 'images.contact_sheet'") == 1


async def test_a_csv_report_page_on_its_own_is_refused_and_in_its_pipeline_accepted(
    engine: AsyncEngine, settings: Settings, owner: Any
) -> None:
    with pytest.raises(BadInput) as refused:
        async with engine.begin() as conn:
            await queue.enqueue(conn, NewJob("report.csv_report", {}, owner.id), settings)
    assert "Summarise a CSV file" in refused.value.errors["input_data.from_step"]
    summary = {"key": "summary", "type": "noop", "input_data": {}}
    report = {"key": "report", "type": "report.csv_report", "input_data": {}, "depends_on": ["summary"]}
    async with engine.begin() as conn:
        await pipelines.create(conn, name="r", steps=[summary, report], user_id=owner.id, settings=settings)


async def test_run_again_of_a_contact_sheet_step_says_why_in_its_own_words(
    client: AsyncTestClient, db_url: str, ui_settings: Settings, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    """Run again copies a step into a job on its own: a contact sheet made from the thumbnails of the
    steps before it has none then. The refusal says so, on the page and in the API alike, instead of the
    job form's "choose at least one picture" (there is no form on that path)."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    fid = await upload(engine, ui_settings, ann.id, path=PICTURE)
    steps = [
        {"key": "thumb", "type": "images.thumbnail", "input_data": {"image": fid}},
        _sheet(["thumb"]),
    ]
    r = await client.post("/api/pipelines", json={"name": "sheet", "steps": steps}, headers=bearer)
    assert r.status_code == 201, r.text
    sheet = next(s["job_id"] for s in r.json()["steps"] if s["key"] == "sheet")
    said = "This step cannot run again as a new job on its own"
    r = await client.post(f"/api/jobs/{sheet}/run-again", headers=bearer)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(said) and "'Pictures'" in r.json()["detail"], r.text
    assert "choose" not in r.text.lower(), r.text
    r = await client.post(f"/jobs/{sheet}/run-again", headers={**HX, "x-csrftoken": await csrf(client)})
    assert r.status_code == 422, r.text
    assert said in r.text and "choose at least" not in r.text.lower() and "input_data" not in r.text, r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE pipeline_id IS NULL") == 0


async def test_run_again_of_a_csv_report_step_says_why_in_its_own_words(
    engine: AsyncEngine, settings: Settings, admin: Any
) -> None:
    """The report page of a CSV report pipeline reads an earlier step's summary: the same rule, the same
    words for run again (an admin's: the step is a built-in pipeline's)."""
    summary = {"key": "summary", "type": "noop", "input_data": {}}
    report = {"key": "report", "type": "report.csv_report", "input_data": {}, "depends_on": ["summary"]}
    async with engine.begin() as conn:
        row = await pipelines.create(
            conn, name="r", steps=[summary, report], user_id=admin.id, settings=settings
        )
        step = await conn.scalar(
            text("SELECT id FROM jobs WHERE pipeline_id = :p AND step_key = 'report'"), {"p": row["id"]}
        )
    with pytest.raises(BadInput) as refused:
        async with engine.begin() as conn:
            await queue.run_again(conn, step, admin, settings)
    assert refused.value.detail.startswith("This step cannot run again as a new job on its own"), (
        refused.value
    )
    assert "'Summary step'" in refused.value.detail, refused.value
