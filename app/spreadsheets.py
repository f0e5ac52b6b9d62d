"""Spreadsheets as rows of job input: read a CSV or XLSX file, match its columns to a job type's input
fields, and turn each row into an ``input_data`` dict.

* **Reading** (:func:`read`): a CSV (UTF-8, UTF-16 or UTF-32 by its byte-order mark, else UTF-8 or
  Windows-1252, :mod:`app.text_encoding`;
  comma, semicolon or tab separated, as Excel writes it in different countries) or the first sheet of
  an XLSX workbook, opened with openpyxl in read-only mode so a large file is streamed, not loaded.
  The first row is the header (an empty first row is refused: the row below it would be taken for the
  column names without a word); empty rows below it are skipped; at most :data:`MAX_ROWS` data rows —
  one more and reading stops with a clear error, so a huge file costs no more than that.
* **Bounds** (the upload limit, ``max_bytes``): a workbook is a zip archive, and a small one can unpack
  to gigabytes (openpyxl loads every shared string, however long, before the first row is read). So its
  zip directory is checked before openpyxl opens it (:func:`_check_archive`: what it unpacks to, how
  far each part expands, compression methods spreadsheet programs use), and the text kept from any
  spreadsheet is counted as it is read: at most ``max_bytes`` characters, what a CSV file could hold.
  Reading is CPU-bound work for seconds: callers in the event loop run it in a thread.
* **Matching** (:func:`match_columns`): a field matches a column whose header equals its name or its
  title, ignoring case, spaces, underscores and hyphens ("Address (URL)", "url", "URL").
* **Converting** (:func:`row_input`): a cell becomes the field's JSON type where that is unambiguous
  (``"42"`` for a whole number, ``"yes"`` for a yes/no field, ``"a, b"`` for a list); an empty cell
  is left out, so the field's default applies. Everything else is left as text for the job type's
  schema to judge, which names the row and field of each problem.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

from app import digits, text_encoding, typed_json
from app.errors import BadInput
from app.formatting import format_bytes
from app.jobs.file_inputs import widget_of
from app.jobs.types import InputModel
from app.settings import Settings

MAX_ROWS = 10_000
"""Most data rows one spreadsheet (and one batch) may have."""
MAX_COLUMNS = 200
MAX_EMPTY_ROWS = 10 * MAX_ROWS
"""Most empty rows skipped: a workbook's row numbers can leave a million rows between two, which its
reader gives as empty rows, with no byte of the file for each."""
DEFAULT_MAX_BYTES: int = Settings.model_fields["upload_max_bytes"].default
"""``UPLOAD_MAX_BYTES`` as shipped: the bound of :func:`read` for callers that have no settings."""
UNPACKED_PER_BYTE = 4
"""A workbook may unpack to at most this many times the upload limit, all its parts together: the XML
around a spreadsheet's cells takes a few times the room of their text (10,000 rows of 200 short
numbers are some 80 MB of sheet XML), and the text kept is at most the upload limit."""
MAX_EXPANSION = 100
"""How many times its packed size one part of a workbook may unpack to (once it unpacks to more than
:data:`EXPANSION_FLOOR_BYTES`): spreadsheet XML packs some 5 to 25 to one; a part that expands a
hundredfold is one text repeated, made to take a reader's memory (a "zip bomb")."""
EXPANSION_FLOOR_BYTES = 1024 * 1024
ZIP_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
"""The compression methods spreadsheet programs write. Python's zipfile stops unpacking a deflated part
at the size its directory declares; other methods unpack each chunk whole before that check."""
SNIFF_BYTES = 16_384
DELIMITERS = ",;\t"
TRUE_WORDS = frozenset({"true", "yes", "y", "1", "x", "on", "ja", "oui", "si", "sí"})
FALSE_WORDS = frozenset({"false", "no", "n", "0", "off", "nein", "non"})
_LIST_SPLIT = re.compile(r"\s*(?:\r?\n|;|,)\s*")
_QUOTED = re.compile(r'"[^"]*"')
_SQUASH = re.compile(r"[\s_\-]+")


@dataclass
class Sheet:
    """A spreadsheet read: its ``columns`` (header texts, made unique), and ``rows`` as ``(row number
    in the file, cells)`` where the header is row 1 as a spreadsheet program counts."""

    name: str
    columns: list[str]
    rows: list[tuple[int, list[Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class SheetField:
    """One input field of a job type, as the mapping page and the converter see it."""

    name: str
    title: str
    kind: str  # string | integer | number | boolean | array | object | file | files
    required: bool
    item_kind: str = "string"


def too_many_rows(limit: int = MAX_ROWS) -> BadInput:
    return BadInput.field(
        "file",
        f"This spreadsheet has more than {limit:,} rows; a batch may have at most {limit:,}. "
        "Split it into smaller files.",
    )


def _unreadable(why: str) -> BadInput:
    return BadInput.field(
        "file", f"This file cannot be read as a spreadsheet: {why}. Save it as CSV or XLSX."
    )


def is_xlsx(data: bytes, name: str) -> bool:
    """An XLSX file is a zip archive (``PK``); the name decides only for an empty or odd file."""
    return data[:4] == b"PK\x03\x04" or name.lower().endswith((".xlsx", ".xlsm"))


def too_much_text(max_bytes: int) -> BadInput:
    return BadInput.field(
        "file",
        f"This spreadsheet holds more than {format_bytes(max_bytes)} of text, more than a file you may "
        "upload. Split it into smaller files.",
    )


def read(
    data: bytes,
    name: str,
    *,
    max_rows: int = MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    encoding: str = "auto",
) -> Sheet:
    """The spreadsheet in ``data`` (a file called ``name``); ``max_bytes`` is the upload limit
    (``UPLOAD_MAX_BYTES``), which bounds the text kept and what a workbook may unpack to; ``encoding``:
    a CSV's text encoding as the person chose it (:data:`app.text_encoding.CHOICES`; a workbook has its
    own). CPU-bound: run it in a thread from an event loop.

    Raises:
        BadInput: on ``file``: not a CSV or XLSX file, no header row, no data rows, a row with a value
        past the header's last column (named by its number), more than
        ``max_rows`` data rows or :data:`MAX_COLUMNS` columns, more than ``max_bytes`` characters of
        text, a workbook that would unpack to too much (:func:`_check_archive`).
    """
    rows = _xlsx_rows(data, max_bytes) if is_xlsx(data, name) else _csv_rows(data, encoding)
    sheet: Sheet | None = None
    text = empty = 0
    empty_on_top = False  # an empty row before the first row with anything in it
    for number, cells in rows:
        # one cell past the widest header allowed is enough to refuse it; none further is cleaned
        head = cells[: MAX_COLUMNS + 1]
        far = _far_value(cells)
        if not far and head.count(None) + head.count("") == len(head):
            cleaned = []  # told cheaply: a workbook's row numbers can skip a million rows, each read empty
        else:
            cleaned = [_clean(c) for c in head]
            while cleaned and (cleaned[-1] is None or cleaned[-1] == ""):
                cleaned.pop()  # a workbook's rows are padded to its widest row
        if not cleaned and not far:
            empty_on_top = empty_on_top or sheet is None
            empty += 1
            if empty > MAX_EMPTY_ROWS:
                raise BadInput.field(
                    "file",
                    f"This spreadsheet has more than {MAX_EMPTY_ROWS:,} empty rows. Delete them, "
                    "or save only the rows to run.",
                )
            continue
        # A workbook's cells may all name one shared string: counted as a CSV file would hold them.
        text += sum(len(c) for c in cleaned if isinstance(c, str))
        if text > max_bytes:
            raise too_much_text(max_bytes)
        if sheet is None:
            if empty_on_top:
                raise _no_header(number)
            if far or len(cleaned) > MAX_COLUMNS:
                raise BadInput.field("file", f"This spreadsheet has more than {MAX_COLUMNS} columns.")
            sheet = Sheet(name=name, columns=_headers(cleaned))
            continue
        if len(sheet.rows) >= max_rows:
            raise too_many_rows(max_rows)
        if (far or len(cleaned)) > len(sheet.columns):
            # a value past the last header belongs to no column: dropping it ran the row without it
            width = len(sheet.columns)
            raise BadInput.field(
                "file",
                f"Row {number} has a value in column {far or len(cleaned)}, past the last of the header's "
                f"{width} column{'' if width == 1 else 's'}: give that column a header, or remove "
                "the value (a comma inside a value needs quotes around the value).",
            )
        sheet.rows.append((number, cleaned))
    if sheet is None:
        raise BadInput.field("file", "This spreadsheet is empty: the first row should name the columns.")
    if not sheet.rows:
        raise BadInput.field("file", "This spreadsheet has a header row but no rows below it.")
    return sheet


def _far_value(cells: Sequence[Any]) -> int:
    """The column number of the row's last value past the first ``MAX_COLUMNS + 1`` cells (the ones
    cleaned), or 0: a value there is still a value past the header's last column. Nearly every row has
    nothing there, told at C speed (``count(None)`` compares by identity; ``count("")`` would not)."""
    tail = cells[MAX_COLUMNS + 1 :]
    if tail.count(None) == len(tail):
        return 0
    for i in range(len(tail) - 1, -1, -1):
        if _clean(tail[i]) not in (None, ""):
            return MAX_COLUMNS + 2 + i
    return 0


def _no_header(first: int) -> BadInput:
    """The refusal of a sheet whose first row is empty and whose first row with anything in it is
    ``first``: that row would be taken for the column names, and a data row read so loses its row."""
    return BadInput.field(
        "file",
        "The first row of this spreadsheet is empty, but it must hold the column names "
        f"(the first row with anything in it is row {first}). Delete the empty rows above it, or put the "
        "column names in the first row and the rows to run below it.",
    )


def _clean(value: Any) -> Any:
    # A cell is kept whole, however long: each row is checked as a submission of its job type is (the
    # field's own length limit, JOB_MAX_INPUT_BYTES), and a cell over it is a problem naming its row and
    # column. A cell cut here was a silent change to the data. (The text of all cells together is
    # bounded by the upload limit, in read.)
    if isinstance(value, str):
        value = value.replace("\x00", "").strip()
    return value


def _headers(cells: Sequence[Any]) -> list[str]:
    """Header texts, each unique: a blank header becomes "Column 3", a repeated one "Name (2)"."""
    seen: dict[str, int] = {}
    out = []
    for i, cell in enumerate(cells, start=1):
        text = cell_text(cell) or f"Column {i}"
        n = seen.get(text.lower(), 0) + 1
        seen[text.lower()] = n
        out.append(text if n == 1 else f"{text} ({n})")
    return out


def _decode(data: bytes) -> str:
    marked = text_encoding.decode(data, errors="replace")
    if marked is not None:
        return marked[0]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _delimiter(sample: str) -> str:
    """The separator of the header line: the candidate it holds most of outside quotes (Excel writes
    semicolons where the decimal mark is a comma); a comma when it holds none."""
    first = _QUOTED.sub("", sample.split("\n", 1)[0])
    best = max(DELIMITERS, key=lambda d: (first.count(d), d == ","))
    return best if first.count(best) > 0 else ","


def _chosen_text(data: bytes, encoding: str) -> str:
    """A CSV's text in the encoding the person chose (not "auto")."""
    label = text_encoding.CHOICES.get(encoding, encoding)
    try:
        text = text_encoding.decode_as(data, encoding)
    except UnicodeDecodeError:
        text = "\x00"
    if "\x00" in text:
        raise BadInput.field(
            "file",
            f'This file is not {label} text: choose another text encoding (or "Find out '
            'automatically"), or save it as "CSV UTF-8" in your spreadsheet program.',
        )
    return text


def _csv_rows(data: bytes, encoding: str = "auto") -> Iterator[tuple[int, Sequence[Any]]]:
    if encoding != "auto":
        text = _chosen_text(data, encoding)
    elif not text_encoding.is_wide(data) and b"\x00" in data[:SNIFF_BYTES]:
        wide = text_encoding.unmarked_codec(data)
        if wide:
            # what was found, and the choice that reads it
            raise BadInput.field(
                "file",
                f"This file is saved as {text_encoding.unmarked_words(wide)}: choose "
                f'"{text_encoding.CHOICES[wide[:6]]}" under Text encoding and read it again, or in your '
                'spreadsheet program use Save As and choose "CSV UTF-8" (or XLSX).',
            )
        raise _unreadable("it holds binary data")
    else:
        text = _decode(data)
    # The csv module refuses a field longer than its limit (131,072 characters unless raised), which
    # made a long cell "unreadable" as a whole file: a cell is held to its field's limit instead (_clean).
    # The limit is the process's; it is only ever raised, to what the file read can hold.
    if csv.field_size_limit() < len(text):
        csv.field_size_limit(len(text))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text[:SNIFF_BYTES]))
    try:
        for number, cells in enumerate(reader, start=1):
            yield number, list(cells)
    except csv.Error as exc:
        raise _unreadable(f"line {reader.line_num}: {exc}") from None


def _too_large(why: str) -> BadInput:
    return BadInput.field(
        "file", f"This workbook is too large to read: {why}. Save it as CSV, or split it into smaller files."
    )


def _check_archive(data: bytes, max_bytes: int) -> None:
    """Refuse a workbook before anything is unpacked: more than :data:`UNPACKED_PER_BYTE` times
    ``max_bytes`` in all, a part expanding more than :data:`MAX_EXPANSION` times, or a compression
    method other than :data:`ZIP_METHODS`. The sizes are the zip directory's, which a made-up file can
    understate: Python's zipfile (which openpyxl reads through) stops at the declared size and fails
    the part's checksum, so what is read is bounded by what was checked here."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts = archive.infolist()
    except Exception as exc:  # a damaged archive fails in whatever way zipfile's code meets it
        raise _unreadable(f"not a valid XLSX workbook ({type(exc).__name__})") from None
    cap = UNPACKED_PER_BYTE * max_bytes
    total = 0
    for part in parts:
        if part.compress_type not in ZIP_METHODS:
            raise _unreadable(
                f"its part {part.filename[:100]} is packed in a way spreadsheet programs do not use"
            )
        total += part.file_size
        if total > cap:
            raise _too_large(f"unpacked, it would be more than {format_bytes(cap)}")
        expands = part.file_size > MAX_EXPANSION * max(part.compress_size, 1)
        if expands and part.file_size > EXPANSION_FLOOR_BYTES:
            raise _too_large(
                f"its part {part.filename[:100]} would unpack to {format_bytes(part.file_size)} from "
                f"{format_bytes(part.compress_size)}, more than spreadsheet programs write"
            )


def _xlsx_rows(data: bytes, max_bytes: int) -> Iterator[tuple[int, Sequence[Any]]]:
    from openpyxl import load_workbook  # imported here: only spreadsheet uploads need it

    _check_archive(data, max_bytes)
    # openpyxl reads the workbook's XML parts as it meets them, and a damaged or unusual one fails in
    # whatever way its code happens to (ParseError, ValueError, AttributeError on a chart sheet first):
    # any failure while opening or reading is the file's, and said so.
    try:
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise _unreadable(f"not a valid XLSX workbook ({type(exc).__name__})") from None
    try:
        sheet = book.worksheets[0] if book.worksheets else None
        if sheet is None:
            return
        # Each row as wide as its own last cell: the sheet's recorded dimension pads every row to the
        # widest one, and a column limit cut off (silently dropped) a value past it.
        sheet.reset_dimensions()
        rows = sheet.iter_rows(values_only=True)
        for number in itertools.count(1):
            try:
                cells = next(rows, None)
            except Exception as exc:
                raise _unreadable(f"row {number} is damaged ({type(exc).__name__})") from None
            if cells is None:
                return
            yield number, cells
    finally:
        book.close()


# --- fields and columns ------------------------------------------------------------------------------


def _kind(prop: dict[str, Any]) -> tuple[str, str]:
    widget = widget_of(prop)
    if widget in ("file", "files"):
        return widget, "string"
    options = [prop, *[s for s in prop.get("anyOf") or [] if isinstance(s, dict)]]
    for option in options:
        kind = option.get("type")
        if kind == "array":
            items = option.get("items") or {}
            return "array", str(items.get("type") or "string") if isinstance(items, dict) else "string"
        if isinstance(kind, str) and kind != "null":
            return kind, "string"
    return "string", "string"


def fields_of(model: InputModel) -> list[SheetField]:
    """The input fields of a job type, in the schema's order."""
    schema = model.model_json_schema()
    required = set(schema.get("required") or [])
    out = []
    for name, prop in (schema.get("properties") or {}).items():
        kind, item_kind = _kind(prop)
        out.append(SheetField(name, str(prop.get("title") or name), kind, name in required, item_kind))
    return out


def squash(text: str) -> str:
    """A header or field name as compared: lower case without spaces, underscores or hyphens."""
    return _SQUASH.sub("", text).casefold()


def match_columns(fields: Iterable[SheetField], columns: Sequence[str]) -> dict[str, int | None]:
    """Each field's column index (or ``None``): first every field whose name a header spells, then the
    others by title, each column used once (a "body" column is the field ``body``, not the field
    titled "Body" next to it)."""
    fields = list(fields)
    index: dict[str, int] = {}
    for i, column in enumerate(columns):
        index.setdefault(squash(column), i)
    chosen: dict[str, int | None] = {f.name: index.get(squash(f.name)) for f in fields}
    used = {i for i in chosen.values() if i is not None}
    for f in fields:
        if chosen[f.name] is None:
            by_title = index.get(squash(f.title))
            if by_title is not None and by_title not in used:
                chosen[f.name] = by_title
                used.add(by_title)
    return chosen


COLUMNS_NAMED = 10
"""The most columns a refused choice lists by name (a wide sheet's others are counted)."""


def chosen_columns(
    sent: Mapping[str, Any], fields: Iterable[SheetField], columns: Sequence[str]
) -> tuple[dict[str, int | None], dict[str, str]]:
    """Each field's column as the mapping step sent it (``sent``: field name → its choice, a column's
    number from 0, or empty for none), and what is wrong with a choice, by field name. A choice that
    names no column of the sheet (``99``, ``x``: a form made by hand, or kept from a wider file) is
    refused naming the field and the columns there are; taken as "no column" it started rows without
    the field, or with its default, without a word."""
    chosen: dict[str, int | None] = {}
    wrong: dict[str, str] = {}
    for f in fields:
        raw = str(sent.get(f.name) or "").strip()
        chosen[f.name] = None
        if not raw:
            continue
        if raw.isascii() and raw.isdigit() and len(raw) <= 9 and int(raw) < len(columns):
            chosen[f.name] = int(raw)
            continue
        shown = raw if len(raw) <= 20 else raw[:20] + "…"
        named = [f"{i} “{c}”" for i, c in enumerate(columns[:COLUMNS_NAMED])]
        if len(columns) > COLUMNS_NAMED:
            named.append(f"{len(columns) - COLUMNS_NAMED:,} more")
        wrong[f.name] = (
            f"{f.title} ({f.name}): there is no column {shown!r} in this spreadsheet; its columns are"
            f" {', '.join(named)}: choose one of them, or none"
        )
    return chosen, wrong


# --- cells to JSON -----------------------------------------------------------------------------------


def cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value).strip()


def _number(value: Any, whole: bool) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return int(value) if whole and float(value).is_integer() else value
    # A cell is text by nature, so its text is read as a number here (the API refuses text for one),
    # by the rule a form's number follows (app.digits): "1_0", a full-width "１０", "nan" or "inf" is
    # no number a person meant, and is left for the schema to say so. An exponent is read, as spreadsheet
    # programs write a large number in a CSV ("1.5E+11").
    text = cell_text(value)
    number = digits.decimal(text, exponent=True)
    if number is None:
        return text  # the schema says what is wrong with it
    if whole:
        return int(number) if number == number.to_integral_value() else text
    as_float = float(number)
    return as_float if math.isfinite(as_float) else text  # 1E+999: no number a float holds


def _boolean(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    word = cell_text(value).casefold()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return cell_text(value)


def convert(f: SheetField, value: Any) -> Any:
    """One cell as the JSON value of field ``f``; ``None`` for an empty cell (the field is left out).

    Raises:
        BadInput: on ``f.name``: an object field's cell is JSON giving a key twice
            (:class:`app.typed_json.DuplicateKey`).
    """
    if value is None or (isinstance(value, str) and value == ""):
        return None
    if f.kind == "integer":
        return _number(value, True)
    if f.kind == "number":
        return _number(value, False)
    if f.kind == "boolean":
        return _boolean(value)
    if f.kind in ("array", "files"):
        parts = [p for p in _LIST_SPLIT.split(cell_text(value)) if p]
        if f.item_kind == "integer":
            return [_number(p, True) for p in parts]
        if f.item_kind == "number":
            return [_number(p, False) for p in parts]
        return parts
    if f.kind == "object":
        try:
            return typed_json.parse(cell_text(value))
        except typed_json.DuplicateKey as exc:
            # kept as text, the schema would say "must be an object", silent about what is wrong with it
            raise BadInput.field(f.name, str(exc)) from None
        except ValueError:
            return cell_text(value)
    return cell_text(value)


def row_input(
    fields: Sequence[SheetField], cells: Sequence[Any], mapping: dict[str, int | None]
) -> dict[str, Any]:
    """The ``input_data`` of one row: each mapped field's converted cell, empty cells left out.

    Raises:
        BadInput: on the field of a cell that is no value of it at all (:func:`convert`).
    """
    data: dict[str, Any] = {}
    for f in fields:
        column = mapping.get(f.name)
        if column is None or column >= len(cells):
            continue
        value = convert(f, cells[column])
        if value is not None:
            data[f.name] = value
    return data


def row_inputs(
    fields: Sequence[SheetField], rows: Sequence[tuple[int, Sequence[Any]]], mapping: dict[str, int | None]
) -> list[dict[str, Any]]:
    """Every row's ``input_data`` (:func:`row_input`).

    Raises:
        BadInput: ``rows[<index>].<field>`` for each cell that is no value of its field at all (an object
        giving a key twice), every row's at once, as a batch's other problems are named.
    """
    inputs: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    for i, (_, cells) in enumerate(rows):
        try:
            inputs.append(row_input(fields, cells, mapping))
        except BadInput as exc:
            errors.update({f"rows[{i}].{path}": message for path, message in exc.errors.items()})
    if errors:
        first, message = next(iter(errors.items()))
        raise BadInput(f"{first}: {message}", errors=errors)
    return inputs
