"""The README's table of API routes gives the body of ``POST /api/schedules`` and ``PATCH
/api/schedules/{id}`` as it does the other routes' bodies: every field the route's body declares is
named in its row, so a field added to the body without a word in the README fails here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from app.cron import MAX_CATCH_UP
from app.web.api.schedules import ScheduleChange, ScheduleCreate

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize(
    ("route", "body"),
    [("POST /api/schedules", ScheduleCreate), ("PATCH /api/schedules/{id}", ScheduleChange)],
)
def test_the_readme_names_every_field_of_the_schedule_bodies(route: str, body: type) -> None:
    rows = [line for line in README.read_text().splitlines() if line.startswith(f"| `{route} {{")]
    assert len(rows) == 1, f"no row for {route} with its body in the README's table"
    braces = re.search(r"\{([^{}]*)\}`", rows[0])
    assert braces is not None
    named = set(re.findall(r"[a-z_]+", braces.group(1)))
    assert {f.name for f in dataclasses.fields(body)} - named == set()
    if body is ScheduleCreate:
        assert f"at most {MAX_CATCH_UP}" in rows[0]
