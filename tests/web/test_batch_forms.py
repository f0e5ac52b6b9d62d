"""Spreadsheets read into job input (CSV with a byte-order mark, semicolons, XLSX made here with openpyxl,
headers matched by title, empty rows, the row limit), and the "Run for each row" pages: upload, map,
every problem listed by row and column with nothing created, then the batch started."""

from __future__ import annotations

import asyncio
import io
import re
import uuid
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncSession

from app import batches, spreadsheets
from app.actions import batches as batch_actions
from app.actions.trail import Actor
from app.errors import BadInput
from app.processors import registry
from app.settings import Settings
from app.web.batch_downloads import csv_line
from app.web.batch_page import problems_of
from tests.support.webkit import app_client, csrf_from, sign_in_as

HTTP_FIELDS = spreadsheets.fields_of(registry.get("http.request").input_model)  # type: ignore[union-attr]


def inputs(sheet: spreadsheets.Sheet) -> list[dict[str, Any]]:
    mapping = spreadsheets.match_columns(HTTP_FIELDS, sheet.columns)
    return [spreadsheets.row_input(HTTP_FIELDS, cells, mapping) for _, cells in sheet.rows]


def test_a_csv_with_a_byte_order_mark_and_semicolons_matches_headers_by_title() -> None:
    data = "\ufeffAddress (URL);METHOD;Time limit (seconds)\r\nhttp://a/;post;2,5\r\n;;\r\n\r\nhttp://b/;GET;7\r\n"
    sheet = spreadsheets.read(data.encode("utf-8"), "list.csv")
    assert sheet.columns == ["Address (URL)", "METHOD", "Time limit (seconds)"]
    assert [n for n, _ in sheet.rows] == [2, 5]  # empty rows skipped; numbers as a spreadsheet shows them
    rows = inputs(sheet)
    assert rows[1] == {"url": "http://b/", "method": "GET", "timeout": 7.0}
    assert rows[0]["url"] == "http://a/" and rows[0]["timeout"] == "2,5"  # left for the schema to judge


def test_a_comma_csv_in_windows_1252_with_quoted_commas() -> None:
    data = 'url,body\n"http://a/","café, crème"\n'.encode("cp1252")
    sheet = spreadsheets.read(data, "x.csv")
    assert inputs(sheet) == [{"url": "http://a/", "body": "café, crème"}]


def test_an_xlsx_made_with_openpyxl_reads_typed_cells() -> None:
    from openpyxl import Workbook

    book = Workbook()
    ws = book.active
    assert ws is not None
    ws.append(["URL", "Timeout", None])
    ws.append(["http://a/", 3, None])
    ws.append([None, None, None])
    ws.append(["http://b/", 4.0, None])
    out = io.BytesIO()
    book.save(out)
    sheet = spreadsheets.read(out.getvalue(), "book.xlsx")
    assert sheet.columns == ["URL", "Timeout"]  # (a value past it: test_spreadsheet_extra_cells.py)
    assert inputs(sheet) == [{"url": "http://a/", "timeout": 3}, {"url": "http://b/", "timeout": 4}]
    assert [n for n, _ in sheet.rows] == [2, 4]


def test_too_many_rows_and_unreadable_files_are_clear_errors() -> None:
    data = ("url\n" + "http://a/\n" * 11).encode()
    with pytest.raises(BadInput) as exc:
        spreadsheets.read(data, "big.csv", max_rows=10)
    assert "more than 10 rows" in exc.value.errors["file"]
    assert len(spreadsheets.read(data[: -len("http://a/\n")], "ok.csv", max_rows=10).rows) == 10
    for bad, why in (
        (b"PK\x03\x04garbage", "XLSX"),
        (b"", "empty"),
        (b"url\n", "no rows"),
        (b"\x00\x01\x02", "binary"),
    ):
        with pytest.raises(BadInput) as exc:
            spreadsheets.read(bad, "f.xlsx" if why == "XLSX" else "f.csv")
        assert exc.value.errors["file"], why


def test_cells_convert_to_the_fields_types() -> None:
    fields = {f.name: f for f in spreadsheets.fields_of(registry.get("email.send").input_model)}  # type: ignore[union-attr]
    assert spreadsheets.convert(fields["to"], "a@x.org; b@x.org\nc@x.org") == [
        "a@x.org",
        "b@x.org",
        "c@x.org",
    ]
    assert spreadsheets.convert(fields["subject"], 12.0) == "12"
    assert spreadsheets.convert(fields["subject"], "") is None
    flag = spreadsheets.SheetField("f", "F", "boolean", False)
    assert [spreadsheets.convert(flag, v) for v in ("Yes", "no", "1", "maybe")] == [
        True,
        False,
        True,
        "maybe",
    ]


def test_a_result_cell_cannot_become_a_formula() -> None:
    assert csv_line(["=HYPERLINK(1)", "+1", "ok"]) == b"'=HYPERLINK(1),'+1,ok\r\n"


# --- the pages ---------------------------------------------------------------------------------------------


def _post_file(name: str, data: bytes) -> dict[str, Any]:
    return {"sheet": (name, data, "text/csv")}


async def test_upload_map_see_problems_by_row_and_column_then_start(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    form = await client.get("/jobs/new/http.request")
    assert (
        'href="/batches/new/http.request"' in form.text and "Run for each row of a spreadsheet" in form.text
    )
    page = await client.get("/batches/new/http.request")
    assert page.status_code == 200
    token = csrf_from(page.text)
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]

    bad = (
        b"Web address,Verb\nhttp://jobs.test:9/a,GET\nftp://nowhere/b,GET\nhttp://jobs.test:9/c,FETCH\n"
        b"http://127.0.0.1:8000/login,GET\n"  # Jobdesk's own sign-in page: a check that needs the settings
    )
    mapped = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": key},
        files=_post_file("a.csv", bad),
    )
    assert mapped.status_code == 200, mapped.text
    assert "4 rows" in mapped.text
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text).group(1)  # type: ignore[union-attr]
    # "Web address" matches no field by name or title: the person chooses it
    assert re.search(r'<option value=""\s+selected>', mapped.text)

    start = {"_csrf_token": token, "_form_key": key, "sheet_id": sheet_id, "map.url": "0", "map.method": "1"}
    refused = await client.post("/batches/new/http.request", data=start)
    assert refused.status_code == 422
    problems = re.findall(
        r'<tr class="row-problem"><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td>', refused.text
    )
    assert problems == [
        ("3", "Web address", "Address (URL)"),
        ("4", "Verb", "Method"),
        ("5", "Web address", "Address (URL)"),
    ]
    assert "Nothing was started" in refused.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0

    fixed = (
        b"Web address,Verb\nhttp://jobs.test:9/a,GET\nhttp://jobs.test:9/b,GET\nhttp://jobs.test:9/c,POST\n"
    )
    again = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": key},
        files=_post_file("b.csv", fixed),
    )
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', again.text).group(1)  # type: ignore[union-attr]
    start["_form_key"] = re.search(r'name="_form_key" value="([^"]+)"', again.text).group(1)  # type: ignore[union-attr]
    done = await client.post(
        "/batches/new/http.request", data={**start, "sheet_id": sheet_id}, follow_redirects=False
    )
    assert done.status_code == 303, done.text
    url = done.headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM jobs WHERE batch_id IS NOT NULL") == 3
    # the same form sent twice (a double click) makes one batch
    twice = await client.post(
        "/batches/new/http.request", data={**start, "sheet_id": sheet_id}, follow_redirects=False
    )
    assert twice.headers["location"] == url
    assert await pg.fetchval("SELECT count(*) FROM batches") == 1

    batch = await client.get(url)
    assert batch.status_code == 200 and "Waiting: <strong>3</strong>" in batch.text
    version = re.search(r"/status\?v=([0-9a-f]+)", batch.text).group(1)  # type: ignore[union-attr]
    quiet = await client.get(f"{url}/status?v={version}", headers={"HX-Request": "true"})
    assert quiet.status_code == 204
    first = await pg.fetchval("SELECT min(id::text)::uuid FROM jobs")
    await pg.execute(
        "UPDATE jobs SET status = 'failed', attempts = max_attempts, completed_at = '2026-01-02 09:12+00', "
        "error_message = 'Connection refused by 127.0.0.1:9' WHERE id = $1",
        first,
    )
    await pg.execute(
        "UPDATE jobs SET status = 'completed', completed_at = '2026-01-02 09:47+00', result_data = '{}' "
        "WHERE id <> $1",
        first,
    )
    final = await client.get(f"{url}/status?v={version}", headers={"HX-Request": "true"})
    assert final.status_code == 286 and "Done: <strong>2</strong>" in final.text
    # a finished batch says when it finished (its last row's end), as it says when it started
    assert (
        '<dt>Finished</dt><dd id="batch-finished"><time datetime="2026-01-02T09:47:00+00:00">' in final.text
    )
    assert "Failed: <strong>1</strong>" in final.text and "Connection refused by 127.0.0.1:9" in final.text
    assert "row 2</a>" in final.text  # the file's own row number (the header is row 1)
    retried = await client.post(
        f"{url}/retry-failed", data={"_csrf_token": token}, headers={"HX-Request": "true"}
    )
    assert retried.status_code == 200 and "Retrying 1 failed row" in retried.text
    assert "Waiting: <strong>1</strong>" in retried.text and 'hx-get="' in retried.text  # polling again
    assert "<dt>Finished</dt>" not in retried.text
    entry = await pg.fetchrow("SELECT action, count FROM audit_log")  # the owner's retry is on record
    assert (entry["action"], entry["count"]) == ("batch.retry_failed", 1)
    listed = await client.get("/batches")
    assert listed.status_code == 200 and f'href="{url}"' in listed.text and "66%" in listed.text


async def test_an_unreadable_sheet_and_another_persons_sheet_id_are_refused(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/http.request")
    token = csrf_from(page.text)
    r = await client.post(
        "/batches/new/http.request", data={"_csrf_token": token}, files=_post_file("a.csv", b"url\n")
    )
    assert r.status_code == 422 and "no rows below it" in r.text
    bob = await pg.fetchval(
        "INSERT INTO users (email, password_hash) VALUES ('bob@example.com', 'x') RETURNING id"
    )
    fid = await pg.fetchval(
        "INSERT INTO files (id, user_id, name, content_type, size, sha256) "
        "VALUES (gen_random_uuid(), $1, 'b.csv', 'text/csv', 4, '') RETURNING id",
        bob,
    )
    other = await client.post(
        "/batches/new/http.request", data={"_csrf_token": token, "sheet_id": str(fid), "map.url": "0"}
    )
    assert other.status_code == 422 and "Upload it again" in other.text
    # the person's own sheet whose bytes are gone from the disk (its row is still there): the same answer
    gone = await pg.fetchval(
        "INSERT INTO files (id, user_id, name, content_type, size, sha256) "
        "VALUES (gen_random_uuid(), (SELECT id FROM users WHERE email = 'ann@example.com'), 'gone.csv', "
        "'text/csv', 4, '') RETURNING id"
    )
    lost = await client.post(
        "/batches/new/http.request", data={"_csrf_token": token, "sheet_id": str(gone), "map.url": "0"}
    )
    assert lost.status_code == 422 and "Upload it again" in lost.text


def _damaged_workbooks() -> dict[str, bytes]:
    """XLSX files openpyxl cannot read, each failing in its own way."""
    import zipfile

    from openpyxl import Workbook

    def saved(book: Any) -> bytes:
        out = io.BytesIO()
        book.save(out)
        return out.getvalue()

    plain = Workbook()
    plain.active.append(["url"])  # type: ignore[union-attr]
    plain.active.append(["http://a/"])  # type: ignore[union-attr]

    def patched(part: str, change: Any) -> bytes:
        src, out = zipfile.ZipFile(io.BytesIO(saved(plain))), io.BytesIO()
        with zipfile.ZipFile(out, "w") as dst:
            for item in src.infolist():
                data = src.read(item.filename)
                dst.writestr(item, change(data) if item.filename == part else data)
        return out.getvalue()

    charts = Workbook()
    charts.create_chartsheet(index=0)
    return {
        "a sheet that is not XML": patched("xl/worksheets/sheet1.xml", lambda d: b"<not xml"),  # ParseError
        "a cell beyond column ZZZ": patched(
            "xl/worksheets/sheet1.xml", lambda d: d.replace(b'r="A1"', b'r="ZZZZZZ1"')
        ),  # ValueError, while reading its rows
        "a chart sheet first": saved(charts),  # AttributeError
    }


async def test_a_damaged_workbook_is_an_error_next_to_the_file_on_upload_and_on_start_not_a_500(
    client: AsyncTestClient, db_url: str
) -> None:
    from tests.support.webkit import add_token

    ann = await sign_in_as(client, db_url, "ann@example.com")
    bearer = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    token = csrf_from((await client.get("/batches/new/http.request")).text)
    for why, data in _damaged_workbooks().items():
        uploaded = await client.post(
            "/batches/new/http.request", data={"_csrf_token": token}, files=_post_file("book.xlsx", data)
        )
        assert uploaded.status_code == 422, (why, uploaded.status_code)
        assert "cannot be read as a spreadsheet" in uploaded.text, why
        # the same file stored another way (the files API) and named by the start form
        stored = await client.post("/api/files", files={"file": ("book.xlsx", data)}, headers=bearer)
        assert stored.status_code == 201, stored.text
        start = {"_csrf_token": token, "sheet_id": stored.json()["id"], "map.url": "0"}
        started = await client.post("/batches/new/http.request", data=start)
        assert started.status_code == 422, (why, started.status_code)
        assert "cannot be read as a spreadsheet" in started.text, why


async def test_many_files_dropped_on_a_file_field_start_one_job_each(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/report.csv_check")
    assert 'name="files" multiple' in page.text
    token = csrf_from(page.text)
    files = [("files", (f"t{i}.csv", f"a,b\n{i},2\n".encode(), "text/csv")) for i in range(3)]
    r = await client.post(
        "/batches/new/report.csv_check", data={"_csrf_token": token}, files=files, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    rows = await pg.fetch(
        "SELECT j.input_data->>'file' AS file, f.name, f.user_id = j.user_id AS same_owner FROM jobs j "
        "JOIN files f ON f.id = (j.input_data->>'file')::uuid WHERE j.batch_id IS NOT NULL ORDER BY j.id"
    )
    assert [x["name"] for x in rows] == ["t0.csv", "t1.csv", "t2.csv"] and all(x["same_owner"] for x in rows)
    # a type without a file field offers only the spreadsheet
    assert 'name="files"' not in (await client.get("/batches/new/http.request")).text


async def test_many_files_sent_twice_with_one_form_key_are_stored_once(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """A double click on "start" with many files (the same form key twice) makes one batch and stores
    the files once; the repeat is answered with the first batch. The files were stored before the key
    was looked at: each repeat stored them again and counted them against the person's storage, and near
    the limit the repeat was refused (429) instead. (Both in flight at once: the next test.)"""
    files = [("files", (f"t{i}.csv", f"a,b\n{i},2\n".encode(), "text/csv")) for i in range(3)]
    size = sum(len(f[1][1]) for f in files)
    async with app_client(make_settings(worker_enabled=False, user_max_upload_bytes=size + 5)) as client:
        await sign_in_as(client, db_url, "ann@example.com")
        page = await client.get("/batches/new/report.csv_check")
        key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        form = {"_csrf_token": csrf_from(page.text), "_form_key": key}

        async def send() -> Any:
            return await client.post(
                "/batches/new/report.csv_check", data=form, files=files, follow_redirects=False
            )

        answers = [await send(), await send()]
    assert [a.status_code for a in answers] == [303, 303], [a.text[-500:] for a in answers]
    assert answers[0].headers["location"] == answers[1].headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM batches") == 1
    assert await pg.fetchval("SELECT count(*) FROM files") == 3
    assert await pg.fetchval("SELECT sum(size) FROM files") == size
    # the first submission's files are the ones its jobs name
    named = await pg.fetchval(
        "SELECT count(*) FROM jobs j JOIN files f ON f.id = (j.input_data->>'file')::uuid "
        "WHERE j.batch_id IS NOT NULL"
    )
    assert named == 3


async def test_a_repeat_of_a_form_key_in_flight_waits_for_the_first_and_finds_its_batch(
    engine: Any, settings: Any, owner: Any
) -> None:
    """Both submissions of a double click in flight at once: the repeat waits for the first's
    transaction (the person's lock, then the batch's form key) and is answered with its batch, creating
    nothing. (Their files are looked up under the same lock: test_form_uploads_once.)"""
    actor = Actor(owner, settings=settings)
    key = str(uuid.uuid4())
    rows = [{"url": "http://jobs.test:9/a"}]
    async with AsyncSession(engine) as first, AsyncSession(engine) as repeat:
        batch, created = await batch_actions.submit(first, actor, "http.request", rows, form_key=key)
        assert created
        again = asyncio.create_task(batch_actions.submit(repeat, actor, "http.request", rows, form_key=key))
        await asyncio.sleep(0.5)
        assert not again.done(), "the repeat did not wait for the first submission"
        await first.commit()
        found, made = await asyncio.wait_for(again, 10)
        await repeat.commit()
        assert (found["id"], made) == (batch["id"], False)


def _bytes_on_disk(files_dir: Any) -> set[str]:
    """Every name in the files folder: stored files' bytes (named by id), and any temporary file left."""
    return {p.name for p in files_dir.iterdir()} if files_dir.exists() else set()


@pytest.mark.parametrize("refusal", ["key sent before", "an empty file", "the storage limit"])
async def test_a_refused_files_form_leaves_no_bytes_without_a_row(
    refusal: str, make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """The "one job per file" form stores its files and starts the batch in one savepoint; refused (its
    key started a batch of other files, a file among them is empty, they go over the person's storage),
    the savepoint took the new files' rows, and their bytes stayed on disk: no row names them, so
    retention, which deletes files by their rows, never found them. The files the key stored the first
    time stay, with their bytes."""
    first = [("files", (f"t{i}.csv", f"a,b\n{i},2\n".encode(), "text/csv")) for i in range(2)]
    other = [
        ("files", ("other.csv", b"a,b\n7,8\n", "text/csv")),
        ("files", ("more.csv", b"a,b\n9,9\n", "text/csv")),
    ]
    size = sum(len(f[1][1]) for f in first)
    # room for one of the other files, not both: the first is stored before the second is refused
    limit = size + 10 if refusal == "the storage limit" else 0
    settings = make_settings(worker_enabled=False, user_max_upload_bytes=limit)
    async with app_client(settings) as client:
        await sign_in_as(client, db_url, "ann@example.com")
        page = await client.get("/batches/new/report.csv_check")
        form = {
            "_csrf_token": csrf_from(page.text),
            "_form_key": re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1),  # type: ignore[union-attr]
        }

        async def send(files: list[Any], **extra: str) -> Any:
            return await client.post(
                "/batches/new/report.csv_check", data={**form, **extra}, files=files, follow_redirects=False
            )

        assert (await send(first)).status_code == 303
        if refusal == "key sent before":
            refused = await send(first[:1] + other)  # one file again (found, not stored), two new
            expected, words = 422, "This form was sent already"
        elif refusal == "an empty file":
            refused = await send(
                other + [("files", ("empty.csv", b"", "text/csv"))], _form_key=str(uuid.uuid4())
            )
            expected, words = 422, "This file is empty"
        else:
            refused = await send(other, _form_key=str(uuid.uuid4()))
            expected, words = 429, "Not enough room for this file"
    assert refused.status_code == expected and words in refused.text, (
        refused.status_code,
        refused.text[-600:],
    )
    rows = {str(r["id"]) for r in await pg.fetch("SELECT id FROM files")}
    assert len(rows) == 2 and await pg.fetchval("SELECT count(*) FROM batches") == 1
    assert _bytes_on_disk(settings.files_dir) == rows


@pytest.mark.parametrize("size", [120_000, 140_000, 1_000_001])
def test_a_long_cell_is_kept_whole_and_held_to_its_fields_limit_as_a_submission_is(size: int) -> None:
    """A cell was cut to 100,000 characters without a word (and one past the csv module's 131,072 made
    the whole file "unreadable"): it is read whole, and a row is refused as a submission of the same
    input would be, naming the row and column; within the field's limit it reaches the job as it was."""
    body = "x" * size
    data = f"url,method,body_type,body\nhttp://a/,POST,text,{body}\n".encode()
    sheet = spreadsheets.read(data, "long.csv")
    [row] = inputs(sheet)
    assert len(row["body"]) == size
    spec = registry.get("http.request")
    assert spec is not None
    settings = Settings.model_construct(job_max_input_bytes=4 * 1024 * 1024)
    try:
        submitted = spec.validate_input(row, field_prefix="input_data")
    except BadInput as exc:
        with pytest.raises(BadInput) as refused:
            batches.check_rows(spec, [row], settings)
        assert refused.value.errors == {"rows[0].body": exc.errors["input_data.body"]}
        mapping = spreadsheets.match_columns(HTTP_FIELDS, sheet.columns)
        [problem] = problems_of(
            refused.value.errors, [n for n, _ in sheet.rows], HTTP_FIELDS, sheet.columns, mapping
        )
        assert (problem.row, problem.column) == (2, "body")
        assert "1000000" in problem.message or "1,000,000" in problem.message
    else:
        assert batches.check_rows(spec, [row], settings) == [submitted]
        assert len(submitted["body"]) == size


async def test_a_column_choice_that_names_no_column_is_refused_naming_the_field_and_the_columns(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """``map.url=99`` (no such column) was taken as "no column chosen"; it is refused beside its field,
    with the columns the sheet has, and nothing starts. A choice within the sheet still starts it."""
    import html

    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/http.request")
    token = csrf_from(page.text)
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    mapped = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": key},
        files=_post_file("a.csv", b"Web address,Verb\nhttp://jobs.test:9/a,GET\n"),
    )
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text).group(1)  # type: ignore[union-attr]
    start = {"_csrf_token": token, "_form_key": key, "sheet_id": sheet_id, "map.method": "1"}
    for choice in ("99", "x", "-1", "2"):
        r = await client.post("/batches/new/http.request", data={**start, "map.url": choice})
        assert r.status_code == 422, (choice, r.text[-1500:])
        said = html.unescape(r.text)
        assert f"(url): there is no column '{choice}' in this spreadsheet" in said, said[-2000:]
        assert "its columns are 0 “Web address”, 1 “Verb”" in said, said[-2000:]
        assert 'id="e-map.url"' in r.text
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    ok = await client.post("/batches/new/http.request", data={**start, "map.url": "0"})
    assert ok.status_code == 200 and "Batch of 1 job" in ok.text, ok.text[-1500:]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


def test_chosen_columns_counts_the_columns_of_a_wide_sheet() -> None:
    fields = [spreadsheets.SheetField("url", "Address", "string", True)]
    chosen, wrong = spreadsheets.chosen_columns({"url": "40"}, fields, [f"c{i}" for i in range(30)])
    assert chosen == {"url": None}
    assert wrong["url"].endswith("9 “c9”, 20 more: choose one of them, or none"), wrong
    assert spreadsheets.chosen_columns({"url": " 3 "}, fields, ["a", "b", "c", "d"]) == ({"url": 3}, {})
    assert spreadsheets.chosen_columns({"url": ""}, fields, ["a"]) == ({"url": None}, {})


async def test_every_refusal_of_the_batch_form_says_nothing_was_started(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """A name that cannot be stored or is too long is refused beside the name field, a picture field
    given a spreadsheet beside the files: each also says, at the top of the form as a row's problems
    do, that nothing was started."""
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/http.request")
    token = csrf_from(page.text)
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    read = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": key},
        files=_post_file("a.csv", b"url\nhttp://jobs.test:9/a\n"),
    )
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', read.text).group(1)  # type: ignore[union-attr]
    start = {"_csrf_token": token, "_form_key": key, "sheet_id": sheet_id, "map.url": "0"}
    for name, beside in (("a\u0000b", "Contains a NUL character"), ("x" * 201, "Must be at most 200")):
        r = await client.post("/batches/new/http.request", data={**start, "_name": name})
        assert r.status_code == 422, r.text
        assert re.search(rf'id="e-_name" class="field-error" role="alert">{beside}', r.text), r.text
        top = re.search(r'id="form-errors"[^>]*><p><strong>([^<]*)<', r.text)
        assert top and top.group(1).startswith("Nothing was started"), r.text
    page = await client.get("/batches/new/images.thumbnail")
    r = await client.post(
        "/batches/new/images.thumbnail",
        data={"_csrf_token": csrf_from(page.text)},
        files=[("files", ("t.csv", b"a,b\n1,2\n", "text/csv"))],
    )
    assert r.status_code == 422, r.text
    beside_files = re.search(r'id="e-files" class="field-error" role="alert">([^<]*)<', r.text)
    assert beside_files and beside_files.group(1).endswith("Nothing was started."), r.text
    assert await pg.fetchval("SELECT count(*) FROM batches") == 0


async def test_an_unmarked_utf16_csv_is_read_once_its_text_encoding_is_chosen_and_started_as_read(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """The batch form has the CSV jobs' "Text encoding" choice (the one list in
    :mod:`app.text_encoding`): a UTF-16 CSV without a byte-order mark, refused on "Find out
    automatically" with the choice that reads it, is read with "UTF-16" (either byte order), and the
    choice goes with the mapping step so the rows started are the rows read."""
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/http.request")
    assert '<option value="utf-16">UTF-16</option>' in page.text
    token = csrf_from(page.text)
    key = re.search(r'name="_form_key" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    text = "Address (URL),Method\nhttp://jobs.test:9/Zürich,GET\nhttp://jobs.test:9/Åsa,POST\n"
    for order in ("utf-16-le", "utf-16-be"):
        data = text.encode(order)
        sent = {"_csrf_token": token, "_form_key": key}
        refused = await client.post("/batches/new/http.request", data=sent, files=_post_file("w.csv", data))
        assert refused.status_code == 422
        assert "choose &#34;UTF-16&#34; under Text encoding" in refused.text, refused.text[-3000:]
        mapped = await client.post(
            "/batches/new/http.request", data={**sent, "encoding": "utf-16"}, files=_post_file("w.csv", data)
        )
        assert mapped.status_code == 200, mapped.text[-3000:]
        assert "2 rows" in mapped.text and 'name="encoding" value="utf-16"' in mapped.text
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', mapped.text).group(1)  # type: ignore[union-attr]
    start = {
        "_csrf_token": token,
        "_form_key": re.search(r'name="_form_key" value="([^"]+)"', mapped.text).group(1),  # type: ignore[union-attr]
        "sheet_id": sheet_id,
        "encoding": "utf-16",
        "map.url": "0",
        "map.method": "1",
    }
    done = await client.post("/batches/new/http.request", data=start, follow_redirects=False)
    assert done.status_code == 303, done.text[-3000:]
    urls = await pg.fetch("SELECT input_data->>'url' AS url FROM jobs ORDER BY created_at, id")
    assert sorted(r["url"] for r in urls) == ["http://jobs.test:9/Zürich", "http://jobs.test:9/Åsa"]
    # a value the list has not is an error beside the choice, nothing read
    odd = await client.post(
        "/batches/new/http.request",
        data={"_csrf_token": token, "_form_key": key, "encoding": "ebcdic"},
        files=_post_file("w.csv", text.encode("utf-8")),
    )
    assert odd.status_code == 422 and 'id="e-encoding"' in odd.text, odd.text[-3000:]
