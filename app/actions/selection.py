"""Which jobs an admin means: the job console's filter, and the SQL it turns into.

The filter (:class:`JobFilter`) is read from a query string, a form or a JSON object alike
(:func:`parse_filter`), so the console's list, its bulk actions and ``POST /api/jobs/bulk`` select the
same jobs. Each condition matches one index's leading column (``ix_jobs_status_id``, ``ix_jobs_type_id``,
``ix_jobs_user_id_id``, ``ix_jobs_pipeline_id``, ``ix_jobs_idempotency_key``, ``ix_jobs_live``); the
created-time range becomes an id range, since job ids are UUIDv7.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.emails import email_key
from app.jobs.queue.cancelled import IN_CANCELLED_PIPELINE
from app.jobs.states import LIVE, Status
from app.jobs.types import registry, type_shown

ID_SLACK = timedelta(minutes=1)
"""Margin around a created-time range when it is turned into an id range (ids and ``created_at`` are
taken a few milliseconds apart)."""
LIST_COLUMNS = (
    "id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts, progress, "
    "progress_message, user_id, pipeline_id, created_at, updated_at, completed_at, "
    "left(error_message, 300) AS error_excerpt, "
    f"{IN_CANCELLED_PIPELINE} AS pipeline_cancelled"
)
"""A list's columns; ``pipeline_cancelled``: the job is a step of a cancelled pipeline, which no retry
puts back (:func:`app.actions.jobs.allowed` offers none)."""
LIVE_SQL = "status IN ('queued', 'in_progress', 'waiting_approval')"
"""The live statuses, written as ``ix_jobs_live``'s own predicate so the planner can use it."""
STATUS_OPTIONS = (
    ("", "Any status"),
    (Status.QUEUED.value, "Waiting"),
    ("scheduled", "Scheduled or retrying later"),
    (Status.IN_PROGRESS.value, "Running"),
    (Status.WAITING_APPROVAL.value, "Needs approval"),
    (Status.COMPLETED.value, "Done"),
    (Status.FAILED.value, "Failed"),
    (Status.CANCELLED.value, "Cancelled"),
)
_STATUS_VALUES = {v for v, _ in STATUS_OPTIONS if v}
USER_BY_EMAIL = text("SELECT id FROM users WHERE email = :email")
TYPE_HAS_JOBS = text("SELECT EXISTS (SELECT 1 FROM jobs WHERE type = :type)")


def _zone(name: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def uuid7_floor(moment: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``moment``'s millisecond (every id created at or after it is ``>=``)."""
    ms = max(0, int(moment.timestamp() * 1000))
    return uuid.UUID(int=ms << 80)


@dataclass
class JobFilter:
    """The admin list's filters as typed by the admin (``raw``) and as parsed for SQL; ``errors`` maps a
    field name to a message shown next to it (the list is then empty rather than a 4xx)."""

    raw: dict[str, str] = field(default_factory=dict)
    status: str | None = None
    type: str | None = None
    owner_id: int | None = None
    pipeline_id: uuid.UUID | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    search_id: uuid.UUID | None = None
    search_key: str | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return any(self.raw.values())

    def url(self, path: str = "/admin/jobs", **extra: Any) -> str:
        params = {k: v for k, v in {**self.raw, **extra}.items() if v}
        return path + ("?" + urlencode(params) if params else "")


FILTER_FIELDS = ("status", "type", "owner", "pipeline", "created_from", "created_to", "q")


def _parse_local(value: str, tz: Any) -> datetime | None:
    """A filter's date and time in the admin's zone; ``None`` when it is not one, or lies outside the
    years ids can encode (1970–9000: job ids are UUIDv7, and the range becomes an id range)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if not 1970 <= moment.year <= 9000:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=tz)


def _unreadable(values: Mapping[str, Any]) -> dict[str, str]:
    """The fields of a JSON filter that cannot be read as a condition, with why."""
    errors: dict[str, str] = {}
    for key, value in values.items():
        if key not in FILTER_FIELDS:
            errors[str(key)[:50]] = f"not a filter field; the fields are {', '.join(FILTER_FIELDS)}"
        elif value is not None and not isinstance(value, str):
            errors[key] = "must be text"
    return errors


def _repeated(values: Mapping[str, Any]) -> dict[str, str]:
    """The filter fields a query string or a form names more than once. The input guard refuses a page's
    declared parameter given twice, but these are read from the whole query here, so
    ``?status=failed&status=queued`` was filtered by one of the two without a word."""
    getall = getattr(values, "getall", None)
    if getall is None:
        return {}
    return {
        name: "given more than once; it takes one value"
        for name in FILTER_FIELDS
        if len(getall(name, [])) > 1
    }


def not_a_status(value: str, statuses: Iterable[str]) -> str:
    """Why ``value`` is no status filter, naming the ``statuses`` a list takes: every job list's one
    wording (the console, My jobs), shown beside its Status field with a 422 — a filter left out listed
    everything as if it had been read."""
    return f"{value[:50]!r} is not a status; one of {', '.join(sorted(statuses))}"


async def unknown_type(db: AsyncSession, name: str | None) -> str | None:
    """Why ``name`` cannot be a filter on job type, in words, or ``None`` when it can: every list and
    action filtered by type (the job console and its bulk actions, ``GET /api/jobs``) reads it here.

    A type no longer registered whose jobs are still here stays a filter: they are listed and cancelled
    by it; any other name matches nothing, so "0 jobs" (acted on, or an empty list) would hide a typo.
    """
    if name is None or registry.get(name) is not None:
        return None
    if (await db.execute(TYPE_HAS_JOBS, {"type": name})).scalar():
        return None
    return f"unknown job type {type_shown(name)}: no job type has this name"


async def parse_filter(
    db: AsyncSession, values: Mapping[str, Any], user: Any, *, strict: bool = False
) -> JobFilter:
    """Read :data:`FILTER_FIELDS` from a query string, a form or (``strict``) a JSON object (times in the
    admin's time zone).

    Never raises for bad input: an unknown status, type or owner, a malformed pipeline id or time
    lands in ``errors`` under its field name (the page shows it beside the field, with a 422; a bulk
    action is refused) — a condition left out would list, or act on, jobs nobody meant. ``strict`` (a
    JSON object, which holds nothing else) also puts there a field that is not a filter field and a
    value that is not text.
    """
    raw = {k: str(values.get(k) or "").strip()[:200] for k in FILTER_FIELDS}
    errors = _unreadable(values) if strict else _repeated(values)
    status = raw["status"] if raw["status"] in _STATUS_VALUES else None
    if raw["status"] and status is None:
        errors.setdefault("status", not_a_status(raw["status"], _STATUS_VALUES))
    f = JobFilter(raw=raw, status=status, errors=errors)
    f.type = raw["type"] or None
    unknown = await unknown_type(db, f.type)
    if unknown is not None:
        f.errors["type"] = unknown
    if raw["owner"]:
        owner = (await db.execute(USER_BY_EMAIL, {"email": email_key(raw["owner"])})).scalar()
        if owner is None:
            f.errors["owner"] = "No user has this e-mail address."
        f.owner_id = owner
    if raw["pipeline"]:
        try:
            f.pipeline_id = uuid.UUID(raw["pipeline"])
        except ValueError:
            f.errors["pipeline"] = "Not a pipeline id: paste the id from the pipeline's page."
    tz = _zone(getattr(user, "timezone", None))
    for name in ("created_from", "created_to"):
        if raw[name]:
            moment = _parse_local(raw[name], tz)
            if moment is None:
                f.errors[name] = "Not a date and time between 1970 and 9000, e.g. 2026-11-29T20:25."
            setattr(f, name, moment)
    if f.created_from and f.created_to and f.created_to <= f.created_from:
        f.errors["created_to"] = "The end must be after the start."
    if raw["q"]:
        try:
            f.search_id = uuid.UUID(raw["q"])
        except ValueError:
            f.search_key = raw["q"]
    return f


def filter_where(
    f: JobFilter,
    *,
    after: uuid.UUID | None = None,
    eligible: str | None = None,
    upto: uuid.UUID | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """The WHERE conditions and parameters of ``f`` (plus keyset ``after``, an action's ``eligible``
    statuses and an ``upto`` id bound). Each condition matches one index's leading column; only fixed
    words are inlined."""
    where: list[str] = []
    params: dict[str, Any] = {}
    if f.status == "scheduled":
        where.append("status = 'queued' AND run_at > now()")
    elif f.status in LIVE:
        where.append(f"{LIVE_SQL} AND status = :status")
        params["status"] = f.status
    elif f.status:
        where.append("status = :status")
        params["status"] = f.status
    if f.type:
        where.append("type = :type")
        params["type"] = f.type
    if f.owner_id is not None:
        where.append("user_id = :owner_id")
        params["owner_id"] = f.owner_id
    if f.pipeline_id is not None:
        where.append("pipeline_id = :pipeline_id")
        params["pipeline_id"] = f.pipeline_id
    if f.created_from is not None:
        where.append("id >= :id_lo AND created_at >= :created_from")
        params["id_lo"] = uuid7_floor(f.created_from - ID_SLACK)
        params["created_from"] = f.created_from
    if f.created_to is not None:
        where.append("id < :id_hi AND created_at < :created_to")
        params["id_hi"] = uuid7_floor(f.created_to + ID_SLACK)
        params["created_to"] = f.created_to
    if f.search_id is not None:
        where.append("id = :search_id")
        params["search_id"] = f.search_id
    if f.search_key is not None:
        where.append("idempotency_key = :search_key")
        params["search_key"] = f.search_key
    if after is not None:
        where.append("id < :after")
        params["after"] = after
    if upto is not None:
        where.append("id <= :upto")
        params["upto"] = upto
    if eligible:
        where.append(eligible)
    return where, params


def list_sql(where: Sequence[str]) -> Any:
    """One page of the admin list, newest first (a backward scan of whichever index the filter leads)."""
    return _list_sql(tuple(where))


@functools.lru_cache(maxsize=256)
def _list_sql(where: tuple[str, ...]) -> Any:
    # one statement object per combination of filters (all values are parameters): compiled once
    cond = " AND ".join(where) or "true"
    return text(f"SELECT {LIST_COLUMNS} FROM jobs WHERE {cond} ORDER BY id DESC LIMIT :limit")


def capped_count_sql(where: Sequence[str]) -> Any:
    """How many rows match, counted up to ``:cap`` (an index scan that stops there)."""
    cond = " AND ".join(where) or "true"
    return text(f"SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {cond} ORDER BY id DESC LIMIT :cap) s")


def ids_sql(where: Sequence[str]) -> Any:
    cond = " AND ".join(where) or "true"
    return text(f"SELECT id FROM jobs WHERE {cond} ORDER BY id DESC LIMIT :limit")
