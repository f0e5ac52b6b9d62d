"""CSV reports: ``report.csv_check`` / ``report.csv_summary`` on the sample CSVs, in common encodings
and delimiters, on files that are not CSV; the HTML report escapes every value (with a negative
control); time linear in the file (repeated column names, too many columns, unclosed quotes); the "CSV
report with review" template end to end through the JSON API, approved and rejected."""

from __future__ import annotations

import csv
import io
import statistics
import time
from typing import Any

import jinja2
import pytest

from app.files import FileStore
from app.jobs import queue
from app.processors import PermanentError, csv_charts, reports
from app.processors.reports import check_csv, report_from_summary, summarise_csv
from tests.support.browser import CHROMIUM, LAUNCH_ARGS
from tests.support.procs import EXAMPLES, as_dict, cpu_context, enqueue, put_file, upload
from tests.support.webkit import add_token, add_user, app_client
from tests.support.workers import running_worker, wait_status, wait_until

PENGUINS = EXAMPLES / "csv" / "penguins.csv"


def summary_of(tmp_path, data: bytes | None = None, path=None, **input_data: Any) -> dict[str, Any]:
    fid = put_file(tmp_path, source=path, data=data)
    with cpu_context(
        "report.csv_summary", {"file": fid, "build_report": False, **input_data}, tmp_path
    ) as ctx:
        return summarise_csv(ctx).data


def columns(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in summary["columns"]}


def test_penguins_summary_matches_an_independent_count(tmp_path) -> None:
    summary = summary_of(tmp_path, path=PENGUINS)
    cols = columns(summary)
    assert summary["rows"] == 344
    assert summary["encoding"] == "utf-8"
    assert summary["delimiter"] == "comma"
    assert summary["overview"] == "344 rows and 8 columns (3 text, 3 whole numbers, 2 decimal numbers)."
    assert {n: c["type"] for n, c in cols.items()} == {
        "species": "text",
        "island": "text",
        "bill_length_mm": "decimal number",
        "bill_depth_mm": "decimal number",
        "flipper_length_mm": "whole number",
        "body_mass_g": "whole number",
        "sex": "text",
        "year": "whole number",
    }
    with open(PENGUINS, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for name in ("bill_length_mm", "body_mass_g"):
        values = [float(r[name]) for r in rows if r[name] != "NA"]
        c = cols[name]
        assert (c["count"], c["missing"]) == (len(values), 344 - len(values)) == (342, 2)
        assert c["min"] == min(values)
        assert c["max"] == max(values)
        assert c["mean"] == pytest.approx(statistics.fmean(values), rel=1e-5)
        assert c["median"] == pytest.approx(statistics.median(values))
        assert sum(b["count"] for b in c["histogram"]) == 342
    assert cols["sex"]["top_values"] == [{"value": "male", "count": 168}, {"value": "female", "count": 165}]
    assert cols["sex"]["missing"] == 11
    assert cols["species"]["distinct"] == 3
    assert cols["year"]["histogram"] == [
        {"from": 2007, "to": 2007, "count": 110},
        {"from": 2008, "to": 2008, "count": 114},
        {"from": 2009, "to": 2009, "count": 120},
    ]


def test_the_other_samples(tmp_path) -> None:
    crime = summary_of(tmp_path, path=EXAMPLES / "csv" / "statecrime.csv")
    assert crime["rows"] == 51
    assert columns(crime)["state"]["distinct"] == 51
    assert columns(crime)["murder"]["type"] == "decimal number"
    danish = summary_of(tmp_path, path=EXAMPLES / "csv" / "danish-money.csv")
    assert danish["encoding"] == "utf-8-sig"  # BOM removed
    assert danish["columns"][0]["name"] == "period"
    assert danish["columns"][0]["examples"] == ["1974Q1", "1974Q2", "1974Q3"]


def _penguins_as(delimiter: str) -> bytes:
    with open(PENGUINS, newline="") as fh:
        rows = list(csv.reader(fh))
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode()


@pytest.mark.parametrize(
    ("delimiter", "name"), [(",", "comma"), (";", "semicolon"), ("\t", "tab"), ("|", "pipe")]
)
def test_each_delimiter_is_found(tmp_path, delimiter, name) -> None:
    summary = summary_of(tmp_path, data=_penguins_as(delimiter))
    assert summary["delimiter"] == name
    assert summary["rows"] == 344
    assert len(summary["columns"]) == 8
    assert columns(summary)["body_mass_g"]["mean"] == pytest.approx(4201.754386, rel=1e-6)


def test_commas_in_a_semicolon_file_with_decimal_commas(tmp_path) -> None:
    text = "name;city;amount;note\nJosé;Zürich;1,5;a, b\nRenée;Kraków;2,25;c, d, e\nÅsa;Malmö;10;f\n"
    summary = summary_of(tmp_path, data=text.encode("cp1252", errors="replace"))
    cols = columns(summary)
    assert summary["encoding"] == "cp1252"
    assert summary["delimiter"] == "semicolon"
    assert cols["name"]["examples"] == ["José", "Renée", "Åsa"]
    assert cols["amount"]["type"] == "decimal number"
    assert cols["amount"]["mean"] == pytest.approx(13.75 / 3, rel=1e-5)


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ("name,city\nJosé,Zürich\nZoë,Göteborg\n".encode("utf-8-sig"), "utf-8-sig"),
        ("name,city\nJosé,Zürich\nZoë,Göteborg\n".encode(), "utf-8"),
        ("name\tcity\nJosé\tZürich\nZoë\tGöteborg\n".encode("utf-16"), "utf-16"),
        ("name,city\nJosé,Zürich\nZoë,Göteborg\n".encode("cp1252"), "cp1252"),
        (b"name,city\nJos\xe9,Z\x81rich\nZo\xeb,G\xf6teborg\n", "latin-1"),
    ],
    ids=["utf-8-bom", "utf-8", "utf-16", "cp1252", "latin-1"],
)
def test_common_encodings_are_found(tmp_path, data, encoding) -> None:
    summary = summary_of(tmp_path, data=data)
    assert summary["encoding"] == encoding
    assert [c["name"] for c in summary["columns"]] == ["name", "city"]
    assert summary["columns"][0]["examples"][0] == "José"


def test_a_chosen_encoding_that_does_not_fit_says_so(tmp_path) -> None:
    with pytest.raises(PermanentError, match="not valid utf-8 text .* choose another encoding, or 'auto'"):
        summary_of(tmp_path, data="a,b\nJosé,1\n".encode("cp1252"), encoding="utf-8")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (
            (EXAMPLES / "broken" / "picture-not-table.csv").read_bytes(),
            "This file is not a CSV file: it is a PNG image.",
        ),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "it is a PDF document"),
        (b"PK\x03\x04\x14\x00\x06\x00" + bytes(30), "Excel .xlsx and Word .docx files are ZIP archives too"),
        (b'{"rows": [{"a": 1}, {"a": 2}]}', "it is a JSON document"),
        (b"<!DOCTYPE html>\n<html><body><table><tr><td>1</td></tr></table></body></html>", "web page"),
        (
            b"Dear team,\nthe numbers, as promised, are below.\nRevenue grew, costs fell, and, overall, we did well.\n"
            b"Thanks,\nAnn\nPS: see you, soon, at the meeting, on Friday, at ten.\n",
            "its lines do not have the same number of fields",
        ),
        (b"a,b\x00c\n1,2\n", "binary data"),
        (b"", "The file is empty"),
        (b"\n\n   \n", "The file is empty"),
    ],
    ids=["png", "pdf", "xlsx", "json", "html", "prose", "nul", "empty", "blank"],
)
def test_a_file_that_is_not_csv_gets_a_clear_error(tmp_path, data, needle) -> None:
    fid = put_file(tmp_path, data=data)
    for type_, func in (("report.csv_check", check_csv), ("report.csv_summary", summarise_csv)):
        with cpu_context(type_, {"file": fid}, tmp_path) as ctx:
            with pytest.raises(PermanentError) as err:
                func(ctx)
        assert needle in str(err.value), str(err.value)


def test_single_column_files_headers_and_ragged_lines(tmp_path) -> None:
    emails = summary_of(tmp_path, data=b"email\nann@example.com\nbob@example.com\n")
    assert [c["name"] for c in emails["columns"]] == ["email"]
    assert emails["rows"] == 2
    headless = summary_of(tmp_path, data=b"1,2.5,x\n3,4.5,y\n5,6.5,z\n")
    assert [c["name"] for c in headless["columns"]] == ["Column 1", "Column 2", "Column 3"]
    assert headless["header"] == "no"
    assert headless["rows"] == 3
    forced = summary_of(tmp_path, data=b"1,2.5,x\n3,4.5,y\n", header="yes")
    assert [c["name"] for c in forced["columns"]] == ["1", "2.5", "x"]
    assert forced["rows"] == 1
    dup = summary_of(tmp_path, data=b"a,a,,b\n1,2,3,4\n")
    assert [c["name"] for c in dup["columns"]] == ["a", "a (2)", "Column 3", "b"]
    lines = "a,b,c\n" + "1,2,3\n" * 30 + "4,5\n6,7,8,9\n"
    ragged = summary_of(tmp_path, data=lines.encode())
    assert ragged["rows"] == 32
    assert "2 line(s) had a different number of fields" in ragged["notes"][0]
    assert columns(ragged)["c"]["missing"] == 1


def test_the_check_counts_in_words_that_agree(tmp_path) -> None:
    def message(data: bytes) -> str:
        with cpu_context("report.csv_check", {"file": put_file(tmp_path, data=data)}, tmp_path) as ctx:
            return str(check_csv(ctx)["message"])

    assert message(b"email\nann@example.com\n").startswith("Found 1 column in 1 row: email (")
    assert message(b"a,b\n1,2\n3,4\n").startswith("Found 2 columns in 2 rows: a (")
    # a column name holding U+202E (right-to-left override) does not reverse the words after it
    odd = message("\u202ename,b\nx,1\n".encode())
    assert odd.startswith("Found 2 columns in 1 row: \u2068\u202ename\u202c\u2069 (text), b (")


def test_types_dates_yes_no_leading_zeros(tmp_path) -> None:
    data = (
        "egg date,seen at,zip,ok,score\n"
        "2007-11-11,2007-11-11 10:30,02134,yes,1e3\n"
        "2008-01-02,2008-01-02T08:00,10001,No,-2.5\n"
        "2007-10-30,NA,90210,,.5\n"
    )
    cols = columns(summary_of(tmp_path, data=data.encode()))
    assert cols["egg date"]["type"] == "date"
    assert (
        cols["egg date"]["earliest"],
        cols["egg date"]["latest"],
    ) == (
        "2007-10-30",
        "2008-01-02",
    )
    assert cols["seen at"]["type"] == "date and time"
    assert cols["seen at"]["missing"] == 1
    assert cols["zip"]["type"] == "text"  # 02134 is a code, not a number
    assert cols["ok"]["type"] == "yes/no"
    assert cols["ok"]["missing"] == 1
    assert cols["score"]["type"] == "decimal number"
    assert cols["score"]["max"] == 1000


HOSTILE = (
    '<script>alert("col")</script>,notes\n'
    '<img src=x onerror=alert(1)>,"Tom & Jerry ""quoted"" \'apos\'"\n'
    "<svg onload=alert(2)>,</text><script>alert(3)</script>\n"
    "<svg onload=alert(2)>,plain\n"
)
RAW_MARKERS = ("<script>alert", "<img src=x", "<svg onload", "</text><script")


def _report_html(tmp_path) -> str:
    fid = put_file(tmp_path, data=HOSTILE.encode())
    with cpu_context("report.csv_summary", {"file": fid, "title": "<b>Title</b> & co"}, tmp_path) as ctx:
        result = summarise_csv(ctx)
        (report,) = result.files
        assert report.name == "b-Title-b-co-report.html"
        assert report.content_type == "text/html"
        return report.path.read_text()


def test_the_report_escapes_every_value(tmp_path) -> None:
    html = _report_html(tmp_path)
    for marker in RAW_MARKERS:
        assert marker not in html, marker
    assert "&lt;script&gt;alert(&#34;col&#34;)&lt;/script&gt;" in html  # the column name, in the page
    assert "&lt;svg onload=alert(2)&gt;" in html  # a value, in the page and in the chart's SVG text
    assert "Tom &amp; Jerry &#34;quoted&#34; &#39;apos&#39;" in html
    assert "&lt;b&gt;Title&lt;/b&gt; &amp; co" in html
    assert "<script" not in html.lower()
    assert "default-src 'none'" in html


def test_the_escaping_check_fails_without_autoescape(tmp_path, monkeypatch) -> None:
    """Negative control: with autoescaping off, or SVG text not escaped, raw markup reaches the file."""
    real = jinja2.Environment
    monkeypatch.setattr(jinja2, "Environment", lambda **kw: real(**{**kw, "autoescape": False}))
    assert "<script>alert" in _report_html(tmp_path)
    monkeypatch.setattr(jinja2, "Environment", real)
    monkeypatch.setattr(csv_charts, "escape", str)
    assert "<svg onload=alert(2)>" in _report_html(tmp_path)


def test_the_report_step_needs_a_summary_before_it(tmp_path) -> None:
    with cpu_context("report.csv_report", {}, tmp_path) as ctx:
        with pytest.raises(PermanentError, match="there is no such step before it"):
            report_from_summary(ctx)
    with cpu_context("report.csv_report", {}, tmp_path, parents={"summary": {"ok": True}}) as ctx:
        with pytest.raises(PermanentError, match="is not a CSV summary"):
            report_from_summary(ctx)


@pytest.mark.browser
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"needs {CHROMIUM} (installed by .ci/run) to render the report"
)
def test_the_report_looks_right(tmp_path, artifacts_dir) -> None:
    fid = put_file(tmp_path, source=PENGUINS)
    with cpu_context("report.csv_summary", {"file": fid, "title": "Palmer penguins"}, tmp_path) as ctx:
        (report,) = summarise_csv(ctx).files
        (artifacts_dir / "csv-report-penguins.html").write_text(report.path.read_text())
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright to render the report")

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            page = browser.new_page(viewport={"width": 375, "height": 800})
            page.goto((artifacts_dir / "csv-report-penguins.html").as_uri())
            assert page.evaluate("document.documentElement.scrollWidth") <= 375  # no sideways scrolling
            assert page.locator("section.col svg").count() == 8
            page.screenshot(path=str(artifacts_dir / "csv-report-penguins-375.png"), full_page=True)
        finally:
            browser.close()


async def test_not_a_csv_through_a_worker_fails_once_in_plain_words(settings, engine, pg) -> None:
    user = await add_user(settings.database_url, "csv@example.com")
    fid = await upload(engine, settings, user.id, path=EXAMPLES / "broken" / "picture-not-table.csv")
    # The queue refuses a picture in a table's field; a processor can still meet one that the upload could
    # not tell (stored as unknown bytes) or that came from another step, and reads its bytes itself.
    await pg.execute(
        "UPDATE files SET content_type = 'application/octet-stream' WHERE id = $1::uuid", str(fid)
    )
    job = await enqueue(engine, settings, user.id, "report.csv_summary", {"file": fid})
    good = await enqueue(
        engine,
        settings,
        user.id,
        "report.csv_summary",
        {"file": await upload(engine, settings, user.id, path=PENGUINS), "title": "Penguins"},
    )
    async with running_worker(settings):
        failed = await wait_status(pg, job, {"failed"}, timeout=60)
        done = await wait_status(pg, good, {"completed"}, timeout=60)
    assert failed["attempts"] == 1
    assert failed["error_message"].startswith("This file is not a CSV file: it is a PNG")
    (ref,) = as_dict(done["result_data"])["files"]
    assert ref["name"] == "Penguins-report.html"
    assert ref["content_type"] == "text/html"
    assert "<h1>Penguins</h1>" in FileStore(settings.files_dir).path(ref["file_id"]).read_text()


# --- the CSV report with review template through the JSON API ------------------------------------------


async def _start_review(client, headers, fid) -> str:
    resp = await client.post(
        "/api/pipelines",
        json={"template": "csv_report_review", "input_data": {"file": fid, "title": "US state crime 2009"}},
        headers=headers,
    )
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


async def _steps(pg, pid) -> dict[str, dict[str, Any]]:
    rows = await pg.fetch("SELECT * FROM jobs WHERE pipeline_id = $1::uuid", pid)
    return {r["step_key"]: dict(r) for r in rows}


async def test_csv_review_end_to_end_approved(make_settings, db_url, engine, pg) -> None:
    settings = make_settings(worker_enabled=False)
    user = await add_user(db_url, "analyst@example.com")
    admin = await add_user(db_url, "admin@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    fid = await upload(engine, settings, user.id, path=EXAMPLES / "csv" / "statecrime.csv")
    async with app_client(settings) as client:
        pid = await _start_review(client, headers, fid)
        async with running_worker(settings):
            await wait_until(
                lambda: pg.fetchval(
                    "SELECT status = 'waiting_approval' FROM jobs WHERE pipeline_id = $1::uuid AND step_key = 'check'",
                    pid,
                ),
                timeout=60,
                what="the check step to wait for approval",
            )
            steps = await _steps(pg, pid)
            assert steps["summary"]["status"] == "queued"
            assert steps["summary"]["attempts"] == 0
            check = as_dict(steps["check"]["result_data"])
            assert check["message"].startswith(
                "Found 8 columns in 51 rows: state (text), violent (decimal number)"
            )
            assert (check["encoding"], check["delimiter"], check["header"]) == ("utf-8", "comma", "yes")
            assert [c["name"] for c in check["columns"]][:2] == ["state", "violent"]
            async with engine.begin() as conn:
                await queue.approve(conn, steps["check"]["id"], admin)
            await wait_until(
                lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1::uuid", pid),
                timeout=60,
                what="the pipeline to finish",
            )
        view = (await client.get(f"/api/pipelines/{pid}", headers=headers)).json()
    assert [s["status"] for s in view["steps"]] == ["completed"] * 3
    steps = await _steps(pg, pid)
    assert as_dict(steps["summary"]["input_data"])["encoding"] == {"$ref": "check.encoding"}
    summary = as_dict(steps["summary"]["result_data"])
    assert "files" not in summary
    assert summary["title"] == "US state crime 2009"
    assert summary["rows"] == 51
    (ref,) = as_dict(steps["report"]["result_data"])["files"]
    html = FileStore(settings.files_dir).path(ref["file_id"]).read_text()
    assert ref["name"] == "US-state-crime-2009-report.html"
    assert "<h1>US state crime 2009</h1>" in html
    assert "hs_grad" in html
    assert "51 rows and 8 columns" in html


async def test_csv_review_rejected_cancels_the_rest(make_settings, db_url, engine, pg) -> None:
    settings = make_settings(worker_enabled=False)
    user = await add_user(db_url, "analyst2@example.com")
    admin = await add_user(db_url, "admin2@example.com", admin=True)
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    fid = await upload(engine, settings, user.id, path=EXAMPLES / "csv" / "penguins.csv")
    async with app_client(settings) as client:
        pid = await _start_review(client, headers, fid)
        async with running_worker(settings):
            await wait_until(
                lambda: pg.fetchval(
                    "SELECT status = 'waiting_approval' FROM jobs WHERE pipeline_id = $1::uuid AND step_key = 'check'",
                    pid,
                ),
                timeout=60,
                what="approval",
            )
            steps = await _steps(pg, pid)
            async with engine.begin() as conn:
                await queue.reject(conn, steps["check"]["id"], admin, "the year column should be a date")
            await wait_until(
                lambda: pg.fetchval("SELECT status = 'failed' FROM pipelines WHERE id = $1::uuid", pid),
                timeout=30,
                what="the pipeline to fail",
            )
    steps = await _steps(pg, pid)
    assert {k: s["status"] for k, s in steps.items()} == {
        "check": "failed",
        "summary": "cancelled",
        "report": "cancelled",
    }
    assert steps["check"]["error_message"] == "rejected: the year column should be a date"
    assert steps["summary"]["attempts"] == 0
    assert steps["report"]["attempts"] == 0


# --- time linear in the file: repeated and too many columns, quotes that never close ---------------------


def _table(width: int, name: str = "a") -> bytes:
    return f"{','.join([name] * width)}\n{','.join(['1'] * width)}\n".encode()


def test_column_names_are_distinct_in_linear_time() -> None:
    assert reports.column_names(["a", "a", "a (2)", "", " b ", "b", "a"], 8) == [
        "a",
        "a (2)",
        "a (2) (2)",
        "Column 4",
        "b",
        "b (2)",
        "a (3)",
        "Column 8",
    ]
    started = time.perf_counter()
    names = reports.column_names(["a"] * 100_000, 100_000)
    assert time.perf_counter() - started < 2.0
    assert len(set(names)) == 100_000
    assert names[-1] == "a (100000)"


def test_the_delimiter_and_header_guesses_take_bounded_time(tmp_path) -> None:
    """The csv module's sniffer takes time growing faster than its sample on unclosed quotes (133 s on
    this 64 KB file when it saw all of it)."""
    started = time.perf_counter()
    for data in (b'"\n' * 32_000, b',"' * 32_000 + b"\n", b'" \n' * 21_000):
        with pytest.raises(PermanentError):
            summary_of(tmp_path, data=data)
    assert time.perf_counter() - started < 10


async def test_wide_and_repetitive_tables_through_the_api_and_a_worker(
    make_settings, db_url, engine, pg
) -> None:
    """9,000 columns all named "a" are named in a blink; a table wider than MAX_COLUMNS fails at once,
    saying why; a file of unclosed quotes ends in seconds, not minutes."""
    settings = make_settings(worker_enabled=False)
    user = await add_user(db_url, "wide@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    files = {
        "repeated": _table(9_000),
        "too_wide": _table(reports.MAX_COLUMNS + 1, "x"),
        "quotes": b'"\n' * 32_000,
    }
    ids = {}
    async with app_client(settings) as client:
        for key, data in files.items():
            fid = await upload(engine, settings, user.id, data=data, name=f"{key}.csv")
            resp = await client.post(
                "/api/jobs", json={"type": "report.csv_check", "input_data": {"file": fid}}, headers=headers
            )
            assert resp.status_code == 201, resp.text
            ids[key] = resp.json()["id"]
    started = time.monotonic()
    async with running_worker(settings):
        rows = {k: await wait_status(pg, v, {"completed", "failed"}, timeout=60) for k, v in ids.items()}
    assert time.monotonic() - started < 60
    repeated = as_dict(rows["repeated"]["result_data"])
    names = [c["name"] for c in repeated["columns"]]
    assert len(names) == 9_000
    assert names[:2] == ["a", "a (2)"]
    assert names[-1] == "a (9000)"
    wide = rows["too_wide"]
    assert wide["status"] == "failed"
    assert wide["attempts"] == 1
    assert "10,001 columns; CSV reports handle up to 10,000" in wide["error_message"]
    assert rows["quotes"]["status"] == "failed"
    assert rows["quotes"]["attempts"] == 1


def test_dates_with_and_without_times_or_offsets_sort_together(tmp_path) -> None:
    data = b"when,zoned\n2024-03-01,2024-03-01T10:00:00+02:00\n2024-02-28T23:30:00,2024-03-01T09:30:00\n"
    cols = columns(summary_of(tmp_path, data=data))
    assert cols["when"]["type"] == "date and time"
    assert (cols["when"]["earliest"], cols["when"]["latest"]) == ("2024-02-28T23:30:00", "2024-03-01")
    assert (cols["zoned"]["earliest"], cols["zoned"]["latest"]) == (
        "2024-03-01T10:00:00+02:00",
        "2024-03-01T09:30:00",
    )


def test_overview_says_one_row_and_one_column_in_the_singular(tmp_path) -> None:
    summary = summary_of(tmp_path, data=b"a\n1\n")
    assert summary["overview"] == "1 row and 1 column (1 whole number)."
