"""Template filters: times in the user's zone, relative times, durations, sizes (app.web)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.web import format_ago, format_duration, format_filesize, format_localtime, zone

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


def test_localtime_uses_the_zone_and_names_it() -> None:
    assert format_localtime(NOW, zone("Europe/Berlin")) == "29 Nov 2026, 21:00 CET"
    assert format_localtime(NOW, zone("America/New_York"), seconds=True) == "29 Nov 2026, 15:00:00 EST"
    assert format_localtime(datetime(2026, 7, 1, 12, 0), zone("UTC")) == "1 Jul 2026, 12:00 UTC"
    assert format_localtime(None, zone("UTC")) == ""
    assert zone("Not/AZone") == zone("UTC")
    assert zone(None) == zone("UTC")


def test_ago() -> None:
    assert format_ago(NOW - timedelta(seconds=10), NOW) == "just now"
    assert format_ago(NOW - timedelta(minutes=2), NOW) == "2 min ago"
    assert format_ago(NOW - timedelta(hours=3), NOW) == "3 h ago"
    assert format_ago(NOW - timedelta(days=1), NOW) == "1 day ago"
    assert format_ago(NOW - timedelta(days=5), NOW) == "5 days ago"
    assert format_ago(NOW + timedelta(minutes=3), NOW) == "in 3 min"
    assert format_ago(None) == ""


def test_duration() -> None:
    assert format_duration(0.85) == "850 ms"
    assert format_duration(4) == "4 s"
    assert format_duration(4.25) == "4.2 s"
    assert format_duration(42) == "42 s"
    assert format_duration(185) == "3 min 5 s"
    assert format_duration(timedelta(hours=2, minutes=10)) == "2 h 10 min"
    assert format_duration(None) == ""


def test_filesize() -> None:
    assert format_filesize(512) == "512 bytes"
    assert format_filesize(1536) == "1.5 KiB"
    assert format_filesize(25 * 1024 * 1024) == "25 MiB"
    assert format_filesize(None) == ""


def test_field_names_read_as_words_with_acronyms_and_units() -> None:
    """A result read "Url", "Ok" and "Elapsed ms: 68": labels are words a person expects, and a name's
    unit suffix moves into the value, in words."""
    from app.formatting import key_label, key_labels, unit_value

    assert key_label("url") == "URL"
    assert key_label("final_url") == "Final URL"
    assert key_label("job_id") == "Job ID"
    assert key_label("csv_rows") == "CSV rows"
    assert key_label("ok") == "OK"
    assert key_label("status_code") == "Status code"
    assert key_label("X-Request-Id") == "X-Request-Id"  # not a field name: as written
    assert (key_label("elapsed_ms"), unit_value("elapsed_ms", 1234)) == ("Elapsed", "1.2 s")
    assert unit_value("elapsed_ms", 68) == "68 ms"
    assert (key_label("timeout_secs"), unit_value("timeout_secs", 90)) == ("Timeout", "1 min 30 s")
    assert (key_label("body_bytes"), unit_value("body_bytes", 1536)) == ("Body size", "1.5 KiB")
    assert unit_value("elapsed_ms", "soon") is None and unit_value("elapsed_ms", True) is None
    assert unit_value("rows", 3) is None
    # "bytes" would read "Size" like its neighbour "size" (pixels): it keeps its own word
    assert key_labels(["size", "bytes"]) == {"size": "Size", "bytes": "Bytes"}
    assert key_labels(["name", "bytes"]) == {"name": "Name", "bytes": "Size"}


def test_far_times_read_as_a_person_says_them() -> None:
    """A job due in year 9000 read "(in 2547226 days)": past and future, a far time is told in months,
    then years (with thousands grouped), and a long duration in days, then months and years."""
    assert format_ago(NOW + timedelta(days=59), NOW) == "in 59 days"
    assert format_ago(NOW - timedelta(days=75), NOW) == "about 2 months ago"
    assert format_ago(NOW + timedelta(days=400), NOW) == "in about 13 months"
    assert format_ago(NOW - timedelta(days=3 * 365), NOW) == "about 3 years ago"
    assert format_ago(datetime(9000, 1, 1, tzinfo=UTC), NOW) == "in about 6,973 years"
    assert format_ago(datetime(1970, 1, 1, tzinfo=UTC), NOW) == "about 57 years ago"
    assert format_ago(datetime.max.replace(tzinfo=UTC), NOW) == "in about 7,973 years"
    assert format_duration(timedelta(hours=50)) == "2 days 2 h"
    assert format_duration(timedelta(days=30)) == "30 days"
    assert format_duration(timedelta(days=9000 * 365)) == "about 8,994 years"
