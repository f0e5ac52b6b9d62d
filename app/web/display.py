"""What the job and pipeline pages show, computed from rows: plain-word statuses, readable results and
errors, event history lines, and the fingerprints that let polls answer "nothing changed".

Pure functions over row mappings (no I/O), shared by :mod:`app.web.jobs` and :mod:`app.web.pipelines`,
so the full page, its htmx fragment and the list cells all say the same thing.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from app.formatting import key_label, key_labels, local_moments, unit_value, zone
from app.jobs import states
from app.jobs.error_text import error_text_for, upstream_of, viewer_is_admin
from app.jobs.states import Status
from app.web import format_localtime
from app.web.forms import humanize

JSON_SHOWN_MAX = 100_000
"""Characters of result JSON shown under "Details"; the rest is cut with a note, so a
huge result cannot make the page unusable."""
ERROR_SUMMARY_MAX = 300
"""Characters of an error's first line shown in plain words; the full text is folded."""

_URL_RE = re.compile(r"^https?://[^\s<>\"'`]+$", re.IGNORECASE)


def now_utc() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def fingerprint(*parts: Any) -> str:
    """A short hex digest of ``parts``: a poll sends it back (``?v=…``) and gets 204 while it matches."""
    return hashlib.blake2s(repr(parts).encode(), digest_size=6).hexdigest()


# --- jobs ---------------------------------------------------------------------------------------------

STATUS_WORDS = {str(k.value): v for k, v in states.LABELS.items()}
"""A stored status in plain words, without the derived labels (Scheduled, Cancelling, …)."""

STATUS_CLASS = {
    "Waiting": "waiting",
    "Scheduled": "waiting",
    "Waiting for earlier steps": "waiting",
    "Retrying": "approval",
    "Running": "running",
    "Cancelling": "running",
    "Done": "done",
    "Failed": "failed",
    "Cancelled": "cancelled",
    "Needs approval": "approval",
}


def job_state(row: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The derived state of a job row (any column subset with ``status``, ``is_active``,
    ``pending_parents``, ``run_at``, ``attempts``, ``max_attempts``, ``progress``):

    ``label`` (plain words: Waiting, Scheduled, Retrying, Running, Done, Failed, Cancelled, Cancelling,
    Needs approval, Waiting for earlier steps), ``css`` (badge class), ``terminal``, ``scheduled`` (waiting for
    its ``run_at``), ``retrying`` (a failed attempt; the next try is at ``run_at``),
    ``percent`` (0–100 or ``None``), ``cancelling``, ``version`` (poll fingerprint).
    """
    now = now or now_utc()
    status = row["status"]
    run_at = _aware(row.get("run_at"))
    due_later = status == Status.QUEUED and run_at is not None and run_at > now
    attempts = row.get("attempts") or 0
    pending = row.get("pending_parents") or 0
    retrying = bool(due_later and attempts > 0 and not pending)
    scheduled = bool(due_later and attempts == 0 and not pending)
    label = states.label(
        status,
        is_active=row.get("is_active", True),
        pending_parents=pending,
        scheduled=scheduled,
        retrying=status == Status.QUEUED and attempts > 0 and not pending,
    )
    progress = row.get("progress")
    percent = None if progress is None else max(0, min(100, round(float(progress) * 100)))
    return {
        "label": label,
        "css": STATUS_CLASS.get(label, "waiting"),
        "terminal": states.is_terminal(status),
        "scheduled": scheduled,
        "retrying": retrying,
        "cancelling": status == Status.IN_PROGRESS and not row.get("is_active", True),
        "percent": percent,
        "version": fingerprint(
            status,
            row.get("is_active"),
            pending,
            attempts,
            progress,
            row.get("progress_message"),
            str(row.get("updated_at")),
            due_later,
        ),
    }


def job_title(row: Mapping[str, Any], spec: Any) -> str:
    """The job's own title, else its type's title, else the type name."""
    return row.get("title") or (spec.title if spec is not None else None) or row["type"]


# --- results ------------------------------------------------------------------------------------------


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
        return "; ".join(_compact(v) for v in value)
    if isinstance(value, dict):
        if set(value) == {"value", "count"}:
            return f"{_compact(value['value'])} ({_compact(value['count'])})"
        if set(value) == {"from", "to", "count"}:
            return f"{_compact(value['from'])}–{_compact(value['to'])}: {_compact(value['count'])}"
        return ", ".join(f"{humanize(str(k))} {_compact(v)}" for k, v in value.items())
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


def display_item(key: str, value: Any, label: str | None = None, depth: int = 0) -> dict[str, Any]:
    """One readable field: ``{"label", "kind", "value"}`` with ``kind`` one of ``text``, ``multiline``,
    ``url``, ``file``, ``files``, ``yesno``, ``empty``, ``list``, ``table`` (a list of objects),
    ``fields`` (an object, shown as nested fields), ``json`` (anything else)."""
    label = label or key_label(key)
    if value is None:
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
    if isinstance(value, dict) and depth == 0 and 0 < len(value) <= 20:
        return {
            "label": label,
            "kind": "fields",
            "value": _items(_ordered(value), depth=1),
        }
    return {"label": label, "kind": "json", "value": pretty_json(value)}


def _items(fields: list[tuple[str, Any]], depth: int = 0) -> list[dict[str, Any]]:
    labels = key_labels([k for k, _ in fields])
    return [display_item(k, v, labels[k], depth) for k, v in fields]


def pretty_json(value: Any, limit: int = JSON_SHOWN_MAX) -> str:
    """Indented JSON, cut at ``limit`` characters with a note saying how much was left out."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = text[:limit] + f"\n… [{len(text) - limit:,} more characters not shown]"
    return text


def result_items(result: Any) -> list[dict[str, Any]]:
    """A result object's top-level fields as readable items (empty for a non-object result)."""
    if not isinstance(result, dict):
        return []
    items = _items(_ordered(result)[:100])
    nested = ("table", "fields", "json")
    return sorted(items, key=lambda it: nested.index(it["kind"]) + 1 if it["kind"] in nested else 0)


def input_items(
    input_data: Any, fields: list[Any], file_names: Mapping[str, Any], tz: Any = None
) -> list[dict[str, Any]]:
    """What the person asked for, labelled from the schema and in its order (``jsonb`` does not keep
    key order); uploaded file ids become download links, date-times are shown in the viewer's zone."""
    if not isinstance(input_data, dict):
        return []
    by_name = {f.name: f for f in fields}
    keys = [f.name for f in fields if f.name in input_data] + [k for k in input_data if k not in by_name]
    items = []
    for key in keys[:100]:
        value = input_data[key]
        f = by_name.get(key)
        label = f.label if f else key_label(key)
        if value is None or value == "":
            items.append({"label": label, "kind": "empty", "value": None})
        elif f is not None and f.kind in ("file", "files"):
            ids = value if isinstance(value, list) else [value]
            refs = [
                {"file_id": str(i), "name": file_names[str(i)]["name"], "size": file_names[str(i)]["size"]}
                if str(i) in file_names
                else {"file_id": None, "name": "a file that is no longer available", "size": None}
                for i in ids
                if i
            ]
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
    return items


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


# --- errors -------------------------------------------------------------------------------------------


def job_for(job: Mapping[Any, Any], viewer: Any) -> dict[str, Any]:
    """A job's fields (the API's shape) with ``error_message`` as ``viewer`` may read it."""
    return {**job, "error_message": error_text_for(job.get("error_message"), viewer)}


def event_for(event: Mapping[Any, Any], viewer: Any) -> dict[str, Any]:
    """A ``job_events`` row with its ``message`` (and a retry's ``data.previous_error``) as ``viewer``
    may read them."""
    out = dict(event)
    out["message"] = error_text_for(out.get("message"), viewer)
    data = out.get("data")
    if isinstance(data, dict) and isinstance(data.get("previous_error"), str):
        out["data"] = {**data, "previous_error": error_text_for(data["previous_error"], viewer)}
    return out


def error_summary(
    row: Mapping[str, Any], message: str | None, viewer: Any = None, upstream: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The error in plain words: ``{"headline", "reason", "technical", "upstream"}`` (``technical`` is
    the text the reason does not already show — a traceback, the rest of a long text — shown folded, or
    ``None``), or ``None`` when there is nothing to say. ``viewer``: who reads it
    (:func:`error_text_for`; ``None`` reads what a job's owner reads). ``upstream``: the step whose
    failure cancelled this one (``{"job_id", "title"}``), named and linked instead of its id."""
    status = row["status"]
    text = (error_text_for(message, viewer) or "").strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > ERROR_SUMMARY_MAX:
        first = first[:ERROR_SUMMARY_MAX] + "…"
    attempts = row.get("attempts") or 0
    technical = text if text and text != first else None
    if status == Status.FAILED:
        if text.startswith("rejected: "):
            return {
                "headline": "An administrator rejected the result.",
                "reason": text.removeprefix("rejected: ")[:ERROR_SUMMARY_MAX],
                "technical": None,
            }
        if text.startswith("lease expired"):
            return {
                "headline": "The worker running this job stopped unexpectedly, and no attempts were left.",
                "reason": None,
                "technical": text,
            }
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
        return {
            "headline": f"It did not work {tries}.".replace("  ", " ").replace(" .", "."),
            "reason": first or None,
            "technical": technical,
        }
    if status == Status.CANCELLED:
        cause = upstream_of(message)
        if cause is not None or text.startswith(("upstream ", "an earlier step ")):
            failed = (cause[1] if cause else text).endswith("failed")
            return {
                "headline": "An earlier step "
                + ("failed" if failed else "did not finish")
                + ", so this one did not run.",
                "reason": None,
                "technical": text if viewer_is_admin(viewer) else None,
                "upstream": {**upstream, "failed": failed} if upstream else None,
            }
        who = "by an administrator" if text.startswith("cancelled by an admin") else ""
        reason = text.split(": ", 1)[1] if ": " in text and text.startswith("cancelled by") else None
        return {
            "headline": f"It was cancelled {who}.".replace(" .", "."),
            "reason": reason,
            "technical": None if text.startswith("cancelled by") else (text or None),
        }
    if text and status == Status.QUEUED and attempts:
        return {"headline": "The last attempt did not work.", "reason": first, "technical": technical}
    return None


# --- history ------------------------------------------------------------------------------------------

EVENT_WORDS = {
    "enqueued": "Submitted",
    "claimed": "Started",
    "completed": "Finished",
    "waiting_approval": "Finished; waiting for approval",
    "retry_scheduled": "An attempt did not work; it will try again",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "cancel_requested": "Asked to stop",
    "released": "Put back in the queue (a worker was shutting down)",
    "rescued": "Its worker was lost",
    "reopened": "Waiting again (an earlier step was retried)",
    "retried": "Retried with a fresh set of attempts",
    "run_again": "Run again as a new job",
    "approved": "Approved",
    "rejected": "Rejected",
    "rerun_requested": "Sent back to run again",
    "rescheduled": "Rescheduled",
}


def actor_words(actor: str, viewer: Any, emails: Mapping[int, str]) -> str:
    """``user:3`` → ``you`` / an email (admins) / ``an administrator``; ``worker:…`` → ``a worker``;
    ``job:…`` → ``an earlier step``; ``system:…`` → ``Jobdesk``."""
    kind, _, rest = (actor or "").partition(":")
    if kind == "user":
        try:
            uid = int(rest)
        except ValueError:
            return "someone"
        if viewer is not None and uid == viewer.id:
            return "you"
        if viewer is not None and viewer.is_admin:
            return emails.get(uid, f"user {uid}")
        return "an administrator"
    if kind == "worker":
        return "a worker"
    if kind == "job":
        return "an earlier step"
    return "Jobdesk"


def event_line(event: Mapping[str, Any], viewer: Any, emails: Mapping[int, str]) -> dict[str, Any]:
    """One history line: ``{"at", "what", "by", "note", "technical"}``."""
    kind = event["kind"]
    data = event.get("data") or {}
    what = EVENT_WORDS.get(kind, humanize(kind))
    if kind == "claimed" and isinstance(data, dict) and data.get("attempt"):
        what = f"Started (attempt {data['attempt']})"
    if kind == "rescued" and event.get("to_status"):
        after = {
            "queued": "it will try again",
            "failed": "no attempts were left",
            "cancelled": "it was cancelled",
        }
        what = f"Its worker was lost; {after.get(event['to_status'], event['to_status'])}"
    message = (error_text_for(event.get("message"), viewer) or "").strip()
    note, technical = message, None
    if len(message) > 200 or "\n" in message:
        note = message.splitlines()[0][:200] + "…"
        technical = message
    cause = upstream_of(event.get("message")) if kind == "cancelled" else None
    if cause is not None:
        # in words, as the job's own page says it: "upstream images.thumbnail 01a2… failed" meant
        # nothing to a non-engineer; an admin can still unfold the stored text
        note = "An earlier step " + ("failed" if cause[1] == "failed" else "did not finish") + "."
        technical = message if viewer_is_admin(viewer) else None
    if kind in ("enqueued", "claimed", "completed"):
        note = note or ""
    # a moment the queue wrote into the message ("run at 2027-11-07T01:30:00-04:00") in the viewer's zone
    note = local_moments(note, zone(getattr(viewer, "timezone", None)))
    return {
        "at": event["at"],
        "what": what,
        "by": actor_words(event.get("actor") or "", viewer, emails),
        "note": note,
        "technical": technical,
        "step": event.get("step_key"),
        "job_id": event.get("job_id"),
    }


def user_ids_in(events: Sequence[Mapping[str, Any]]) -> list[int]:
    ids = set()
    for e in events:
        kind, _, rest = (e.get("actor") or "").partition(":")
        if kind == "user" and rest.isdigit():
            ids.add(int(rest))
    return sorted(ids)


# --- pipelines ----------------------------------------------------------------------------------------

PIPELINE_LABELS = {
    "running": "Running",
    "waiting_approval": "Needs approval",
    "completed": "Done",
    "failed": "Failed",
    "cancelled": "Cancelled",
}


def pipeline_state(p: Mapping[str, Any], steps: list[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """``{"label", "css", "finished", "version"}`` of a pipeline row (or :func:`app.pipelines.get` view).

    A pipeline is *finished* once no step is live (``finished_at`` set): a failed pipeline may still
    have independent steps running, and its page keeps polling until they end.
    """
    label = PIPELINE_LABELS.get(p["status"], humanize(p["status"]))
    finished = p.get("finished_at") is not None
    if p["status"] == "failed" and not finished:
        label = "Failed (other steps are still finishing)"
    css = STATUS_CLASS.get(PIPELINE_LABELS.get(p["status"], ""), "waiting")
    step_parts = tuple(
        (
            str(s.get("job_id")),
            s.get("status"),
            s.get("is_active"),
            s.get("pending_parents"),
            s.get("attempts"),
            s.get("progress"),
            s.get("progress_message"),
            str(s.get("run_at")),
        )
        for s in (steps or [])
    )
    return {
        "label": label,
        "css": css,
        "finished": finished,
        "version": fingerprint(p["status"], str(p.get("finished_at")), str(p.get("updated_at")), step_parts),
    }
