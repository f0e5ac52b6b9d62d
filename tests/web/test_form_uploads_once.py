"""A form sent again (a reload, the back button, a double click) with the same file stores it once: the
spreadsheet form's "read" step and a job form's file field carry the form's one-time key, and a repeat
of the key with the same file by the same person is answered with the file stored the first time,
looked up under the person's lock before anything is stored or counted against their storage."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import asyncpg
from litestar.datastructures import UploadFile
from sqlalchemy.ext.asyncio import AsyncConnection

import tests.support.forms  # noqa: F401  (registers test.form)
from app.actions.files import store_upload
from app.files import FileStore
from tests.support.webkit import app_client, csrf_from, sign_in_as, switch_to

SHEET = b"url,method\nhttp://jobs.test:9/a,GET\nhttp://jobs.test:9/b,GET\n"


def _found(pattern: str, html: str) -> str:
    return re.search(pattern, html).group(1)  # type: ignore[union-attr]


async def test_the_spreadsheet_read_step_sent_again_stores_the_sheet_once(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """The read step posted twice with one key (a reload of the column page) stores the sheet once and
    shows the same stored sheet with the same start key (so "start" after either makes one batch);
    close to the person's storage limit the repeat is not refused. Another file with the same key
    (the back button, another file chosen) is read and stored as a new sheet."""
    settings = make_settings(worker_enabled=False, user_max_upload_bytes=len(SHEET) + 5)
    async with app_client(settings) as client:
        await sign_in_as(client, db_url, "ann@example.com")
        page = await client.get("/batches/new/http.request")
        form = {
            "_csrf_token": csrf_from(page.text),
            "_form_key": _found(r'name="_form_key" value="([^"]+)"', page.text),
        }

        async def read(data: bytes) -> Any:
            return await client.post(
                "/batches/new/http.request", data=form, files={"sheet": ("list.csv", data, "text/csv")}
            )

        answers = [await read(SHEET), await read(SHEET)]
        assert [a.status_code for a in answers] == [200, 200], [a.text[-400:] for a in answers]
        assert await pg.fetchval("SELECT count(*) FROM files") == 1
        sheets = {_found(r'name="sheet_id" value="([^"]+)"', a.text) for a in answers}
        assert sheets == {str(await pg.fetchval("SELECT id FROM files"))}
        keys = {_found(r'name="_form_key" value="([^"]+)"', a.text) for a in answers}
        assert len(keys) == 1 and form["_form_key"] not in keys
        start = {**form, "_form_key": keys.pop(), "sheet_id": sheets.pop(), "map.url": "0"}
        starts = [
            await client.post(
                "/batches/new/http.request",
                data=start,
                follow_redirects=False,
            )
            for _ in range(2)
        ]
        assert [s.status_code for s in starts] == [303, 303]
        assert starts[0].headers["location"] == starts[1].headers["location"]
        assert await pg.fetchval("SELECT count(*) FROM batches") == 1
    async with app_client(make_settings(worker_enabled=False)) as client:
        await switch_to(client, "ann@example.com")
        other = await client.post(
            "/batches/new/http.request",
            data={**form, "_csrf_token": csrf_from((await client.get("/batches/new/http.request")).text)},
            files={"sheet": ("list.csv", SHEET + b"http://jobs.test:9/c,GET\n", "text/csv")},
        )
        assert other.status_code == 200 and "3 rows" in other.text
    assert await pg.fetchval("SELECT count(*) FROM files") == 2


async def test_a_job_form_with_a_file_sent_twice_stores_the_file_once_and_starts_one_job(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """A double click on a job form with a file: the repeat's file was stored again, so its input named
    another file and a second job started; and a form shown again with an error, then reloaded, stored
    the file once per reload."""
    async with app_client(make_settings(worker_enabled=False, user_max_upload_bytes=20)) as client:
        await sign_in_as(client, db_url, "ann@example.com")
        page = await client.get("/jobs/new/test.form")
        form = {
            "_csrf_token": csrf_from(page.text),
            "_form_key": _found(r'name="_form_key" value="([^"]+)"', page.text),
        }
        upload = [("document", ("notes.txt", b"hello", "text/plain"))]

        async def send(**fields: str) -> Any:
            return await client.post(
                "/jobs/new/test.form", data={**form, **fields}, files=upload, follow_redirects=False
            )

        refused = [await send(name="Ann", copies="99") for _ in range(3)]  # shown with an error, reloaded
        assert [r.status_code for r in refused] == [422] * 3
        assert await pg.fetchval("SELECT count(*) FROM files") == 1
        started = [await send(name="Ann"), await send(name="Ann")]
        assert [r.status_code for r in started] == [303, 303], [r.text[-400:] for r in started]
        assert started[0].headers["location"] == started[1].headers["location"]
    assert await pg.fetchval("SELECT count(*) FROM files") == 1
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 1


async def test_a_repeat_of_an_upload_in_flight_waits_for_the_first_and_finds_its_file(
    engine: Any, settings: Any, owner: Any, pg: asyncpg.Connection, tmp_path: Any
) -> None:
    """Both uploads of a double click in flight at once: the repeat's look-up waits for the first's
    transaction (the person's lock) and finds its file, so the repeat stores nothing."""

    store = FileStore(tmp_path)
    key = str(uuid.uuid4())

    def upload() -> UploadFile:
        return UploadFile(content_type="text/csv", filename="list.csv", file_data=SHEET)

    async def put(conn: AsyncConnection) -> Any:
        row, problem, _ = await store_upload(
            upload(),
            conn,
            store,
            user_id=owner.id,
            max_bytes=1 << 20,
            person=owner,
            settings=settings,
            form_key=key,
        )
        assert problem is None
        return row

    async with engine.connect() as first, engine.connect() as repeat:
        await first.begin()
        made = await put(first)
        await repeat.begin()
        again = asyncio.create_task(put(repeat))
        await asyncio.sleep(0.5)
        assert not again.done(), "the repeat did not wait for the first upload"
        await first.commit()
        found = await asyncio.wait_for(again, 10)
        await repeat.commit()
    assert found["id"] == made["id"]
    assert await pg.fetchval("SELECT count(*) FROM files") == 1


class _Quiet:
    def info(self, *args: Any, **kw: Any) -> None:
        pass


async def test_an_upload_kept_for_a_refused_form_goes_with_retention(
    make_settings: Any, db_url: str, engine: Any, pg: asyncpg.Connection
) -> None:
    """A job form refused after its upload was stored (a bad value in another field; its key sent before
    with other values) keeps the upload for the form shown again. No job takes it, so it is an upload
    nothing names: retention deletes it, row and bytes, once it is older than JOB_RETENTION_DAYS, and
    leaves the file the job it started uses."""
    from app.worker.maintenance import Retention

    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        await sign_in_as(client, db_url, "ann@example.com")

        async def send(key: str, name: str, **fields: str) -> Any:
            page = await client.get("/jobs/new/test.form")
            return await client.post(
                "/jobs/new/test.form",
                data={"_csrf_token": csrf_from(page.text), "_form_key": key, "name": "Ann", **fields},
                files=[("document", (name, name.encode(), "text/plain"))],
                follow_redirects=False,
            )

        bad_value = await send(str(uuid.uuid4()), "bad-value.txt", copies="99")
        key = str(uuid.uuid4())
        started = await send(key, "used.txt")
        sent_before = await send(key, "sent-before.txt")  # the back button, another file
    assert (bad_value.status_code, started.status_code, sent_before.status_code) == (422, 303, 422)
    assert "This form was sent already" in sent_before.text
    files = {r["name"]: r["id"] for r in await pg.fetch("SELECT name, id FROM files")}
    assert set(files) == {"bad-value.txt", "used.txt", "sent-before.txt"}  # kept for the forms shown again
    store = FileStore(settings.files_dir)
    retention = Retention(engine, settings, files=store, log=_Quiet())
    await retention.run_once()
    assert await pg.fetchval("SELECT count(*) FROM files") == 3  # younger than the retention: kept
    await pg.execute("UPDATE files SET created_at = now() - interval '31 days'")  # JOB_RETENTION_DAYS: 30
    await retention.run_once()
    assert [r["name"] for r in await pg.fetch("SELECT name FROM files")] == ["used.txt"]
    assert [store.path(fid).exists() for fid in files.values()] == [n == "used.txt" for n in files]
