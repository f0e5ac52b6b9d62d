"""A browser form obeys the same rule as the JSON API, and bad input on a form is a 422 next to its field:
never a 500, a value silently changed or cut, or a file silently dropped. Each test drives the rule
through the page's form and through the API (or the core, where the API cannot carry the input)."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.auth import create_user
from app.errors import BadInput
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import add_token, csrf_from, sign_in_as

URLENCODED = {"content-type": "application/x-www-form-urlencoded"}


def _field_error(html: str) -> list[str]:
    return re.findall(r'class="field-error"[^>]*>([^<]*)<', html)


def _form_key(html: str) -> str:
    return re.search(r'name="_form_key" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]


async def test_bytes_that_are_not_utf8_in_a_urlencoded_form_or_a_query_are_refused_not_replaced(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    token, key = csrf_from(page.text), _form_key(page.text)
    for raw in ("ab%FFc", "ab%ED%A0%80c", "%C3"):  # not UTF-8; a lone surrogate's bytes; a cut character
        sent = await client.post(
            "/jobs/new/test.form",
            content=f"_csrf_token={token}&_form_key={key}&name={raw}",
            headers=URLENCODED,
            follow_redirects=False,
        )
        # it was a 303 to a job whose name held U+FFFD where the person's bytes were
        assert sent.status_code == 422, (raw, sent.status_code)
        assert "name" in sent.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    # the same for a form that shows its own errors (it reads NUL itself, but never sees these bytes)
    await sign_in_as(client, db_url, "boss@example.com", admin=True)
    users = await client.get("/admin/users")
    created = await client.post(
        "/admin/users",
        content=f"_csrf_token={csrf_from(users.text)}&email=new@example.com&password=long+enough+%FF+pass",
        headers=URLENCODED,
    )
    assert created.status_code == 422
    assert await pg.fetchval("SELECT count(*) FROM users WHERE email = 'new@example.com'") == 0
    assert (await client.get("/jobs?q=%FF")).status_code == 422
    assert (await client.get("/jobs?q=caf%C3%A9")).status_code == 200
    # the API refuses such bytes in its JSON too
    bearer = {
        "Authorization": f"Bearer {await add_token(db_url, ann.id)}",
        "content-type": "application/json",
    }
    api = await client.post(
        "/api/jobs", content=b'{"type": "test.form", "input_data": {"name": "ab\xffc"}}', headers=bearer
    )
    assert 400 <= api.status_code < 500
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_number_typed_with_digits_int_cannot_read_is_a_field_error_not_a_500(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    account = await client.get("/account")
    token = csrf_from(account.text)
    for days in ("²", "9" * 5000):  # isdigit() said yes to both, then int() failed: a 500
        made = await client.post(
            "/account/tokens", data={"_csrf_token": token, "name": "ci", "expires_in_days": days}
        )
        assert made.status_code == 422, made.status_code
        assert any("number of days" in e for e in _field_error(made.text))
    assert (
        await client.post(
            "/account/tokens", data={"_csrf_token": token, "name": "ok", "expires_in_days": " 5 "}
        )
    ).status_code == 200
    # the API takes a whole number only
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    api = await client.post("/api/me/tokens", json={"name": "ci", "expires_in_days": "²"}, headers=bearer)
    assert api.status_code == 422 and "expires_in_days" in api.text

    # the spreadsheet form's column choices
    page = await client.get("/batches/new/http.request")
    mapped = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": _form_key(page.text)},
        files={"sheet": ("a.csv", b"url\nhttp://jobs.test:9/a\n", "text/csv")},
    )
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text).group(1)  # type: ignore[union-attr]
    for column in ("²", "9" * 5000, "-1"):
        start = {
            "_csrf_token": token,
            "_form_key": _form_key(mapped.text),
            "sheet_id": sheet_id,
            "map.url": column,
        }
        refused = await client.post("/batches/new/http.request", data=start)
        assert refused.status_code == 422, (column[:5], refused.status_code)  # no such column: url missing
    assert await pg.fetchval("SELECT count(*) FROM batches") == 0


async def test_a_batch_name_over_the_limit_is_refused_next_to_it_as_the_api_refuses_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/http.request")
    token = csrf_from(page.text)
    mapped = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": _form_key(page.text)},
        files={"sheet": ("a.csv", b"url\nhttp://jobs.test:9/a\n", "text/csv")},
    )
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text).group(1)  # type: ignore[union-attr]
    long_name = "n" * 250
    start = {
        "_csrf_token": token,
        "_form_key": _form_key(mapped.text),
        "sheet_id": sheet_id,
        "map.url": "0",
        "_name": long_name,
    }
    refused = await client.post("/batches/new/http.request", data=start, follow_redirects=False)
    # it was a 303 to a batch named with the first 200 characters
    assert refused.status_code == 422, refused.status_code
    assert _field_error(refused.text) == ["Must be at most 200 characters (it has 250)."]
    assert f'value="{long_name}"' in refused.text  # what was typed is kept
    assert await pg.fetchval("SELECT count(*) FROM batches") == 0
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    api = await client.post(
        "/api/batches",
        json={"type": "http.request", "rows": [{"url": "http://jobs.test:9/a"}], "name": long_name},
        headers=bearer,
    )
    assert api.status_code == 422 and "name" in api.json()["errors"]
    assert await pg.fetchval("SELECT count(*) FROM batches") == 0
    started = await client.post(
        "/batches/new/http.request", data={**start, "_name": "n" * 200}, follow_redirects=False
    )
    assert started.status_code == 303


async def test_an_admins_reject_reason_over_the_limit_is_refused_on_the_page_not_cut(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    boss = await sign_in_as(client, db_url, "boss@example.com", admin=True)
    steps = []
    for _ in range(2):
        job = await enqueue(engine, ui_settings, boss.id, "noop", input_data={}, requires_approval=True)
        await claim(engine, job)
        await finish(engine, ui_settings, job, "completed", result={"ok": True})
        steps.append(job)
    token = csrf_from((await client.get("/admin/jobs")).text)
    reason = "r" * 2001
    page = await client.post(f"/admin/jobs/{steps[0]}/reject", data={"_csrf_token": token, "reason": reason})
    # it was a 200 "Rejected", with the reason saved cut to 2,000 characters
    assert page.status_code == 422, page.status_code
    assert "at most 2,000 characters" in page.text
    bearer = {"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
    api = await client.post(f"/api/jobs/{steps[1]}/reject", json={"reason": reason}, headers=bearer)
    assert api.status_code == 422
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 0


async def test_a_password_nobody_could_sign_in_with_is_refused_on_the_admin_form_and_in_the_core(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, engine: AsyncEngine
) -> None:
    await sign_in_as(client, db_url, "boss@example.com", admin=True)
    page = await client.get("/admin/users")
    made = await client.post(
        "/admin/users",
        data={
            "_csrf_token": csrf_from(page.text),
            "email": "new@example.com",
            "password": "long enough\x00pass",
        },
    )
    # it was a 200 "Created": an account whose password the sign-in form refuses
    assert made.status_code == 422, made.status_code
    assert any("NUL" in e for e in _field_error(made.text))
    assert await pg.fetchval("SELECT count(*) FROM users WHERE email = 'new@example.com'") == 0
    # `jobdesk create-user --password-stdin` and the API go through the same rule
    async with engine.begin() as conn:
        for password in ("long enough\x00pass", "long enough\ud800pass"):
            with pytest.raises(BadInput) as exc:
                await create_user(conn, "cli@example.com", password)
            assert "password" in exc.value.errors


async def test_a_kept_file_that_is_not_yours_is_an_error_next_to_the_field_not_dropped(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    bob = await sign_in_as(client, db_url, "bob@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    stored = await client.post("/api/files", files={"file": ("b.txt", b"bob's")}, headers=bearer)
    bobs_file = stored.json()["id"]
    ann = await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    form: dict[str, Any] = {
        "_csrf_token": csrf_from(page.text),
        "_form_key": _form_key(page.text),
        "name": "x",
        "_keep.document": bobs_file,
    }
    sent = await client.post("/jobs/new/test.form", data=form, follow_redirects=False)
    # it was a 303 to a job without the document
    assert sent.status_code == 422, sent.status_code
    assert "no longer here (or is not yours)" in sent.text
    sent = await client.post(
        "/jobs/new/test.form", data={**form, "_keep.document": "not-a-file"}, follow_redirects=False
    )
    assert sent.status_code == 422
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    # the API refuses another person's file the same way (the core's owner check)
    ann_bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    api = await client.post(
        "/api/jobs",
        json={"type": "test.form", "input_data": {"name": "x", "document": bobs_file}},
        headers=ann_bearer,
    )
    assert api.status_code == 422 and "input_data.document" in api.json()["errors"]


NUL_ERROR = "Contains a NUL character, which cannot be stored; remove it."
JOB_FORM_NULS = {
    "name": 'id="e-name" class="field-error">' + NUL_ERROR,
    "notes": 'id="e-notes" class="field-error">' + NUL_ERROR,
    "_title": 'id="e-_title" class="field-error">' + NUL_ERROR,
    "_run_at_time": 'id="run-at-error" class="field-error">' + NUL_ERROR,
    "_form_key": "<li>The form&#39;s field &#39;_form_key&#39; contains a NUL character",
}


@pytest.mark.parametrize("multipart", [False, True], ids=["urlencoded", "multipart"])
async def test_a_nul_typed_in_the_job_form_is_an_error_beside_its_field_with_what_was_typed_kept(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, multipart: bool
) -> None:
    """The job form comes back with the problem next to the field and every value as typed, as the
    schedule form does; it was a bare 422 page naming the field, and what was typed was lost."""
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    typed = {"name": "Ann", "notes": "Kept notes", "copies": "3", "_title": "My job", "_run_at_time": ""}
    files = {"unused": ("x.txt", b"x")} if multipart else None
    for field, shown in JOB_FORM_NULS.items():
        form = {**typed, "_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text)}
        form[field] = f"a\x00{form[field]}"
        sent = await client.post("/jobs/new/test.form", data=form, files=files, follow_redirects=False)
        assert sent.status_code == 422, (field, sent.status_code)
        assert shown in sent.text, (field, sent.text[:2000])
        assert 'value="3"' in sent.text and "Kept notes</textarea>" in sent.text, field
        assert 'name="name"' in sent.text and "<h1>Every field</h1>" in sent.text, field
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_nul_typed_in_the_pipeline_form_is_an_error_beside_its_field_with_what_was_typed_kept(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/pipelines/new/test.steps")
    for field in ("title", "_title"):
        form = {"title": "Weekly", "seconds": "7", "_title": "Mine", "_csrf_token": csrf_from(page.text)}
        form["_form_key"] = _form_key(page.text)
        form[field] = f"a\x00{form[field]}"
        sent = await client.post("/pipelines/new/test.steps", data=form, follow_redirects=False)
        assert sent.status_code == 422, (field, sent.status_code)
        assert f'id="e-{field}" class="field-error">{NUL_ERROR}' in sent.text, (field, sent.text[:2000])
        assert 'value="7"' in sent.text and "Start the pipeline" in sent.text, field
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0


async def test_a_checkbox_sent_with_a_value_no_box_sends_is_an_error_not_a_tick(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """``urgent=maybe`` started an urgent job: every value but a few words for no was read as ticked."""
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "name": "Ann"}
    sent = await client.post("/jobs/new/test.form", data={**form, "urgent": "maybe"}, follow_redirects=False)
    assert sent.status_code == 422
    assert 'id="e-urgent" class="field-error">Tick the box or leave it empty.' in sent.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    page = await client.get("/pipelines/new/test.steps")
    steps = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "fail_right": "maybe"}
    sent = await client.post("/pipelines/new/test.steps", data=steps, follow_redirects=False)
    assert sent.status_code == 422
    assert 'id="e-fail_right" class="field-error">Tick the box or leave it empty.' in sent.text
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0
    sent = await client.post(
        "/notifications/email",
        data={"_csrf_token": form["_csrf_token"], "email": "maybe"},
        follow_redirects=False,
    )
    assert sent.status_code == 422 and "email" in sent.text
    # the box's own value, and a box left empty, are read as they were
    for value, urgent in (("true", True), ("", False)):
        key = _form_key((await client.get("/jobs/new/test.form")).text)
        sent = await client.post(
            "/jobs/new/test.form", data={**form, "_form_key": key, "urgent": value}, follow_redirects=False
        )
        assert sent.status_code == 303, sent.text[:500]
        job = sent.headers["location"].rsplit("/", 1)[1]
        assert (
            await pg.fetchval("SELECT (input_data->>'urgent')::bool FROM jobs WHERE id = $1::uuid", job)
            is urgent
        )
