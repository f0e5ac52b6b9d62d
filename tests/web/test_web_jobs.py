"""The web UI for people who are not engineers (cases C13, C19, C20): catalogue, generated forms and their validation, job and pipeline pages and their polled
fragments, My jobs, actions, files and ownership. Server-side; the browser tests are in
``test_browser_ui.py``."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form, test.step, test.steps, test.approval)
from app.auth import CurrentUser
from app.jobs import queue
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, failed_job, finish
from tests.support.webkit import (
    HX,
    add_token,
    add_user,
    app_client,
    csrf,
    sign_in_as,
    switch_to,
)


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False, upload_max_bytes=4096)


def main_html(html: str) -> str:
    return html[html.index("<main") : html.index("</main>")]


def form_body(csrf_token: str, **fields: Any) -> dict[str, Any]:
    return {"_csrf_token": csrf_token, **fields}


# --- catalogue ------------------------------------------------------------------------------------------


async def test_catalogue_groups_types_and_templates_and_hides_diagnostics_from_non_admins(
    client: AsyncTestClient, db_url: str
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = main_html((await client.get("/")).text)
    assert "<h1>Start a job</h1>" in page
    assert 'href="/jobs/new/test.form"' in page
    assert "Every field" in page
    assert "A form with one field of every kind (tests only)." in page
    assert 'href="/pipelines/new/test.steps"' in page
    assert "pipeline · 4 steps" in page
    assert "<h3" in page
    assert "Testing" in page
    for diagnostic in ("/jobs/new/noop", "/jobs/new/sleep", "/jobs/new/fail"):
        assert diagnostic not in page
    assert (await client.get("/jobs/new/sleep")).status_code == 404  # the form is hidden too

    await sign_in_as(client, db_url, "root@example.com", admin=True)
    page = main_html((await client.get("/")).text)
    for diagnostic in ("/jobs/new/noop", "/jobs/new/sleep", "/jobs/new/fail"):
        assert diagnostic in page
    assert "Diagnostics" in page
    assert "admins only" in page
    assert page.index("Testing") < page.index("Diagnostics")  # diagnostic groups come last


# --- the generated form ------------------------------------------------------------------------------------


async def test_form_has_one_control_per_field_named_after_it_with_labels_help_defaults_and_marks(
    client: AsyncTestClient, db_url: str
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    html = (await client.get("/jobs/new/test.form")).text
    form = html[html.index('<form method="post" action="/jobs/new/test.form"') :]
    controls = {
        "name": r'<input type="text" id="f-name" name="name" aria-required="true"',
        "notes": r'<textarea id="f-notes" name="notes"',
        "copies": r'<input type="number" inputmode="numeric" id="f-copies" name="copies"[^>]*value="1" step="1" min="1" max="10"',
        "scale": r'<input type="text" inputmode="decimal"[^>]*name="scale"[^>]*value="1.5"',
        "price": r'name="price"[^>]*value=""',
        "urgent": r'<input type="checkbox" role="switch" id="f-urgent" name="urgent" value="true"\s',
        "size": r'<select id="f-size" name="size"',
        "colour": r'<select id="f-colour" name="colour"',
        "due": r'<input type="date" id="f-due" name="due"',
        "remind_at": r'<input type="datetime-local" id="f-remind_at" name="remind_at"',
        "daily_at": r'<input type="time" id="f-daily_at" name="daily_at"',
        "document": r'<input type="file" id="f-document" name="document"',
        "attachments": r'<input type="file" id="f-attachments" name="attachments" multiple',
        "tags": r'<textarea id="f-tags" name="tags"',
        "extra": r'<textarea id="f-extra" name="extra"[^>]*class="mono"',
    }
    for name, pattern in controls.items():
        assert re.search(pattern, form), name
    assert '<label for="f-name">Your name <abbr class="req" title="required">*</abbr></label>' in form
    assert '<small id="h-name" class="help">Shown on the result.</small>' in form
    assert '<option value="medium" selected>medium</option>' in form
    assert '<option value="" selected>(none)</option>' in form  # optional enum without default
    assert '<option value="dark-blue">Dark blue</option>' in form
    assert "Time in UTC." in form  # date-times are read in the user's time zone
    assert "Up to 4 KiB." in form  # the upload limit in words
    assert 'enctype="multipart/form-data"' in form
    assert 'name="_csrf_token"' in form
    assert 'id="run-at-date" name="_run_at_date"' in form
    assert re.search(r'name="_run_at_tz" value="UTC" list="[\w-]+-zones"', form)  # the person's zone
    # the diagnostic `sleep` form, for an admin: the input's name is the schema field name
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    html = (await client.get("/jobs/new/sleep")).text
    assert re.search(
        r'<input type="text" inputmode="decimal"[^>]*id="f-seconds" name="seconds"[^>]*value="1"', html
    )
    assert (await client.get("/jobs/new/no.such.type")).status_code == 404


BAD_VALUES = [
    # (field, submitted value, message shown next to it)
    ("name", "", "Fill this in."),
    ("name", "x" * 41, "Use at most 40 characters."),
    ("copies", "abc", "Enter a whole number, like 42."),
    ("copies", "2.5", "Enter a whole number, like 42."),
    ("copies", "11", "Must be at most 10."),
    ("copies", "0", "Must be at least 1."),
    ("scale", "lots", "Enter a number, like 2.5."),
    ("scale", "0", "Must be more than 0."),
    ("scale", "NaN", "Enter a number, like 2.5."),
    ("price", "-1", "Must be at least 0."),
    ("size", "huge", "Choose one of the options."),
    ("colour", "green", "Choose one of the options."),
    ("due", "31/12/2026", "Enter a date, like 2026-12-31."),
    ("remind_at", "tomorrow", "Enter a date and a time."),
    ("daily_at", "25:00", "Enter a time, like 09:30."),
    ("tags", "a\nb\nc\nd\ne\nf", "Give at most 5 items."),
    ("extra", "{oops", "This must be valid JSON."),
    ("extra", '{"a": "many"}', "a: Enter a whole number, like 42."),
]


@pytest.mark.parametrize(
    ("field", "value", "message"), BAD_VALUES, ids=[f"{f}={v[:8]!r}" for f, v, _ in BAD_VALUES]
)
async def test_a_bad_value_is_shown_next_to_its_field_with_the_input_kept(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, field: str, value: str, message: str
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    data = {"name": "Ann", "copies": "2", "notes": "keep me <b>", field: value}
    r = await client.post("/jobs/new/test.form", data=form_body(token, **data), follow_redirects=False)
    assert r.status_code == 422
    html = r.text
    assert f'<small id="e-{field}" class="field-error">{message}</small>' in html
    assert re.search(rf'id="f-{field}" name="{field}"[^>]*aria-invalid="true"', html)
    assert f'<a href="#f-{field}">' in html  # the summary links to the field
    assert ">keep me &lt;b&gt;</textarea>" in html  # what was typed is kept (escaped)
    if field not in ("tags", "size", "colour", "extra"):
        assert f'value="{value}"' in html or value == ""
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_run_at_errors_and_a_scheduled_job(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    cases = [
        ({"_title": "x" * 201}, "Must be at most 200 characters (this one has 201)."),
        ({"_run_at_date": "2030-01-01"}, "Choose a time as well as a date"),
        ({"_run_at_time": "09:30"}, "Choose a date as well as a time"),
        ({"_run_at_date": "2020-01-01", "_run_at_time": "09:30"}, "That moment has already passed"),
        (
            {"_run_at_date": "2030-01-01", "_run_at_time": "09:30", "_run_at_tz": "Mars/Olympus"},
            "Choose a time zone",
        ),
    ]
    for fields, message in cases:
        r = await client.post(
            "/jobs/new/test.form", data=form_body(token, name="Ann", **fields), follow_redirects=False
        )
        assert r.status_code == 422
        assert message in r.text
        if "_title" in fields:
            assert f'<small id="e-_title" class="field-error">{message}</small>' in r.text
            assert 'value="' + "x" * 201 + '"' in r.text
            continue
        assert '<details class="run-at" open>' in r.text
        assert 'id="run-at-error"' in r.text
    r = await client.post(
        "/jobs/new/test.form",
        data=form_body(
            token, name="Ann", _run_at_date="2031-06-01", _run_at_time="09:30", _run_at_tz="Europe/Berlin"
        ),
        follow_redirects=False,
    )
    assert r.status_code == 303
    row = await pg.fetchrow("SELECT id, run_at FROM jobs")
    assert row["run_at"].isoformat() == "2031-06-01T07:30:00+00:00"  # 09:30 in Berlin (summer time)
    page = (await client.get(f"/jobs/{row['id']}")).text
    assert "Scheduled for" in page
    assert "1 Jun 2031, 07:30 UTC" in page
    assert '<span class="status-icon" aria-hidden="true"></span>Scheduled</span>' in page


async def test_a_good_form_with_every_kind_of_field_enqueues_the_job_and_redirects_to_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, ui_settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    await pg.execute("UPDATE users SET timezone = 'Europe/Berlin' WHERE id = $1", user.id)
    await switch_to(client, "ann@example.com")
    token = await csrf(client)
    data = form_body(
        token,
        name="Ann",
        notes="line 1\r\nline 2",
        copies="3",
        scale="2,5",
        price="19.99",
        urgent="true",
        size="large",
        colour="dark-blue",
        due="2026-12-31",
        remind_at="2026-12-24T18:00",
        daily_at="07:15",
        tags="red\n\n blue \n",
        extra='{"speed": 3}',
        _title="Christmas cards",
    )
    files = [
        ("document", ("report <1>.pdf", b"%PDF-1.4 hello", "application/pdf")),
        ("attachments", ("a.txt", b"first", "text/plain")),
        ("attachments", ("b.txt", b"second", "text/plain")),
    ]
    r = await client.post("/jobs/new/test.form", data=data, files=files, follow_redirects=False)
    assert r.status_code == 303, r.text
    job = await pg.fetchrow("SELECT id, input_data, title FROM jobs")
    assert r.headers["location"] == f"/jobs/{job['id']}"
    assert job["title"] == "Christmas cards"
    got = json.loads(job["input_data"])
    document = got.pop("document")
    attachments = got.pop("attachments")
    assert got == {
        "name": "Ann",
        "notes": "line 1\nline 2",
        "copies": 3,
        "scale": 2.5,
        "price": "19.99",
        "urgent": True,
        "size": "large",
        "colour": "dark-blue",
        "due": "2026-12-31",
        "remind_at": "2026-12-24T18:00:00+01:00",  # read in the user's time zone
        "daily_at": "07:15:00",
        "tags": ["red", "blue"],
        "extra": {"speed": 3},
        "pause": 0.0,
    }
    stored = {str(r["id"]): r for r in await pg.fetch("SELECT * FROM files")}
    assert set(stored) == {document, *attachments}
    assert stored[document]["name"] == "report 1.pdf"
    assert stored[document]["size"] == 14
    assert all(
        f["user_id"] == user.id and f["job_id"] == job["id"] for f in stored.values()
    )  # removed with it
    assert (ui_settings.files_dir / document).read_bytes() == b"%PDF-1.4 hello"
    # the job page shows the input as readable fields, files as download links, times in Berlin
    page = main_html((await client.get(r.headers["location"])).text)
    assert f'<a href="/files/{document}" download>report 1.pdf</a>' in page
    assert "24 Dec 2026, 18:00 CET" in page
    assert "Dark blue" in page
    assert "<dd>Yes</dd>" in page
    assert "<h1>Christmas cards</h1>" in page
    assert "<p>Every field</p>" in page
    listed = main_html((await client.get("/jobs")).text)
    assert (
        f'<a href="/jobs/{job["id"]}">Christmas cards</a> <small class="muted">Every field</small>' in listed
    )


async def test_a_too_large_upload_gets_413_with_the_limit_in_words_and_nothing_is_stored(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """The request body limit is UPLOAD_MAX_BYTES: a larger upload is refused before it is read (the
    browser says so next to the field before sending, static/app.js; see test_browser_ui)."""
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    form = (await client.get("/jobs/new/test.form")).text
    assert 'name="document" data-max-bytes="4096">' in form
    for size in (5000, 3_000_000):
        r = await client.post(
            "/jobs/new/test.form",
            data=form_body(token, name="Ann"),
            files=[("document", ("big.bin", b"x" * size, "application/octet-stream"))],
            follow_redirects=False,
        )
        assert r.status_code == 413
        assert "<h1>Too large</h1>" in r.text
        assert "The request is too large: the limit is 4 KiB." in r.text
    assert await pg.fetchval("SELECT count(*) FROM files") == 0
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_an_uploaded_file_is_kept_when_the_form_is_shown_again_with_an_error(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    r = await client.post(
        "/jobs/new/test.form",
        data=form_body(token, name="Ann", copies="99"),
        files=[("document", ("notes.txt", b"hello", "text/plain"))],
        follow_redirects=False,
    )
    assert r.status_code == 422
    file_id = str(await pg.fetchval("SELECT id FROM files"))
    assert f'name="_keep.document" value="{file_id}" checked>' in r.text
    assert "Use notes.txt" in r.text
    key = re.search(r'name="_form_key" value="([^"]+)"', r.text).group(1)
    r = await client.post(
        "/jobs/new/test.form",
        data=form_body(token, name="Ann", copies="2", _form_key=key, **{"_keep.document": file_id}),
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert json.loads(await pg.fetchval("SELECT input_data FROM jobs"))["document"] == file_id
    # another user's file id cannot be smuggled in through the keep field: an error next to it, no job
    await sign_in_as(client, db_url, "bob@example.com")
    token = await csrf(client)
    r = await client.post(
        "/jobs/new/test.form",
        data=form_body(token, name="Bob", **{"_keep.document": file_id}),
        follow_redirects=False,
    )
    assert r.status_code == 422
    assert "not yours" in r.text and file_id not in r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_a_double_submit_creates_one_job_and_changed_input_with_the_same_form_is_refused_with_a_link(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    key = str(uuid.uuid4())
    first = await client.post(
        "/jobs/new/test.form", data=form_body(token, name="Ann", _form_key=key), follow_redirects=False
    )
    again = await client.post(
        "/jobs/new/test.form", data=form_body(token, name="Ann", _form_key=key), follow_redirects=False
    )
    assert first.status_code == again.status_code == 303
    assert first.headers["location"] == again.headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
    changed = await client.post(
        "/jobs/new/test.form", data=form_body(token, name="Bo", _form_key=key), follow_redirects=False
    )
    # the form started a job already: it says so, links that job, and comes back with a new key
    assert changed.status_code == 422
    assert "This form was sent already" in changed.text
    assert f'href="{first.headers["location"]}"' in changed.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
    new_key = re.search(r'name="_form_key" value="([^"]+)"', changed.text).group(1)  # type: ignore[union-attr]
    assert new_key != key
    sent = await client.post(
        "/jobs/new/test.form", data=form_body(token, name="Bo", _form_key=new_key), follow_redirects=False
    )
    assert sent.status_code == 303 and sent.headers["location"] != first.headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 2


async def test_a_failed_job_offers_edit_and_resubmit_with_the_form_filled_in(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    data = {
        "name": "Ann",
        "copies": 4,
        "tags": ["a", "b"],
        "remind_at": "2026-12-24T17:00:00+00:00",
        "size": "small",
    }
    jid = await failed_job(engine, settings, user.id, "Boom", input_data=data)
    page = (await client.get(f"/jobs/{jid}")).text
    assert f'href="/jobs/new/test.form?from={jid}"' in page
    assert "Edit and resubmit" in page
    form = (await client.get(f"/jobs/new/test.form?from={jid}")).text
    assert "This form is filled in from" in form
    assert re.search(r'name="name"[^>]*value="Ann"', form)
    assert re.search(r'name="copies"[^>]*value="4"', form)
    assert '<textarea id="f-tags" name="tags" aria-describedby="h-tags" rows="4">a\nb</textarea>' in form
    assert re.search(r'name="remind_at"[^>]*value="2026-12-24T17:00"', form)
    assert '<option value="small" selected>small</option>' in form
    # another user's job cannot pre-fill a form: the same 404 as an unknown id
    await sign_in_as(client, db_url, "bob@example.com")
    assert (await client.get(f"/jobs/new/test.form?from={jid}")).status_code == 404
    assert (await client.get(f"/jobs/new/test.form?from={uuid.uuid4()}")).status_code == 404


# --- the job page and its fragment --------------------------------------------------------------------------


async def test_job_page_and_fragment_follow_the_job_from_waiting_to_done(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await enqueue(engine, settings, user.id, title="Quarterly <report>")
    page = (await client.get(f"/jobs/{jid}")).text
    assert "<h1>Quarterly &lt;report&gt;</h1>" in page
    # no live region around the card: it re-read the whole card on each change; the status line is
    # said through #status-news (tests/browser/test_browser_status_news.py)
    assert '<div class="live-region">' in page and 'data-news="Quarterly &lt;report&gt;: Waiting"' in page
    poll = re.search(
        r'hx-get="(/jobs/[^"]+/status\?v=([0-9a-f]+)[^"]*)" hx-trigger="every 2s" hx-swap="outerHTML"', page
    )
    assert poll, "the status part polls every 2 s"
    assert "Waiting</span>" in page
    assert "It will start as soon as a worker is free." in page

    # nothing changed: 204, so the page is left alone (no swap, no screen-reader chatter)
    r = await client.get(poll.group(1), headers=HX)
    assert r.status_code == 204
    assert r.content == b""
    # the fragment alone, with HX-Request; the full page without it
    r = await client.get(f"/jobs/{jid}/status", headers=HX)
    assert r.status_code == 200
    assert r.text.lstrip().startswith('<article id="job-status"')
    assert "<html" not in r.text
    assert r.headers["vary"] == "HX-Request"
    assert "<html" in (await client.get(f"/jobs/{jid}/status")).text
    full_as_fragment = await client.get(f"/jobs/{jid}", headers=HX)
    assert full_as_fragment.text.lstrip().startswith('<article id="job-status"')

    # running, with progress and the processor's message
    assert await claim(engine) == jid
    async with engine.begin() as conn:
        await queue.set_progress(conn, "test-worker", jid, 0.42, "Reading page 3 of 7")
    r = await client.get(poll.group(1), headers=HX)
    assert r.status_code == 200
    assert "Running</span>" in r.text
    assert '<progress value="42" max="100"' in r.text
    assert "<strong>42%</strong> · Reading page 3 of 7" in r.text
    assert (
        '<dt>Attempt</dt><dd>1 of 4 <small class="muted">(a failed attempt is tried again by itself, 4 tries in all)</small></dd>'
        in r.text
    )
    assert 'id="act-cancel"' in r.text
    assert 'hx-confirm="Cancel this job? Work already done is lost."' in r.text

    # done: 286 stops the polling; the result and the history come with the last answer
    await finish(
        engine,
        settings,
        jid,
        "completed",
        result={
            "greeting": "Hello <b>Ann</b>",
            "report": {
                "file_id": str(uuid.uuid4()),
                "name": "r.pdf",
                "size": 2048,
                "content_type": "application/pdf",
            },
            "link": "https://example.com/x?a=1&b=2",
            "bad_link": "javascript:alert(2)",
            "nested": {"deep": ["<img src=x onerror=alert(1)>"]},
            "ok": True,
        },
    )
    r = await client.get(poll.group(1), headers=HX)
    assert r.status_code == 286
    html = r.text
    assert "hx-get" not in html.split('<section id="job-history"')[0]  # the final part does not poll
    assert "Done</span>" in html
    assert '<h2 id="result-heading">Result</h2>' in html
    assert "<dd>Hello &lt;b&gt;Ann&lt;/b&gt;</dd>" in html
    assert re.search(
        r'<a href="/files/[0-9a-f-]+" download>r.pdf</a> <small class="muted">\(2 KiB\)</small>', html
    )
    assert (
        '<a href="https://example.com/x?a=1&amp;b=2" rel="noopener noreferrer nofollow" target="_blank">'
        in html
    )
    assert "<dd>javascript:alert(2)</dd>" in html
    assert 'href="javascript' not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x" not in html
    assert '<summary>Details</summary><pre class="json">' in html
    assert (
        '<section id="job-history" class="history" aria-labelledby="history-heading" hx-swap-oob="true">'
        in html
    )
    assert "Finished" in html
    assert "Started (attempt 1)" in html
    assert "took" in html


async def test_a_failed_job_explains_the_error_in_plain_words_with_the_technical_text_folded(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    error = 'ValueError: the <script>alert(4)</script> column is missing\n  File "x.py", line 3\n' + "y" * 300
    jid = await failed_job(engine, settings, user.id, error)
    page = main_html((await client.get(f"/jobs/{jid}")).text)
    assert "Failed</span>" in page
    assert "What went wrong" in page
    assert "It did not work after 1 attempt." in page
    assert '<p class="reason">The &lt;script&gt;alert(4)&lt;/script&gt; column is missing</p>' in page
    assert "ValueError" not in page  # an owner reads words, not the exception's type
    # the traceback describes the server, not the job: its owner reads the message alone
    assert "Technical details" not in page
    assert "line 3" not in page
    assert "<script>alert" not in page
    assert "hx-get" not in page  # finished: nothing polls
    # how many tries it took, not "1 of 3" as if more were coming
    assert "<dt>Tries</dt><dd>1</dd>" in page and "<dt>Attempt</dt>" not in page


async def test_a_retry_wait_shows_the_attempt_the_next_try_and_the_last_error(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, make_settings: Any
) -> None:
    slow_retry = make_settings(job_retry_intervals=[600])
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await enqueue(engine, slow_retry, user.id, max_attempts=3)
    await claim(engine)
    await finish(engine, slow_retry, jid, "failed", error="Timeout talking to the printer", delay=600)
    page = main_html((await client.get(f"/jobs/{jid}")).text)
    assert "Retrying</span>" in page
    assert "Next try" in page
    assert "(in 10 min)" in page
    assert "<dt>Attempt</dt><dd>1 of 3 <small" in page
    assert "The last attempt did not work." in page
    assert "Timeout talking to the printer" in page


async def test_the_history_names_people_plainly(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    owner = await sign_in_as(client, db_url, "ann@example.com")
    await add_user(db_url, "root@example.com", admin=True)
    jid = await enqueue(engine, settings, owner.id)
    token = await csrf(client)
    await switch_to(client, "root@example.com")
    token = await csrf(client)
    r = await client.post(f"/jobs/{jid}/cancel", data={"_csrf_token": token})
    assert r.status_code == 200
    assert 'Cancelled</strong> <small class="muted">by you</small>' in r.text
    await switch_to(client, "ann@example.com")
    page = (await client.get(f"/jobs/{jid}")).text
    assert 'Submitted</strong> <small class="muted">by you</small>' in page
    assert 'Cancelled</strong> <small class="muted">by an administrator</small>' in page
    assert "It was cancelled by an administrator." in page


# --- actions -----------------------------------------------------------------------------------------------


async def test_the_owner_cancels_in_place_and_a_second_cancel_says_nothing_changed(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await enqueue(engine, settings, user.id)
    token = await csrf(client)
    assert (await client.get(f"/jobs/{jid}/cancel")).status_code == 405  # POST only
    r = await client.post(f"/jobs/{jid}/cancel", headers=HX)
    assert r.status_code == 403  # no CSRF token: nothing changes
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "queued"
    r = await client.post(f"/jobs/{jid}/cancel", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 200
    assert '<p class="notice notice-ok" role="status">Cancelled.</p>' in r.text
    assert r.text.lstrip().startswith('<article id="job-status"')
    assert "Cancelled</span>" in r.text
    assert 'hx-swap-oob="true"' in r.text  # the history is refreshed too
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "cancelled"
    r = await client.post(f"/jobs/{jid}/cancel", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 409
    assert "Nothing changed: it has already finished (Cancelled)." in r.text
    assert r.text.lstrip().startswith('<article id="job-status"')  # still the status part, not a bare error
    # the owner's own actions are not admin actions: no audit entry, no admin alert
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == 0
    # without htmx the same form works and answers with the whole page
    jid2 = await enqueue(engine, settings, user.id)
    r = await client.post(f"/jobs/{jid2}/cancel", data={"_csrf_token": token})
    assert r.status_code == 200
    assert "<html" in r.text
    assert "Cancelled." in r.text


async def test_cancelling_a_running_job_shows_cancelling_until_the_worker_stops_it(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await enqueue(engine, settings, user.id)
    await claim(engine)
    token = await csrf(client)
    r = await client.post(f"/jobs/{jid}/cancel", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 200
    assert "Stopping the job." in r.text
    assert "Cancelling</span>" in r.text
    assert 'id="act-cancel"' not in r.text
    assert "hx-get" in r.text  # still polling until it stops
    r = await client.post(f"/jobs/{jid}/cancel", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 409
    assert "Nothing changed: it is already being stopped." in r.text


async def test_admin_actions_are_audited_and_alerted_and_conflicts_are_audited_as_refused(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "ann@example.com")
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    token = await csrf(client)
    h = {**HX, "x-csrftoken": token}
    jid = await failed_job(engine, settings, owner.id, "Boom")

    page = (await client.get(f"/jobs/{jid}")).text
    assert 'id="act-retry"' in page
    assert 'id="act-run-again"' in page
    assert 'hx-confirm="Retry this job with a fresh set of attempts?"' in page
    assert "Edit and resubmit" not in page  # that is the owner's

    r = await client.post(f"/jobs/{jid}/retry", headers=h)
    assert r.status_code == 200
    assert "Retrying: the job is waiting to run again with a fresh set of 1 attempts." in r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "queued"
    entry = await pg.fetchrow("SELECT * FROM audit_log ORDER BY id DESC LIMIT 1")
    assert (entry["user_id"], entry["action"], entry["outcome"]) == (admin.id, "job.retry", "ok")
    assert json.loads(entry["target_ids"]) == [str(jid)]
    assert entry["ip"]
    alert = await pg.fetchrow("SELECT kind, payload FROM alert_outbox WHERE kind = 'admin_action'")
    payload = json.loads(alert["payload"])
    assert payload["admin"] == "root@example.com"
    assert payload["action"] == "job.retry"
    assert payload["job_ids"] == [str(jid)]

    r = await client.post(f"/jobs/{jid}/retry", headers=h)  # a double click
    assert r.status_code == 409
    assert "Nothing changed: it is Waiting, not failed." in r.text
    refused = await pg.fetchrow("SELECT * FROM audit_log ORDER BY id DESC LIMIT 1")
    assert refused["action"] == "job.retry"
    assert refused["outcome"].startswith("refused: Nothing changed")
    assert await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'") == 1

    # run again: a new job, linked from the outcome
    await claim(engine)
    await finish(engine, settings, jid, "completed", result={})
    r = await client.post(f"/jobs/{jid}/run-again", headers=h)
    assert r.status_code == 200
    assert "Started again as a new job." in r.text
    new_id = await pg.fetchval("SELECT id FROM jobs WHERE id <> $1", jid)
    assert f'<a href="/jobs/{new_id}">Open the new job</a>' in r.text
    assert await pg.fetchval("SELECT user_id FROM jobs WHERE id = $1", new_id) == owner.id

    # run now: a scheduled job starts at once
    later = await enqueue(engine, settings, owner.id, run_at=datetime(2031, 1, 1, tzinfo=UTC))
    page = (await client.get(f"/jobs/{later}")).text
    assert "Scheduled for" in page
    assert 'id="act-run-now"' in page
    r = await client.post(f"/jobs/{later}/run-now", headers=h)
    assert r.status_code == 200
    assert "It will start as soon as a worker is free." in r.text
    assert await pg.fetchval("SELECT run_at <= now() FROM jobs WHERE id = $1", later)
    actions = [r["action"] for r in await pg.fetch("SELECT action FROM audit_log ORDER BY id")]
    assert actions == ["job.retry", "job.retry", "job.run_again", "job.run_now"]


async def test_an_owner_gets_403_for_admin_actions_and_nothing_changes(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await failed_job(engine, settings, user.id, "Boom")
    page = (await client.get(f"/jobs/{jid}")).text
    assert 'id="act-approve"' not in page
    token = await csrf(client)
    r = await client.post(f"/jobs/{jid}/run-now", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 403
    assert "Only an admin can" in r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "failed"
    assert await pg.fetchval("SELECT count(*) FROM audit_log") == 0


async def test_an_owner_retries_their_own_failed_job_audited_but_not_someone_elses(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    other = await add_user(db_url, "bob@example.com")
    theirs = await failed_job(engine, settings, other.id, "Boom")
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await failed_job(engine, settings, user.id, "Boom")
    page = (await client.get(f"/jobs/{jid}")).text
    assert 'id="act-retry"' in page
    assert 'id="act-run-again"' in page
    token = await csrf(client)
    r = await client.post(f"/jobs/{theirs}/retry", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 404
    r = await client.post(f"/jobs/{jid}/retry", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 200
    assert "Retrying" in r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "queued"
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", theirs) == "failed"
    entry = await pg.fetchrow("SELECT action, user_id, target_ids FROM audit_log")
    assert (entry["action"], entry["user_id"]) == ("job.retry", user.id)
    assert json.loads(entry["target_ids"]) == [str(jid)]
    assert (
        await pg.fetchval("SELECT count(*) FROM alert_outbox WHERE kind = 'admin_action'") == 0
    )  # no admin notice


async def test_approval_steps_from_the_pipeline_page_approve_reject_with_reason_and_rerun(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    from app import pipelines

    owner = await add_user(db_url, "ann@example.com")
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    token = await csrf(client)
    h = {**HX, "x-csrftoken": token}

    async def waiting_step() -> tuple[uuid.UUID, uuid.UUID]:
        async with engine.begin() as conn:
            p = await pipelines.create_from_template(
                conn, "test.approval", {"title": "T"}, user_id=owner.id, settings=settings
            )
        step = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'draft'", p["id"])
        await claim(engine, step)
        await finish(engine, settings, step, "completed", result={"draft": "text"})
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", step) == "waiting_approval"
        return p["id"], step

    pid, step = await waiting_step()
    page = (await client.get(f"/pipelines/{pid}")).text
    assert "Needs approval</span>" in page
    assert f'id="approve-{step}"' in page
    assert f'id="reject-{step}"' in page
    assert 'hx-target="#pipeline-status"' in page
    assert 'name="view" value="pipeline"' in page
    r = await client.post(f"/jobs/{step}/approve", data={"view": "pipeline"}, headers=h)
    assert r.status_code == 200
    assert r.text.lstrip().startswith('<article id="pipeline-status"')
    assert "Approved. The steps after it can run now." in r.text
    r = await client.post(f"/jobs/{step}/approve", data={"view": "pipeline"}, headers=h)
    assert r.status_code == 409
    assert "Nothing changed: this step was already approved by root@example.com at " in r.text

    pid, step = await waiting_step()
    r = await client.post(f"/jobs/{step}/reject", data={"view": "pipeline", "reason": "  "}, headers=h)
    assert r.status_code == 422
    assert "Say why the result is rejected." in r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", step) == "waiting_approval"
    r = await client.post(
        f"/jobs/{step}/reject", data={"view": "pipeline", "reason": "Wrong <numbers>"}, headers=h
    )
    assert r.status_code == 200
    assert "Rejected." in r.text
    job_page = (await client.get(f"/jobs/{step}")).text
    assert "An administrator rejected the result." in job_page
    assert "Wrong &lt;numbers&gt;" in job_page
    audit = await pg.fetchrow("SELECT detail FROM audit_log WHERE action = 'job.reject' AND outcome = 'ok'")
    assert json.loads(audit["detail"]) == {"reason": "Wrong <numbers>"}

    pid, step = await waiting_step()
    r = await client.post(f"/jobs/{step}/rerun", headers=h)  # from the job page
    assert r.status_code == 200
    assert "This step will run again" in r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", step) == "queued"


# --- pipeline page ------------------------------------------------------------------------------------------


async def test_pipeline_page_shows_steps_in_dag_order_side_by_side_and_polls_until_finished(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    r = await client.post(
        "/pipelines/new/test.steps",
        data=form_body(token, title="Weekly <sales>", seconds="0"),
        follow_redirects=False,
    )
    assert r.status_code == 303
    pid = await pg.fetchval("SELECT id FROM pipelines")
    assert r.headers["location"] == f"/pipelines/{pid}"
    page = (await client.get(r.headers["location"])).text
    layers = re.findall(r'<li class="layer">(.*?)</ul>\s*</li>', page, re.S)
    titles = [re.findall(r'<span class="step-title">([^<]+)</span>', layer) for layer in layers]
    assert titles == [["A step · prepare"], ["Left", "Right"], ["Finish"]]  # untitled: its type and key
    assert "These 2 steps run side by side:" in layers[1]
    assert "0%</strong> done · 0 of 4 steps" in page
    steps = {r["step_key"]: r["id"] for r in await pg.fetch("SELECT id, step_key FROM jobs")}
    assert f'<a href="/jobs/{steps["left"]}" class="step-link">' in page
    poll = re.search(
        r'hx-get="(/pipelines/[^"]+/status\?v=[0-9a-f]+[^"]*)" hx-trigger="every 2s"', page
    ).group(1)
    poll = poll.replace("&amp;", "&")  # it carries the bell's count too
    assert (await client.get(poll, headers=HX)).status_code == 204
    # steps advance
    assert await claim(engine) == steps["prepare"]
    r = await client.get(poll, headers=HX)
    assert r.status_code == 200
    assert 'class="step step-running"' in r.text
    poll = (
        re.search(r'hx-get="(/pipelines/[^"]+/status\?v=[0-9a-f]+[^"]*)"', r.text)
        .group(1)
        .replace("&amp;", "&")
    )
    await finish(engine, settings, steps["prepare"], "completed", result={"label": "prepare"})
    for _ in range(2):  # left and right side by side, then finish
        async with engine.begin() as conn:
            claimed = [r["id"] for r in await queue.claim(conn, "test-worker", 10, 60)]
        for step_id in claimed:
            await finish(engine, settings, step_id, "completed", result={"ok": True})
    assert await pg.fetchval("SELECT status FROM pipelines WHERE id = $1", pid) == "completed"
    r = await client.get(poll, headers=HX)
    assert r.status_code == 286
    assert "Done</span>" in r.text
    assert "100%</strong> done · 4 of 4 steps" in r.text
    assert 'id="pipeline-history"' in r.text
    assert 'hx-swap-oob="true"' in r.text
    assert "Cancel pipeline" not in r.text
    assert "<sales>" not in r.text


async def test_the_owner_cancels_a_pipeline_in_place(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    await client.post("/pipelines/new/test.steps", data=form_body(token), follow_redirects=False)
    pid = await pg.fetchval("SELECT id FROM pipelines")
    await claim(engine)  # prepare runs
    r = await client.post(f"/pipelines/{pid}/cancel", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 200
    assert "Pipeline cancelled: 3 steps cancelled, 1 running step is stopping." in r.text
    r = await client.post(f"/pipelines/{pid}/cancel", headers={**HX, "x-csrftoken": token})
    assert r.status_code in (200, 409)  # the running step is still stopping: nothing left to stop
    jobs = await pg.fetch("SELECT status, is_active FROM jobs")
    assert sorted(j["status"] for j in jobs) == ["cancelled"] * 3 + ["in_progress"]
    assert not any(j["is_active"] for j in jobs if j["status"] == "in_progress")


async def test_pipeline_form_validation_and_resubmit(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    form = (await client.get("/pipelines/new/test.steps")).text
    assert "What happens: 4 steps" in form
    assert 'name="seconds"' in form
    assert "Start the pipeline" in form
    r = await client.post(
        "/pipelines/new/test.steps", data=form_body(token, seconds="61"), follow_redirects=False
    )
    assert r.status_code == 422
    assert '<small id="e-seconds" class="field-error">Must be at most 60.</small>' in r.text
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0
    # the run can be named, like a job; too long a name is an error next to that field
    assert "Name this pipeline" in form
    r = await client.post(
        "/pipelines/new/test.steps", data=form_body(token, _title="x" * 201), follow_redirects=False
    )
    assert r.status_code == 422
    assert 'id="e-_title" class="field-error">Must be at most 200 characters' in r.text
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0
    r = await client.post(
        "/pipelines/new/test.steps",
        data=form_body(token, _title="Quarterly numbers"),
        follow_redirects=False,
    )
    named = await pg.fetchval("SELECT id FROM pipelines WHERE name = 'Quarterly numbers'")
    assert r.status_code == 303
    assert r.headers["location"] == f"/pipelines/{named}"
    await pg.execute("DELETE FROM pipelines")
    r = await client.post(
        "/pipelines/new/test.steps",
        data=form_body(token, title="Mine", fail_right="true"),
        follow_redirects=False,
    )
    pid = await pg.fetchval("SELECT id FROM pipelines")
    async with engine.begin() as conn:
        await __import__("app.pipelines", fromlist=["cancel"]).cancel(conn, pid, CurrentUser(0, "x", True))
    page = (await client.get(f"/pipelines/{pid}")).text
    assert f'href="/pipelines/new/test.steps?from={pid}"' in page
    form = (await client.get(f"/pipelines/new/test.steps?from={pid}")).text
    assert 'value="Mine"' in form
    assert re.search(r'name="fail_right" value="true" checked', form)


# --- My jobs --------------------------------------------------------------------------------------------


async def test_my_jobs_lists_own_jobs_and_pipelines_newest_first_with_filters_and_older_pages(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    from app import pipelines

    user = await sign_in_as(client, db_url, "ann@example.com")
    empty = main_html((await client.get("/jobs")).text)
    assert 'No jobs yet — <a href="/">start one</a>.' in empty
    other = await add_user(db_url, "bob@example.com")
    await enqueue(engine, settings, other.id, input_data={"name": "Bob's secret"}, title="Bob's job")
    ids = [await enqueue(engine, settings, user.id, title=f"Job {i:02d}") for i in range(27)]
    async with engine.begin() as conn:
        p = await pipelines.create_from_template(
            conn, "test.steps", {"title": "P"}, user_id=user.id, settings=settings
        )
    failed = await failed_job(engine, settings, user.id, "x" * 100_000, title="The failed one")

    page = main_html((await client.get("/jobs")).text)
    titles = re.findall(r'<td><a href="/(?:jobs|pipelines)/[^"]+">([^<]+)</a>', page)
    assert titles[:3] == ["The failed one", "Four steps", "Job 26"]
    assert len(titles) == 25
    table = page[page.index('<section id="job-list"') :]
    assert "Bob" not in table  # others' jobs and pipeline steps are not listed
    assert "A step" not in table
    assert "x" * 200 not in page  # no error text in the list (case C13)
    assert re.search(
        rf'id="cell-{ids[26]}" class="cell status status-waiting" hx-get="/jobs/{ids[26]}/cell\?v=[0-9a-f]+&amp;bell=1" hx-trigger="every 2s"',
        page,
    )
    assert re.search(
        rf'id="cell-{failed}" class="cell status status-failed" data-news="[^"]*">', page
    )  # finished: no polling
    assert re.search(rf'id="cell-{p["id"]}"[^>]*hx-get="/pipelines/{p["id"]}/cell', page)
    older = re.search(r'<a href="(/jobs\?after=[^"]+)" rel="next">Older</a>', page).group(1)
    page2 = main_html((await client.get(older.replace("&amp;", "&"))).text)
    titles2 = re.findall(r'<td><a href="/(?:jobs|pipelines)/[^"]+">([^<]+)</a>', page2)
    assert titles2 == ["Job 03", "Job 02", "Job 01", "Job 00"]
    assert 'rel="next"' not in page2
    assert ">Newest</a>" in page2

    only_failed = main_html((await client.get("/jobs?status=failed")).text)
    assert re.findall(r'<td><a href="/jobs/[^"]+">([^<]+)</a>', only_failed) == ["The failed one"]
    only_pipelines = main_html((await client.get("/jobs?type=pipeline:test.steps")).text)
    assert re.findall(r'<td><a href="/[^"]+">([^<]+)</a>', only_pipelines) == ["Four steps"]
    nothing = main_html((await client.get("/jobs?type=noop")).text)
    assert "Nothing matches these filters." in nothing
    fragment = await client.get("/jobs?status=failed", headers=HX)
    assert fragment.text.lstrip().startswith('<section id="job-list"')
    # a status that is none is said beside the field (a 422 listing nothing, as /admin/jobs answers),
    # never ignored as if every job had been asked for; a cursor the list did not give is a 422 too, as
    # on every list (tests/web/test_list_cursors.py), never the first page as if it were the one asked for
    r = await client.get("/jobs?status=zzz")
    assert r.status_code == 422, r.status_code
    page = main_html(r.text)
    assert "&#39;zzz&#39; is not a status; one of cancelled, completed, failed" in page, page
    assert 'aria-describedby="fe-status"' in page and "Fix the filter above to see jobs." in page
    assert "The failed one" not in page
    # so is a kind that is none (a mistyped link): "Nothing matches" read as if no job of it existed
    for kind, said in (
        ("zzz", "unknown job type &#39;zzz&#39;: no job type has this name"),
        ("pipeline:zzz", "unknown pipeline &#39;zzz&#39;: no pipeline has this name"),
    ):
        r = await client.get("/jobs", params={"type": kind})
        page = main_html(r.text)
        assert r.status_code == 422 and said in page, (r.status_code, page)
        assert 'aria-describedby="fe-type"' in page and "The failed one" not in page
    r = await client.get("/jobs?after=not-a-uuid")
    assert r.status_code == 422 and "is not a position this list gave" in r.text


async def test_list_cells_poll_one_job_each_and_stop_when_it_finishes(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    jid = await enqueue(engine, settings, user.id)
    page = (await client.get("/jobs")).text
    url = re.search(rf'hx-get="(/jobs/{jid}/cell\?v=[0-9a-f]+[^"]*)"', page).group(1).replace("&amp;", "&")
    assert (await client.get(url, headers=HX)).status_code == 204
    await claim(engine)
    r = await client.get(url, headers=HX)
    assert r.status_code == 200
    assert "Running" in r.text
    assert "hx-get" in r.text
    await finish(engine, settings, jid, "completed", result={})
    r = await client.get(url, headers=HX)
    assert r.status_code == 286
    assert "Done" in r.text
    assert "hx-get" not in r.text


# --- ownership (case C20) and XSS (case C19) ---------------------------------------------------------------


async def test_another_users_job_pipeline_and_file_get_the_same_404_as_unknown_ids(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    from app import pipelines

    await sign_in_as(client, db_url, "ann@example.com")
    token = await csrf(client)
    r = await client.post(
        "/jobs/new/test.form",
        data=form_body(token, name="Ann"),
        files=[("document", ("mine.txt", b"private", "text/plain"))],
        follow_redirects=False,
    )
    jid = uuid.UUID(r.headers["location"].rsplit("/", 1)[1])
    fid = await pg.fetchval("SELECT id FROM files")
    ann = await pg.fetchval("SELECT id FROM users WHERE email = 'ann@example.com'")
    async with engine.begin() as conn:
        pid = (await pipelines.create_from_template(conn, "test.steps", {}, user_id=ann, settings=settings))[
            "id"
        ]
    assert (await client.get(f"/files/{fid}")).status_code == 200

    await sign_in_as(client, db_url, "bob@example.com")
    token = await csrf(client)
    unknown = uuid.uuid4()
    gets = [
        "/jobs/{}",
        "/jobs/{}/status",
        "/jobs/{}/cell",
        "/pipelines/{}",
        "/pipelines/{}/status",
        "/pipelines/{}/cell",
        "/files/{}",
    ]
    for template in gets:
        theirs = template.format(fid if "files" in template else (pid if "pipelines" in template else jid))
        for headers in ({}, HX):
            mine = await client.get(theirs, headers=headers)
            ghost = await client.get(template.format(unknown), headers=headers)
            assert mine.status_code == ghost.status_code == 404, theirs
            same = mine.text
            for real in (fid, pid, jid):
                same = same.replace(str(real), "X")
            assert same == ghost.text.replace(str(unknown), "X"), theirs
    for action in ("cancel", "retry", "run-again", "approve", "reject", "rerun", "run-now"):
        r = await client.post(f"/jobs/{jid}/{action}", headers={**HX, "x-csrftoken": token})
        assert r.status_code == 404, action
    r = await client.post(f"/pipelines/{pid}/cancel", headers={**HX, "x-csrftoken": token})
    assert r.status_code == 404
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE status <> 'queued'") == 0
    assert "Ann" not in (await client.get("/jobs")).text
    # an admin may see and download everything
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    assert (await client.get(f"/jobs/{jid}")).status_code == 200
    assert (await client.get(f"/pipelines/{pid}")).status_code == 200
    assert (await client.get(f"/files/{fid}")).status_code == 200


async def test_stored_xss_payloads_are_escaped_on_every_page_and_fragment(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection
) -> None:
    """Case C19: no user data reaches the page unescaped, nor any hx-* attribute or inline script."""
    user = await sign_in_as(client, db_url, "ann@example.com")
    payload = {
        "name": "<img src=x onerror=alert(1)>",
        "notes": "javascript:alert(2)",
        "tags": ['"><svg onload=alert(3)>'],
    }
    jid = await enqueue(engine, settings, user.id, input_data=payload, title='"><svg onload=alert(3)>')
    await claim(engine)
    await finish(
        engine, settings, jid, "failed", error="Exception: <script>alert(4)</script>", permanent=True
    )
    from app import pipelines

    async with engine.begin() as conn:
        p = await pipelines.create(
            conn,
            name='"><svg onload=alert(5)>',
            steps=[
                {"key": "a", "type": "test.form", "input_data": payload, "title": "<b onclick=alert(6)>x</b>"}
            ],
            user_id=user.id,
            settings=settings,
        )
    urls = [
        f"/jobs/{jid}",
        f"/jobs/{jid}/status",
        f"/jobs/{jid}/cell",
        "/jobs",
        f"/pipelines/{p['id']}",
        f"/pipelines/{p['id']}/status",
        f"/pipelines/{p['id']}/cell",
    ]
    for url in urls:
        for headers in ({}, HX):
            html = (await client.get(url, headers=headers)).text
            for raw in ("<img src=x", "<svg", "<script>alert", "<b onclick", 'href="javascript'):
                assert raw not in html, (url, raw)
            tags = TagAudit()
            tags.feed(html)
            assert tags.handlers == [], url
            assert tags.inline_scripts == 0, url
            assert tags.styles == 0, url
            assert all("alert" not in v and "<" not in v for v in tags.hx_values), (url, tags.hx_values)


class TagAudit(HTMLParser):
    """Collects inline event handlers, inline scripts and styles, and hx-* attribute values of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.handlers: list[str] = []
        self.hx_values: list[str] = []
        self.inline_scripts = 0
        self.styles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        self.handlers += [n for n in names if n.startswith("on")]
        self.hx_values += [v or "" for n, v in attrs if n.startswith("hx-") and n != "hx-confirm"]
        self.styles += int("style" in names or tag == "style")
        self.inline_scripts += int(tag == "script" and "src" not in names)


async def test_negative_controls_the_escaping_and_ownership_checks_catch_a_leak(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, settings: Settings, monkeypatch: Any
) -> None:
    """The checks above fail when their mechanism is switched off: with autoescape off the payload
    reaches the page and TagAudit sees its handler; without the owner check another user's job is shown."""
    from app.db import read_rows
    from app.web import jobs as web_jobs
    from app.web.deps import parse_uuid
    from app.web.job_page import JOB_STATUS

    ann = await add_user(db_url, "ann@example.com")
    jid = await enqueue(engine, settings, ann.id, title="<img src=x onerror=alert(1)>")
    await sign_in_as(client, db_url, "bob@example.com")
    assert (await client.get(f"/jobs/{jid}/status", headers=HX)).status_code == 404

    async def no_owner_check(request: Any, job_id: Any, user: Any, query: Any = JOB_STATUS) -> Any:
        rows = await read_rows(request.app.state.engine, query, {"id": parse_uuid(job_id)})
        return rows[0]

    async def no_owner_check_again(db: Any, job_id: Any, user: Any, query: Any = JOB_STATUS) -> Any:
        return (await db.execute(query, {"id": parse_uuid(job_id)})).mappings().first()

    monkeypatch.setattr(web_jobs, "poll_row", no_owner_check)  # the polls' owner check
    # and the poll's read of the row again inside its snapshot, which checks the owner too
    monkeypatch.setattr(web_jobs, "load_status_row", no_owner_check_again)
    leaked = await client.get(f"/jobs/{jid}/status", headers=HX)
    assert leaked.status_code == 200  # the 404 above comes from the owner check

    await switch_to(client, "ann@example.com")
    env = client.app.template_engine.engine
    env.autoescape = False
    env.cache.clear()
    try:
        html = (await client.get("/jobs")).text
    finally:
        env.autoescape = True
        env.cache.clear()
    tags = TagAudit()
    tags.feed(html)
    assert "<img src=x onerror=alert(1)>" in html
    assert tags.handlers == ["onerror"]


# --- files ------------------------------------------------------------------------------------------------


async def test_api_upload_and_downloads_with_safe_headers(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com")
    bob = await add_user(db_url, "bob@example.com")
    h = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    hb = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    r = await client.post(
        "/api/files", files={"file": ('Ünïcode "name".html', b"<script>x</script>", "text/html")}, headers=h
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"id", "name", "size", "content_type"}
    assert body["name"] == "Ünïcode name.html"
    assert body["size"] == 18
    assert body["content_type"] == "text/html"
    # the id goes into a job's input
    r2 = await client.post(
        "/api/jobs",
        json={"type": "test.form", "input_data": {"name": "A", "document": body["id"]}},
        headers=h,
    )
    assert r2.status_code == 201
    dl = await client.get(f"/api/files/{body['id']}", headers=h)
    assert dl.status_code == 200
    assert dl.content == b"<script>x</script>"
    assert dl.headers["content-disposition"] == (
        "attachment; filename=\"Unicode name.html\"; filename*=UTF-8''%C3%9Cn%C3%AFcode%20name.html"
    )
    assert dl.headers["x-content-type-options"] == "nosniff"
    assert (await client.get(f"/api/files/{body['id']}", headers=hb)).status_code == 404
    assert (await client.get("/api/files/nope", headers=h)).status_code == 404
    # limits and bad requests: 413 with the limit in words, 422 otherwise; never a 500
    r = await client.post(
        "/api/files", files={"file": ("big.bin", b"x" * 5000, "application/octet-stream")}, headers=h
    )
    assert r.status_code == 413
    assert r.json()["detail"] == "The request is too large: the limit is 4 KiB."
    r = await client.post("/api/files", files={"file": ("empty.txt", b"", "text/plain")}, headers=h)
    assert r.status_code == 422
    assert r.json()["errors"]["file"].startswith("This file is empty")
    r = await client.post("/api/files", files={"other": ("a.txt", b"a", "text/plain")}, headers=h)
    assert r.status_code == 422
    assert "file" in r.json()["errors"]
    assert (await client.post("/api/files", files={"file": ("a.txt", b"a", "text/plain")})).status_code == 401
    assert await pg.fetchval("SELECT count(*) FROM files") == 1


# --- every query a page or poll issues uses an index ------------------------------------------------------

BIG_TABLES = ("jobs", "pipelines", "job_events", "files", "job_dependencies")


def _plan_problems(plan: dict[str, Any], limit_rows: int | None) -> list[str]:
    """Sequential scans of the big tables, and (for polls) rows read beyond ``limit_rows``."""
    problems = []
    node_type = plan.get("Node Type", "")
    relation = plan.get("Relation Name")
    if relation in BIG_TABLES:
        if node_type == "Seq Scan":
            problems.append(f"Seq Scan on {relation}")
        touched = round(  # rows per loop can be fractional (an average over loops or workers)
            plan.get("Actual Rows", 0) * plan.get("Actual Loops", 1) + plan.get("Rows Removed by Filter", 0)
        )
        if limit_rows is not None and touched > limit_rows:
            problems.append(f"{node_type} on {relation} read {touched} rows")
    for child in plan.get("Plans", []):
        problems.extend(_plan_problems(child, limit_rows))
    return problems


async def _explain(engine: AsyncEngine, statement: str, params: Any, limit_rows: int | None) -> list[str]:
    async with engine.connect() as conn:
        result = await conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        plan = result.scalar_one()
        await conn.rollback()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return _plan_problems(plan[0]["Plan"], limit_rows)


@pytest.mark.slow
async def test_every_query_of_every_page_and_poll_uses_an_index_on_a_big_table(
    db_url: str, make_settings: Any, pg: asyncpg.Connection, engine: AsyncEngine
) -> None:
    from sqlalchemy import event

    from app import pipelines

    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        ann = await sign_in_as(client, db_url, "ann@example.com", admin=False)
        crowd = [
            await pg.fetchval(
                "INSERT INTO users (email, password_hash) VALUES ($1, 'x') RETURNING id", f"u{i}@x"
            )
            for i in range(20)
        ]
        # 120 000 jobs over 20 other users, 12 000 pipelines, 150 000 events, 100 000 files (case C17's shape)
        await pg.execute(
            """
            INSERT INTO pipelines (id, name, user_id, status, finished_at)
            SELECT gen_random_uuid(), 'p' || g, ($1::int[])[1 + g % 20], 'completed', now() FROM generate_series(1, 12000) g
            """,
            crowd,
        )
        await pg.execute(
            """
            INSERT INTO jobs (id, type, status, user_id, input_data, result_data, error_message, max_attempts, completed_at,
                              created_at, pipeline_id)
            SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN 'noop' ELSE 'test.form' END,
                   CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'completed' END, ($1::int[])[1 + g % 20],
                   '{"name": "x"}', '{"ok": true}', CASE WHEN g % 10 = 0 THEN 'boom' END, 3, now(), now(), NULL
            FROM generate_series(1, 120000) g
            """,
            crowd,
        )
        await pg.execute(
            """
            INSERT INTO job_events (job_id, pipeline_id, kind, actor)
            SELECT id, NULL, 'enqueued', 'user:1' FROM jobs CROSS JOIN generate_series(1, 2) LIMIT 150000
            """
        )
        await pg.execute(
            """
            INSERT INTO job_dependencies (job_id, depends_on)
            SELECT id, prev FROM (SELECT id, lag(id) OVER (ORDER BY id) AS prev FROM jobs) s
            WHERE prev IS NOT NULL LIMIT 100000
            """
        )
        await pg.execute(
            """
            INSERT INTO files (id, user_id, name, content_type, size, sha256)
            SELECT gen_random_uuid(), ($1::int[])[1 + g % 20], 'f', 'text/plain', 1, 'x' FROM generate_series(1, 100000) g
            """,
            crowd,
        )
        # Ann's own things: a finished job with a file, a running job, a pipeline mid-way
        token = await csrf(client)
        r = await client.post(
            "/jobs/new/test.form",
            data=form_body(token, name="Ann"),
            files=[("document", ("a.txt", b"a", "text/plain"))],
            follow_redirects=False,
        )
        done_id = uuid.UUID(r.headers["location"].rsplit("/", 1)[1])
        await claim(engine, done_id)
        await finish(engine, settings, done_id, "completed", result={"ok": 1})
        running = await enqueue(engine, settings, ann.id)
        await claim(engine, running)
        async with engine.begin() as conn:
            pid = (
                await pipelines.create_from_template(
                    conn, "test.steps", {}, user_id=ann.id, settings=settings
                )
            )["id"]
        await claim(engine)
        fid = await pg.fetchval("SELECT id FROM files WHERE user_id = $1", ann.id)
        await pg.execute("ANALYZE")

        captured: list[tuple[str, Any]] = []

        def capture(
            conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
        ) -> None:
            if statement.lstrip().upper().startswith("SELECT") or " FROM " in statement.upper():
                captured.append((statement, parameters))

        def log_query(record: Any) -> None:  # statements sent straight on asyncpg (app.db.read_rows)
            if record.query.lstrip().upper().startswith("SELECT"):
                captured.append((record.query, record.args))

        def on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
            dbapi_conn._connection.add_query_logger(log_query)  # a set: adding twice is harmless

        app_engine = client.app.state.engine  # runs in the test client's own event loop
        event.listen(app_engine.sync_engine, "before_cursor_execute", capture)
        event.listen(app_engine.sync_engine.pool, "checkout", on_checkout)
        pages = [
            "/",
            "/jobs",
            "/jobs?status=failed",
            "/jobs?status=queued",  # a running pipeline none of whose steps started reads "Waiting"
            "/jobs?status=in_progress",
            "/jobs?type=test.form",
            "/jobs?type=pipeline:test.steps",
            f"/jobs?after={running}",
            f"/jobs/{done_id}",
            f"/jobs/{running}",
            f"/pipelines/{pid}",
            "/jobs/new/test.form",
            f"/jobs/new/test.form?from={done_id}",
            f"/files/{fid}",
        ]
        polls = [
            (f"/jobs/{running}/status", 5),
            (f"/jobs/{done_id}/status", 20),
            (f"/jobs/{running}/cell?bell=0", 5),  # the bell's count rides on the polls
            (f"/pipelines/{pid}/status?bell=0", 20),
            (f"/pipelines/{pid}/cell?bell=0", 20),
        ]
        problems: list[str] = []
        for url in pages:
            captured.clear()
            r = await client.get(url)
            await asyncio.sleep(0.05)  # asyncpg calls query loggers soon after, not during, the query
            assert r.status_code == 200, url
            assert captured, url
            if url.startswith("/jobs?") or url == "/jobs":
                for statement, _ in captured:  # case C13: lists never load input, result or error text
                    assert not re.search(r"input_data|result_data|error_message", statement), statement
            for statement, params in captured:
                problems += [
                    f"{url}: {p}: {statement[:120]}" for p in await _explain(engine, statement, params, None)
                ]
        for url, limit_rows in polls:
            captured.clear()
            assert (await client.get(url, headers=HX)).status_code in (200, 286), url
            await asyncio.sleep(0.05)
            assert captured, url
            if "/cell" in url:
                for statement, _ in captured:
                    assert not re.search(r"input_data|result_data|error_message\b", statement), statement
            for statement, params in captured:
                problems += [
                    f"{url}: {p}: {statement[:120]}"
                    for p in await _explain(engine, statement, params, limit_rows)
                ]
        event.remove(app_engine.sync_engine, "before_cursor_execute", capture)
        event.remove(app_engine.sync_engine.pool, "checkout", on_checkout)
        assert problems == []

        # negative control: the checker does catch a query that scans the table
        found = await _explain(engine, "SELECT id FROM jobs WHERE progress_message = $1", ("x",), None)
        assert found == ["Seq Scan on jobs"]
        found = await _explain(
            engine, "SELECT id FROM jobs WHERE user_id = $1 ORDER BY id DESC LIMIT 50", (crowd[0],), 5
        )
        assert len(found) == 1
        assert found[0].endswith("Scan on jobs read 50 rows")


def test_a_list_of_numbers_is_typed_with_commas_not_json() -> None:
    """Found by a first-time user: "Sizes (pixels)" asked for JSON. A list of numbers is a text box that
    takes ``160, 640`` (commas, spaces or semicolons) and says which entry is not a number."""
    from zoneinfo import ZoneInfo

    from app.processors import registry
    from app.web.form_values import convert as _convert
    from app.web.forms import display_value, form_fields

    sizes = next(f for f in form_fields(registry.get("images.thumbnail").input_model) if f.name == "sizes")
    assert sizes.kind == "integers"
    utc = ZoneInfo("UTC")
    assert _convert(sizes, "160, 640", utc) == ([160, 640], None)
    assert _convert(sizes, "160 ; 640  1024", utc) == ([160, 640, 1024], None)
    value, problem = _convert(sizes, "160, big", utc)
    assert value is None
    assert problem == "“big” is not a whole number. Separate the numbers with commas, like 160, 640."
    assert display_value(sizes, [160, 640], utc) == "160, 640"


def test_results_show_lists_of_objects_as_tables_and_objects_as_fields() -> None:
    from app.web.result_display import result_items

    items = {
        it["label"]: it
        for it in result_items(
            {
                "columns": [
                    {"name": "price", "type": "decimal"},
                    {"name": "<b>item</b>", "type": "text", "url": "https://x.example"},
                ],
                "source": {"name": "penguins.csv", "rows": 344},
                "deep": {"a": {"b": {"c": 1}}},
            }
        )
    }
    table = items["Columns"]
    assert table["kind"] == "table"
    assert table["value"]["columns"] == ["Name", "Type", "URL"]
    assert [c["value"] for c in table["value"]["rows"][1]] == ["<b>item</b>", "text", "https://x.example"]
    assert table["value"]["rows"][1][2]["kind"] == "url"
    assert items["Source"]["kind"] == "fields"
    assert [f["value"] for f in items["Source"]["value"]] == [
        "penguins.csv",
        "344",
    ]
    assert items["Deep"]["kind"] == "fields"  # one level, then JSON
    assert items["Deep"]["value"][0]["kind"] == "json"


def test_an_http_answer_reads_status_reason_and_method_before_its_body() -> None:
    """What a person looks at first in an HTTP request's result comes first: whether it worked."""
    from app.web.result_display import result_items

    result = {
        "body": "hi",
        "body_bytes": 2,
        "content_type": "text/plain",
        "elapsed_ms": 12,
        "headers": {"server": "x"},
        "method": "GET",
        "ok": True,
        "reason": "OK",
        "status": 200,
        "url": "https://example.com/",
    }
    labels = [it["label"] for it in result_items(result)]
    assert labels[:5] == ["Status", "Reason", "OK", "Method", "URL"], labels
    assert labels.index("Body") > labels.index("URL")


def test_a_csv_summarys_columns_read_as_a_table_with_nested_values_in_words() -> None:
    """A first-time user's trial found the CSV summary's columns shown as raw JSON: 14 keys and nested
    ``top_values`` / ``histogram``. They are a table, nested values written out in words."""
    from app.processors.reports import summarise_column
    from app.web.result_display import result_items

    columns = [
        summarise_column("species", ["Adelie", "Adelie", "Gentoo", ""], 3, False),
        summarise_column("mass", ["3750", "3800", "", "4500.5"], 3, False),
    ]
    (item,) = result_items({"columns": columns})
    assert item["kind"] == "table", item
    table = item["value"]
    cells = {col: [row[i]["value"] for row in table["rows"]] for i, col in enumerate(table["columns"])}
    assert cells["Name"] == ["species", "mass"]
    assert cells["Top values"][0] == "Adelie (2); Gentoo (1)"
    assert "{" not in " ".join(str(v) for col in cells.values() for v in col)


@pytest.mark.parametrize("skew_minutes", [90, -90])
async def test_pages_read_due_and_scheduled_on_the_database_clock_on_a_skewed_web_host(
    client: AsyncTestClient,
    db_url: str,
    engine: AsyncEngine,
    ui_settings: Settings,
    pg: asyncpg.Connection,
    monkeypatch: Any,
    skew_minutes: int,
) -> None:
    """A job's ``run_at`` is on the database's clock, and so is the "now" a page compares it with (and
    the one a schedule's preview counts from): a web host 90 minutes fast showed a job due in 45 minutes
    as "Waiting" as if due, one 90 minutes slow showed a job due now as "Scheduled", and the fast one's
    preview of a daily schedule began a day late."""
    import time
    from datetime import timedelta

    from app import dbclock
    from app.web import display

    skew = timedelta(minutes=skew_minutes)
    skew_ns = skew_minutes * 60 * 1_000_000_000
    owner = await sign_in_as(client, db_url, "root@example.com", admin=True)
    db_now = await pg.fetchval("SELECT now()")
    soon = await enqueue(engine, ui_settings, owner.id, run_at=db_now + timedelta(minutes=45))
    due = await enqueue(engine, ui_settings, owner.id)

    class SkewedHost(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz or UTC) + skew

    real_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + skew_ns)
    monkeypatch.setattr(dbclock, "_offset_ns", -skew_ns)  # as the web process measures it
    monkeypatch.setattr(display, "datetime", SkewedHost, raising=False)
    from app.web.admin import schedule_form

    monkeypatch.setattr(schedule_form, "datetime", SkewedHost, raising=False)

    badge = '<span class="status-icon" aria-hidden="true"></span>{}</span>'
    page = (await client.get(f"/jobs/{soon}")).text
    assert badge.format("Scheduled") in page, skew_minutes
    page = (await client.get(f"/jobs/{due}")).text
    assert badge.format("Waiting") in page and badge.format("Scheduled") not in page, skew_minutes
    listed = main_html((await client.get("/jobs")).text)
    assert listed.count(badge.format("Scheduled")) == 1, skew_minutes

    # a schedule at the next whole hour by the database's clock: the preview's first run is that one
    nxt = (db_now + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    cron = f"0 {nxt.hour} * * *"
    preview = await client.get("/admin/schedules/preview", params={"_cron": cron, "_timezone": "UTC"})
    assert f"{nxt.day} {nxt:%b %Y}, {nxt:%H}:00" in preview.text, (skew_minutes, preview.text[-800:])
