"""What one row of ``/admin/jobs`` shows: the job's title and type, the pipeline it is a step of, the
file or URL it works on, its owner, state, tries, buttons, and the error's first line (the rest folded).

The list query reads no input; the extras of a page's rows (input with the owner's e-mail, pipeline
names, file names) are at most three primary-key lookups of one page of ids each, whatever the table's
size.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions.jobs import failed_for_good
from app.jobs.file_inputs import file_fields
from app.processors import registry
from app.web import display, result_display
from app.web.deps import rows_of
from app.web.job_page import available_actions

#: The page's rows' input and owner's e-mail in one round trip (by primary keys: one page of ids).
INPUTS = text(
    """
    SELECT j.id, j.input_data, j.user_id, u.email
    FROM jobs j LEFT JOIN users u ON u.id = j.user_id
    WHERE j.id = ANY(CAST(:ids AS uuid[]))
    """
)
PIPELINES = text("SELECT id, name FROM pipelines WHERE id = ANY(CAST(:ids AS uuid[]))")
FILE_NAMES = text("SELECT id, name FROM files WHERE id = ANY(CAST(:ids AS uuid[]))")
HINT_MAX = 80
"""Characters of an input URL kept for the row (wrapped in its cell; a longer one ends in "…")."""
ERROR_LINE_MAX = 140


def _as_uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def input_hint(input_data: Any, type_name: str) -> dict[str, str] | None:
    """What a job works on, for its row: ``{"kind": "file", "id": …}`` for the first file field that holds
    an id, else ``{"kind": "url", "text": …}`` for the first http(s) URL in the input, else ``None``."""
    if not isinstance(input_data, dict):
        return None
    spec = registry.get(type_name)
    if spec is not None:
        for name in file_fields(spec.input_model):
            value = input_data.get(name)
            first = value[0] if isinstance(value, list) and value else value
            if first and _as_uuid(first) is not None:
                return {"kind": "file", "id": str(_as_uuid(first))}
    for value in input_data.values():
        if isinstance(value, str) and result_display.is_http_url(value):
            # the row says where a long address is cut; the job's page (the title's link) shows it whole
            return {"kind": "url", "text": value if len(value) <= HINT_MAX else value[:HINT_MAX] + "…"}
    return None


def error_parts(excerpt: str | None) -> tuple[str, str]:
    """The error's first line (cut to :data:`ERROR_LINE_MAX`) and the rest of the excerpt (folded)."""
    body = (excerpt or "").strip()
    first, _, rest = body.partition("\n")
    if len(first) > ERROR_LINE_MAX:
        first, rest = first[:ERROR_LINE_MAX] + "…", body
    return first, rest.strip()


def row_item(
    row: Mapping[Any, Any],
    emails: Mapping[int, str],
    user: Any,
    *,
    pipelines: Mapping[str, str] | None = None,
    hint: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One table row: the job's columns plus its state, title, owner, pipeline, input, error and buttons."""
    spec = registry.get(row["type"])
    state = display.job_state(row)
    error, error_rest = error_parts(row.get("error_excerpt"))
    pipeline_id = str(row["pipeline_id"]) if row.get("pipeline_id") else None
    return {
        "job": row,
        "id": row["id"],
        "short_id": str(row["id"])[-8:],
        "title": display.job_title(row, spec),
        "type_title": spec.title if spec is not None else row["type"],
        "owner": emails.get(row["user_id"], f"user {row['user_id']}"),
        "state": state,
        "error": error,
        "error_rest": error_rest,
        "pipeline": {"id": pipeline_id, "name": (pipelines or {}).get(pipeline_id or "", "a pipeline")}
        if pipeline_id
        else None,
        "input": hint,
        "actions": available_actions(row, state, user),
    }


async def row_items(db: AsyncSession, rows: Sequence[Mapping[Any, Any]], user: Any) -> list[dict[str, Any]]:
    """:func:`row_item` for a page of rows, with their owners, pipelines and input files or URLs."""
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    found = await rows_of(db, INPUTS, {"ids": ids})
    inputs = {r["id"]: r["input_data"] for r in found}
    emails = {r["user_id"]: r["email"] for r in found if r["email"] is not None}
    hints = {jid: input_hint(inputs.get(jid), r["type"]) for jid, r in zip(ids, rows, strict=True)}
    file_ids = sorted({h["id"] for h in hints.values() if h and h["kind"] == "file"})
    names: dict[str, str] = {}
    if file_ids:
        names = {str(f["id"]): f["name"] for f in await rows_of(db, FILE_NAMES, {"ids": file_ids})}
    for h in hints.values():
        if h and h["kind"] == "file":
            h["text"] = (names.get(h["id"]) or "a file that is no longer available")[:HINT_MAX]
    pipeline_ids = sorted({str(r["pipeline_id"]) for r in rows if r.get("pipeline_id")})
    pipelines: dict[str, str] = {}
    if pipeline_ids:
        pipelines = {str(p["id"]): p["name"] for p in await rows_of(db, PIPELINES, {"ids": pipeline_ids})}
    items = [row_item(r, emails, user, pipelines=pipelines, hint=hints[r["id"]]) for r in rows]
    warned = await failed_for_good(db, [i["job"] for i in items if i["actions"]["retry"]])
    for i in items:
        i["retry_warning"] = str(i["id"]) in warned
    return items
