"""A job's result and input as its pages show them: readable items (a value with its unit, a table, a
link, a picture or table file to preview), the output files a result names, and the JSON under
"Details". The statuses, errors and history around them are :mod:`app.web.display`'s.

Pure functions over values (no I/O), shared by the job page, a pipeline's outputs, the approvals
pages and the admin's job rows.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from app.formatting import key_label, key_labels, unit_value
from app.web import format_localtime
from app.web.forms import humanize

JSON_SHOWN_MAX = 100_000
"""Characters of result JSON shown under "Details"; the rest is cut with a note, so a
huge result cannot make the page unusable."""

FIELDS_SHOWN = 100
"""Top-level fields of a result or an input shown as items; past them the page says how many are left
out and that "Details" (the JSON) has them all."""

_URL_RE = re.compile(r"^https?://[^\s<>\"'`]+$", re.IGNORECASE)


def is_file_ref(value: Any) -> bool:
    """A ``{"file_id": <uuid>, "name", …}`` object (:func:`app.files.file_ref`) in result data."""
    if not (isinstance(value, dict) and isinstance(value.get("file_id"), str) and "name" in value):
        return False
    try:
        uuid.UUID(value["file_id"])
    except ValueError:
        return False
    return True


def is_http_url(value: Any) -> bool:
    """Only ``http``/``https`` URLs become links: ``javascript:`` and the rest
    stay text, so a result cannot run script in the viewer's session."""
    if not isinstance(value, str) or len(value) > 2000 or not _URL_RE.match(value):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


TABLE_MAX_ROWS = 200
TABLE_MAX_COLUMNS = 16


def _cell(value: Any, key: str = "") -> dict[str, Any]:
    """A table cell: a file link, an http(s) link, or text (a number in its column's unit, nested data
    in words, :func:`_compact`)."""
    if is_file_ref(value):
        return {"kind": "file", "value": value}
    if is_http_url(value):
        return {"kind": "url", "value": value}
    text = unit_value(key, value) or _compact(value)
    return {"kind": "text", "value": text if len(text) <= 300 else text[:299] + "…"}


def _compact(value: Any) -> str:
    """Nested data in a table cell, in words rather than JSON: ``[{value, count}]`` as ``a (3); b (2)``,
    ``[{from, to, count}]`` as ``1–2: 3; …``, other objects as ``Key value, …``, lists joined by ``;``
    (a first-time user's trial found the CSV summary's columns shown as raw JSON)."""
    if isinstance(value, list):
        return "; ".join(_compact(v) for v in value if not is_blank(v))
    if isinstance(value, dict):
        if set(value) == {"value", "count"}:
            return f"{_compact(value['value'])} ({_compact(value['count'])})"
        if set(value) == {"from", "to", "count"}:
            return f"{_compact(value['from'])}–{_compact(value['to'])}: {_compact(value['count'])}"
        return ", ".join(f"{humanize(str(k))} {_compact(v)}" for k, v in value.items() if not is_blank(v))
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, float):
        return f"{value:,.6g}"
    return "" if value is None else str(value)


def _as_table(value: Any) -> dict[str, Any] | None:
    """A list of flat objects as ``{"columns", "rows"}`` (people read tables, not JSON), or ``None``."""
    if not (isinstance(value, list) and value and len(value) <= TABLE_MAX_ROWS):
        return None
    if not all(isinstance(v, dict) and not is_file_ref(v) for v in value):
        return None
    keys: list[str] = []
    for row in value:
        for k in row:
            if k not in keys:
                keys.append(str(k))
    if len(keys) > TABLE_MAX_COLUMNS:
        return None
    labels = key_labels(keys)
    return {
        "columns": [labels[k] for k in keys],
        "rows": [[_cell(row.get(k), k) for k in keys] for row in value],
    }


PREVIEW_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def preview_kind(ref: Any) -> str | None:
    """How a result file is shown in place: ``image`` (an ``<img>``), ``html`` (opened in a new tab,
    sandboxed), ``csv`` (its first rows), or ``None`` (a download link only)."""
    if not is_file_ref(ref):
        return None
    ctype = str(ref.get("content_type") or "").split(";")[0].strip().lower()
    if ctype in PREVIEW_IMAGE_TYPES:
        return "image"
    if ctype == "text/html":
        return "html"
    if ctype in ("text/csv", "text/tab-separated-values"):
        return "csv"
    return None


def output_files(result: Any) -> list[dict[str, Any]]:
    """The file references at a result's top level (``files`` and any other file field), in order."""
    if not isinstance(result, dict):
        return []
    found: list[dict[str, Any]] = []
    for _, value in _ordered(result):
        values = value if isinstance(value, list) else [value]
        found.extend(v for v in values if is_file_ref(v) and v not in found)
    return found


RESULT_KEY_ORDER = (
    "files",
    "name",
    "title",
    "status",
    "status_code",
    "reason",
    "ok",
    "method",
    "url",
    "final_url",
    "message",
    "note",
    "pictures",
    "rows",
    "columns",
)
"""Result fields people look for first, in this order; other fields follow by kind (single values, then
lists, tables and nested objects), each group by name. ``jsonb`` keeps no key order, so without a fixed
order the same result would read differently from job to job."""


def _ordered(result: dict[str, Any]) -> list[tuple[str, Any]]:
    def rank(kv: tuple[str, Any]) -> tuple[int, int, str]:
        key, value = kv
        known = RESULT_KEY_ORDER.index(key) if key in RESULT_KEY_ORDER else len(RESULT_KEY_ORDER)
        nested = 1 if isinstance(value, dict | list) and not is_file_ref(value) else 0
        return (known, nested, key.lower())

    return sorted(((str(k), v) for k, v in result.items()), key=rank)


def is_blank(value: Any) -> bool:
    """Nothing to show: ``None``, a text of nothing but spaces, or a list or object whose every item is
    blank itself (``[]``, ``{}``, ``[null, "", {}]``). Such a field is left out rather than written as
    ``None``, ``[]``, ``{}``, "none" or a label with nothing beside it (an e-mail's "Refused {}", a
    pipeline contact sheet's "Pictures none" when its pictures come from the earlier steps)."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list):
        return all(is_blank(v) for v in value)
    if isinstance(value, dict):
        return all(is_blank(v) for v in value.values())
    return False


def display_item(key: str, value: Any, label: str | None = None, depth: int = 0) -> dict[str, Any]:
    """One readable field: ``{"label", "kind", "value"}`` with ``kind`` one of ``text``, ``multiline``,
    ``url``, ``file``, ``files``, ``yesno``, ``empty`` (nothing to show, :func:`is_blank`; lists of
    items leave it out), ``list``, ``table`` (a list of objects), ``fields`` (an object, shown as nested
    fields), ``json`` (anything else)."""
    label = label or key_label(key)
    if is_blank(value):
        return {"label": label, "kind": "empty", "value": None}
    if isinstance(value, bool):
        return {"label": label, "kind": "yesno", "value": value}
    if isinstance(value, int | float):
        return {"label": label, "kind": "text", "value": unit_value(key, value) or str(value)}
    if isinstance(value, str):
        if is_http_url(value):
            return {"label": label, "kind": "url", "value": value}
        return {"label": label, "kind": "multiline" if "\n" in value else "text", "value": value}
    if is_file_ref(value):
        return {"label": label, "kind": "file", "value": {**value, "preview": preview_kind(value)}}
    if isinstance(value, list) and value and all(is_file_ref(v) for v in value):
        return {"label": label, "kind": "files", "value": [{**v, "preview": preview_kind(v)} for v in value]}
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value) and len(value) <= 50:
        return {
            "label": label,
            "kind": "list",
            "value": [{"url": is_http_url(v), "text": str(v)} for v in value],
        }
    table = _as_table(value)
    if table is not None:
        return {"label": label, "kind": "table", "value": table}
    if isinstance(value, dict) and depth == 0 and len(value) <= 20:
        fields = _items(_ordered(value), depth=1)
        return {"label": label, "kind": "fields" if fields else "empty", "value": fields or None}
    return {"label": label, "kind": "json", "value": pretty_json(value)}


def _items(fields: list[tuple[str, Any]], depth: int = 0) -> list[dict[str, Any]]:
    """The fields as items, without those that have nothing to show."""
    labels = key_labels([k for k, _ in fields])
    items = (display_item(k, v, labels[k], depth) for k, v in fields)
    return [it for it in items if it["kind"] != "empty"]


def pretty_json(value: Any, limit: int = JSON_SHOWN_MAX) -> str:
    """Indented JSON, cut at ``limit`` characters with a note saying how much was left out."""
    return shown_json(value, limit)[0]


def shown_json(value: Any, limit: int = JSON_SHOWN_MAX) -> tuple[str, int]:
    """:func:`pretty_json`'s text and how many characters it left out (0: all of it), so that a page
    says the cut beside "Details" too, not only at the end of a long box."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > limit:
        return text[:limit] + f"\n… [{len(text) - limit:,} more characters not shown]", len(text) - limit
    return text, 0


def fields_left_out(value: Any) -> int:
    """How many top-level fields of a result or an input :func:`result_items` and :func:`input_items`
    leave out (past :data:`FIELDS_SHOWN`)."""
    return max(0, len(value) - FIELDS_SHOWN) if isinstance(value, dict) else 0


def result_items(result: Any) -> list[dict[str, Any]]:
    """A result object's top-level fields as readable items (empty for a non-object result)."""
    if not isinstance(result, dict):
        return []
    items = _items(_ordered(result)[:FIELDS_SHOWN])
    nested = ("table", "fields", "json")
    return sorted(items, key=lambda it: nested.index(it["kind"]) + 1 if it["kind"] in nested else 0)


def input_items(
    input_data: Any, fields: list[Any], file_names: Mapping[str, Any], tz: Any = None
) -> list[dict[str, Any]]:
    """What the person asked for, labelled from the schema and in its order (``jsonb`` does not keep
    key order); uploaded file ids become download links, date-times are shown in the viewer's zone.
    A field left empty is left out (:func:`is_blank`)."""
    if not isinstance(input_data, dict):
        return []
    by_name = {f.name: f for f in fields}
    keys = [f.name for f in fields if f.name in input_data] + [k for k in input_data if k not in by_name]
    items = []
    for key in keys[:FIELDS_SHOWN]:
        value = input_data[key]
        f = by_name.get(key)
        label = f.label if f else key_label(key)
        if is_blank(value):
            continue
        if f is not None and f.kind in ("file", "files"):
            ids = value if isinstance(value, list) else [value]
            refs = [
                {"file_id": str(i), "name": file_names[str(i)]["name"], "size": file_names[str(i)]["size"]}
                if str(i) in file_names
                else {"file_id": None, "name": "a file that is no longer available", "size": None}
                for i in ids
                if i
            ]
            if refs:
                items.append({"label": label, "kind": "files", "value": refs})
        elif f is not None and f.kind == "choice" and f.choices:
            shown = next((c.label for c in f.choices if c.value == str(value)), str(value))
            items.append({"label": label, "kind": "text", "value": shown})
        elif f is not None and f.kind == "datetime" and isinstance(value, str) and tz is not None:
            try:
                when = datetime.fromisoformat(value)
            except ValueError:
                items.append(display_item(key, value, label))
                continue
            items.append({"label": label, "kind": "text", "value": format_localtime(when, tz)})
        elif isinstance(value, float) and value.is_integer():
            items.append({"label": label, "kind": "text", "value": str(int(value))})
        else:
            items.append(display_item(key, value, label))
    return [it for it in items if it["kind"] != "empty"]


def file_ids_in(input_data: Any, fields: list[Any]) -> list[str]:
    """Ids of uploaded files that ``input_data`` refers to through file fields."""
    ids: list[str] = []
    if not isinstance(input_data, dict):
        return ids
    for f in fields:
        if f.kind in ("file", "files") and input_data.get(f.name):
            value = input_data[f.name]
            ids.extend(str(v) for v in (value if isinstance(value, list) else [value]) if v)
    return ids
