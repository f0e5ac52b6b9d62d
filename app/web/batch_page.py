"""What the batch pages show: the spreadsheet form's mapping and its problems by row and column, and a
batch's progress, counts by status and failed rows.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import batches, spreadsheets
from app.actions import batches as batch_actions
from app.jobs.error_text import error_text_for, retry_refusal
from app.jobs.input_words import sentence_of
from app.web import display
from app.web.job_page import POLL
from app.web.notifications import bell_url, viewer_bell

FAILED_SHOWN = 100
"""Failed rows listed on the page; the download has them all."""
PREVIEW_ROWS = 5
STATUS_WORDS = {
    "queued": "Waiting",
    "in_progress": "Running",
    "waiting_approval": "Needs approval",
    "completed": "Done",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
STATUS_CSS = {
    "queued": "waiting",
    "in_progress": "running",
    "waiting_approval": "approval",
    "completed": "done",
    "failed": "failed",
    "cancelled": "cancelled",
}
BATCH_LABELS = {**display.PIPELINE_LABELS, "queued": "Waiting"}
FAILED_ROWS = text(
    """
    SELECT id, row, title, error_message FROM (
        SELECT id, status, title, error_message, row_number() OVER (ORDER BY id) AS row
        FROM jobs WHERE batch_id = :id
    ) j WHERE status = 'failed' ORDER BY id LIMIT :limit
    """
)
RETRYING = text(
    """
    SELECT count(*) AS n, min(run_at) AS next_at,
           (array_agg(left(error_message, 1000) ORDER BY id) FILTER (WHERE error_message IS NOT NULL))[1]
               AS error_message
    FROM jobs WHERE batch_id = :id AND status = 'queued' AND attempts > 0
    """
)
"""Rows waiting to try again after an attempt that did not work (a connection error, a timeout): how
many, when the next one tries, and the first one's error."""
_ROW_PATH = re.compile(r"^rows\[(\d+)\](?:\.([^.\[]+))?(.*)$")


@dataclass
class RowProblem:
    """One problem of the spreadsheet, as the person sees it: the row number in their file, the column
    (or "no column" when the field is not mapped), the field and what is wrong."""

    row: int | None
    column: str
    field: str
    message: str


@dataclass
class MappingStep:
    """The mapping step: the file, its columns, each field's chosen column, a preview and problems."""

    sheet_id: str
    sheet_name: str
    columns: list[str]
    fields: list[spreadsheets.SheetField]
    chosen: dict[str, int | None]
    preview: list[list[str]]
    row_count: int
    problems: list[RowProblem] = field(default_factory=list)
    more_problems: int = 0


def mapping_view(
    sheet_id: str,
    sheet: spreadsheets.Sheet,
    fields: list[spreadsheets.SheetField],
    chosen: dict[str, int | None],
) -> MappingStep:
    preview = [[_shown(spreadsheets.cell_text(c)) for c in cells] for _, cells in sheet.rows[:PREVIEW_ROWS]]
    return MappingStep(sheet_id, sheet.name, sheet.columns, fields, chosen, preview, len(sheet.rows))


PREVIEW_CELL_CHARS = 300
"""Characters of a cell the preview shows (the cell itself is kept whole for the row's job)."""


def _shown(text: str) -> str:
    return (
        text
        if len(text) <= PREVIEW_CELL_CHARS
        else text[:PREVIEW_CELL_CHARS] + f"… ({len(text):,} characters)"
    )


def problems_of(
    errors: Mapping[str, str],
    numbers: Sequence[int],
    fields: Sequence[spreadsheets.SheetField],
    columns: Sequence[str],
    chosen: Mapping[str, int | None],
) -> list[RowProblem]:
    """A batch's ``rows[i].<field>`` errors as problems by the file's row number and column."""
    titles = {f.name: f.title for f in fields}
    out = []
    for path, message in errors.items():
        match = _ROW_PATH.match(path)
        # said as the job form says it ("Enter a number, like 2.5."): the words are the same function's
        message = sentence_of(message)
        if match is None:
            out.append(RowProblem(None, "", "", message))
            continue
        index, name, rest = int(match.group(1)), match.group(2) or "", match.group(3)
        column_index = chosen.get(name) if name else None
        column = columns[column_index] if column_index is not None else ("no column chosen" if name else "")
        label = titles.get(name, name) + rest
        number = numbers[index] if index < len(numbers) else index + 1
        out.append(RowProblem(number, column, label, message))
    return out


def batch_state(view: batches.BatchView, retrying: int = 0) -> dict[str, Any]:
    """The badge and poll version of a batch; ``retrying``: its rows waiting to try again after an error
    (a batch whose every waiting row is one reads "Retrying", as such a job does, not "Waiting")."""
    label = BATCH_LABELS.get(view.status, view.status)
    if view.status == "failed" and not view.finished:
        label = "Failed"
    if view.status == "queued" and retrying and retrying >= view.counts.get("queued", 0):
        label = "Retrying"
    css = display.STATUS_CLASS.get(label, "waiting")
    version = display.fingerprint(view.status, sorted(view.counts.items()), retrying)
    return {"label": label, "css": css, "finished": view.finished, "version": version}


async def batch_context(db: AsyncSession, batch_id: Any, user: Any, **kw: Any) -> dict[str, Any]:
    """What ``batches/_status.html`` shows."""
    view = await batches.get(db, batch_id, user)
    retrying = None
    if view.counts.get("queued"):
        found = (await db.execute(RETRYING, {"id": view.id})).mappings().one()
        if found["n"]:
            # "Waiting 0%" with no word said nothing while rows failed to connect and waited to try again
            lines = (error_text_for(found["error_message"], user) or "").strip().splitlines()
            retrying = {
                "n": int(found["n"]),
                "next_at": found["next_at"],
                "error": lines[0] if lines else None,
            }
    state = batch_state(view, retrying["n"] if retrying else 0)
    unread = await viewer_bell(db, user)  # the poll carries it: the bell is refreshed with the page
    failed = []
    if view.counts.get("failed"):
        params = {"id": view.id, "limit": FAILED_SHOWN}
        failed = list((await db.execute(FAILED_ROWS, params)).mappings().all())
    counts = [
        {"status": s, "label": STATUS_WORDS[s], "css": STATUS_CSS[s], "n": view.counts.get(s, 0)}
        for s in batches.STATUSES
        if view.counts.get(s, 0)
    ]
    # hidden when no failed row shown could be helped by a retry (the action's own rule)
    can_retry = bool(view.counts.get("failed")) and (
        len(failed) < view.counts["failed"] or any(retry_refusal(r) is None for r in failed)
    )
    return {
        "batch": view.row,
        "view": view,
        "state": state,
        "counts": counts,
        "failed": failed,
        "retrying": retrying,
        "failed_more": max(0, view.counts.get("failed", 0) - len(failed)),
        "can_retry": can_retry,
        "retry_question": await batch_actions.retry_question(db, view.id) if can_retry else None,
        "poll_url": None
        if view.finished
        else bell_url(f"/batches/{view.id}/status?v={state['version']}", unread),
        "unread": unread,
        "poll": POLL,
        "notice": kw.get("notice"),
        "notice_ok": kw.get("notice_ok", True),
    }
