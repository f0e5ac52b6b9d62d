"""CSV reports: ``report.csv_check`` (find the layout and the columns),
``report.csv_summary`` (per-column summary, charts and one self-contained HTML report to download) and
``report.csv_report`` (the "report" step of the "CSV report with review" pipeline,
:mod:`app.processors.pipeline_templates`).

Reading a CSV (:func:`read_table`): the encoding is UTF-8, UTF-16 or UTF-32 by its byte-order mark
(:mod:`app.text_encoding`), else UTF-8, Windows-1252 or Latin-1 — tried in that order unless chosen; the delimiter is found with
:class:`csv.Sniffer` among ``,`` ``;`` tab ``|``, checked by how consistently it splits the lines (and
replaced by the most consistent one when the sniffer guesses badly). A file that is binary (a picture, a
PDF, an Excel workbook…), an HTML/XML or JSON document, or text whose lines do not split into the same
number of fields is refused with a message saying what it looks like.

The report (:mod:`app.processors.csv_charts`) escapes every value of the file. All parsing is CPU-bound
and runs in a separate process; every step takes time linear in the file's size, and tables wider than
:data:`MAX_COLUMNS` are refused.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from app import dbclock, text_encoding, typed_json
from app.formatting import isolated, plural
from app.processors import TABLES, CpuContext, FileId, Input, OutputFile, PermanentError, Result, processor
from app.processors.csv_charts import render_report
from app.processors.csv_stats import DECIMAL, MISSING, summarise_column
from app.processors.images import safe_stem
from app.processors.inputs import describe_bytes, stored_file

MAX_FILE_BYTES = 200 * 1024 * 1024
SNIFF_CHARS = 64 * 1024
"""Characters whose field counts decide the delimiter."""
SNIFFER_CHARS = 4 * 1024
"""Characters :class:`csv.Sniffer` sees: its quote-guessing regular expressions take time that grows
faster than the sample on some inputs (0.3 s at 4 KB, 18 s at 64 KB)."""
MAX_COLUMNS = 10_000
"""Widest table summarised; wider files are refused with a permanent error."""
DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}
DELIMITER_NAMES = {v: k for k, v in DELIMITERS.items()}
MARKUP_START = re.compile(r"^<(!doctype\s+html|html[\s>]|\?xml\s)", re.IGNORECASE)

Encoding = Literal["auto", "utf-8", "utf-8-sig", "utf-16", "utf-32", "cp1252", "latin-1"]
Delimiter = Literal["auto", "comma", "semicolon", "tab", "pipe"]
Header = Literal["auto", "yes", "no"]
ENCODING_LABELS: dict[str, Any] = {"x-labels": dict(text_encoding.CHOICES)}
"""Choices in words for the form; the values stay as the API takes them."""
DELIMITER_LABELS: dict[str, Any] = {
    "x-labels": {
        "auto": "Find out automatically",
        "comma": "Comma",
        "semicolon": "Semicolon",
        "tab": "Tab",
        "pipe": "Pipe (|)",
    }
}
HEADER_LABELS: dict[str, Any] = {"x-labels": {"auto": "Find out automatically", "yes": "Yes", "no": "No"}}


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
        PermanentError: empty, binary (naming the format when known), not valid in the chosen encoding,
            or a web page, XML or JSON document.
    """
    if not raw.strip():
        raise PermanentError("The file is empty: there is nothing to summarise.")
    wide = text_encoding.is_wide(raw)
    if not wide and encoding not in ("utf-16", "utf-32"):
        what = describe_bytes(raw[:64])
        if what:
            raise not_csv(f"it is {what}")
        if b"\x00" in raw[:65536]:
            unmarked = text_encoding.unmarked_codec(raw)
            if unmarked:
                raise unmarked_refusal(unmarked, encoding)
            raise not_csv("it contains binary data, not text")
    text, enc = _decode_text(raw, _encodings_to_try(raw, encoding))
    if "\x00" in text:
        raise not_csv("it contains binary data, not text")
    _refuse_documents(text)
    return text, enc


_WITH_MARK = {"utf-8": "utf-8-sig", "utf-16-le": "utf-16", "utf-16-be": "utf-16"}
"""The codec that reads (and drops) the byte-order mark :func:`app.text_encoding.bom` found; UTF-32's
is ``utf-32``."""


def unmarked_refusal(codec: str, encoding: str) -> PermanentError:
    """A CSV in UTF-16 or UTF-32 without a byte-order mark (``codec``, :func:`app.text_encoding.unmarked_codec`)
    read with the encoding choice ``encoding``: what was found, and the choice that reads it."""
    labels = ENCODING_LABELS["x-labels"]
    chosen = f"'{labels.get(encoding, encoding)}'"
    which = chosen if encoding == "auto" else f"the text encoding chosen, {chosen},"
    return PermanentError(
        f"This file is {text_encoding.unmarked_words(codec)}, which {which} does not read: choose "
        f"'{labels[codec[:6]]}' under Text encoding and start it again, or save the file as \"CSV UTF-8\" "
        "in your spreadsheet program."
    )


def _encodings_to_try(raw: bytes, encoding: str) -> list[str]:
    if encoding != "auto":
        return [text_encoding.chosen_codec(raw, encoding)]
    marked = text_encoding.bom(raw)
    if marked is not None:
        return [_WITH_MARK.get(marked[0], "utf-32")]
    return ["utf-8", "cp1252", "latin-1"]


def _decode_text(raw: bytes, candidates: list[str]) -> tuple[str, str]:
    """``raw`` decoded with the first of ``candidates`` that fits, and that encoding's name.

    Raises:
        PermanentError: none fits (naming the last one tried and the first bad byte).
    """
    for i, enc in enumerate(candidates):
        try:
            text = raw.decode(enc)
        except UnicodeDecodeError as exc:
            if i + 1 < len(candidates):
                continue
            raise PermanentError(
                f"The file is not valid {enc} text (first bad byte at position {exc.start}); "
                "choose another encoding, or 'auto'."
            ) from None
        if enc == "utf-8" and text.startswith("\ufeff"):
            return text[1:], "utf-8-sig"
        return text, enc
    raise PermanentError("No text encoding was chosen.")


def _refuse_documents(text: str) -> None:
    """Raise :func:`not_csv` for a web page, an XML or a JSON document."""
    head = text.lstrip()[:200]
    first_line = head.split("\n", 1)[0].strip()
    if MARKUP_START.match(head) or (first_line.startswith("<") and first_line.endswith(">")):
        raise not_csv("it looks like a web page or an XML document")
    if head[:1] in ("{", "["):
        try:
            typed_json.parse(text)
        except typed_json.DuplicateKey:
            pass  # a JSON document all the same
        except ValueError:
            return
        raise not_csv("it is a JSON document")


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


def _lines_within(text: str, limit: int) -> str:
    """The start of ``text`` up to ``limit`` characters, cut after a line end when there is one."""
    if len(text) <= limit:
        return text
    sample = text[:limit]
    return sample[: sample.rindex("\n") + 1] if "\n" in sample else sample


def find_delimiter(text: str) -> str:
    """The delimiter (a key of :data:`DELIMITERS`): :class:`csv.Sniffer`'s guess when it splits the
    first lines consistently into several fields, else the candidate that does so best; ``comma`` for a
    file with a single column."""
    sample = _lines_within(text, SNIFF_CHARS)
    scores: dict[str, tuple[float, int]] = {}
    for name, ch in DELIMITERS.items():
        scores[name] = _consistency(_field_counts(sample, ch))
    try:
        sniffer_sample = _lines_within(sample, SNIFFER_CHARS)
        sniffed = DELIMITER_NAMES.get(csv.Sniffer().sniff(sniffer_sample, delimiters=",;\t|").delimiter)
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
    """Whether the first row names the columns: a first row of distinct, non-empty, non-numeric names,
    or else :meth:`csv.Sniffer.has_header`'s vote (:func:`_header_vote`)."""
    if len(sample_rows) < 2:
        return True
    first = [c.strip() for c in sample_rows[0]]
    if all(first) and len(set(first)) == len(first) and not any(_is_number(c) for c in first):
        return True
    return _header_vote(sample_rows[0], sample_rows[1:22]) > 0


def _header_vote(header: list[str], rows: list[list[str]]) -> int:
    """:meth:`csv.Sniffer.has_header`'s rule on rows already parsed: a column whose values below the
    first row all parse as numbers, or all have one length, votes for a header when the first row's cell
    does not fit, and against it when it does. (The sniffer itself would guess the dialect of the sample
    again, which costs time that grows with the square of the sample.)"""
    kinds: dict[int, Any] = dict.fromkeys(range(len(header)))
    for row in rows:
        if len(row) != len(header):
            continue
        for col in list(kinds):
            kind = _cell_kind(row[col])
            if kinds[col] is None:
                kinds[col] = kind
            elif kinds[col] != kind:
                del kinds[col]
    vote = 0
    for col, kind in kinds.items():
        if kind is None:  # no regular row: nothing says the first row is data
            vote += 1
        elif kind is complex:
            vote += 1 if _cell_kind(header[col]) is not complex else -1
        else:
            vote += 1 if len(header[col]) != kind else -1
    return vote


def _cell_kind(value: str) -> Any:
    """``complex`` for a value that parses as a number, else the value's length."""
    try:
        complex(value)
    except (ValueError, OverflowError):
        return len(value)
    return complex


def column_names(header: list[str], width: int) -> list[str]:
    """``width`` distinct column names: the header's (stripped), ``Column <n>`` where it has none, and
    ``<name> (2)``, ``<name> (3)``… for repeats. Linear in ``width``: the names in use are a set, and each
    repeated name continues counting where it stopped."""
    names: list[str] = []
    used: set[str] = set()
    next_number: dict[str, int] = {}
    for i in range(width):
        base = (header[i].strip() if i < len(header) else "") or f"Column {i + 1}"
        name = base
        if name in used:
            n = next_number.get(base, 1)
            while name in used:
                n += 1
                name = f"{base} ({n})"
            next_number[base] = n
        used.add(name)
        names.append(name)
    return names


def _parse_rows(text: str, delim: str) -> list[list[str]]:
    """The non-blank rows of ``text``.

    Raises:
        PermanentError: a line the csv module cannot parse, or no row at all.
    """
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
    return rows


def read_table(path: Path, encoding: str = "auto", delimiter: str = "auto", header: str = "auto") -> Table:
    """Read the CSV at ``path`` with the layout given or found (see the module docstring).

    Raises:
        PermanentError: not a CSV (with what it looks like), unreadable encoding, a line the csv
            module cannot parse, lines with inconsistent field counts, too large or too wide.
    """
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise PermanentError(f"The file is {size // (1024 * 1024)} MB; CSV reports handle up to 200 MB.")
    text, enc = decode(path.read_bytes(), encoding)
    delim_name = find_delimiter(text) if delimiter == "auto" else delimiter
    rows = _parse_rows(text, DELIMITERS[delim_name])
    has_header = guess_header(rows[:50]) if header == "auto" else header == "yes"
    width = len(rows[0]) if has_header else Counter(len(r) for r in rows).most_common(1)[0][0]
    if width > MAX_COLUMNS:
        raise PermanentError(
            f"The file has {width:,} columns; CSV reports handle up to {MAX_COLUMNS:,}. Is the separator "
            "right? Otherwise split the file into narrower tables."
        )
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
    names = column_names(rows[0] if has_header else [], width)
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


# --- summarising (per column: app.processors.csv_stats) -------------------------------------------


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
    many = {"whole number": "whole numbers", "decimal number": "decimal numbers", "date": "dates"}
    many["date and time"] = "dates and times"
    parts = ", ".join(f"{n:,} {many.get(k, k) if n > 1 else k}" for k, n in kinds.most_common())
    # The counts agree with their nouns as the check's message says them ("1 row", "1,500 rows"): a
    # one-column or one-row file read "1 columns" here.
    return f"{plural(table.rows, 'row')} and {plural(len(columns), 'column')} ({parts})."


# --- processors ----------------------------------------------------------------------------------------


class CsvLayoutInput(Input):
    """How to read a CSV: everything found automatically unless chosen."""

    file: FileId = Field(
        title="CSV file",
        description="A .csv file, for example exported from a spreadsheet.",
        json_schema_extra=TABLES,
    )
    encoding: Encoding = Field(
        "auto",
        title="Text encoding",
        description="Leave on auto unless letters come out wrong: Excel on Windows often saves cp1252.",
        json_schema_extra=ENCODING_LABELS,
    )
    delimiter: Delimiter = Field(
        "auto",
        title="Separator",
        description="What separates the values: auto finds it.",
        json_schema_extra=DELIMITER_LABELS,
    )
    header: Header = Field("auto", title="First line has the column names", json_schema_extra=HEADER_LABELS)


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
    table = read_table(stored_file(ctx, inp.file, "CSV file"), inp.encoding, inp.delimiter, inp.header)
    columns = summarise(table, 3)
    # a column's name is the file's text beside our words: one holding U+202E would reverse the rest
    described = ", ".join(f"{isolated(c['name'])} ({c['type']})" for c in columns)
    return {
        "message": f"Found {plural(len(columns), 'column')} in {plural(table.rows, 'row')}: {described}.",
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
    table = read_table(stored_file(ctx, inp.file, "CSV file"), inp.encoding, inp.delimiter, inp.header)
    columns = summarise(table, inp.top)
    summary = {
        "title": inp.title or "CSV summary",
        "overview": overview(table, columns),
        **layout_of(table),
        "columns": columns,
        "notes": table.notes,
    }
    files = [_write_report(summary, ctx)] if inp.build_report else []
    return Result(data=summary, files=files)


def _write_report(summary: dict[str, Any], ctx: CpuContext) -> OutputFile:
    out_dir = Path(ctx.output_dir)
    name = f"{safe_stem(summary.get('title') or '', 'csv')}-report.html"
    path = out_dir / name
    missing_words = ", ".join(sorted(m for m in MISSING if m))
    path.write_text(
        render_report(summary, missing_words, ctx.now or dbclock.db_time(), ctx.timezone), encoding="utf-8"
    )
    return OutputFile(path, name, "text/html")


class CsvReportInput(Input):
    """Input of ``report.csv_report``."""

    from_step: str = Field(
        "summary",
        max_length=64,
        title="Summary step",
        description="The key of the earlier pipeline step whose summary becomes the report.",
    )


def summary_step_given(data: dict[str, Any], has_parents: bool) -> dict[str, str]:
    """At submission: the report is made from an earlier step's result, so a job with no step before it
    could only fail when it runs."""
    if has_parents:
        return {}
    return {
        "from_step": "this step turns the summary made by an earlier pipeline step into a report, and a job "
        "on its own has no earlier step; to summarise a CSV file on its own, use 'Summarise a CSV file'"
    }


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
    out = _write_report(summary, ctx)
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
    submit_check=summary_step_given,
    cpu_bound=True,
    timeout=300,
    max_attempts=3,
    group="Pipeline steps",
    diagnostic=True,
)(report_from_summary)
