"""A cron expression that names no date (``0 0 31 2 *``) is refused saying that it never fires and why,
not with croniter's "(failed to find next date)"; a step beyond its field (``*/99999999999999999999``, or
0) is refused, where croniter took it. One rule (:func:`app.cron.check_cron`) for the API, the schedule
form and schedules defined in code."""

from __future__ import annotations

import pytest

from app.cron import check_cron
from app.errors import BadInput
from tests.support.webkit import AdminApi


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("0 0 31 2 *", "never fires: February has no day 31"),
        ("0 0 30 feb *", "never fires: February has no day 30"),
        ("0 0 31 4,6 *", "never fires: April and June have no day 31"),
        ("0 0 31 4,6,9,11 *", "never fires: April, June, September and November have no day 31"),
        ("0 0 31 feb,apr,jun,sep,nov *", "never fires: February, April, June, September and November have"),
        (
            "0-59/99999999999999999999 * * * *",
            "the step after '/' in the minute field must be a whole number from 1 to 60",
        ),
        ("0 */0 * * *", "the step after '/' in the hour field must be a whole number from 1 to 24"),
    ],
)
def test_a_schedule_that_cannot_fire_as_written_is_refused_in_words(cron: str, words: str) -> None:
    with pytest.raises(BadInput) as refused:
        check_cron(cron)
    assert words in refused.value.errors["cron"], refused.value.errors
    assert "failed to find" not in refused.value.detail


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 31 * *", "0 0 31 2 1", "*/15 * * * *", "0 0 1-31/2 * *"])
def test_schedules_that_fire_are_taken(cron: str) -> None:
    assert check_cron(cron) == cron


async def test_the_api_says_so(admin_api: AdminApi) -> None:
    body = {"type": "noop", "name": "n", "cron": "0 0 31 2 *", "input_data": {}}
    r = await admin_api.client.post("/api/schedules", json=body, headers=admin_api.root)
    assert r.status_code == 422, r.text
    assert "never fires: February has no day 31" in r.json()["errors"]["cron"], r.text


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("0 R * * *", "'R' in the hour field is not a cron value"),
        ("R * * * *", "'R' in the minute field is not a cron value"),
        ("H * * * *", "'H' in the minute field is not a cron value"),
        ("0 0 * * jan", "'jan' in the weekday field is not a cron value"),
        ("0 0 * * 5%", "'%' is not a cron value"),
    ],
)
def test_a_word_no_crontab_has_is_refused_naming_its_field(cron: str, words: str) -> None:
    """croniter read ``R`` as a random value drawn again at each next fire: a trial's ``0 R * * *`` was
    saved, and fired at another hour each day (twice on some days, on none on others), never at the times
    its preview showed."""
    with pytest.raises(BadInput) as refused:
        check_cron(cron)
    assert words in refused.value.errors["cron"], refused.value.errors
    assert "hash_id" not in refused.value.detail


@pytest.mark.parametrize("cron", ["0 0 1 JAN-FEB *", "0 9 * jan mon-fri", "0 0 * * mon"])
def test_names_are_taken(cron: str) -> None:
    assert check_cron(cron) == cron


LAST_AND_NTH = {
    "0 0 L * *": "'L' in the day field: 'L' is not taken",
    "0 0 15W * *": "'15W' in the day field: 'W' is not taken",
    "0 0 LW * *": "'LW' in the day field: 'L' is not taken",
    "0 0 * * 5L": "'5L' in the weekday field: 'L' is not taken",
    "0 0 * * 5#3": "'5#3' in the weekday field: '#' is not taken",
    "0 0 * * MON#6": "'MON#6' in the weekday field: '#' is not taken",
    "0 0 * L *": "'L' in the month field: 'L' is not taken",
    # Quartz's "no specific value", which croniter read as '*'
    "0 0 ? * mon": "'?' in the day field: '?' is not taken",
    "0 9 * * ?": "'?' in the weekday field: '?' is not taken",
    "*/5,? * * * *": "'*/5,?' in the minute field: '?' is not taken",
}


@pytest.mark.parametrize("cron", list(LAST_AND_NTH))
async def test_last_nearest_weekday_and_nth_marks_are_refused_on_every_path(
    cron: str, admin_api: AdminApi
) -> None:
    """The README documents five plain fields; croniter also read Quartz's ``L``, ``W`` and ``#``, which
    no crontab takes and which the preview and the daylight-saving rules were never checked against.
    Refused as ``R`` and ``H`` are, by the one rule: saving, and the preview (:func:`upcoming`)."""
    from datetime import UTC, datetime

    from app.cron import upcoming

    said = LAST_AND_NTH[cron]
    for check in (check_cron, lambda c: upcoming(c, "Europe/Berlin", datetime(2026, 3, 1, tzinfo=UTC))):
        with pytest.raises(BadInput) as refused:
            check(cron)
        assert said in refused.value.errors["cron"], refused.value.errors
        assert "five plain crontab fields" in refused.value.errors["cron"]
    body = {"type": "noop", "name": "n", "cron": cron, "input_data": {}}
    r = await admin_api.client.post("/api/schedules", json=body, headers=admin_api.root)
    assert r.status_code == 422, r.text
    assert said in r.json()["errors"]["cron"], r.text
