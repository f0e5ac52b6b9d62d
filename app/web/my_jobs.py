"""My jobs: a person's own standalone jobs and pipelines, newest first, filtered by status and kind,
keyset-paginated ("Older"); unfinished rows carry a live status cell that polls only its own row. Above
them, on the first page, the person's newest :data:`RECENT_BATCHES` batches with their counts.

Each query reads one user's rows through ``ix_jobs_user_id_id`` / ``ix_pipelines_user_id_id`` and never
loads input, result or error text.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import functools
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import batches
from app.actions import access
from app.actions.pipelines import startable_templates
from app.actions.selection import not_a_status, unknown_type
from app.jobs.cursors import Cursor, read_cursor
from app.jobs.states import Status
from app.jobs.types import type_shown
from app.pipelines import get_template, started_column
from app.processors import registry
from app.web import display
from app.web.batch_page import STATUS_WORDS, batch_state
from app.web.deps import rows_of
from app.web.notifications import bell_url, viewer_bell

PAGE_SIZE = 25
RECENT_BATCHES = 5
"""Batches shown above the list; "All batches" leads to the rest."""
_LIST_JOB_COLUMNS = (
    "id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts, progress, "
    "progress_message, created_at, updated_at, started_at, completed_at"
)
_LIST_PIPELINE_COLUMNS = "id, name, template, status, created_at, updated_at, finished_at"

STATUS_FILTERS = (
    ("", "Any status"),
    (Status.QUEUED.value, "Waiting"),
    (Status.IN_PROGRESS.value, "Running"),
    (Status.WAITING_APPROVAL.value, "Needs approval"),
    (Status.COMPLETED.value, "Done"),
    (Status.FAILED.value, "Failed"),
    (Status.CANCELLED.value, "Cancelled"),
)
#: Job status filter → pipeline status (``None``: no pipeline matches that filter). A ``running``
#: pipeline none of whose steps has started reads "Waiting" (:func:`app.web.display.pipeline_state`), so
#: "Waiting" lists those and "Running" the others (:data:`PIPELINE_STARTED_FOR`).
PIPELINE_STATUS_FOR = {
    "queued": "running",
    "in_progress": "running",
    "waiting_approval": "waiting_approval",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}
PIPELINE_STARTED_FOR = {"queued": False, "in_progress": True}
"""Job status filter → whether the listed ``running`` pipelines have a started step."""
PIPELINE_TYPE_PREFIX = "pipeline:"


SEARCH_WINDOW = 5000
"""A search looks through the person's newest this many jobs (and pipelines) below the page's keyset
position: the scan stays bounded however many jobs they have, without an extension (``pg_trgm``) that a
PostgreSQL server may lack. "Older" pages search on from where the last one stopped, and where a window
ended with older rows unsearched, "Search older jobs" from there (:func:`search_boundary`)."""
SEARCH_MAX = 100
"""Characters of the search text used."""
SEARCHED_INPUT_CHARS = 2000
"""Characters of a job's input (as JSON text) that the search looks at."""


def like_pattern(words: str) -> str:
    """``words`` as an ``ILIKE … ESCAPE '\\'`` pattern matching them anywhere: ``%``, ``_`` and ``\\``
    typed by the person match themselves, not any text."""
    escaped = words.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@functools.lru_cache(maxsize=32)
def list_jobs_sql(*, status: bool, job_type: bool, after: bool, search: bool = False) -> Any:
    """The My jobs query for one combination of filters: ``WHERE user_id = … ORDER BY id DESC`` served by
    ``ix_jobs_user_id_id`` (each combination is its own statement, so the planner sees real values).
    A search filters the newest :data:`SEARCH_WINDOW` of those rows by name and input text."""
    where = ["user_id = :user_id", "pipeline_id IS NULL"]
    if status:
        where.append("status = :status")
    if job_type:
        where.append("type = :type")
    if after:
        where.append("id < :after")
    if not search:
        return text(
            f"SELECT {_LIST_JOB_COLUMNS} FROM jobs WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT :limit"
        )
    return text(
        f"""
        SELECT {_LIST_JOB_COLUMNS} FROM (
            SELECT {_LIST_JOB_COLUMNS}, input_data FROM jobs WHERE {" AND ".join(where)}
            ORDER BY id DESC LIMIT {SEARCH_WINDOW}
        ) recent
        WHERE title ILIKE :pattern ESCAPE '\\'
           OR left(input_data::text, {SEARCHED_INPUT_CHARS}) ILIKE :pattern ESCAPE '\\'
        ORDER BY id DESC LIMIT :limit
        """
    )


@functools.lru_cache(maxsize=32)
def list_pipelines_sql(
    *, status: bool, template: bool, after: bool, search: bool = False, started: bool | None = None
) -> Any:
    """The pipelines half of My jobs, served by ``ix_pipelines_user_id_id``; a search looks at the name and
    the input of the newest :data:`SEARCH_WINDOW`. Each row has ``started``
    (:func:`app.pipelines.started_column`: one bounded probe per listed pipeline that is ``running``);
    ``started`` True or False keeps only the pipelines that have (not) started, probing each ``running``
    one the scan meets."""
    where = ["user_id = :user_id"]
    if status:
        where.append("status = :status")
    if template:
        where.append("template = :template")
    if after:
        where.append("id < :after")
    if not search:
        sql = f"SELECT {_LIST_PIPELINE_COLUMNS} FROM pipelines WHERE {' AND '.join(where)}"
    else:
        sql = f"""
        SELECT {_LIST_PIPELINE_COLUMNS} FROM (
            SELECT {_LIST_PIPELINE_COLUMNS}, input_data FROM pipelines WHERE {" AND ".join(where)}
            ORDER BY id DESC LIMIT {SEARCH_WINDOW}
        ) recent
        WHERE (name ILIKE :pattern ESCAPE '\\'
           OR left(COALESCE(input_data::text, ''), {SEARCHED_INPUT_CHARS}) ILIKE :pattern ESCAPE '\\')
        """
    # the probe is taken on the rows the filters leave (the planner flattens these subqueries): with no
    # ``started`` filter, on the listed rows only, the Limit stopping the scan
    sql = f"SELECT *, {started_column('listed')} FROM ({sql}) listed"
    if started is not None:
        sql = f"SELECT * FROM ({sql}) probed WHERE {'' if started else 'NOT '}started"
    return text(f"{sql} ORDER BY id DESC LIMIT :limit")


@functools.lru_cache(maxsize=32)
def window_end_sql(table: str, *, status: bool, kind: bool, after: bool) -> Any:
    """The oldest row of ``table`` a search's window took and, when there is one, the next older: the
    person's rows under the same filters (and ``after``) at :data:`SEARCH_WINDOW` - 1 and
    :data:`SEARCH_WINDOW`, newest first (``ix_*_user_id_id``). Two rows: the window was full and older
    rows went unsearched."""
    where = ["user_id = :user_id"] + (["pipeline_id IS NULL"] if table == "jobs" else [])
    if status:
        where.append("status = :status")
    if kind:
        where.append("type = :type" if table == "jobs" else "template = :template")
    if after:
        where.append("id < :after")
    return text(
        f"SELECT id FROM {table} WHERE {' AND '.join(where)} ORDER BY id DESC OFFSET {SEARCH_WINDOW - 1} LIMIT 2"
    )


async def search_boundary(
    db: AsyncSession,
    user: Any,
    status: str | None,
    job_type: str | None,
    template: str | None,
    after_id: uuid.UUID | None,
    *,
    pipelines: bool,
) -> uuid.UUID | None:
    """Where a search stopped with rows left unsearched: the newest of the oldest rows that each full
    window (jobs, pipelines) took, or ``None`` when every row below ``after_id`` was looked at. Both
    kinds were searched from ``after_id`` down to it, so the page lists the matches at or above it, and
    "Search older jobs" goes on below it (``after=<it>``, an ordinary ``Cursor.ID``): no row is skipped,
    and none listed twice, however far one window reached past the other."""
    ends: list[uuid.UUID] = []
    if template is None:
        params = _params(user, after_id, status=status, type=job_type)
        sql = window_end_sql("jobs", status=bool(status), kind=bool(job_type), after=bool(after_id))
        ends += _full_window_end((await db.execute(sql, params)).scalars().all())
    if pipelines:
        pipeline_status = PIPELINE_STATUS_FOR.get(status or "")
        params = _params(user, after_id, status=pipeline_status, template=template)
        sql = window_end_sql(
            "pipelines", status=bool(pipeline_status), kind=bool(template), after=bool(after_id)
        )
        ends += _full_window_end((await db.execute(sql, params)).scalars().all())
    return max(ends) if ends else None


def _full_window_end(ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    return [ids[0]] if len(ids) > 1 else []


def job_list_item(row: Mapping[str, Any], bell: int | None = None) -> dict[str, Any]:
    """A My jobs row for a job (``bell``: the unread count the page shows, carried by its cell's poll)."""
    spec = registry.get(row["type"])
    state = display.job_state(row)
    return {
        "kind": "job",
        "id": row["id"],
        "title": display.job_title(row, spec),
        "subtitle": spec.title if spec is not None and row.get("title") else None,
        "url": f"/jobs/{row['id']}",
        "state": state,
        "created_at": row["created_at"],
        "cell_url": None
        if state["terminal"]
        else bell_url(f"/jobs/{row['id']}/cell?v={state['version']}", bell),
        "percent": state["percent"] if row["status"] == Status.IN_PROGRESS else None,
        "message": (row.get("progress_message") or "")[:80] if row["status"] == Status.IN_PROGRESS else None,
    }


STEP_COUNTS = text(
    """
    SELECT pipeline_id, count(*) AS total, count(*) FILTER (WHERE status = 'completed') AS done
    FROM jobs WHERE pipeline_id = ANY(CAST(:ids AS uuid[])) GROUP BY pipeline_id
    """
)


async def pipeline_list_items(
    db: AsyncSession, rows: list[Mapping[str, Any]], bell: int | None = None
) -> list[dict[str, Any]]:
    """My jobs rows for pipelines, with the step counts of the unfinished ones (one query). My jobs and
    a cell's poll both build the cell here, so the version the page puts in the poll's address is the
    one the poll compares: an unchanged pipeline's first poll is a 204, not a re-render."""
    live = [r["id"] for r in rows if r.get("finished_at") is None]
    counts = {c["pipeline_id"]: c for c in await rows_of(db, STEP_COUNTS, {"ids": live})} if live else {}
    items = []
    for r in rows:
        c = counts.get(r["id"])
        items.append(_pipeline_list_item(r, c["done"] if c else None, c["total"] if c else None, bell))
    return items


def _pipeline_list_item(
    row: Mapping[str, Any], done: int | None, total: int | None, bell: int | None
) -> dict[str, Any]:
    """A My jobs row for a pipeline (through :func:`pipeline_list_items`, which counts its steps)."""
    state = display.pipeline_state(row, None)
    version = display.fingerprint(state["version"], done, total)
    percent = round(100 * done / total) if total and done is not None else None
    # "Waiting · 0%" read as stuck too: the percentage is shown once a step has started
    shown = state["started"] and not state["finished"]
    return {
        "kind": "pipeline",
        "id": row["id"],
        "title": row["name"],
        "subtitle": "Pipeline",
        "url": f"/pipelines/{row['id']}",
        "state": {**state, "terminal": state["finished"], "version": version},
        "created_at": row["created_at"],
        "cell_url": None if state["finished"] else bell_url(f"/pipelines/{row['id']}/cell?v={version}", bell),
        "percent": percent if shown else None,
    }


def batch_list_item(view: batches.BatchView) -> dict[str, Any]:
    """A batch above the list: name, job type, counts by status in words, and its page."""
    spec = registry.get(view.row["type"])
    return {
        "id": view.id,
        "name": view.row["name"],
        "type": spec.title if spec is not None else view.row["type"],
        "url": f"/batches/{view.id}",
        "state": batch_state(view),
        "total": view.total,
        "percent": view.percent,
        "counts": [
            {"status": s, "label": STATUS_WORDS[s], "n": view.counts[s]}
            for s in batches.STATUSES
            if view.counts.get(s)
        ],
        "created_at": view.row["created_at"],
    }


async def recent_batches(db: AsyncSession, user: Any) -> tuple[list[dict[str, Any]], bool]:
    """The person's newest :data:`RECENT_BATCHES` batches, and whether they have more."""
    views = await batches.recent_views(db, user, RECENT_BATCHES + 1)
    return [batch_list_item(v) for v in views[:RECENT_BATCHES]], len(views) > RECENT_BATCHES


TEMPLATE_HAS_PIPELINES = text(
    "SELECT EXISTS (SELECT 1 FROM pipelines WHERE user_id = :user_id AND template = :template)"
)


async def _unknown_kind(
    db: AsyncSession, user: Any, job_type: str | None, template: str | None
) -> str | None:
    """Why the Kind filter names nothing, or ``None``: a job type as every list reads one
    (:func:`~app.actions.selection.unknown_type`), a pipeline that is no template and none of the person's
    pipelines. "Nothing matches these filters" hid a mistyped link's kind as if no job of it existed."""
    if job_type is not None:
        return await unknown_type(db, job_type)
    if template is None or get_template(template) is not None:
        return None
    params = {"user_id": user.id, "template": template}
    if (await db.execute(TEMPLATE_HAS_PIPELINES, params)).scalar():
        return None
    return f"unknown pipeline {type_shown(template)}: no pipeline has this name"


def _type_filter_options(user: Any) -> list[tuple[str, str]]:
    options = [("", "Any kind")]
    for spec in sorted(access.submittable_types(user), key=lambda s: s.title.lower()):
        options.append((spec.type, spec.title))
    for tpl in sorted(startable_templates(user), key=lambda t: t.title.lower()):
        options.append((PIPELINE_TYPE_PREFIX + tpl.name, f"{tpl.title} (pipeline)"))
    return options


def _params(user: Any, after_id: uuid.UUID | None, **filters: Any) -> dict[str, Any]:
    """The query parameters: the user, the page size, and only the filters that are set."""
    params: dict[str, Any] = {"user_id": user.id, "limit": PAGE_SIZE + 1}
    params.update({k: v for k, v in filters.items() if v})
    if after_id:
        params["after"] = after_id
    return params


async def _job_rows(
    db: AsyncSession,
    user: Any,
    status: str | None,
    job_type: str | None,
    after_id: uuid.UUID | None,
    search: str | None,
) -> list[Any]:
    sql = list_jobs_sql(
        status=bool(status), job_type=bool(job_type), after=bool(after_id), search=bool(search)
    )
    params = _params(user, after_id, status=status, type=job_type)
    if search:
        params["pattern"] = like_pattern(search)
    return await rows_of(db, sql, params)


async def _pipeline_rows(
    db: AsyncSession,
    user: Any,
    job_status: str | None,
    template: str | None,
    after_id: uuid.UUID | None,
    search: str | None,
) -> list[Any]:
    sql = list_pipelines_sql(
        status=bool(job_status),
        template=bool(template),
        after=bool(after_id),
        search=bool(search),
        started=PIPELINE_STARTED_FOR.get(job_status or ""),
    )
    params = _params(user, after_id, status=PIPELINE_STATUS_FOR.get(job_status or ""), template=template)
    if search:
        params["pattern"] = like_pattern(search)
    return await rows_of(db, sql, params)


def search_words(q: str | None) -> str | None:
    """The search text as used: spaces trimmed, NUL bytes dropped, at most :data:`SEARCH_MAX` characters."""
    words = " ".join((q or "").replace("\x00", "").split())[:SEARCH_MAX]
    return words or None


async def list_context(
    db: AsyncSession,
    user: Any,
    status: str | None,
    type_filter: str | None,
    after: str | None,
    q: str | None = None,
) -> dict[str, Any]:
    """My jobs: the user's own standalone jobs and pipelines merged newest first (both ids are UUIDv7,
    so id order is creation order), :data:`PAGE_SIZE` per page, keyset-paginated by ``after``; ``q``
    finds jobs by name and input text (:func:`list_jobs_sql`)."""
    asked = (status or "").strip()
    status = asked if asked in PIPELINE_STATUS_FOR else None
    # a status that is none lists nothing and says so beside the field (as the console does), never
    # every job as if no filter had been asked for
    errors = {"status": not_a_status(asked, PIPELINE_STATUS_FOR)} if asked and status is None else {}
    search = search_words(q)
    type_filter = (type_filter or "").strip()[:200] or None
    after_id = read_cursor(after, Cursor.ID)  # one it did not give is a 422, not the first page
    template = job_type = None
    if type_filter and type_filter.startswith(PIPELINE_TYPE_PREFIX):
        template = type_filter.removeprefix(PIPELINE_TYPE_PREFIX)
    elif type_filter:
        job_type = type_filter
    if (unknown := await _unknown_kind(db, user, job_type, template)) is not None:
        errors["type"] = unknown
    listed_jobs = template is None and not errors
    job_rows = await _job_rows(db, user, status, job_type, after_id, search) if listed_jobs else []
    pipeline_rows: list[Any] = []
    with_pipelines = (
        job_type is None and not errors and not (status and PIPELINE_STATUS_FOR.get(status) is None)
    )
    if with_pipelines:
        pipeline_rows = await _pipeline_rows(db, user, status, template, after_id, search)
    merged = sorted(
        [("job", r) for r in job_rows] + [("pipeline", r) for r in pipeline_rows],
        key=lambda kr: kr[1]["id"],
        reverse=True,
    )
    # a search looks through the newest SEARCH_WINDOW rows: where it ends with older rows unsearched, the
    # page says so and offers to search on below where it stopped, not "nothing (more) matches" as if
    # every job had been looked at
    boundary = None
    if search and not errors:
        boundary = await search_boundary(
            db, user, status, job_type, template, after_id, pipelines=with_pipelines
        )
    if boundary is not None:
        merged = [kr for kr in merged if kr[1]["id"] >= boundary]
    page = merged[:PAGE_SIZE]
    more = len(merged) > PAGE_SIZE
    cut = boundary is not None and not more
    query = {"status": status or "", "type": type_filter or "", "q": search or ""}
    recent, more_batches = await recent_batches(db, user) if after_id is None else ([], False)
    bell = await viewer_bell(db, user)  # carried by the live cells' polls
    listed = [r for kind, r in page if kind == "pipeline"]
    pipeline_items = {i["id"]: i for i in await pipeline_list_items(db, listed, bell)}
    return {
        "batches": recent,
        "more_batches": more_batches,
        "items": [job_list_item(r, bell) if kind == "job" else pipeline_items[r["id"]] for kind, r in page],
        "older_url": _list_url(query, page[-1][1]["id"]) if more and page else None,
        "newest_url": _list_url(query, None) if after_id else None,
        "status": status or "",
        "type_filter": type_filter or "",
        "status_options": STATUS_FILTERS,
        "type_options": _type_filter_options(user),
        "q": search or "",
        "search_window": SEARCH_WINDOW,
        "search_cut": cut,
        "search_older_url": _list_url(query, boundary) if cut else None,
        "errors": errors,
        "filtered": bool(status or type_filter or search),
        "paged": bool(after_id),
    }


def _list_url(query: dict[str, str], after: Any) -> str:
    params = {k: v for k, v in query.items() if v}
    if after is not None:
        params["after"] = str(after)
    return "/jobs" + (("?" + urlencode(params)) if params else "")
