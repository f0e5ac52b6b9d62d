"""Titles Jobdesk makes from a person's text and its own words: a batch row's "<batch name> · row 3", a
scheduled job's "<schedule name> (2026-12-07 08:00 UTC)", a job named by its files "<file name> and 4
more". A name holding U+202E (right-to-left override) reversed our words after it on every page, notice
and e-mail that shows the title; the name is set apart with FSI … PDI and its controls closed, within
the title's length, and a left-to-right name stays as it was."""

from __future__ import annotations

from datetime import UTC, datetime

from app.batches import _title as row_title
from app.cron import fired_title
from app.formatting import balanced, isolated_within
from app.jobs.naming import name_from_input
from app.processors import registry

RLO, PDF, FSI, PDI = "\u202e", "\u202c", "\u2068", "\u2069"
NAME = f"{RLO}Invoices"
SHOWN = f"{FSI}{NAME}{PDF}{PDI}"
AT = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)


def test_a_name_beside_our_words_in_a_title_is_set_apart() -> None:
    sheet = registry.get("images.contact_sheet")
    assert sheet is not None
    fid, other = "01a23310-acd3-73bc-9239-90788ee4c799", "01a23310-acd3-73bc-9239-90788ee4c79a"
    titles = {
        row_title(NAME, 3): f"{SHOWN} · row 3",
        fired_title(NAME, AT): f"{SHOWN} (2026-12-07 08:00 UTC)",
        name_from_input(sheet.input_model, {"images": [fid, other]}, {fid: NAME}): f"{SHOWN} and 1 more",
    }
    for made, expected in titles.items():
        assert made == expected
        assert balanced(made) == made
    # left-to-right names, as before
    assert row_title("Invoices", 3) == "Invoices · row 3"
    assert fired_title("Nightly", AT) == "Nightly (2026-12-07 08:00 UTC)"
    assert fired_title("x" * 300, AT) == "x" * 176 + "… (2026-12-07 08:00 UTC)"


def test_a_long_name_full_of_controls_still_fits_the_title() -> None:
    name = RLO * 150
    for made, room in ((row_title(name, 12), 180), (fired_title(name, AT), 177)):
        shown = made.rsplit(" · row", 1)[0].rsplit(" (", 1)[0]
        assert len(shown) <= room and len(made) <= 200
        assert shown.startswith(FSI + RLO) and shown.endswith(PDF + PDI)
        assert balanced(made) == made
    assert isolated_within(f"{RLO}abcdef", 7) == f"{FSI}{RLO}ab…{PDF}{PDI}"
    assert isolated_within(f"{RLO}abc", 4) == "…"  # nothing left that turns


def test_a_value_quoted_in_a_forms_error_is_set_apart() -> None:
    """ "“‮big” is not a whole number." read backwards from the value on, beside the form field."""
    from zoneinfo import ZoneInfo

    from app.web.form_values import convert
    from app.web.forms import form_fields

    thumbnail = registry.get("images.thumbnail")
    assert thumbnail is not None
    sizes = next(f for f in form_fields(thumbnail.input_model) if f.name == "sizes")
    value, problem = convert(sizes, f"160, {RLO}big", ZoneInfo("UTC"))
    assert value is None and problem is not None
    assert problem.startswith(f"“{FSI}{RLO}big{PDF}{PDI}” is not a whole number.")
