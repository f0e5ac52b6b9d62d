"""Column statistics of CSV reports: what counts as missing, the kind of a column's values (whole
numbers, decimals, dates, yes/no, text), and one column's summary (counts, range, histogram, most common
values). Every function takes time linear (or n log n) in the column's length."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from datetime import UTC, date, datetime
from typing import Any

MISSING = {"", "na", "n/a", "nan", "null", "none", "-", "?", "#n/a", "(blank)"}
"""Values counted as missing (compared lower-cased, spaces stripped)."""
TOP_DISTINCT_CAP = 100_000
"""Distinct values tracked per column; past this, top values are approximate."""
EXAMPLES = 3

INTEGER = re.compile(r"^[+-]?\d+$")
DECIMAL = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
DECIMAL_COMMA = re.compile(r"^[+-]?\d+,\d+$")
YES_NO = {"yes", "no", "true", "false", "y", "n"}


def is_missing(v: str) -> bool:
    return v.strip().lower() in MISSING


def _as_date(v: str) -> date | datetime | None:
    if len(v) < 8 or not v[:4].isdigit():
        return None
    try:
        return date.fromisoformat(v) if len(v) <= 10 else datetime.fromisoformat(v)
    except ValueError:
        return None


def detect_type(values: list[str], decimal_comma: bool) -> str:
    """The kind of a column's present (non-missing, stripped) values, in words: ``whole number``,
    ``decimal number``, ``date``, ``date and time``, ``yes/no``, ``text`` or ``empty``. Whole numbers
    with a leading zero (postcodes, ids) are text."""
    if not values:
        return "empty"
    if any(
        len(v.lstrip("+-")) > 1 and v.lstrip("+-")[0] == "0" and v.lstrip("+-")[1].isdigit() for v in values
    ):
        return "text"  # 02134: a code (postcode, id), not a number
    if all(INTEGER.match(v) for v in values):
        return "whole number"
    if all(DECIMAL.match(v) for v in values):
        return "decimal number"
    if decimal_comma and all(DECIMAL.match(v) or DECIMAL_COMMA.match(v) for v in values):
        return "decimal number"
    if all(v.lower() in YES_NO for v in values):
        return "yes/no"
    parsed = [_as_date(v) for v in values]
    if all(p is not None for p in parsed):
        return "date and time" if any(isinstance(p, datetime) for p in parsed) else "date"
    return "text"


def _moment(v: str) -> datetime:
    """A date or date and time as one comparable value: dates at midnight, times with an offset moved to
    UTC, times without one taken as they are (so dates, local and zoned times sort together)."""
    parsed = _as_date(v)
    if isinstance(parsed, datetime):
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(UTC).replace(tzinfo=None)
        return parsed
    if parsed is None:
        return datetime.min
    return datetime(parsed.year, parsed.month, parsed.day)


def _isoformat(v: str) -> str:
    parsed = _as_date(v)
    return parsed.isoformat() if parsed is not None else v


def _num(v: str) -> float:
    return float(v.replace(",", "."))


def _round(x: float) -> float | int:
    if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return int(x)
    return float(f"{x:.7g}")


def histogram(numbers: list[float], whole: bool, bins: int = 10) -> list[dict[str, Any]]:
    """Equal-width bins ``[{"from", "to", "count"}]`` (whole numbers with a small range: one bin per
    value)."""
    lo, hi = min(numbers), max(numbers)
    if lo == hi:
        return [{"from": _round(lo), "to": _round(hi), "count": len(numbers)}]
    if whole and hi - lo + 1 <= bins:
        per_value = Counter(int(n) for n in numbers)
        return [{"from": v, "to": v, "count": per_value.get(v, 0)} for v in range(int(lo), int(hi) + 1)]
    step = (hi - lo) / bins
    counts = [0] * bins
    for n in numbers:
        counts[min(bins - 1, int((n - lo) / step))] += 1
    return [
        {"from": _round(lo + i * step), "to": _round(lo + (i + 1) * step), "count": c}
        for i, c in enumerate(counts)
    ]


def summarise_column(name: str, raw: list[str], top: int, decimal_comma: bool) -> dict[str, Any]:
    """One column's summary: ``{name, type, count, missing, distinct, …}`` plus ``min, max, mean,
    median, histogram`` for numbers, ``earliest, latest`` for dates, ``top_values`` (``[{value,
    count}]``) for text and yes/no, ``examples`` for all."""
    present = [v.strip() for v in raw if not is_missing(v)]
    kind = detect_type(present, decimal_comma)
    counter: Counter[str] = Counter()
    capped = False
    for v in present:
        if v in counter or len(counter) < TOP_DISTINCT_CAP:
            counter[v] += 1
        else:
            capped = True
    out: dict[str, Any] = {
        "name": name,
        "type": kind,
        "count": len(present),
        "missing": len(raw) - len(present),
        "distinct": len(counter),
        "examples": list(dict.fromkeys(present))[:EXAMPLES],
    }
    if capped:
        out["distinct_note"] = f"more than {TOP_DISTINCT_CAP:,} different values; counts are approximate"
    if kind in ("whole number", "decimal number"):
        numbers = [_num(v) for v in present]
        out.update(
            {
                "min": _round(min(numbers)),
                "max": _round(max(numbers)),
                "mean": _round(statistics.fmean(numbers)),
                "median": _round(statistics.median(numbers)),
                "histogram": histogram(numbers, kind == "whole number"),
            }
        )
    elif kind in ("date", "date and time"):
        moments = sorted((_moment(v), v) for v in present)
        out.update({"earliest": _isoformat(moments[0][1]), "latest": _isoformat(moments[-1][1])})
    if kind in ("text", "yes/no"):
        out["top_values"] = [{"value": v, "count": c} for v, c in counter.most_common(top)]
        lengths = [len(v) for v in present]
        out.update({"shortest": min(lengths), "longest": max(lengths)})
    return out
