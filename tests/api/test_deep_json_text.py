"""JSON typed into a text field (``http.request``'s JSON body, a spreadsheet cell for an object field, a
CSV file that looks like JSON) nested deeper than Python's parser goes: a field error or a plain reading,
never a ``RecursionError`` out of a check (a 500) or out of a processor."""

from __future__ import annotations

from app import spreadsheets
from app.processors import PermanentError
from app.processors.reports import check_csv
from tests.support.procs import cpu_context, put_file
from tests.support.webkit import add_token, add_user, app_client

DEEP = "[" * 50_000 + "]" * 50_000


async def test_a_json_body_nested_too_deeply_is_a_422_on_every_submission_path(make_settings, db_url) -> None:
    user = await add_user(db_url, "deepjson@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    row = {"url": "https://example.com/", "method": "POST", "body_type": "json", "body": DEEP}
    async with app_client(make_settings(worker_enabled=False)) as client:
        for path, body, field in (
            ("/api/jobs", {"type": "http.request", "input_data": row}, "input_data.body"),
            ("/api/batches", {"type": "http.request", "rows": [row]}, "rows[0].body"),
            (
                "/api/pipelines",
                {"name": "p", "steps": [{"key": "a", "type": "http.request", "input_data": row}]},
                "steps[0].input_data.body",
            ),
        ):
            resp = await client.post(path, json=body, headers=headers)
            assert resp.status_code == 422, (path, resp.text)
            assert "Is not valid JSON: it is nested too deeply to read" in resp.json()["errors"][field]
        assert (await client.get("/api/jobs", headers=headers)).json()["items"] == []


def test_a_deep_cell_for_an_object_field_stays_text_for_the_schema_to_refuse() -> None:
    field = spreadsheets.SheetField("o", "O", "object", False)
    assert spreadsheets.convert(field, DEEP) == DEEP
    assert spreadsheets.convert(field, '{"a": [1]}') == {"a": [1]}


def test_a_csv_file_that_opens_like_deep_json_is_read_as_a_table(tmp_path) -> None:
    fid = put_file(tmp_path, data=DEEP.encode() + b"\n")
    with cpu_context("report.csv_check", {"file": fid}, tmp_path) as ctx:
        try:
            check_csv(ctx)
        except PermanentError as exc:  # what it says of a one-cell table is the processor's own words
            assert "JSON" not in str(exc), str(exc)
