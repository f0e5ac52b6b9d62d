"""The admin job console: ``/admin/jobs`` and ``/admin/failed`` (issue 7 §1–3; case C17).

* ``GET /admin/jobs`` — every user's jobs, newest first, filtered by status, type, owner e-mail, pipeline
  and a created-from/to range, or searched by job id or idempotency key; keyset-paginated by id (UUIDv7,
  so id order is creation order). ``GET /admin/jobs/counts`` is the counts strip at the top (loaded and
  refreshed by htmx): live statuses counted over their partial indexes and capped at
  :data:`COUNT_CAP` ("10,000+"), finished ones counted up to the same cap and estimated by the planner
  above it — never ``COUNT(*)`` over the table, and no summary row that every transition would update.
* ``POST /admin/jobs/{id}/<action>`` — cancel, retry, run again, approve, reject (with a reason), rerun,
  run now, through :func:`app.web.jobs.perform_job_action`; the answer is the table row with the outcome
  in it (409 "Nothing changed: …" when the job had moved on).
* ``POST /admin/jobs/bulk/confirm`` then ``POST /admin/jobs/bulk`` — bulk retry or cancel of the ticked
  rows or of every row matching the filter: the first shows how many jobs will be affected, the second
  does it (at most :data:`BULK_MAX`, in batches of :data:`BULK_BATCH` through :mod:`app.jobs.queue`) and
  writes one audit entry and one admin-action alert with the count.
* ``GET /admin/failed`` — the newest :data:`FAILED_WINDOW` failed jobs grouped by type and normalised
  error, newest group first, each with "Retry all in this group" (confirm with the count, then bulk
  retry).

Every list query is served by an index (``pk_jobs``, ``ix_jobs_status_id``, ``ix_jobs_type_id``,
``ix_jobs_user_id_id``, ``ix_jobs_pipeline_id``, ``ix_jobs_idempotency_key``, ``ix_jobs_live``); the
created-time range is turned into an id range, since ids are UUIDv7 (``tests/test_admin_jobs.py``
checks the plans on 100,000 rows).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Template
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit, controls
from app.auth import requires_admin
from app.errors import BadInput, Conflict, Forbidden, NotFound
from app.jobs import outbox, queue
from app.jobs.states import LIVE, Status
from app.processors import registry
from app.web import DbSession, is_htmx, render, zone
from app.web import display as views
from app.web.jobs import (
    ACTIONS,
    CONFIRM,
    ActionOutcome,
    available_actions,
    client_ip,
    emails_for,
    parse_uuid,
    perform_job_action,
    request_id,
    settings_of,
)
from app.web.metrics import CAPPED_COUNT, EXACT_CAP, planner_estimate

PAGE_SIZE = 50
COUNT_CAP = EXACT_CAP
"""Statuses are counted exactly up to this many rows (shown as "10,000+" for live ones above it)."""
BULK_MAX = 2_000
"""At most this many jobs per bulk action; the confirm step says so when more match."""
BULK_BATCH = 100
"""Jobs acted on per batch inside a bulk action (each job in its own savepoint)."""
FAILED_WINDOW = 2_000
"""``/admin/failed`` groups only the newest this many failed jobs (one index range scan)."""
ERROR_SIGNATURE_MAX = 160
ID_SLACK = timedelta(minutes=1)
"""Margin around a created-time range when it is turned into an id range (ids and ``created_at`` are
taken a few milliseconds apart)."""

_LIST_COLUMNS = (
    "id, type, title, status, is_active, pending_parents, run_at, attempts, max_attempts, progress, "
    "progress_message, user_id, pipeline_id, created_at, updated_at, completed_at, "
    "left(error_message, 300) AS error_excerpt"
)
LIVE_SQL = "status IN ('queued', 'in_progress', 'waiting_approval')"
"""The live statuses, written as ``ix_jobs_live``'s own predicate so the planner can use it."""
BULK_ACTIONS = {
    "retry": {"verb": "Retry", "done": "Retried", "eligible": "status = 'failed'", "what": "failed"},
    "cancel": {
        "verb": "Cancel",
        "done": "Cancelled",
        "eligible": f"{LIVE_SQL} AND is_active",
        "what": "waiting, running or needing approval (and not already being stopped)",
    },
}
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
ROW = text(f"SELECT {_LIST_COLUMNS} FROM jobs WHERE id = :id")
ROWS_BY_ID = text("SELECT id, status, is_active FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))")


def uuid7_floor(moment: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``moment``'s millisecond (every id created at or after it is ``>=``)."""
    ms = max(0, int(moment.timestamp() * 1000))
    return uuid.UUID(int=ms << 80)


# --- filters ------------------------------------------------------------------------------------------------


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


async def parse_filter(db: AsyncSession, values: Mapping[str, Any], user: Any) -> JobFilter:
    """Read :data:`FILTER_FIELDS` from a query string or form (times in the admin's time zone).

    Never raises for bad input: an unknown status is ignored, an unknown owner, a malformed pipeline id
    or time lands in ``errors`` under its field name.
    """
    raw = {k: str(values.get(k) or "").strip()[:200] for k in FILTER_FIELDS}
    if raw["status"] not in _STATUS_VALUES:
        raw["status"] = ""
    f = JobFilter(raw=raw, status=raw["status"] or None)
    f.type = raw["type"] or None
    if raw["owner"]:
        owner = (await db.execute(USER_BY_EMAIL, {"email": raw["owner"].lower()})).scalar()
        if owner is None:
            f.errors["owner"] = "No user has this e-mail address."
        f.owner_id = owner
    if raw["pipeline"]:
        try:
            f.pipeline_id = uuid.UUID(raw["pipeline"])
        except ValueError:
            f.errors["pipeline"] = "Not a pipeline id: paste the id from the pipeline's page."
    tz = zone(getattr(user, "timezone", None))
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
    cond = " AND ".join(where) or "true"
    return text(f"SELECT {_LIST_COLUMNS} FROM jobs WHERE {cond} ORDER BY id DESC LIMIT :limit")


def capped_count_sql(where: Sequence[str]) -> Any:
    """How many rows match, counted up to ``:cap`` (an index scan that stops there)."""
    cond = " AND ".join(where) or "true"
    return text(f"SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {cond} ORDER BY id DESC LIMIT :cap) s")


def ids_sql(where: Sequence[str]) -> Any:
    cond = " AND ".join(where) or "true"
    return text(f"SELECT id FROM jobs WHERE {cond} ORDER BY id DESC LIMIT :limit")


# --- counts (issue 7 §1) ------------------------------------------------------------------------------------

#: Live statuses over their partial indexes (``ix_jobs_live``, ``ix_jobs_queued_run_at``), capped.
LIVE_COUNT_SQL = {
    status: text(
        f"SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {LIVE_SQL} AND status = '{status}' LIMIT {COUNT_CAP + 1}) s"
    )
    for status in ("queued", "in_progress", "waiting_approval")
}
SCHEDULED_COUNT = text(
    f"SELECT count(*) FROM (SELECT 1 FROM jobs WHERE status = 'queued' AND run_at > now() LIMIT {COUNT_CAP + 1}) s"
)


def count_words(n: int, *, exact: bool, capped: bool) -> str:
    """``1,234``; ``10,000+`` for a capped count; ``about 880,000`` for a planner estimate."""
    if capped:
        return f"{COUNT_CAP:,}+"
    return f"{n:,}" if exact else f"about {n:,}"


async def status_counts(db: AsyncSession) -> list[dict[str, Any]]:
    """Jobs per status for the strip at the top of ``/admin/jobs``: ``[{status, label, css, n, words,
    exact}]``. Live statuses: capped counts over partial indexes. Finished statuses: exact up to
    :data:`COUNT_CAP` (index-only scan of ``ix_jobs_status_id`` that stops there), the planner's estimate
    above it. At most 7 small index scans and 3 EXPLAINs; nothing proportional to the table (case C17)."""
    conn = await db.connection()
    out: list[dict[str, Any]] = []
    for status, css in (("queued", "waiting"), ("in_progress", "running"), ("waiting_approval", "approval")):
        n = int((await conn.execute(LIVE_COUNT_SQL[status])).scalar_one())
        out.append(_count(status, css, min(n, COUNT_CAP), exact=n <= COUNT_CAP, capped=n > COUNT_CAP))
    n = int((await conn.execute(SCHEDULED_COUNT)).scalar_one())
    out.insert(
        1,
        _count(
            "scheduled",
            "waiting",
            min(n, COUNT_CAP),
            exact=n <= COUNT_CAP,
            capped=n > COUNT_CAP,
            label="Scheduled",
        ),
    )
    for status, css in (("failed", "failed"), ("completed", "done"), ("cancelled", "cancelled")):
        n = int((await conn.execute(CAPPED_COUNT, {"status": status})).scalar_one())
        if n < EXACT_CAP:
            out.append(_count(status, css, n, exact=True, capped=False))
        else:
            estimate = max(int(await planner_estimate(conn, status)), n)
            out.append(_count(status, css, estimate, exact=False, capped=False))
    return out


def _count(status: str, css: str, n: int, *, exact: bool, capped: bool, label: str | None = None) -> dict:
    return {
        "status": status,
        "label": label or views.STATUS_WORDS.get(status, status),
        "css": css,
        "n": n,
        "exact": exact,
        "words": count_words(n, exact=exact, capped=capped),
        "url": "/admin/jobs?" + urlencode({"status": status}),
    }


# --- the list -----------------------------------------------------------------------------------------------


def row_item(row: Mapping[str, Any], emails: Mapping[int, str], user: Any) -> dict[str, Any]:
    """One table row: the job's columns plus its state, title, owner, error excerpt and buttons."""
    spec = registry.get(row["type"])
    state = views.job_state(row)
    excerpt = (row.get("error_excerpt") or "").strip().split("\n", 1)[0]
    return {
        "job": row,
        "id": row["id"],
        "short_id": str(row["id"])[-8:],
        "title": views.job_title(row, spec),
        "type_title": spec.title if spec is not None else row["type"],
        "owner": emails.get(row["user_id"], f"user {row['user_id']}"),
        "state": state,
        "error": excerpt[:140] + ("…" if len(excerpt) > 140 else ""),
        "actions": available_actions(row, state, user),
    }


def type_options() -> list[tuple[str, str]]:
    options = [("", "Any type")]
    for spec in sorted(registry.all(), key=lambda s: s.title.lower()):
        options.append((spec.type, f"{spec.title} ({spec.type})"))
    return options


async def list_context(db: AsyncSession, f: JobFilter, user: Any, after: str | None) -> dict[str, Any]:
    """The list page: :data:`PAGE_SIZE` rows newest first after the keyset ``after`` (a job id)."""
    try:
        after_id = uuid.UUID(after) if after else None
    except ValueError:
        after_id = None
    rows: list[Any] = []
    if not f.errors:
        where, params = filter_where(f, after=after_id)
        params["limit"] = PAGE_SIZE + 1
        rows = list((await db.execute(list_sql(where), params)).mappings().all())
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    emails = await emails_for(db, sorted({r["user_id"] for r in rows}))
    return {
        "filter": f,
        "rows": [row_item(r, emails, user) for r in rows],
        "older_url": f.url(after=str(rows[-1]["id"])) if more and rows else None,
        "newest_url": f.url() if after_id else None,
        "status_options": STATUS_OPTIONS,
        "type_options": type_options(),
        "confirms": CONFIRM,
        "bulk_max": BULK_MAX,
        "paged": bool(after_id),
    }


# --- bulk actions (issue 7 §2) ------------------------------------------------------------------------------


@dataclass
class BulkPlan:
    """What a bulk action will do: ``action`` (retry/cancel), ``scope`` (selected/filter/group), the ids
    it will try (``ids``), how many of them are eligible now (``count``), how many ticked rows are not
    (``ineligible``), whether more than :data:`BULK_MAX` matched (``truncated``) and the ``upto`` id bound
    that keeps rows created after the confirm step out."""

    action: str
    scope: str
    ids: list[uuid.UUID]
    count: int
    ineligible: int = 0
    truncated: bool = False
    upto: uuid.UUID | None = None
    extra: dict[str, str] = field(default_factory=dict)


async def plan_selected(db: AsyncSession, action: str, raw_ids: Sequence[str]) -> BulkPlan:
    """Ticked rows: every valid id is tried; ``count`` is how many are eligible for ``action`` now."""
    ids: list[uuid.UUID] = []
    for value in raw_ids:
        try:
            jid = uuid.UUID(str(value))
        except ValueError:
            continue
        if jid not in ids:
            ids.append(jid)
    ids = ids[:BULK_MAX]
    rows = (await db.execute(ROWS_BY_ID, {"ids": ids})).mappings().all() if ids else []
    eligible = sum(1 for r in rows if _eligible(action, r))
    return BulkPlan(action, "selected", ids, eligible, ineligible=len(ids) - eligible)


def _eligible(action: str, row: Mapping[str, Any]) -> bool:
    if action == "retry":
        return row["status"] == Status.FAILED
    return row["status"] in LIVE and bool(row["is_active"])


async def plan_filter(db: AsyncSession, action: str, f: JobFilter, upto: uuid.UUID | None) -> BulkPlan:
    """Every row matching ``f`` that ``action`` applies to (newest :data:`BULK_MAX`), up to id ``upto``
    (default: the newest matching id now)."""
    where, params = filter_where(f, eligible=BULK_ACTIONS[action]["eligible"], upto=upto)
    params["limit"] = BULK_MAX + 1
    ids = [r[0] for r in (await db.execute(ids_sql(where), params)).all()]
    truncated = len(ids) > BULK_MAX
    ids = ids[:BULK_MAX]
    return BulkPlan(
        action, "filter", ids, len(ids), truncated=truncated, upto=upto or (ids[0] if ids else None)
    )


@dataclass
class BulkOutcome:
    """``done`` and ``skipped`` job ids of a bulk action, and the sentence shown in place."""

    action: str
    done: list[uuid.UUID]
    skipped: list[uuid.UUID]
    message: str


async def run_bulk(
    db: AsyncSession,
    user: Any,
    plan: BulkPlan,
    *,
    expected: int | None,
    detail: dict[str, Any],
    ip: str | None = None,
) -> BulkOutcome:
    """Retry or cancel ``plan.ids`` through :func:`app.jobs.queue.retry` / :func:`app.jobs.queue.cancel`,
    :data:`BULK_BATCH` at a time, each job in its own savepoint so one that moved on ("already
    finished", "not failed") is skipped without undoing the others. Writes one audit entry
    (``jobs.bulk_retry`` / ``jobs.bulk_cancel``, ``count`` = done, outcome ``"N done, M skipped"``) and
    one admin-action alert, in the caller's transaction (issue 7 §2, §5).

    ``expected`` is the count shown at the confirm step: rows that stopped matching since then count as
    skipped, so the outcome adds up to what the admin confirmed.
    """
    if expected is not None and plan.scope != "selected":
        plan.ids = plan.ids[: max(0, expected)]  # never more than the admin confirmed
    done: list[uuid.UUID] = []
    skipped: list[uuid.UUID] = []
    act = queue.retry if plan.action == "retry" else queue.cancel
    for start in range(0, len(plan.ids), BULK_BATCH):
        for jid in plan.ids[start : start + BULK_BATCH]:
            try:
                async with db.begin_nested():
                    await act(db, jid, user)
            except (Conflict, NotFound, Forbidden):
                skipped.append(jid)
            else:
                done.append(jid)
    gone = max(0, (expected or 0) - len(done) - len(skipped)) if plan.scope != "selected" else 0
    n_skipped = len(skipped) + gone
    outcome = f"{len(done)} done, {n_skipped} skipped"
    audit_action = f"jobs.bulk_{plan.action}"
    full_detail = {
        **detail,
        "scope": plan.scope,
        "skipped": n_skipped,
        "skipped_ids": [str(j) for j in skipped[:20]],
    }
    await audit.record(
        db,
        user=user,
        action=audit_action,
        target_type="job",
        target_ids=done,
        count=len(done),
        outcome=outcome,
        detail=full_detail,
        ip=ip,
    )
    await outbox.record_admin_action(
        await db.connection(),
        admin_email=user.email,
        action=audit_action,
        count=len(done),
        job_ids=done,
        outcome=outcome,
        detail=full_detail,
    )
    verb = BULK_ACTIONS[plan.action]["done"]
    message = f"{verb} {len(done):,} job{'s' if len(done) != 1 else ''}"
    if plan.action == "cancel":
        message += " (running ones stop shortly)"
    message += f"; {n_skipped:,} skipped" + (" because they had moved on." if n_skipped else ".")
    return BulkOutcome(plan.action, done, skipped, message)


# --- failed jobs grouped (issue 7 §3) ---------------------------------------------------------------------

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_HEX_RE = re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.IGNORECASE)
_NUM_RE = re.compile(r"\d+")
FAILED_LATEST = text(
    f"SELECT id, type, user_id, left(error_message, 1000) AS error, completed_at FROM jobs "
    f"WHERE status = 'failed' ORDER BY id DESC LIMIT {FAILED_WINDOW}"
)
FAILED_UPTO = text(
    f"SELECT id, type, user_id, left(error_message, 1000) AS error, completed_at FROM jobs "
    f"WHERE status = 'failed' AND id <= :upto ORDER BY id DESC LIMIT {FAILED_WINDOW}"
)


def error_signature(message: str | None) -> str:
    """A failed job's error reduced to what repeats: the first non-empty line, ids, long hex strings and
    numbers masked (``<id>``, ``<hex>``, ``N``), cut to :data:`ERROR_SIGNATURE_MAX` characters."""
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    first = lines[0] if lines else "(no error message)"
    first = _UUID_RE.sub("<id>", first)
    first = _HEX_RE.sub("<hex>", first)
    first = _NUM_RE.sub("N", first)
    first = re.sub(r"\s+", " ", first)
    return first[:ERROR_SIGNATURE_MAX] + ("…" if len(first) > ERROR_SIGNATURE_MAX else "")


async def failed_groups(db: AsyncSession, upto: uuid.UUID | None = None) -> dict[str, Any]:
    """The newest :data:`FAILED_WINDOW` failed jobs (``ix_jobs_status_id``, one bounded range scan),
    grouped by ``(type, error_signature)``, the group with the newest failure first.

    Returns ``{"groups": [{key, type, type_title, signature, count, newest, newest_id, ids}], "scanned":
    n, "window_full": bool, "upto": newest id}``."""
    rows = (
        (await db.execute(FAILED_UPTO if upto else FAILED_LATEST, {"upto": upto} if upto else {}))
        .mappings()
        .all()
    )
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        sig = error_signature(r["error"])
        g = groups.get((r["type"], sig))
        if g is None:
            spec = registry.get(r["type"])
            g = groups[(r["type"], sig)] = {
                "key": views.fingerprint(r["type"], sig),
                "type": r["type"],
                "type_title": spec.title if spec is not None else r["type"],
                "signature": sig,
                "count": 0,
                "newest": r["completed_at"],
                "newest_id": r["id"],
                "ids": [],
            }
        g["count"] += 1
        g["ids"].append(r["id"])
    return {
        "groups": list(groups.values()),
        "scanned": len(rows),
        "window_full": len(rows) >= FAILED_WINDOW,
        "upto": rows[0]["id"] if rows else None,
        "window": FAILED_WINDOW,
    }


async def plan_group(db: AsyncSession, type_: str, signature: str, upto: uuid.UUID | None) -> BulkPlan:
    """The failed jobs of one group, within the same window the page showed (bounded by ``upto``)."""
    data = await failed_groups(db, upto)
    ids: list[uuid.UUID] = []
    for g in data["groups"]:
        if g["type"] == type_ and g["signature"] == signature:
            ids = g["ids"][:BULK_MAX]
    return BulkPlan(
        "retry", "group", ids, len(ids), upto=data["upto"], extra={"type": type_, "signature": signature}
    )


# --- the controller -----------------------------------------------------------------------------------------


def _form_str(form: Any, name: str, limit: int = 500) -> str:
    return str(form.get(name) or "").strip()[:limit]


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


class AdminJobsController(Controller):
    """``/admin/jobs`` and ``/admin/failed``; admins only (403 for others, sign-in page when signed out)."""

    path = "/admin"
    guards = [requires_admin]
    include_in_schema = False

    @get("/jobs", name="admin.jobs")
    async def jobs_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        after: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The list (htmx: just ``admin/_jobs_list.html``)."""
        f = await parse_filter(db_session, request.query_params, request.user)
        ctx = await list_context(db_session, f, request.user, after)
        # "Paused by <admin> at …" (issue 11 §3): for the filtered type, or every pause when unfiltered
        ctx["paused"] = await controls.paused_for(db_session, [f.type] if f.type else None)
        return render(request, "admin/jobs.html", ctx, fragment="admin/_jobs_list.html")

    @get("/jobs/counts", name="admin.jobs.counts")
    async def counts(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """The counts strip (a fragment; polled every 30 s by the page)."""
        return Template(
            template_name="admin/_jobs_counts.html",
            context={"counts": await status_counts(db_session), "cap": COUNT_CAP, "user": request.user},
        )

    @post([f"/jobs/{{job_id:str}}/{action}" for action in ACTIONS], name="admin.jobs.action", status_code=200)
    async def row_action(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """One job's action from its row; the answer is the row with the outcome in it (409 when nothing
        changed because the job had moved on; 422 for a reject without a reason; 404 unknown id)."""
        action = request.url.path.rstrip("/").rsplit("/", 1)[1]
        form = await request.form()
        user = request.user
        try:
            outcome = await perform_job_action(
                db_session,
                user,
                action,
                job_id,
                settings_of(request),
                reason=_form_str(form, "reason", 2000),
                ip=client_ip(request),
                req_id=request_id(request),
            )
        except BadInput as exc:
            message = exc.errors.get("reason", exc.detail)
            outcome = ActionOutcome(
                action, False, message[:1].upper() + message[1:] + ".", 422, parse_uuid(job_id)
            )
        if outcome.status_code == 409:
            await db_session.commit()  # keep the audit entry of the refused action
        await db_session.flush()
        row = (await db_session.execute(ROW, {"id": outcome.job_id})).mappings().first()
        if row is None:
            raise NotFound(f"No job with id {outcome.job_id}.")
        item = row_item(row, await emails_for(db_session, [row["user_id"]]), user)
        ctx = {
            "item": item,
            "notice": outcome.message,
            "notice_ok": outcome.ok,
            "new_job_id": outcome.new_job_id,
            "confirms": CONFIRM,
        }
        if is_htmx(request):
            return render(request, "admin/_jobs_row.html", ctx, status_code=outcome.status_code)
        return render(
            request, "admin/jobs_result.html", {**ctx, "back": "/admin/jobs"}, status_code=outcome.status_code
        )

    @post("/jobs/bulk/confirm", name="admin.jobs.bulk_confirm", status_code=200)
    async def bulk_confirm(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 1 of a bulk action: how many jobs it will affect, with Confirm / Back."""
        form = await request.form()
        plan, f = await self._plan(request, db_session, form, confirmed=False)
        ctx = {
            "plan": plan,
            "filter": f,
            "spec": BULK_ACTIONS[plan.action],
            "bulk_max": BULK_MAX,
            "target_url": "/admin/jobs/bulk",
            "back": f.url() if f else "/admin/jobs",
        }
        return self._panel(request, ctx)

    @post("/jobs/bulk", name="admin.jobs.bulk", status_code=200)
    async def bulk(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 2: do it; the outcome ("Retried 12 jobs; 1 skipped …") replaces the confirm panel."""
        form = await request.form()
        plan, f = await self._plan(request, db_session, form, confirmed=True)
        expected = _int(_form_str(form, "expected", 20))
        detail: dict[str, Any] = {}
        if f is not None:
            detail["filter"] = {k: v for k, v in f.raw.items() if v}
        detail.update(plan.extra)
        outcome = await run_bulk(
            db_session, request.user, plan, expected=expected, detail=detail, ip=client_ip(request)
        )
        ctx = {
            "outcome": outcome,
            "back": f.url() if f else "/admin/failed" if plan.scope == "group" else "/admin/jobs",
        }
        return self._panel(request, ctx)

    @get("/failed", name="admin.failed")
    async def failed_page(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Failed jobs grouped by type and error, newest group first."""
        return render(request, "admin/failed.html", await failed_groups(db_session))

    @post("/failed/retry/confirm", name="admin.failed.confirm", status_code=200)
    async def group_confirm(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 1 of "Retry all in this group": the count."""
        form = await request.form()
        plan = await _group_plan(db_session, form)
        ctx = {
            "plan": plan,
            "filter": None,
            "spec": BULK_ACTIONS["retry"],
            "bulk_max": BULK_MAX,
            "target_url": "/admin/failed/retry",
            "back": "/admin/failed",
        }
        return self._panel(request, ctx)

    @post("/failed/retry", name="admin.failed.retry", status_code=200)
    async def group_retry(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 2: retry the group's jobs (one audit entry ``jobs.bulk_retry``)."""
        form = await request.form()
        plan = await _group_plan(db_session, form)
        outcome = await run_bulk(
            db_session,
            request.user,
            plan,
            expected=_int(_form_str(form, "expected", 20)),
            detail=dict(plan.extra),
            ip=client_ip(request),
        )
        return self._panel(request, {"outcome": outcome, "back": "/admin/failed"})

    async def _plan(
        self, request: Request[Any, Any, Any], db: AsyncSession, form: Any, *, confirmed: bool
    ) -> tuple[BulkPlan, JobFilter | None]:
        action = _form_str(form, "action", 20)
        scope = _form_str(form, "scope", 20)
        if action not in BULK_ACTIONS or scope not in ("selected", "filter"):
            raise BadInput("Choose Retry or Cancel, for the ticked rows or for every matching row.")
        f = await parse_filter(db, form, request.user)
        if scope == "selected":
            ids = form.getall("ids", []) if hasattr(form, "getall") else form.get("ids") or []
            if not ids:
                raise BadInput("Tick at least one row first.")
            return await plan_selected(db, action, ids), f
        if f.errors:
            raise BadInput("Fix the filter first: " + " ".join(f.errors.values()))
        upto = _uuid_or_none(_form_str(form, "upto", 64)) if confirmed else None
        return await plan_filter(db, action, f, upto), f

    def _panel(self, request: Request[Any, Any, Any], ctx: dict[str, Any]) -> Template:
        if is_htmx(request):
            return render(request, "admin/_jobs_bulk.html", ctx)
        return render(request, "admin/jobs_result.html", ctx)


async def _group_plan(db: AsyncSession, form: Any) -> BulkPlan:
    """The failed group a "Retry all" form names (type, error signature, newest id shown)."""
    return await plan_group(
        db,
        _form_str(form, "type", 200),
        _form_str(form, "signature"),
        _uuid_or_none(_form_str(form, "upto", 64)),
    )


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
