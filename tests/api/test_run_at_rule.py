"""One rule for a job's due time (``run_at``) on every path that sets one: text with a UTC offset,
between 1970 and 9000, refused with a 422 naming the field in words — on submission, on the API's and
the page's reschedule, and for a pipeline's or a schedule's jobs (which are enqueued as a submission
is). Rescheduling had no bounds (9999-12-31T23:59:59Z was taken; with ``-14:00`` a 422 named no field)
and a number was read as Unix time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.errors import BadInput
from app.jobs.run_at import check_run_at
from tests.support.webkit import HX, AdminApi, csrf_from, login

LATER = "2030-01-01T09:00:00+01:00"
BAD = {
    "9999-12-31T23:59:59Z": "must be a date between 1970 and 9000",
    "9999-12-31T23:59:59-14:00": "must be a date between 1970 and 9000",
    # before the range it is said too, not "already passed" (with no word of how much later would do)
    "1969-12-31T23:59:59Z": "must be a date between 1970 and 9000",
    "1970-01-01T00:30:00+01:00": "must be a date between 1970 and 9000",
    "2030-01-01T09:00:00": "needs a UTC offset",
    "zzz": "is not a date and time",
    "2030-02-31T09:00:00Z": "is not a date and time",
    "2030-01-01T09:00+01:00": "is not a date and time",
    1700000000: "must be a date and time as text",
    1.5: "must be a date and time as text",
    True: "must be a date and time as text",
}


def test_the_rule_reads_text_and_bounds_the_moment_in_utc() -> None:
    assert check_run_at(None) is None
    assert check_run_at("2030-01-01t09:00:00z") == datetime(2030, 1, 1, 9, tzinfo=UTC)
    assert check_run_at("9000-12-31T23:59:59Z") == datetime(9000, 12, 31, 23, 59, 59, tzinfo=UTC)
    for value, words in BAD.items():
        with pytest.raises(BadInput) as caught:
            check_run_at(value, "steps[1].run_at")  # type: ignore[arg-type]
        assert words in caught.value.errors["steps[1].run_at"], value


async def test_submission_and_reschedule_refuse_the_same_due_times_in_words(admin_api: AdminApi) -> None:
    made = await admin_api.client.post(
        "/api/jobs", json={"type": "noop", "run_at": LATER}, headers=admin_api.root
    )
    assert made.status_code == 201, made.text
    job_id = made.json()["id"]
    for value, words in BAD.items():
        for path in ("/api/jobs", f"/api/jobs/{job_id}/reschedule"):
            body = {"type": "noop", "run_at": value} if path == "/api/jobs" else {"run_at": value}
            r = await admin_api.client.post(path, json=body, headers=admin_api.root)
            assert r.status_code == 422, (path, value, r.text)
            assert list(r.json()["errors"]) == ["run_at"], (path, value, r.text)
            assert words in r.json()["errors"]["run_at"], (path, value, r.text)
            assert "Invalid" not in r.text and "Expected" not in r.text, (path, value, r.text)
    assert await admin_api.pg.fetchval("SELECT count(*) FROM jobs") == 1
    assert await admin_api.pg.fetchval("SELECT run_at FROM jobs") == datetime(2030, 1, 1, 8, tzinfo=UTC)
    moved = await admin_api.client.post(
        f"/api/jobs/{job_id}/reschedule", json={"run_at": "2031-06-01 10:00:00Z"}, headers=admin_api.root
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["run_at"].startswith("2031-06-01T10:00:00")


async def test_the_reschedule_form_is_held_to_the_same_bounds_in_utc(admin_api: AdminApi) -> None:
    """The form bounds the date as typed; late on 31 Dec 9000 west of UTC is already 9001 in UTC, which
    the rule refuses beside the fields, as the API does."""
    made = await admin_api.client.post(
        "/api/jobs", json={"type": "noop", "run_at": LATER}, headers=admin_api.root
    )
    job_id = made.json()["id"]
    assert (await login(admin_api.client, "root@example.com")).status_code == 303
    token = csrf_from((await admin_api.client.get(f"/jobs/{job_id}")).text)
    r = await admin_api.client.post(
        f"/jobs/{job_id}/reschedule",
        data={"date": "9000-12-31", "time": "23:30", "tz": "Pacific/Pago_Pago", "_csrf_token": token},
        headers=HX,
    )
    assert r.status_code == 422, r.text
    assert "Must be a date between 1970 and 9000." in r.text
    assert await admin_api.pg.fetchval("SELECT run_at FROM jobs") == datetime(2030, 1, 1, 8, tzinfo=UTC)
