"""``/admin/audit``: the audit trail, newest first, filtered by action and admin (admins only).

Keyset-paginated on the entry id ("Older" keeps the filters), so every page costs the same however long
the trail grows.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import json
import uuid
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, Request, get
from litestar.params import QueryParameter
from litestar.response import Template

from app import audit, auth
from app.digits import whole
from app.emails import email_key
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import DbSession, render
from app.web.result_display import is_blank

AUDIT_PAGE = 50
TARGETS_SHOWN = 20


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
        return True
    except ValueError:
        return False


TARGET_PAGES = {"job": "/jobs/", "pipeline": "/pipelines/", "batch": "/batches/"}
"""Targets with a page of their own, by their UUID."""


def _target_links(row: Mapping[Any, Any]) -> list[dict[str, str | None]]:
    """Links to what an entry acted on (every id it kept: the page shows :data:`TARGETS_SHOWN`, the rest
    folded): job, pipeline and batch pages, users, schedules; job types as plain words."""
    links = []
    for raw in row["target_ids"] or []:
        tid = str(raw)
        href = None
        if row["target_type"] in TARGET_PAGES and _is_uuid(tid):
            href = f"{TARGET_PAGES[row['target_type']]}{uuid.UUID(tid)}"
        elif row["target_type"] == "user" and whole(tid) is not None:
            href = f"/admin/users#user-{tid}"
        elif row["target_type"] == "schedule" and _is_uuid(tid):
            href = "/admin/schedules#schedule-" + tid
        links.append({"text": tid, "href": href})
    return links


def audit_line(row: Mapping[Any, Any]) -> dict[str, Any]:
    """One entry as the page shows it: who, what in words, links to its targets, outcome, detail."""
    detail = row["detail"]
    words = audit.ACTIONS.get(row["action"])
    refused = audit.is_refusal(row["outcome"])
    count = 0 if refused else int(row["count"] or 0)
    counted = audit.counted_words(row["action"], count, row["outcome"])
    links = _target_links(row)
    more = 0 if counted else max(0, count - min(TARGETS_SHOWN, len(links)), len(links) - TARGETS_SHOWN)
    return {
        "id": row["id"],
        "at": row["at"],
        "who": row["user_email"],
        "what": words.what if words else row["action"],
        "action": row["action"],
        "targets": links[:TARGETS_SHOWN],
        # the targets past the first ones, listed in a fold ("and 30 more" said them with no way to see
        # them); those the entry kept no id of (past audit.MAX_IDS) are counted apart
        "rest_targets": links[TARGETS_SHOWN:],
        # a count of something other than the targets (jobs a pipeline's cancel stopped) is said as such,
        # never as more targets
        "more_targets": more,
        "unkept_targets": max(0, more - len(links[TARGETS_SHOWN:])),
        "count": None if counted else count,
        "counted": counted,
        "outcome": row["outcome"],
        "ok": not refused,
        "detail": detail_fields(detail),
    }


DETAIL_FIELDS_MAX = 30
VALUE_MAX = 300


def detail_fields(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """An entry's detail as labelled fields (``filter status: failed``), nested objects flattened, lists
    joined; at most :data:`DETAIL_FIELDS_MAX` fields of :data:`VALUE_MAX` characters each."""
    if not isinstance(detail, dict):
        return [] if is_blank(detail) else [{"label": prefix or "detail", "value": _value_words(detail)}]
    out: list[dict[str, str]] = []
    for key in sorted(detail):
        label = f"{prefix} {key}".strip().replace("_", " ")
        value = detail[key]
        if is_blank(value):
            continue  # a bulk action on ticked rows has no filter: no "filter {}"
        if isinstance(value, dict):
            out.extend(detail_fields(value, label))
        else:
            out.append({"label": label, "value": _value_words(value)})
        if len(out) >= DETAIL_FIELDS_MAX:
            break
    return out[:DETAIL_FIELDS_MAX]


def _value_words(value: Any) -> str:
    if value is None:
        text = "—"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, list):
        value = [v for v in value if not is_blank(v)]
        text = ", ".join(_value_words(v) for v in value[:20]) + (
            f" and {len(value) - 20} more" if len(value) > 20 else ""
        )
    elif isinstance(value, dict):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    else:
        text = str(value)
    return text[:VALUE_MAX] + ("…" if len(text) > VALUE_MAX else "")


def _filter(value: str | None, limit: int) -> str | None:
    """A filter as typed, on one line and without NUL characters (no stored value holds one)."""
    return (value or "").replace("\x00", "").strip()[:limit] or None


class AuditController(Controller):
    """``/admin/audit``; admins only."""

    path = "/admin/audit"
    guards = [auth.requires_admin]
    include_in_schema = False

    @get("/", name="admin.audit")
    async def audit_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        action: Annotated[str | None, QueryParameter()] = None,
        user_filter: Annotated[str | None, QueryParameter(name="user")] = None,
        before: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The audit trail, newest first, :data:`AUDIT_PAGE` per page ("Older" keeps the filters)."""
        action = _filter(action, 100)
        email = email_key(_filter(user_filter, 254)) or None
        before_id = read_cursor(before, Cursor.ENTRY, field="before")
        rows = await audit.entries(
            db_session, before=before_id, limit=AUDIT_PAGE + 1, action=action, user_email=email
        )
        rows, before_next = page_of(rows, AUDIT_PAGE, lambda r: r["id"])
        query = {k: v for k, v in {"action": action, "user": email}.items() if v}
        older = None
        if before_next is not None:
            older = "/admin/audit?" + urlencode({**query, "before": before_next})
        return render(
            request,
            "admin/audit.html",
            {
                "entries": [audit_line(r) for r in rows],
                "older_url": older,
                "newest_url": ("/admin/audit?" + urlencode(query)) if before_id else None,
                "action": action or "",
                "user_filter": email or "",
                "actions": sorted(((code, w.what) for code, w in audit.ACTIONS.items()), key=lambda a: a[1]),
            },
        )
