"""Jobs a person can tell apart and find: names from the input, the My jobs search box (app.web.my_jobs,
app.jobs.naming)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, test.steps)
from app.jobs.naming import name_from_input, url_words
from app.processors import registry
from app.settings import Settings
from app.web.my_jobs import like_pattern
from app.web.request_context import CSP
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import HX, bearer, sign_in_as, switch_to


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False, upload_max_bytes=400_000)


def test_a_name_comes_from_the_file_the_url_or_the_subject() -> None:
    thumbs = registry.get("images.thumbnail")
    sheet = registry.get("images.contact_sheet")
    assert thumbs is not None and sheet is not None
    fid = "01a23310-acd3-73bc-9239-90788ee4c799"
    other = "01a23310-acd3-73bc-9239-90788ee4c79a"
    assert name_from_input(thumbs.input_model, {"image": fid}, {fid: "holiday.jpg"}) == "holiday.jpg"
    assert (
        name_from_input(sheet.input_model, {"images": [fid, other], "title": "x"}, {fid: "a.png"})
        == "a.png and 1 more"
    )
    assert url_words("https://www.example.com/hooks/build/?x=1") == "example.com/hooks/build"
    assert url_words("javascript:alert(1)") is None
    assert name_from_input(None, {"url": "https://example.com/a", "method": "POST"}, {}) == "example.com/a"
    assert (
        name_from_input(None, {"to": "a@example.com", "subject": "  Monthly\nnumbers "}, {})
        == "Monthly numbers"
    )
    assert name_from_input(None, {"seconds": 3}, {}) is None
    assert len(name_from_input(None, {"subject": "x" * 500}, {}) or "") == 80


def test_a_search_pattern_matches_percent_and_underscore_as_typed() -> None:
    assert like_pattern("50%_off\\") == "%50\\%\\_off\\\\%"


async def test_jobs_are_named_from_their_input_on_the_page_the_api_and_the_list(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    user, h = await bearer(db_url, "ann@example.com")
    made = await client.post(
        "/api/jobs",
        json={
            "type": "http.request",
            "input_data": {"url": "https://hooks.example.com/build/42", "method": "GET"},
        },
        headers=h,
    )
    assert made.status_code == 201, made.text
    assert made.json()["title"] == "hooks.example.com/build/42"
    named = await client.post(
        "/api/jobs",
        json={"type": "http.request", "title": "My own name", "input_data": {"url": "https://x.example/"}},
        headers=h,
    )
    assert named.json()["title"] == "My own name"  # a name given is kept
    up = await client.post("/api/files", files={"file": ("holiday.png", PNG)}, headers=h)
    assert up.status_code == 201, up.text
    thumb = await client.post(
        "/api/jobs", json={"type": "images.thumbnail", "input_data": {"image": up.json()["id"]}}, headers=h
    )
    assert thumb.json()["title"] == "holiday.png"

    await switch_to(client, "ann@example.com")
    listing = (await client.get("/jobs")).text
    assert "hooks.example.com/build/42" in listing
    assert "holiday.png" in listing
    page = (await client.get(f"/jobs/{made.json()['id']}")).text
    assert "<h1>hooks.example.com/build/42</h1>" in page

    # a job submitted before names were derived gets one on its page
    await pg.execute("UPDATE jobs SET title = NULL WHERE id = $1", made.json()["id"])
    page = (await client.get(f"/jobs/{made.json()['id']}")).text
    assert "<h1>hooks.example.com/build/42</h1>" in page


async def test_my_jobs_search_finds_by_name_and_input_with_the_filters_and_pages(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    _, h = await bearer(db_url, "ann@example.com")
    _, other = await bearer(db_url, "bob@example.com")
    for n in range(3):
        await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": {"url": f"https://shop.example/orders/{n}"}},
            headers=h,
        )
    await client.post(
        "/api/jobs",
        json={
            "type": "email.send",
            "input_data": {"to": ["x@example.com"], "subject": "Q3 50% off", "body": "Hi"},
        },
        headers=h,
    )
    await client.post(
        "/api/jobs",
        json={"type": "http.request", "title": "Nightly_run", "input_data": {"url": "https://n.example/"}},
        headers=h,
    )
    await client.post(
        "/api/jobs",
        json={"type": "http.request", "title": "Nightly run", "input_data": {"url": "https://n.example/"}},
        headers=h,
    )
    await client.post(  # another person's job never shows
        "/api/jobs",
        json={"type": "http.request", "input_data": {"url": "https://shop.example/bob"}},
        headers=other,
    )
    await switch_to(client, "ann@example.com")

    def names(html: str) -> list[str]:
        import re

        return re.findall(r'<td><a href="/jobs/[^"]+">([^<]+)</a>', html)

    found = names((await client.get("/jobs", params={"q": "SHOP.example"})).text)
    assert found == ["shop.example/orders/2", "shop.example/orders/1", "shop.example/orders/0"]
    assert names((await client.get("/jobs", params={"q": "x@example.com"})).text) == ["Q3 50% off"]
    assert names((await client.get("/jobs", params={"q": "50%"})).text) == ["Q3 50% off"]
    assert names((await client.get("/jobs", params={"q": "%"})).text) == ["Q3 50% off"]  # % is a character
    assert names((await client.get("/jobs", params={"q": "Nightly_"})).text) == ["Nightly_run"]
    assert names((await client.get("/jobs", params={"q": "shop", "type": "email.send"})).text) == []
    assert names((await client.get("/jobs", params={"q": "orders", "status": "queued"})).text)
    assert "Nothing matches these filters" in (await client.get("/jobs", params={"q": "nope"})).text
    assert 'value="orders"' in (await client.get("/jobs", params={"q": "orders"})).text

    # keyset paging keeps the search
    ids = [r["id"] for r in await pg.fetch("SELECT id FROM jobs ORDER BY id DESC")]
    more = (await client.get("/jobs", params={"q": "orders", "after": str(ids[4])})).text
    assert names(more) == ["shop.example/orders/1", "shop.example/orders/0"]
    assert "q=orders" in (await client.get("/jobs", params={"q": "orders", "after": str(ids[0])})).text
    assert (await client.get("/jobs", params={"q": "a" * 5000}, headers=HX)).status_code == 200
    assert (await client.get("/jobs", params={"q": "\x00"}, headers=HX)).status_code == 422


PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82"
)


# --- results at a glance ------------------------------------------------------------------------------


async def _stored(engine: Any, settings: Settings, user_id: int, name: str, data: bytes) -> dict[str, Any]:
    from app.files import FileStore, file_ref

    async with engine.begin() as conn:
        row = await FileStore(settings.files_dir).save(conn, user_id=user_id, name=name, data=data)
    return file_ref(row)


async def test_a_job_page_shows_pictures_opens_reports_and_shows_a_csvs_first_rows(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings
) -> None:
    user = await sign_in_as(client, db_url, "ann@example.com")
    png = await _stored(engine, ui_settings, user.id, "thumb-200.png", PNG)
    html = await _stored(engine, ui_settings, user.id, "report.html", b"<h1>Report</h1>")
    rows = "\n".join(f"{n},name {n}" for n in range(100))
    table = await _stored(engine, ui_settings, user.id, "out.csv", f"id,name\n{rows}\n".encode())
    jid = await enqueue(engine, ui_settings, user.id)
    await claim(engine, jid)
    result = {
        "zeta": 1,
        "headers": {"X-Request-Id": "abc", "content-type": "text/plain"},
        "status_code": 200,
        "files": [png, html, table],
    }
    await finish(engine, ui_settings, jid, "completed", result=result)
    page = (await client.get(f"/jobs/{jid}")).text
    assert f'<img src="/files/{png["file_id"]}" alt="thumb-200.png"' in page
    assert f'href="/files/{html["file_id"]}?view=1" target="_blank"' in page
    assert "<td>name 3</td>" in page and "<td>name 60</td>" not in page  # the first rows only
    assert "X-Request-Id" in page and "X Request Id" not in page  # keys as written
    assert page.index("<dt>Files</dt>") < page.index("<dt>Status code</dt>") < page.index("<dt>Zeta</dt>")
    viewed = await client.get(f"/files/{html['file_id']}", params={"view": "1"})
    assert viewed.headers["content-disposition"].startswith("inline")
    assert viewed.headers["content-security-policy"].startswith("sandbox")
    assert "allow-scripts" not in viewed.headers["content-security-policy"]
    downloaded = await client.get(f"/files/{html['file_id']}")
    assert downloaded.headers["content-disposition"].startswith("attachment")


async def test_a_missing_files_error_page_keeps_the_pages_own_styles(
    client: AsyncTestClient, db_url: str
) -> None:
    # a link to a file retention removed: the 404 is our page, not stored bytes, so it is not sandboxed
    await sign_in_as(client, db_url, "ann@example.com")
    for path in ("/files/no-such-file", "/files/01a24f5d-b557-7783-b9e7-a9635cbcd8de?view=1"):
        r = await client.get(path)
        assert r.status_code == 404
        assert "No such file" in r.text
        assert r.headers["content-security-policy"] == CSP, r.headers["content-security-policy"]


async def test_a_pipeline_page_puts_its_outputs_and_why_it_failed_at_the_top(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    from app import pipelines

    user = await sign_in_as(client, db_url, "ann@example.com")
    sheet = await _stored(engine, ui_settings, user.id, "contact-sheet.png", PNG)
    async with engine.begin() as conn:
        p = await pipelines.create_from_template(
            conn, "test.steps", {}, user_id=user.id, settings=ui_settings
        )
    page = (await client.get(f"/pipelines/{p['id']}")).text
    assert '<p id="pipeline-summary">Pipeline of 4 steps' in page

    async def step(key: str) -> Any:
        return await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = $2", p["id"], key)

    for key in ("prepare", "left", "right"):
        jid = await step(key)
        if key != "right":  # the claim of "left" takes "right" too
            await claim(engine, jid)
        await finish(
            engine, ui_settings, jid, "completed", result={"files": [] if key != "left" else [sheet]}
        )
    last = await step("finish")
    await claim(engine, last)
    await finish(engine, ui_settings, last, "completed", result={"files": [sheet]})
    page = (await client.get(f"/pipelines/{p['id']}")).text
    top = page[page.index('id="outputs"') : page.index('class="steps"')]
    assert f'<img src="/files/{sheet["file_id"]}"' in top  # the last step's output, not "left"'s
    assert top.count("<img") == 1
    fragment = await client.get(f"/pipelines/{p['id']}/status", params={"v": "x"}, headers=HX)
    assert 'id="pipeline-summary" hx-swap-oob="true">Pipeline of 4 steps' in fragment.text

    async with engine.begin() as conn:
        q = await pipelines.create_from_template(
            conn, "test.steps", {}, user_id=user.id, settings=ui_settings
        )
    first = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'prepare'", q["id"])
    await pg.execute("UPDATE jobs SET max_attempts = 1 WHERE id = $1", first)
    await claim(engine, first)
    await finish(engine, ui_settings, first, "failed", error="The column 'price' is missing.")
    page = (await client.get(f"/pipelines/{q['id']}")).text
    why = page[page.index('id="pipeline-why-heading"') : page.index('class="steps"')]
    assert f'<a href="/jobs/{first}">' in why
    assert "The column &#39;price&#39; is missing." in why


# --- catching mistakes in the form ---------------------------------------------------------------------


async def test_file_fields_say_what_they_take_and_choices_read_in_words(
    client: AsyncTestClient, db_url: str
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    thumbs = (await client.get("/jobs/new/images.thumbnail")).text
    assert 'accept="image/*"' in thumbs
    assert '<option value="WEBP"' in thumbs and ">WebP</option>" in thumbs
    csv_form = (await client.get("/jobs/new/report.csv_check")).text
    assert 'accept=".csv,' in csv_form
    assert ">UTF-8 with BOM</option>" in csv_form and 'value="utf-8-sig"' in csv_form
    assert ">Comma</option>" in csv_form and 'value="comma"' in csv_form
    batch = (await client.get("/pipelines/new/photo_batch")).text
    assert "What happens: one step per picture, then a contact sheet" in batch
    assert 'accept="image/*"' in batch


async def test_a_csv_given_as_a_picture_is_a_form_error_next_to_the_field_and_a_422_in_the_api(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    from tests.support.webkit import csrf

    _, h = await bearer(db_url, "ann@example.com")
    await switch_to(client, "ann@example.com")
    token = await csrf(client)
    r = await client.post(
        "/jobs/new/images.thumbnail",
        data={"_csrf_token": token, "sizes": "160", "format": "JPEG", "quality": "85"},
        files=[("image", ("prices.csv", b"a,b\n1,2\n", "text/csv"))],
        follow_redirects=False,
    )
    assert r.status_code == 422
    assert "This file is a CSV table, not a picture." in r.text
    assert 'href="#f-image"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    up = await client.post("/api/files", files={"file": ("prices.csv", b"a,b\n1,2\n")}, headers=h)
    api = await client.post(
        "/api/jobs", json={"type": "images.thumbnail", "input_data": {"image": up.json()["id"]}}, headers=h
    )
    assert api.status_code == 422
    assert "input_data.image" in api.text and "not a picture" in api.text
    pic = await client.post("/api/files", files={"file": ("p.png", PNG)}, headers=h)
    csv_job = await client.post(
        "/api/jobs", json={"type": "report.csv_check", "input_data": {"file": pic.json()["id"]}}, headers=h
    )
    assert csv_job.status_code == 422 and "a PNG picture, not a CSV table" in csv_job.text
    ok = await client.post(
        "/api/jobs", json={"type": "report.csv_check", "input_data": {"file": up.json()["id"]}}, headers=h
    )
    assert ok.status_code == 201
    tpl = await client.post(
        "/api/pipelines",
        json={"template": "photo_batch", "input_data": {"images": [pic.json()["id"], up.json()["id"]]}},
        headers=h,
    )
    assert tpl.status_code == 422 and "input_data.images[1]" in tpl.text
    # the same rule on every other path that names files: ad hoc pipelines, batches, schedules
    step = {"key": "t", "type": "images.thumbnail", "input_data": {"image": up.json()["id"]}}
    adhoc = await client.post("/api/pipelines", json={"name": "p", "steps": [step]}, headers=h)
    assert adhoc.status_code == 422 and "not a picture" in adhoc.text, adhoc.text
    rows = [{"image": pic.json()["id"]}, {"image": up.json()["id"]}]
    batch = await client.post("/api/batches", json={"type": "images.thumbnail", "rows": rows}, headers=h)
    assert batch.status_code == 422 and "rows[1].image" in batch.text and "not a picture" in batch.text
    _, root = await bearer(db_url, "root@example.com", admin=True)
    table = await client.post("/api/files", files={"file": ("t.csv", b"a,b\n1,2\n")}, headers=root)
    when = {"cron": "0 3 * * *", "type": "images.thumbnail", "input_data": {"image": table.json()["id"]}}
    sched = await client.post("/api/schedules", json=when, headers=root)
    assert sched.status_code == 422 and "not a picture" in sched.text, sched.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1
    assert (
        await pg.fetchval("SELECT count(*) FROM batches")
        + await pg.fetchval("SELECT count(*) FROM schedules")
        == 0
    )


async def test_the_email_form_says_when_email_is_not_set_up_and_a_long_body_is_refused(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    from tests.support.webkit import csrf

    await sign_in_as(client, db_url, "ann@example.com")
    form = (await client.get("/jobs/new/email.send")).text
    assert "Sending e-mail is not set up on this Jobdesk yet" in form
    assert "SMTP_HOST" not in form  # the settings are for admins
    assert "maxlength=" not in form[form.index('name="body"') - 300 : form.index("</textarea>")]
    token = await csrf(client)
    r = await client.post(
        "/jobs/new/email.send",
        data={"_csrf_token": token, "to": "a@example.com", "subject": "Hi", "body": "x" * 200_001},
        follow_redirects=False,
    )
    assert r.status_code == 422
    assert "Use at most 200,000 characters." in r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    assert "<code>SMTP_HOST</code>" in (await client.get("/jobs/new/email.send")).text


# --- how long it usually takes -------------------------------------------------------------------------


async def test_a_waiting_job_says_how_long_its_type_usually_takes_once_there_are_five_runs(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    from app.web import job_page

    user = await sign_in_as(client, db_url, "ann@example.com")
    for n in range(4):
        jid = await enqueue(engine, ui_settings, user.id)
        await claim(engine, jid)
        await finish(engine, ui_settings, jid, "completed", result={})
        await pg.execute(
            "UPDATE jobs SET started_at = now() - make_interval(secs => $2), completed_at = now() WHERE id = $1",
            jid,
            [170.0, 180.0, 200.0, 3000.0][n],
        )
    waiting = await enqueue(engine, ui_settings, user.id)
    job_page._usual_cache.clear()
    assert "usually take" not in (await client.get(f"/jobs/{waiting}")).text  # four runs are not enough
    fifth = await claim(engine)
    assert fifth == waiting
    await finish(engine, ui_settings, fifth, "completed", result={})
    await pg.execute("UPDATE jobs SET started_at = now() - interval '190 s' WHERE id = $1", fifth)
    sixth = await enqueue(engine, ui_settings, user.id)
    job_page._usual_cache.clear()
    page = (await client.get(f"/jobs/{sixth}")).text
    assert "Jobs like this usually take about 3 min." in page  # the median, not the 50-min outlier
    await pg.execute("UPDATE jobs SET started_at = now() - interval '1 h' WHERE id = $1", fifth)
    assert "about 3 min" in (await client.get(f"/jobs/{sixth}")).text  # cached for a minute
    assert job_page.about(4) == "a few seconds" and job_page.about(44) == "about 40 s"


# --- plain words ---------------------------------------------------------------------------------------


def test_errors_read_in_plain_words_for_owners_and_in_full_for_admins() -> None:
    from app.web.display import error_summary, error_text_for

    dns = "Could not connect to example.com: example.com cannot be resolved ([Errno -2] Name or service not known)"
    owner = object()
    assert error_text_for(dns, owner) == "Could not connect to example.com: the name does not exist"
    assert error_text_for("[Errno 111] Connection refused", owner) == "the server refused the connection"
    assert error_text_for("ValueError: the column is empty", owner) == "The column is empty"

    class Admin:
        is_admin = True

    assert error_text_for(dns, Admin()) == dns
    failed = {"status": "failed", "attempts": 3}
    summary = error_summary(failed, dns, owner)
    assert (
        summary is not None
        and summary["reason"] == "Could not connect to example.com: the name does not exist"
    )
    assert summary["technical"] is None  # nothing more to show than the reason: no repeat
    long_one = "x" * 200
    assert error_summary(failed, long_one, owner)["technical"] is None  # type: ignore[index]
    traced = 'boom\nTraceback (most recent call last):\n  File "/srv/app.py", line 1'
    assert error_summary(failed, traced, Admin())["technical"] == traced  # type: ignore[index]


async def test_a_cancelled_step_names_the_step_that_failed_and_a_rejection_is_at_the_top(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    from app import pipelines
    from app.jobs import queue

    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        p = await pipelines.create_from_template(
            conn, "test.steps", {}, user_id=user.id, settings=ui_settings
        )
    first = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'prepare'", p["id"])
    left = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'left'", p["id"])
    title = await pg.fetchval("SELECT title FROM jobs WHERE id = $1", first)
    await pg.execute("UPDATE jobs SET max_attempts = 1 WHERE id = $1", first)
    await claim(engine, first)
    await finish(engine, ui_settings, first, "failed", error="OSError: [Errno 113] No route to host")
    page = (await client.get(f"/jobs/{left}")).text
    main = page[page.index("<main") :]
    assert f'It was cancelled because <a href="/jobs/{first}">“{title or "A step"}”</a> failed.' in main
    assert str(first) not in main.replace(f'href="/jobs/{first}"', "")  # no raw ids in the words
    assert "Technical details" not in main
    failed_page = (await client.get(f"/jobs/{first}")).text
    assert "The server cannot be reached" in failed_page and "Errno" not in failed_page
    assert "OSError" not in failed_page

    async with engine.begin() as conn:
        a = await pipelines.create_from_template(
            conn, "test.approval", {"title": "T"}, user_id=user.id, settings=ui_settings
        )
    draft = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'draft'", a["id"])
    await claim(engine, draft)
    await finish(engine, ui_settings, draft, "completed", result={"draft": "text"})
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    async with engine.begin() as conn:
        await queue.reject(conn, draft, root, "The totals do not add up")
    await switch_to(client, "ann@example.com")
    page = (await client.get(f"/pipelines/{a['id']}")).text
    top = page[page.index('id="pipeline-why-heading"') : page.index('class="steps"')]
    assert f'An administrator rejected the result of <a href="/jobs/{draft}">“Draft”</a>' in top
    assert "The totals do not add up" in top
    step = (await client.get(f"/jobs/{draft}")).text
    assert step.index("The totals do not add up") < step.index('<dl class="facts">')


async def test_an_approval_steps_time_counts_the_work_and_shows_the_wait_apart(
    client: AsyncTestClient, db_url: str, engine: Any, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    from app import pipelines
    from app.jobs import queue

    user = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        a = await pipelines.create_from_template(
            conn, "test.approval", {"title": "T"}, user_id=user.id, settings=ui_settings
        )
    draft = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'draft'", a["id"])
    await claim(engine, draft)
    await finish(engine, ui_settings, draft, "completed", result={"draft": "text"})
    root = await sign_in_as(client, db_url, "root@example.com", admin=True)
    async with engine.begin() as conn:
        await queue.approve(conn, draft, root)
    await pg.execute(
        "UPDATE jobs SET started_at = now() - interval '2 h 4 min', completed_at = now() WHERE id = $1", draft
    )
    await pg.execute(
        "UPDATE job_events SET at = now() - interval '2 h' WHERE job_id = $1 AND kind = 'waiting_approval'",
        draft,
    )
    await switch_to(client, "ann@example.com")
    page = (await client.get(f"/jobs/{draft}")).text
    assert "took 4 min" in page and "then waited 2 h" in page


async def test_a_step_cancelled_by_an_earlier_failure_reads_in_words_in_the_history(
    client: AsyncTestClient, db_url: str, engine: Any, settings: Settings, pg: asyncpg.Connection
) -> None:
    # the pipeline's history printed "upstream test.form 01a2… failed" under the cancelled step
    from app.jobs import queue

    ann = await sign_in_as(client, db_url, "ann@example.com")
    async with engine.begin() as conn:
        p = await queue.create_pipeline(
            conn,
            name="Two steps",
            steps=[
                {"key": "a", "type": "test.form", "input_data": {"name": "A"}, "max_attempts": 1},
                {"key": "b", "type": "test.form", "input_data": {"name": "B"}, "depends_on": ["a"]},
            ],
            user_id=ann.id,
            settings=settings,
        )
    first = await pg.fetchval("SELECT id FROM jobs WHERE pipeline_id = $1 AND step_key = 'a'", p["id"])
    await claim(engine, first)
    await finish(engine, settings, first, "failed", error="The file is not a CSV file.")
    assert "upstream" in await pg.fetchval(
        "SELECT message FROM job_events WHERE kind = 'cancelled' AND job_id <> $1", first
    )
    for path in (
        f"/pipelines/{p['id']}",
        f"/jobs/{await pg.fetchval('SELECT id FROM jobs WHERE step_key = $1', 'b')}",
    ):
        history = (await client.get(path)).text.split('class="history"', 1)[1]
        assert "An earlier step failed." in history, path
        assert "upstream" not in history, path
    # an admin reads the same words, with the stored text folded under them
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    history = (await client.get(f"/pipelines/{p['id']}")).text.split('class="history"', 1)[1]
    assert '<span class="note">An earlier step failed.</span>' in history
    assert '<summary>Full text</summary><pre class="technical">upstream test.form' in history
