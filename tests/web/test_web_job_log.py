"""A job's log on the web: the log box of its page, the poll that appends only new lines out of band
(and answers 204 when there are none), ``/jobs/{id}/log.txt`` and ``GET /api/jobs/{id}/log?after=``,
all owner-checked like the job page."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.jobs import joblog
from app.jobs.joblog import Line
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import HX, add_token, sign_in_as, switch_to


async def log(engine: AsyncEngine, job_id: uuid.UUID, *texts: str) -> None:
    async with engine.begin() as conn:
        await joblog.write(conn, [Line(job_id, 1, datetime.now(UTC), "info", t) for t in texts])


async def test_page_poll_download_and_api_of_a_running_jobs_log(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    job = await enqueue(engine, ui_settings, ann.id)
    await claim(engine, job)
    await log(engine, job, "first <b>line</b>", "second\x00line")

    page = (await client.get(f"/jobs/{job}")).text
    assert 'id="job-log-lines"' in page
    assert "first &lt;b&gt;line&lt;/b&gt;" in page and "second\ufffdline" in page
    poll = re.search(r'hx-get="(/jobs/[^"]+/status\?v=[^"&]+&amp;log=(\d+)[^"]*)"', page)
    assert poll is not None
    url, seen = poll.group(1).replace("&amp;", "&"), int(poll.group(2))
    assert seen > 0

    # nothing new: 204, as before logs existed
    assert (await client.get(url, headers=HX)).status_code == 204
    # a new line counts as news: only it is appended, out of band, and the next poll asks after it
    await log(engine, job, "third line")
    r = await client.get(url, headers=HX)
    assert r.status_code == 200
    oob = r.text[r.text.index('hx-swap-oob="beforeend:#job-log-lines"') :]
    assert "third line" in oob and "first" not in oob and "second" not in oob
    nxt = re.search(r"&amp;log=(\d+)", r.text)
    assert nxt is not None and int(nxt.group(1)) > seen

    # the download
    txt = await client.get(f"/jobs/{job}/log.txt")
    assert txt.status_code == 200 and txt.headers["content-type"] == "text/plain; charset=utf-8"
    assert "attachment" in txt.headers["content-disposition"]
    assert [ln.split("] ", 1)[1] for ln in txt.text.splitlines()] == [
        "first <b>line</b>",
        "second\ufffdline",
        "third line",
    ]

    # the API, whole and after a seq
    token = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    body = (await client.get(f"/api/jobs/{job}/log", headers=token)).json()
    assert body["cut"] == 0 and [ln["text"] for ln in body["lines"]] == [
        "first <b>line</b>",
        "second\ufffdline",
        "third line",
    ]
    assert set(body["lines"][0]) == {"seq", "at", "level", "text", "attempt"}
    after = body["lines"][1]["seq"]
    body = (await client.get(f"/api/jobs/{job}/log?after={after}", headers=token)).json()
    assert [ln["text"] for ln in body["lines"]] == ["third line"]
    bad = await client.get(f"/api/jobs/{job}/log?after=abc", headers=token)
    assert bad.status_code == 422 and "after" in bad.text

    # another person sees none of it
    bob = await sign_in_as(client, db_url, "bob@example.com")
    await switch_to(client, "bob@example.com")
    assert (await client.get(f"/jobs/{job}/log.txt")).status_code == 404
    bob_token = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    assert (await client.get(f"/api/jobs/{job}/log", headers=bob_token)).status_code == 404


async def test_the_cut_marker_is_shown_and_counted(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    job = await enqueue(engine, ui_settings, ann.id)
    async with engine.begin() as conn:
        lines = [Line(job, 1, datetime.now(UTC), "info", f"l{i}") for i in range(30)]
        await joblog.write(conn, lines, max_lines=10)
    token = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    body = (await client.get(f"/api/jobs/{job}/log", headers=token)).json()
    assert body["cut"] == 20 and [ln["text"] for ln in body["lines"]] == [f"l{i}" for i in range(20, 30)]
    page = (await client.get(f"/jobs/{job}")).text
    assert "… 20 earlier lines cut" in page
    assert (await client.get(f"/jobs/{job}/log.txt")).text.startswith("… 20 earlier lines cut\n")


async def test_a_job_without_lines_shows_no_log_box(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    job = await enqueue(engine, ui_settings, ann.id)
    await claim(engine, job)
    await finish(engine, ui_settings, job, "completed", result={})
    assert 'id="job-log-lines"' not in (await client.get(f"/jobs/{job}")).text


async def test_a_log_lines_time_is_shown_in_the_persons_zone_as_the_history_is(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    """The log box showed the time of day in UTC beside a history in the person's zone (13:23 CET in the
    history, 12:23 in the log). The download, read away from the page, says its times are UTC."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    await pg.execute("UPDATE users SET timezone = 'America/New_York' WHERE id = $1", ann.id)
    job = await enqueue(engine, ui_settings, ann.id)
    await claim(engine, job)
    at = datetime(2026, 12, 6, 12, 23, 55, tzinfo=UTC)
    async with engine.begin() as conn:
        await joblog.write(conn, [Line(job, 1, at, "info", "hello")])
    page = (await client.get(f"/jobs/{job}")).text
    assert re.search(
        r'<time datetime="2026-12-06T12:23:55\+00:00" title="6 Dec 2026, 07:23:55 EST">07:23:55</time>', page
    )
    txt = (await client.get(f"/jobs/{job}/log.txt")).text
    assert txt.startswith("2026-12-06 12:23:55Z INFO    [attempt 1] hello")
