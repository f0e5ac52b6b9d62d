"""What a job's page shows: its live status part, its input, result, error and history, and the buttons
the viewer gets.

Every query here reads one job by primary key; the status part never loads the input, and loads the
result and the full error only when there is an outcome to show (a finished job, or one waiting for
approval). Another user's job gets the same 404 as an unknown id, so ids cannot be probed.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import asyncio
import csv
import functools
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from litestar import Request
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import controls, text_encoding
from app.actions import access
from app.actions import approvals as approval_actions
from app.actions.jobs import (
    RETRY_WARNING,
    RETRY_WARNING_CONFIRM,
    allowed,
    failed_for_good,
    requeues_refused,
    retry_offered,
)
from app.db import read_rows
from app.errors import NotFound
from app.files import FileStore
from app.formatting import zone_names
from app.jobs import naming, queue
from app.jobs.cursors import page_of
from app.jobs.states import LIVE, Status
from app.processors import registry
from app.web import display, forms, job_log, result_display, zone
from app.web.deps import parse_uuid, rows_of
from app.web.notifications import bell_url

HISTORY_LIMIT = 200
"""Events shown at once in a job's or a pipeline's history: the newest, then "Older events" pages back."""
EVENTS_END = 2**63 - 1
"""The ``before`` of a history's first page: above every event id."""
POLL = "every 2s"
"""How often a live status region asks for news."""
CONFIRM = {
    "cancel": "Cancel this job? Work already done is lost.",
    "retry": "Retry this job with a fresh set of attempts?",
    "retry-anyway": RETRY_WARNING_CONFIRM,
    "run-again": "Start a new job with the same input?",
    "approve": "Approve this result? The next steps will run.",
    "reject": "Reject this result? Steps that depend on it will be cancelled.",
    "rerun": "Run this step again?",
    "run-now": "Start this job now instead of at its scheduled time?",
    "reschedule": "Move this job to the chosen time?",
}

#: One job's live state for the status fragment and list cells: by primary key, without input, result
#: or the full error text.
_STATUS_COLUMNS = """
    id, user_id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts,
    progress, progress_message, requires_approval, pipeline_id, step_key, blocked_by, created_by_job,
    created_at, updated_at, started_at, completed_at, left(error_message, 2000) AS error_preview,
    (SELECT max(seq) FROM job_logs l WHERE l.job_id = jobs.id) AS log_seq,
    (SELECT count(*) FROM notifications n WHERE n.user_id = jobs.user_id AND n.read_at IS NULL) AS unread
"""
JOB_STATUS = text(f"SELECT {_STATUS_COLUMNS} FROM jobs WHERE id = :id")
#: One My jobs status cell: the live columns only.
JOB_CELL = text(
    """
    SELECT id, user_id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts,
           progress, progress_message, created_at, updated_at,
           (SELECT count(*) FROM notifications n WHERE n.user_id = jobs.user_id AND n.read_at IS NULL) AS unread
    FROM jobs WHERE id = :id
    """
)
#: The whole job page's row in one read: :data:`JOB_STATUS` with the input and the outcome.
JOB_PAGE = text(f"SELECT {_STATUS_COLUMNS}, input_data, result_data, error_message FROM jobs WHERE id = :id")
#: A finished job's outcome, loaded once when its page or final fragment is rendered.
JOB_OUTCOME = text("SELECT result_data, error_message FROM jobs WHERE id = :id")
JOB_EVENTS = text(
    """
    SELECT id, job_id, at, kind, from_status, to_status, actor, message, data
    FROM job_events WHERE job_id = :id AND id < :before ORDER BY id DESC LIMIT :limit
    """
)
USER_EMAILS = text("SELECT id, email FROM users WHERE id = ANY(CAST(:ids AS int[]))")
PIPELINE_NAME = text("SELECT id, name, user_id FROM pipelines WHERE id = :id")
FILES_BY_ID = text("SELECT id, name, size, user_id FROM files WHERE id = ANY(CAST(:ids AS uuid[]))")


@functools.lru_cache(maxsize=1)
def timezone_names() -> tuple[str, ...]:
    """IANA time zone names for the "Run at" picker: the ones every picker offers and every form accepts."""
    return zone_names()


async def load_status_row(
    db: AsyncSession, job_id: Any, user: Any, query: Any = JOB_STATUS
) -> Mapping[Any, Any]:
    """The job's live columns (:data:`JOB_STATUS`, or ``query``).

    Raises:
        NotFound: unknown, malformed or another user's id — one answer for all, so ids cannot be probed.
    """
    jid = parse_uuid(job_id)
    return _visible((await db.execute(query, {"id": jid})).mappings().first(), jid, user)


def _visible(row: Mapping[Any, Any] | None, jid: uuid.UUID, user: Any) -> Mapping[Any, Any]:
    """``row`` if ``user`` may see it (:func:`app.jobs.queue.may_see`); else the same NotFound as an
    unknown id (ids cannot be probed)."""
    if row is None or not queue.may_see(row, user):
        raise NotFound(f"No job with id {jid}.")
    return row


async def poll_row(
    request: Request[Any, Any, Any], job_id: Any, user: Any, query: Any = JOB_STATUS
) -> Mapping[Any, Any]:
    """:func:`load_status_row` for the 2 s polls: one autocommit round trip on the asyncpg connection
    (:func:`app.db.read_rows`), so a poll answered 204 never opens a transaction. Not for reads after
    a change in the request's own transaction (they would not see it).

    Raises:
        NotFound: unknown, malformed or another user's id — one answer for all, so ids cannot be probed.
    """
    jid = parse_uuid(job_id)
    rows = await read_rows(request.app.state.engine, query, {"id": jid})
    return _visible(rows[0] if rows else None, jid, user)


async def emails_for(db: AsyncSession, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    return {r["id"]: r["email"] for r in await rows_of(db, USER_EMAILS, {"ids": ids})}


async def job_history(
    db: AsyncSession, job_id: uuid.UUID, user: Any, before: int | None = None
) -> dict[str, Any]:
    """The job's events before the event id ``before`` (none: its newest), :data:`HISTORY_LIMIT` of
    them, oldest first, in plain words (:func:`history_of`)."""
    params = {"id": job_id, "before": before or EVENTS_END, "limit": HISTORY_LIMIT + 1}
    rows: list[dict[str, Any]] = await rows_of(db, JOB_EVENTS, params)
    return await history_of(db, rows, user, f"/jobs/{job_id}/history", paged=before is not None)


async def history_of(
    db: AsyncSession, rows: list[dict[str, Any]], user: Any, url: str, *, paged: bool
) -> dict[str, Any]:
    """A page of a history from ``rows`` (newest first, :data:`HISTORY_LIMIT` + 1 fetched), shown oldest
    first: ``lines``, and ``older_url`` (``url?before=<the oldest event shown>``, the one cursor reader's
    :data:`~app.jobs.cursors.Cursor.ENTRY`) when older events were left out, so the page says it is cut
    and offers them rather than stopping at its newest events as if they were all."""
    page, older = page_of(rows, HISTORY_LIMIT, lambda r: r["id"])
    page = page[::-1]
    emails = await emails_for(db, display.user_ids_in(page)) if user.is_admin else {}
    return {
        "lines": [display.event_line(r, user, emails) for r in page],
        "more": older is not None,
        "older_url": f"{url}?before={older}" if older is not None else None,
        "older_cursor": older,
        "limit": HISTORY_LIMIT,
        "paged": paged,
    }


def available_actions(row: Mapping[Any, Any], state: Mapping[str, Any], user: Any) -> dict[str, bool]:
    """Which buttons the viewer gets: the actions layer's rules applied to the job's state (the action
    checks again when a button is pressed)."""
    status = row["status"]
    standalone = row.get("pipeline_id") is None
    spec = registry.get(row["type"])
    waiting = status == Status.WAITING_APPROVAL
    return {
        "cancel": allowed(user, "cancel", row) and status in LIVE and not state["cancelling"],
        "retry": retry_offered(user, row),
        "run_again": allowed(user, "run-again", row)
        and standalone
        and state["terminal"]
        and spec is not None,
        "resubmit": row["user_id"] == user.id
        and standalone
        and status in (Status.FAILED, Status.CANCELLED)
        and spec is not None
        and access.may_submit(user, spec),
        "approve": allowed(user, "approve", row) and waiting,
        "reject": allowed(user, "reject", row) and waiting,
        "rerun": allowed(user, "rerun", row) and waiting,
        "run_now": allowed(user, "run-now", row)
        and status == Status.QUEUED
        and (state["scheduled"] or state["retrying"]),
        "reschedule": allowed(user, "reschedule", row) and status == Status.QUEUED,
    }


async def _offered(
    db: AsyncSession, row: Mapping[Any, Any], state: Mapping[str, Any], user: Any
) -> dict[str, bool]:
    """:func:`available_actions`, less a retry, run again or rerun the queue's owner rule would refuse
    (:func:`app.actions.jobs.requeues_refused`): asked on the row shown, only when one is offered."""
    actions = available_actions(row, state, user)
    if not any(actions.get(name) for name in ("retry", "run_again", "rerun")):
        return actions
    refused = await requeues_refused(db, user, row)
    return {name: offered and name.replace("_", "-") not in refused for name, offered in actions.items()}


async def status_context(
    db: AsyncSession,
    row: Mapping[Any, Any],
    user: Any,
    *,
    notice: str | None = None,
    notice_ok: bool = True,
    new_job_id: Any = None,
    with_history: bool = False,
    files: FileStore | None = None,
) -> dict[str, Any]:
    """Everything ``jobs/_status.html`` shows; loads the result and full error only when there is an
    outcome to show (finished, or waiting for approval). With ``files``, a CSV result shows its first
    rows."""
    state = display.job_state(row)
    spec = registry.get(row["type"])
    ctx: dict[str, Any] = {
        "job": row,
        "state": state,
        "title": display.job_title(row, spec),
        "actions": await _offered(db, row, state, user),
        "notice": notice,
        "notice_ok": notice_ok,
        "new_job_id": new_job_id,
        "poll_url": None
        if state["terminal"]
        else bell_url(
            f"/jobs/{row['id']}/status?v={state['version']}&log={row.get('log_seq') or 0}",
            row["unread"] if row.get("unread") is not None and row["user_id"] == user.id else None,
        ),
        "poll": POLL,
        "confirms": CONFIRM,
        "result_items": [],
        "previews": {},
        "usually": None,
        "work": None,
        "ran": None,
        "result_json": None,
        "result_json_cut": 0,
        "result_cut": 0,
        "error": None,
        "history": None,
        "retry_warning": None,
        # A waiting job of a paused type says so in every rendering of this part (the page, its poll, an
        # action's answer), never "it will start as soon as a worker is free".
        "paused": await controls.paused_for(db, [row["type"]]) if row["status"] == Status.QUEUED else [],
    }
    if state["terminal"] or row["status"] == Status.WAITING_APPROVAL:
        # the page's row has it already (JOB_PAGE); a status fragment reads it now
        outcome = row if "result_data" in row else (await rows_of(db, JOB_OUTCOME, {"id": row["id"]}))[0]
        result = outcome["result_data"]
        ctx["result_items"] = result_display.result_items(result)
        ctx["previews"] = await csv_previews(db, files, result_display.output_files(result), row["user_id"])
        # a result with nothing to show reads "No result.", not a "Details" holding its "{}"
        if not result_display.is_blank(result):
            ctx["result_json"], ctx["result_json_cut"] = result_display.shown_json(result)
        ctx["result_cut"] = result_display.fields_left_out(result)
        upstream = await upstream_step(db, row) if row["status"] == Status.CANCELLED else None
        ctx["error"] = display.error_summary(row, outcome["error_message"], user, upstream)
        if row.get("requires_approval") and row["completed_at"] and row["started_at"]:
            ctx["work"] = await approval_times(db, row)
        if ctx["work"] is None:
            ctx["ran"] = await run_time(db, row)
        if row["status"] == Status.WAITING_APPROVAL:  # the step's own approvers, not only admins
            may = await approval_actions.may_decide(db, user, row["id"], row["user_id"])
            ctx["actions"]["approve"] = ctx["actions"]["reject"] = may
    elif row.get("error_preview"):
        ctx["error"] = display.error_summary(row, row["error_preview"], user)
    if row["status"] in (Status.QUEUED, Status.IN_PROGRESS):
        usual = await usual_duration(db, row["type"])
        ctx["usually"] = about(usual) if usual is not None else None
    if ctx["actions"]["retry"]:
        ctx["retry_warning"] = RETRY_WARNING if str(row["id"]) in await failed_for_good(db, [row]) else None
    if ctx["actions"]["reschedule"]:
        ctx["timezones"] = timezone_names()
        ctx["reschedule_tz"] = user.timezone or "UTC"
    if with_history:
        ctx["history"] = await job_history(db, row["id"], user)
        ctx["history_oob"] = True
    return ctx


UPSTREAM_STEP = text("SELECT id, type, title, step_key FROM jobs WHERE id = :id AND user_id = :owner")
WORK_DONE = text(
    "SELECT max(at) FROM job_events WHERE job_id = :id AND kind = 'waiting_approval' AND at >= :started"
)


async def upstream_step(db: AsyncSession, row: Mapping[Any, Any]) -> dict[str, Any] | None:
    """The step whose failure cancelled ``row`` (``blocked_by``): ``{"job_id", "title"}`` to name and link
    it instead of its id."""
    if not row.get("blocked_by"):
        return None
    found = (
        (await db.execute(UPSTREAM_STEP, {"id": row["blocked_by"], "owner": row["user_id"]}))
        .mappings()
        .first()
    )
    if found is None:
        return None
    return {"job_id": found["id"], "title": display.job_title(dict(found), registry.get(found["type"]))}


ENDED_FROM = text(
    "SELECT from_status FROM job_events WHERE job_id = :id AND to_status = :status ORDER BY id DESC LIMIT 1"
)


async def run_time(db: AsyncSession, row: Mapping[Any, Any]) -> timedelta | None:
    """How long a finished job's last attempt ran (a timedelta): from its start to its end, when it ended
    running; ``None`` when it ended without running — cancelled while it waited for its first attempt,
    for a retry or for its parents — whose ``started_at`` is an earlier attempt's (or none): the time from
    there to the cancel was a wait, not work ("took 7.1 s" for a job that never ran)."""
    started, ended = row["started_at"], row["completed_at"]
    if started is None or ended is None or ended < started:
        return None
    ended_from = (await db.execute(ENDED_FROM, {"id": row["id"], "status": row["status"]})).scalar()
    return ended - started if ended_from == Status.IN_PROGRESS else None


async def approval_times(db: AsyncSession, row: Mapping[Any, Any]) -> dict[str, Any] | None:
    """An approval step's time apart from the wait for the decision: ``{"work", "waited"}`` (timedeltas)
    from its last run's start to the moment it asked for approval, and from then to the decision."""
    asked = (await db.execute(WORK_DONE, {"id": row["id"], "started": row["started_at"]})).scalar()
    if asked is None or asked > row["completed_at"]:
        return None
    return {"work": asked - row["started_at"], "waited": row["completed_at"] - asked}


USUAL_RUNS = 5
"""Finished runs of a type needed before a waiting or running job says how long it usually takes."""
USUAL_WINDOW = 200
"""The type's newest jobs the estimate looks at (through ``ix_jobs_type_id``): one bounded index scan,
however many jobs the type has, and an estimate that follows recent changes."""
USUAL_CACHE_SECS = 60.0
#: The median run time of a type's newest completed jobs (seconds) and how many there were.
USUAL_DURATION = text(
    f"""
    SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)) AS secs,
           count(*) AS runs
    FROM (SELECT status, started_at, completed_at FROM jobs WHERE type = :type
          ORDER BY id DESC LIMIT {USUAL_WINDOW}) recent
    WHERE status = 'completed' AND started_at IS NOT NULL AND completed_at >= started_at
    """
)
_usual_cache: dict[str, tuple[float, float | None]] = {}


async def usual_duration(db: AsyncSession, job_type: str) -> float | None:
    """How long a job of ``job_type`` usually runs (the median of its newest completed runs), or ``None``
    with fewer than :data:`USUAL_RUNS`. Cached for :data:`USUAL_CACHE_SECS` per type, so a page polled
    every 2 s asks at most once a minute."""
    now = time.monotonic()
    cached = _usual_cache.get(job_type)
    if cached is not None and cached[0] > now:
        return cached[1]
    row = (await db.execute(USUAL_DURATION, {"type": job_type})).mappings().one()
    secs = float(row["secs"]) if row["secs"] is not None and row["runs"] >= USUAL_RUNS else None
    if len(_usual_cache) > 1000:
        _usual_cache.clear()
    _usual_cache[job_type] = (now + USUAL_CACHE_SECS, secs)
    return secs


def about(secs: float) -> str:
    """A typical run time in round words: "a few seconds", "about 40 s", "about 3 min", "about 2 h"."""
    if secs < 10:
        return "a few seconds"
    if secs < 90:
        return f"about {int(round(secs / 10) * 10)} s"
    if secs < 90 * 60:
        return f"about {round(secs / 60)} min"
    return f"about {round(secs / 3600, 1):g} h"


PREVIEW_BYTES = 32 * 1024
"""Bytes of a CSV result read for its preview: enough for the first rows of any sensible file, and a
bounded read however large the file is."""
PREVIEW_ROWS = 8
PREVIEW_COLUMNS = 12
PREVIEW_FILES = 3
OWNED_FILES = text("SELECT id FROM files WHERE id = ANY(CAST(:ids AS uuid[])) AND user_id = :owner")


def _first_rows(path: Any, tab: bool) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(PREVIEW_BYTES)
    except OSError:
        return None
    marked = text_encoding.decode(head, errors="replace")
    text_ = marked[0] if marked is not None else head.decode("utf-8", errors="replace")
    lines = text_.splitlines()
    if len(head) == PREVIEW_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut in the middle
    delimiter = "\t" if tab else (csv.Sniffer().sniff(text_[:4096], ",;\t|").delimiter if lines else ",")
    rows = [r[:PREVIEW_COLUMNS] for r in csv.reader(lines[: PREVIEW_ROWS + 1], delimiter=delimiter)]
    if not rows:
        return None
    return {"columns": rows[0], "rows": rows[1:], "more": len(lines) > PREVIEW_ROWS + 1}


async def csv_previews(
    db: AsyncSession, files: FileStore | None, refs: list[dict[str, Any]], owner_id: int
) -> dict[str, Any]:
    """``{file id: {"columns", "rows", "more"}}``: the first rows of up to :data:`PREVIEW_FILES` CSV
    result files that belong to the job's owner (a result can name any id; only the owner's files are
    read), each a bounded read of :data:`PREVIEW_BYTES`."""
    wanted = [r for r in refs if result_display.preview_kind(r) == "csv"][:PREVIEW_FILES]
    if files is None or not wanted:
        return {}
    ids = [uuid.UUID(r["file_id"]) for r in wanted]
    owned = {str(r[0]) for r in (await db.execute(OWNED_FILES, {"ids": ids, "owner": owner_id})).all()}
    out: dict[str, Any] = {}
    for ref in wanted:
        if ref["file_id"] in owned:
            tab = str(ref.get("content_type", "")).startswith("text/tab")
            try:
                found = await asyncio.to_thread(_first_rows, files.path(ref["file_id"]), tab)
            except csv.Error:
                found = None
            if found:
                out[ref["file_id"]] = found
    return out


async def page_context(db: AsyncSession, job_id: Any, user: Any, **status_kw: Any) -> dict[str, Any]:
    """The whole job page: its status part (:func:`status_context`), the input as readable fields, the
    pipeline it belongs to, and the history."""
    row = full = await queue.read_job(db, JOB_PAGE, job_id, user)
    ctx = await status_context(db, row, user, **status_kw)
    spec = registry.get(row["type"])
    fields = forms.form_fields(spec.input_model) if spec else []
    ids = result_display.file_ids_in(full["input_data"], fields)
    names: dict[str, Any] = {}
    if ids:
        valid = []
        for i in ids:
            try:
                valid.append(uuid.UUID(i))
            except ValueError:
                continue
        for f in await rows_of(db, FILES_BY_ID, {"ids": valid}):
            if user.is_admin or f["user_id"] == user.id:
                names[str(f["id"])] = f
    if not row["title"] and spec is not None:  # submitted before jobs were named from their input
        named = naming.name_from_input(
            spec.input_model, full["input_data"], {k: v["name"] for k, v in names.items()}
        )
        ctx["title"] = named or ctx["title"]
    pipeline = None
    if row["pipeline_id"]:
        found = await rows_of(db, PIPELINE_NAME, {"id": row["pipeline_id"]})
        pipeline = found[0] if found else None
    ctx.update(
        spec=spec,
        input_items=result_display.input_items(full["input_data"], fields, names, zone(user.timezone)),
        input_cut=result_display.fields_left_out(full["input_data"]),
        # the JSON of an input cut as items: the fields the items leave out are read there
        input_json=result_display.shown_json(full["input_data"])
        if result_display.fields_left_out(full["input_data"])
        else (None, 0),
        pipeline=pipeline,
        history=await job_history(db, row["id"], user),
        history_oob=False,
        log=await job_log.log_view(db, row),
        approval=await approval_actions.record_of(db, row["id"]) if full["requires_approval"] else None,
    )
    return ctx
