"""CSV reports (issue 9 §2–3): ``report.csv_check`` (find the layout and the columns),
``report.csv_summary`` (per-column summary, charts and one self-contained HTML report to download) and
``report.csv_report`` (the "report" step of the "CSV report with review" pipeline,
:mod:`app.processors.pipeline_templates`).

Reading a CSV (:func:`read_table`): the encoding is UTF-8 (with or without BOM), UTF-16 (with BOM),
Windows-1252 or Latin-1 — tried in that order unless chosen; the delimiter is found with
:class:`csv.Sniffer` among ``,`` ``;`` tab ``|``, checked by how consistently it splits the lines (and
replaced by the most consistent one when the sniffer guesses badly). A file that is binary (a picture, a
PDF, an Excel workbook…), an HTML/XML or JSON document, or text whose lines do not split into the same
number of fields is refused with a message saying what it looks like.

The report is built with Jinja2 with autoescaping, and every text in the generated SVG charts is
escaped, so no value of the file can become markup; the report also carries a Content-Security-Policy
that forbids scripts. All parsing is CPU-bound and runs in a separate process.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal

from markupsafe import Markup, escape
from pydantic import Field

from app.processors import CpuContext, FileId, Input, OutputFile, PermanentError, Result, processor
from app.processors.images import safe_stem
from app.processors.inputs import describe_bytes, stored_file

MAX_FILE_BYTES = 200 * 1024 * 1024
SNIFF_CHARS = 64 * 1024
DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}
DELIMITER_NAMES = {v: k for k, v in DELIMITERS.items()}
MISSING = {"", "na", "n/a", "nan", "null", "none", "-", "?", "#n/a", "(blank)"}
"""Values counted as missing (compared lower-cased, spaces stripped)."""
TOP_DISTINCT_CAP = 100_000
"""Distinct values tracked per column; past this, top values are approximate."""
EXAMPLES = 3

INTEGER = re.compile(r"^[+-]?\d+$")
DECIMAL = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
DECIMAL_COMMA = re.compile(r"^[+-]?\d+,\d+$")
YES_NO = {"yes", "no", "true", "false", "y", "n"}
MARKUP_START = re.compile(r"^<(!doctype\s+html|html[\s>]|\?xml\s)", re.IGNORECASE)

Encoding = Literal["auto", "utf-8", "utf-8-sig", "utf-16", "cp1252", "latin-1"]
Delimiter = Literal["auto", "comma", "semicolon", "tab", "pipe"]
Header = Literal["auto", "yes", "no"]


def not_csv(why: str) -> PermanentError:
    return PermanentError(
        f"This file is not a CSV file: {why}. Upload the data saved as CSV (comma-separated values)."
    )


# --- reading -----------------------------------------------------------------------------------------


@dataclass
class Table:
    """A parsed CSV: the layout found or chosen, column names and values (all as text)."""

    encoding: str
    delimiter: str  # a key of DELIMITERS
    has_header: bool
    names: list[str]
    columns: list[list[str]]
    rows: int
    ragged: int = 0
    notes: list[str] = field(default_factory=list)


def decode(raw: bytes, encoding: str) -> tuple[str, str]:
    """``(text, encoding used)`` of a CSV file's bytes.

    Raises:
        PermanentError: empty, binary (naming the format when known), or not valid in the chosen encoding.
    """
    if not raw.strip():
        raise PermanentError("The file is empty: there is nothing to summarise.")
    utf16 = raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    if not utf16 and encoding != "utf-16":
        what = describe_bytes(raw[:64])
        if what:
            raise not_csv(f"it is {what}")
        if b"\x00" in raw[:65536]:
            raise not_csv("it contains binary data, not text")
    if encoding == "auto":
        if raw.startswith(codecs.BOM_UTF8):
            candidates = ["utf-8-sig"]
        elif utf16:
            candidates = ["utf-16"]
        else:
            candidates = ["utf-8", "cp1252", "latin-1"]
    else:
        candidates = [encoding]
    for i, enc in enumerate(candidates):
        try:
            text = raw.decode(enc)
            break
        except UnicodeDecodeError as exc:
            if i + 1 < len(candidates):
                continue
            raise PermanentError(
                f"The file is not valid {enc} text (first bad byte at position {exc.start}); "
                "choose another encoding, or 'auto'."
            ) from None
    if enc == "utf-8" and text.startswith("\ufeff"):
        text, enc = text[1:], "utf-8-sig"
    if "\x00" in text:
        raise not_csv("it contains binary data, not text")
    head = text.lstrip()[:200]
    first_line = head.split("\n", 1)[0].strip()
    if MARKUP_START.match(head) or (first_line.startswith("<") and first_line.endswith(">")):
        raise not_csv("it looks like a web page or an XML document")
    if head[:1] in ("{", "["):
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            raise not_csv("it is a JSON document")
    return text, enc


def _field_counts(lines: str, delim: str) -> list[int]:
    try:
        return [len(r) for r in csv.reader(io.StringIO(lines, newline=""), delimiter=delim) if any(r)]
    except csv.Error:
        return []


def _consistency(counts: list[int]) -> tuple[float, int]:
    """(share of lines with the most common field count, that count)."""
    if not counts:
        return 0.0, 0
    width, n = Counter(counts).most_common(1)[0]
    return n / len(counts), width


def find_delimiter(text: str) -> str:
    """The delimiter (a key of :data:`DELIMITERS`): :class:`csv.Sniffer`'s guess when it splits the
    first lines consistently into several fields, else the candidate that does so best; ``comma`` for a
    file with a single column."""
    sample = text[:SNIFF_CHARS]
    if len(text) > SNIFF_CHARS and "\n" in sample:
        sample = sample[: sample.rindex("\n") + 1]
    scores: dict[str, tuple[float, int]] = {}
    for name, ch in DELIMITERS.items():
        scores[name] = _consistency(_field_counts(sample, ch))
    try:
        sniffed = DELIMITER_NAMES.get(csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter)
    except csv.Error:
        sniffed = None
    if sniffed and scores[sniffed][1] > 1 and scores[sniffed][0] >= 0.9:
        return sniffed
    usable = [
        (share, width, -i, name) for i, (name, (share, width)) in enumerate(scores.items()) if width > 1
    ]
    if usable:
        return max(usable)[3]
    return "comma"


def _is_number(v: str) -> bool:
    return bool(DECIMAL.match(v))


def guess_header(sample_rows: list[list[str]]) -> bool:
    """Whether the first row names the columns: :meth:`csv.Sniffer.has_header`'s rule (a column whose
    values share a type or length the first row does not), or a first row of distinct, non-empty,
    non-numeric names."""
    if len(sample_rows) < 2:
        return True
    first = [c.strip() for c in sample_rows[0]]
    if all(first) and len(set(first)) == len(first) and not any(_is_number(c) for c in first):
        return True
    text = "\n".join(",".join('"' + c.replace('"', '""') + '"' for c in r) for r in sample_rows[:50])
    try:
        return csv.Sniffer().has_header(text)
    except csv.Error:
        return True


def _names(header: list[str], width: int) -> list[str]:
    names: list[str] = []
    for i in range(width):
        base = header[i].strip() if i < len(header) else ""
        base = base or f"Column {i + 1}"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base} ({n})"
        names.append(name)
    return names


def read_table(path: Path, encoding: str = "auto", delimiter: str = "auto", header: str = "auto") -> Table:
    """Read the CSV at ``path`` with the layout given or found (see the module docstring).

    Raises:
        PermanentError: not a CSV (with what it looks like), unreadable encoding, a line the csv
            module cannot parse, lines with inconsistent field counts, too large.
    """
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise PermanentError(f"The file is {size // (1024 * 1024)} MB; CSV reports handle up to 200 MB.")
    text, enc = decode(path.read_bytes(), encoding)
    delim_name = find_delimiter(text) if delimiter == "auto" else delimiter
    delim = DELIMITERS[delim_name]
    rows: list[list[str]] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim)
    try:
        for row in reader:
            if any(c.strip() for c in row):
                rows.append(row)
    except csv.Error as exc:
        raise PermanentError(
            f"Line {reader.line_num} cannot be read as CSV ({exc}). Is this really a CSV file?"
        ) from None
    if not rows:
        raise PermanentError("The file has no data: every line is empty.")
    has_header = guess_header(rows[:50]) if header == "auto" else header == "yes"
    counts = Counter(len(r) for r in rows)
    width = len(rows[0]) if has_header else counts.most_common(1)[0][0]
    body = rows[1:] if has_header else rows
    ragged = sum(1 for r in body if len(r) != width)
    if body and ragged > max(2, 0.1 * len(body)):
        example = next(i for i, r in enumerate(body) if len(r) != width)
        line = example + (2 if has_header else 1)
        found = "a different delimiter" if delimiter == "auto" else f"a delimiter other than {delim_name}"
        raise not_csv(
            f"its lines do not have the same number of fields (the first line has {width}, "
            f"line {line} has {len(body[example])}, and {ragged} lines differ) — unless it uses {found}"
        )
    if width == 1 and not body and len(text.splitlines()) <= 1:
        raise PermanentError("The file has a single line and a single value: there is no table to summarise.")
    names = _names(rows[0] if has_header else [], width)
    columns: list[list[str]] = [[] for _ in range(width)]
    for r in body:
        for i in range(width):
            columns[i].append(r[i] if i < len(r) else "")
    notes = []
    if ragged:
        notes.append(
            f"{ragged} line(s) had a different number of fields: missing fields count as missing, "
            "extra fields were ignored."
        )
    return Table(enc, delim_name, has_header, names, columns, len(body), ragged, notes)


# --- summarising -------------------------------------------------------------------------------------


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
        counts = Counter(int(n) for n in numbers)
        return [{"from": v, "to": v, "count": counts.get(v, 0)} for v in range(int(lo), int(hi) + 1)]
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
        parsed = sorted(_as_date(v) for v in present)  # type: ignore[type-var]
        out.update({"earliest": parsed[0].isoformat(), "latest": parsed[-1].isoformat()})
    if kind in ("text", "yes/no"):
        out["top_values"] = [{"value": v, "count": c} for v, c in counter.most_common(top)]
        lengths = [len(v) for v in present]
        out.update({"shortest": min(lengths), "longest": max(lengths)})
    return out


def summarise(table: Table, top: int) -> list[dict[str, Any]]:
    decimal_comma = table.delimiter != "comma"
    return [
        summarise_column(n, c, top, decimal_comma) for n, c in zip(table.names, table.columns, strict=True)
    ]


def layout_of(table: Table) -> dict[str, Any]:
    return {
        "encoding": table.encoding,
        "delimiter": table.delimiter,
        "header": "yes" if table.has_header else "no",
        "rows": table.rows,
    }


def overview(table: Table, columns: list[dict[str, Any]]) -> str:
    kinds = Counter(c["type"] for c in columns)
    plural = {"whole number": "whole numbers", "decimal number": "decimal numbers", "date": "dates"}
    plural["date and time"] = "dates and times"
    parts = ", ".join(f"{n} {plural.get(k, k) if n > 1 else k}" for k, n in kinds.most_common())
    return f"{table.rows} rows and {len(columns)} columns ({parts})."


# --- charts (SVG) and the HTML report --------------------------------------------------------------

BAR = "#2f6f9f"
MISS = "#d98b3a"


def _svg(width: int, height: int, label: str, body: list[str]) -> Markup:
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">' + "".join(body) + "</svg>"
    )


def _short(text: Any, n: int = 28) -> str:
    s = str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def chart_missing(columns: list[dict[str, Any]]) -> Markup:
    """Horizontal stacked bars: filled and missing values per column."""
    row_h, left, width = 22, 190, 640
    height = 30 + row_h * len(columns)
    total = max((c["count"] + c["missing"] for c in columns), default=1) or 1
    span = width - left - 100
    body = [
        f'<text x="{left}" y="14" font-size="12" fill="#333"><tspan fill="{BAR}">■</tspan> filled</text>',
        f'<text x="{left + 70}" y="14" font-size="12" fill="#333"><tspan fill="{MISS}">■</tspan> missing</text>',
    ]
    for i, c in enumerate(columns):
        y = 24 + i * row_h
        filled = span * c["count"] / total
        missing = span * c["missing"] / total
        body.append(
            f'<text x="{left - 8}" y="{y + 14}" font-size="12" text-anchor="end" fill="#222">'
            f"{escape(_short(c['name']))}</text>"
        )
        body.append(f'<rect x="{left}" y="{y + 3}" width="{filled:.1f}" height="{row_h - 8}" fill="{BAR}"/>')
        if c["missing"]:
            body.append(
                f'<rect x="{left + filled:.1f}" y="{y + 3}" width="{missing:.1f}" height="{row_h - 8}" fill="{MISS}"/>'
            )
        body.append(
            f'<text x="{left + filled + missing + 6:.1f}" y="{y + 14}" font-size="11" fill="#555">'
            f"{c['missing']} missing</text>"
        )
    return _svg(width, height, "Filled and missing values per column", body)


def chart_histogram(col: dict[str, Any]) -> Markup:
    """Vertical bars of a numeric column's histogram, with the range under it."""
    bins = col["histogram"]
    width, height, bottom = 320, 150, 24
    peak = max(b["count"] for b in bins) or 1
    bar_w = (width - 20) / len(bins)
    body = []
    for i, b in enumerate(bins):
        h = (height - bottom - 10) * b["count"] / peak
        x = 10 + i * bar_w
        body.append(
            f'<rect x="{x + 1:.1f}" y="{height - bottom - h:.1f}" width="{max(bar_w - 2, 1):.1f}" '
            f'height="{h:.1f}" fill="{BAR}"><title>{escape(b["from"])} to {escape(b["to"])}: '
            f"{b['count']}</title></rect>"
        )
    body.append(f'<text x="10" y="{height - 6}" font-size="11" fill="#444">{escape(col["min"])}</text>')
    body.append(
        f'<text x="{width - 10}" y="{height - 6}" font-size="11" fill="#444" text-anchor="end">'
        f"{escape(col['max'])}</text>"
    )
    return _svg(width, height, f"Distribution of {col['name']}", body)


def chart_top(col: dict[str, Any]) -> Markup:
    """Horizontal bars of a text column's most common values."""
    values = col.get("top_values") or []
    row_h, left, width = 20, 150, 320
    height = 8 + row_h * max(len(values), 1)
    peak = max((v["count"] for v in values), default=1) or 1
    body = []
    for i, v in enumerate(values):
        y = 4 + i * row_h
        w = (width - left - 40) * v["count"] / peak
        body.append(
            f'<text x="{left - 6}" y="{y + 13}" font-size="11" text-anchor="end" fill="#222">'
            f"{escape(_short(v['value'], 22))}</text>"
        )
        body.append(f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{BAR}"/>')
        body.append(
            f'<text x="{left + w + 4:.1f}" y="{y + 13}" font-size="11" fill="#555">{v["count"]}</text>'
        )
    return _svg(width, height, f"Most common values of {col['name']}", body)


REPORT_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1b; margin: 0 auto;
       max-width: 980px; padding: 24px 16px 48px; }
h1 { font-size: 1.6em; margin: 0 0 4px; } h2 { font-size: 1.2em; margin: 0 0 6px; }
.meta { color: #555; margin: 0 0 20px; }
section.col { border: 1px solid #ddd; border-radius: 8px; padding: 14px 16px; margin: 14px 0;
              display: flex; flex-wrap: wrap; gap: 16px 28px; }
section.col > div { flex: 1 1 300px; min-width: 0; }
table { border-collapse: collapse; } td, th { text-align: left; padding: 2px 12px 2px 0; vertical-align: top; }
th { font-weight: 600; color: #444; } .type { color: #2f6f9f; font-weight: 600; }
.note { background: #fff7e6; border: 1px solid #f0d9a8; padding: 8px 12px; border-radius: 6px; }
svg { max-width: 100%; height: auto; } .overview { overflow-x: auto; }
code { background: #f2f2f0; padding: 0 4px; border-radius: 3px; overflow-wrap: anywhere; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="meta">{{ overview }} Read as {{ encoding }}, separated by {{ delimiter }},
{% if header == "yes" %}with{% else %}without{% endif %} a header line. Made by Jobdesk on {{ made }}.</p>
{% for note in notes %}<p class="note">{{ note }}</p>{% endfor %}
<h2>Filled and missing values</h2>
<div class="overview">{{ missing_chart }}</div>
<p class="meta">Counted as missing: empty cells and {{ missing_words }}.</p>
{% for c in columns %}
<section class="col">
  <div>
    <h2>{{ c.name }}</h2>
    <p><span class="type">{{ c.type }}</span> · {{ c.count }} filled · {{ c.missing }} missing · {{ c.distinct }} different</p>
    <table>
    {% if c.min is defined %}
      <tr><th>Lowest</th><td>{{ c.min }}</td></tr><tr><th>Highest</th><td>{{ c.max }}</td></tr>
      <tr><th>Mean</th><td>{{ c.mean }}</td></tr><tr><th>Median</th><td>{{ c.median }}</td></tr>
    {% endif %}
    {% if c.earliest is defined %}
      <tr><th>Earliest</th><td>{{ c.earliest }}</td></tr><tr><th>Latest</th><td>{{ c.latest }}</td></tr>
    {% endif %}
    {% if c.top_values is defined %}
      {% for v in c.top_values %}<tr><td><code>{{ v.value }}</code></td><td>{{ v.count }}</td></tr>{% endfor %}
    {% endif %}
    {% if c.examples %}<tr><th>Examples</th><td>{% for e in c.examples %}<code>{{ e }}</code> {% endfor %}</td></tr>{% endif %}
    </table>
    {% if c.distinct_note is defined %}<p class="note">{{ c.distinct_note }}</p>{% endif %}
  </div>
  {% if c.chart %}<div>{{ c.chart }}</div>{% endif %}
</section>
{% endfor %}
</body>
</html>
"""


def render_report(summary: dict[str, Any]) -> str:
    """The self-contained HTML report of a summary (as returned by ``report.csv_summary``): inline CSS
    and SVG charts, no script, every value escaped (Jinja2 autoescape; SVG text via :func:`escape`)."""
    from jinja2 import Environment

    env = Environment(autoescape=True)
    columns = []
    for c in summary["columns"]:
        c = dict(c)
        if c.get("histogram"):
            c["chart"] = chart_histogram(c)
        elif c.get("top_values"):
            c["chart"] = chart_top(c)
        columns.append(c)
    return env.from_string(REPORT_TEMPLATE).render(
        title=summary.get("title") or "CSV summary",
        overview=summary.get("overview", ""),
        encoding=summary.get("encoding", "?"),
        delimiter=f"{summary.get('delimiter', 'comma')}s",
        header=summary.get("header", "yes"),
        notes=summary.get("notes") or [],
        made=datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        missing_chart=chart_missing(summary["columns"]),
        missing_words=", ".join(sorted(m for m in MISSING if m)),
        columns=columns,
    )


# --- processors ----------------------------------------------------------------------------------------


class CsvLayoutInput(Input):
    """How to read a CSV: everything found automatically unless chosen."""

    file: FileId = Field(
        title="CSV file", description="A .csv file, for example exported from a spreadsheet."
    )
    encoding: Encoding = Field(
        "auto",
        title="Text encoding",
        description="Leave on auto unless letters come out wrong: Excel on Windows often saves cp1252.",
    )
    delimiter: Delimiter = Field(
        "auto", title="Separator", description="What separates the values: auto finds it."
    )
    header: Header = Field("auto", title="First line has the column names")


class CsvSummaryInput(CsvLayoutInput):
    """Input of ``report.csv_summary``."""

    title: str = Field("", max_length=150, title="Report title", description="Empty: 'CSV summary'.")
    top: int = Field(5, ge=1, le=20, title="Most common values shown", description="For text columns.")
    build_report: bool = Field(
        True, title="Make the HTML report", description="Off: only the summary, without the report file."
    )


def check_csv(ctx: CpuContext) -> dict[str, Any]:
    """Find the layout and the columns. ``result_data``: ``{message, encoding, delimiter, header, rows,
    columns: [{name, type, count, missing, examples}], notes}``; ``encoding``/``delimiter``/``header``
    are valid inputs of ``report.csv_summary`` (the review pipeline passes them on).

    Raises:
        PermanentError: see :func:`read_table`.
    """
    inp: CsvLayoutInput = ctx.input
    table = read_table(
        stored_file(ctx.files_dir, inp.file, "CSV file"), inp.encoding, inp.delimiter, inp.header
    )
    columns = summarise(table, 3)
    described = ", ".join(f"{c['name']} ({c['type']})" for c in columns)
    return {
        "message": f"Found {len(columns)} columns in {table.rows} rows: {described}.",
        **layout_of(table),
        "columns": [{k: c[k] for k in ("name", "type", "count", "missing", "examples")} for c in columns],
        "notes": table.notes,
    }


def summarise_csv(ctx: CpuContext) -> Result:
    """Summarise every column and (unless ``build_report`` is off) write the HTML report file.
    ``result_data``: ``{title, overview, encoding, delimiter, header, rows, columns: [see
    summarise_column], notes, files?}``.

    Raises:
        PermanentError: see :func:`read_table`.
    """
    inp: CsvSummaryInput = ctx.input
    table = read_table(
        stored_file(ctx.files_dir, inp.file, "CSV file"), inp.encoding, inp.delimiter, inp.header
    )
    columns = summarise(table, inp.top)
    summary = {
        "title": inp.title or "CSV summary",
        "overview": overview(table, columns),
        **layout_of(table),
        "columns": columns,
        "notes": table.notes,
    }
    files = [_write_report(summary, Path(ctx.output_dir))] if inp.build_report else []
    return Result(data=summary, files=files)


def _write_report(summary: dict[str, Any], out_dir: Path) -> OutputFile:
    name = f"{safe_stem(summary.get('title') or '', 'csv')}-report.html"
    path = out_dir / name
    path.write_text(render_report(summary), encoding="utf-8")
    return OutputFile(path, name, "text/html")


class CsvReportInput(Input):
    """Input of ``report.csv_report``."""

    from_step: str = Field(
        "summary",
        max_length=64,
        title="Summary step",
        description="The key of the earlier pipeline step whose summary becomes the report.",
    )


def report_from_summary(ctx: CpuContext) -> Result:
    """Build the HTML report from the summary an earlier step made (``ctx.parents[from_step]``).
    ``result_data``: ``{title, overview, columns: n, files}``.

    Raises:
        PermanentError: no such earlier step, or its result is not a CSV summary.
    """
    key = ctx.input.from_step
    summary = ctx.parents.get(key)
    if summary is None:
        raise PermanentError(
            f"This step turns the summary of an earlier pipeline step ({key!r}) into a report, and there "
            "is no such step before it. To summarise a CSV file on its own, use 'Summarise a CSV file'."
        )
    if not isinstance(summary, dict) or not isinstance(summary.get("columns"), list):
        raise PermanentError(f"The result of step {key!r} is not a CSV summary.")
    out = _write_report(summary, Path(ctx.output_dir))
    return Result(
        data={
            "title": summary.get("title"),
            "overview": summary.get("overview"),
            "columns": len(summary["columns"]),
        },
        files=[out],
    )


processor(
    "report.csv_check",
    title="Check a CSV file",
    description="Finds how a CSV file is written (encoding, separator, header) and what its columns hold.",
    input=CsvLayoutInput,
    cpu_bound=True,
    timeout=300,
    max_attempts=3,
    group="Reports",
)(check_csv)

processor(
    "report.csv_summary",
    title="Summarise a CSV file",
    description="Counts, missing values, lowest/highest/mean/median and most common values of every column, "
    "with charts, as an HTML report to download.",
    input=CsvSummaryInput,
    cpu_bound=True,
    timeout=600,
    max_attempts=3,
    group="Reports",
)(summarise_csv)

processor(
    "report.csv_report",
    title="Build a CSV report page",
    description="The last step of the CSV report pipeline: turns the summary step's result into the HTML report.",
    input=CsvReportInput,
    cpu_bound=True,
    timeout=300,
    max_attempts=3,
    group="Pipeline steps",
    diagnostic=True,
)(report_from_summary)
