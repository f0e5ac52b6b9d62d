"""``/admin``: workers and queue health, and the controls per job type (admins only).

* ``GET /admin`` — live workers with their running jobs and last heartbeat, jobs waiting per type, the
  oldest waiting job's age, failures in the last hour, throughput over the last hour, day or week
  (:data:`CHART_RANGES`) as inline SVG bars with a time and a count axis; pause/resume and limits per job type; recent control changes.
  ``GET /admin/health`` is the live part, polled by htmx every 5 s.
* ``POST /admin/controls/{pause,resume,limits}`` — through :mod:`app.actions.controls` (audited, with an
  admin notice).

Polled queries read small tables or partial indexes only, so a poll stays cheap on a table of millions
of jobs: ``workers``; ``ix_jobs_running``; ``ix_jobs_live`` (waiting per type, counted up to
:data:`WAITING_CAP` each); ``ix_jobs_queued_run_at`` (oldest waiting); ``throughput_samples`` (primary key
range, a row per worker per minute written by the heartbeat) for the chart; ``ix_jobs_finished`` (the
newest finished jobs, a bounded range) for the per-type figures and the failures of the last hour — a poll
never scans ``jobs`` or ``job_events``.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import QueryParameter
from litestar.response import Redirect, Template
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import auth, controls
from app.actions import controls as control_actions
from app.actions import trail
from app.errors import BadInput, Conflict, NotFound
from app.jobs import queue
from app.jobs.types import cut_type
from app.processors import registry
from app.web import DbSession, confirms, display, flash, is_htmx, render
from app.web.admin.waiting import WAITING_KINDS, waiting_kinds
from app.web.deps import action_form_errors, actor_of, client_ip, not_taken, settings_of
from app.web.form_shape import form_errors
from app.web.form_values import typed_values, whole_number
from app.web.input_guard import FORM_CHECKED

POLL = "every 5s"
"""How often the live part of ``/admin`` refreshes (paused while the tab is hidden, static/app.js)."""
WAITING_CAP = 10_000
"""Waiting jobs of one type are counted exactly up to this many, then shown as "10,000+"."""
WORKERS_SHOWN = 100
"""Live workers listed (longest running first); past it the page says there are more."""
JOBS_SHOWN = 300
"""Running jobs listed under their workers; past it the page says so and links to the full list."""
LIVE_WORKERS = text(
    f"""
    SELECT id, hostname, pid, concurrency, running, started_at, last_seen_at, stopping, listener_connected,
           version, greatest(0, extract(epoch FROM now() - last_seen_at))::int AS heartbeat_age,
           health->'sweep_failing' AS sweep_failing
    FROM workers WHERE last_seen_at > now() - make_interval(secs => :fresh)
    ORDER BY started_at LIMIT {WORKERS_SHOWN + 1}
    """
)
#: Running jobs of the live workers, through the partial index ``ix_jobs_running``.
RUNNING_JOBS = text(
    f"""
    SELECT id, type, title, locked_by, started_at, progress FROM jobs
    WHERE status = 'in_progress' AND locked_by = ANY(CAST(:ids AS text[]))
    ORDER BY started_at LIMIT {JOBS_SHOWN + 1}
    """
)
#: Distinct waiting types by a skip scan of ``ix_jobs_live`` (status, type), then a capped count each.
WAITING_BY_TYPE = text(
    f"""
    WITH RECURSIVE t(type) AS (
        (SELECT type FROM jobs WHERE status = 'queued' ORDER BY type LIMIT 1)
        UNION ALL
        SELECT (SELECT j.type FROM jobs j WHERE status = 'queued' AND j.type > t.type ORDER BY j.type LIMIT 1)
        FROM t WHERE t.type IS NOT NULL
    )
    SELECT t.type, c.n FROM t
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM jobs j WHERE status = 'queued' AND j.type = t.type LIMIT {WAITING_CAP + 1}
        ) s
    ) c
    WHERE t.type IS NOT NULL
    LIMIT 200
    """
)
RUNNING_BY_TYPE = text(
    "SELECT type, count(*) AS n FROM jobs WHERE status = 'in_progress' GROUP BY type ORDER BY type LIMIT 200"
)
#: The oldest due, claimable waiting job (``ix_jobs_queued_run_at`` in run_at order).
OLDEST_WAITING = text(
    """
    SELECT id, type, title, run_at, now() - run_at AS age FROM jobs
    WHERE status = 'queued' AND run_at <= now() AND is_active AND pending_parents = 0
    ORDER BY run_at LIMIT 1
    """
)
THROUGHPUT = text(
    """
    SELECT date_bin(make_interval(mins => :step), minute, :origin) AS minute,
           sum(completed) AS completed, sum(failed) AS failed
    FROM throughput_samples
    WHERE minute >= :origin
    GROUP BY 1 ORDER BY 1
    """
)
#: The chart's choices: label → (bars, minutes per bar). A range is a primary-key range of
#: ``throughput_samples`` (a row per worker per minute), at most a week of them.
CHART_RANGES = {"1h": (60, 1), "24h": (48, 30), "7d": (42, 240)}
CHART_DEFAULT = "1h"
HOUR_SAMPLE = 5_000
"""Per-type figures of the last hour are read from at most this many newest finished jobs."""
#: Per type over the last hour: finished and failed, median run time and median wait (due → started),
#: from the newest :data:`HOUR_SAMPLE` finished jobs through ``ix_jobs_finished`` (a bounded index range).
TYPE_HOUR = text(
    f"""
    SELECT type, count(*) FILTER (WHERE status = 'completed') AS done,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at))
               FILTER (WHERE started_at IS NOT NULL) AS median_run,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at))
               FILTER (WHERE started_at IS NOT NULL) AS median_wait,
           (SELECT count(*) FROM (
               SELECT 1 FROM jobs WHERE status IN ('completed', 'failed', 'cancelled')
               AND completed_at > now() - interval '1 hour' LIMIT {HOUR_SAMPLE + 1}) c) > {HOUR_SAMPLE} AS capped
    FROM (
        SELECT type, status, started_at, completed_at, run_at FROM jobs
        WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at > now() - interval '1 hour'
        ORDER BY completed_at DESC LIMIT {HOUR_SAMPLE}
    ) recent
    GROUP BY type ORDER BY type LIMIT 200
    """
)
FAILED_LAST_HOUR = text(
    "SELECT COALESCE(sum(failed), 0) FROM throughput_samples WHERE minute > now() - interval '1 hour'"
)
DB_NOW = text("SELECT date_trunc('minute', now())")

HEALTH_QUERIES = {
    "live_workers": LIVE_WORKERS,
    "running_jobs": RUNNING_JOBS,
    "waiting_by_type": WAITING_BY_TYPE,
    "running_by_type": RUNNING_BY_TYPE,
    "oldest_waiting": OLDEST_WAITING,
    "throughput": THROUGHPUT,
    "failed_last_hour": FAILED_LAST_HOUR,
    "type_hour": TYPE_HOUR,
    "types_without_workers": queue.TYPES_WITHOUT_WORKERS,
    "waiting_kinds": WAITING_KINDS,
}
"""Every query a poll of ``/admin/health`` runs, by name (a test EXPLAINs each on a large table)."""

CONTROL_ACTIONS = ("job_type.pause", "job_type.resume", "job_type.limits")
RECENT_CONTROLS = text(
    """
    SELECT id, at, user_email, action, target_ids, detail, outcome FROM audit_log
    WHERE action = ANY(CAST(:actions AS text[])) ORDER BY id DESC LIMIT 10
    """
)


def chart_origin(end_minute: datetime, bars: int, step: int) -> datetime:
    """The first bar's start: ``bars - 1`` steps of ``step`` minutes before the bar holding ``end_minute``
    (bars start at whole multiples of ``step`` minutes since midnight UTC)."""
    since_midnight = end_minute - end_minute.replace(hour=0, minute=0, second=0, microsecond=0)
    aligned = end_minute - timedelta(minutes=(since_midnight.total_seconds() // 60) % step)
    return aligned - timedelta(minutes=step * (bars - 1))


def throughput_chart(
    rows: Sequence[Mapping[Any, Any]], end_minute: datetime, minutes: int = 60, step: int = 1
) -> dict:
    """``minutes`` bars of ``step`` minutes each, the last one holding ``end_minute`` (missing ones are 0):
    ``{"bars": [{"minute", "completed", "failed", "x", "h_ok", "h_failed"}], "max", "total", "width",
    "height", "y_ticks", "x_ticks", "step"}``; heights are in SVG units of a ``width`` × ``height`` view
    box; the ticks label the count axis (0, half, peak) and the time axis (first, middle, last bar)."""
    by_minute = {r["minute"]: (int(r["completed"] or 0), int(r["failed"] or 0)) for r in rows}
    start = chart_origin(end_minute, minutes, step)
    values = []
    for i in range(minutes):
        m = start + timedelta(minutes=i * step)
        values.append((m, *by_minute.get(m, (0, 0))))
    peak = max([c + f for _, c, f in values] + [1])
    width, height, gap = minutes * 10, 60, 2
    bars = []
    for i, (m, c, f) in enumerate(values):
        h_ok = round(height * c / peak, 1)
        h_failed = round(height * f / peak, 1)
        bars.append(
            {
                "minute": m,
                "completed": c,
                "failed": f,
                "x": i * 10,
                "w": 10 - gap,
                "h_ok": h_ok,
                "h_failed": h_failed,
                "y_ok": round(height - h_ok, 1),
                "y_failed": round(height - h_ok - h_failed, 1),
            }
        )
    return {
        "bars": bars,
        "max": peak if any(c + f for _, c, f in values) else 0,
        "total": sum(c for _, c, _f in values),
        "total_failed": sum(f for _, _c, f in values),
        "width": width,
        "height": height,
        "step": step,
        "y_ticks": [
            {"value": v, "y": round(height - height * v / peak, 1)} for v in sorted({0, peak // 2, peak})
        ],
        "x_ticks": [{"at": bars[i]["minute"], "x": bars[i]["x"]} for i in (0, minutes // 2, minutes - 1)],
    }


async def waiting_by_type(db: AsyncSession) -> list[dict[str, Any]]:
    """``[{"type", "n", "capped"}]``: queued jobs per type, counted exactly up to :data:`WAITING_CAP`."""
    return [
        {"type": r["type"], "n": min(int(r["n"]), WAITING_CAP), "capped": int(r["n"]) > WAITING_CAP}
        for r in (await db.execute(WAITING_BY_TYPE)).mappings().all()
    ]


def sweep_failing(value: Any) -> list[dict[str, Any]]:
    """The parts of a worker's sweep that keep failing, as its heartbeat wrote them
    (:meth:`app.worker.sweep_parts.Parts.report`): ``[{"part", "what", "error", "since", "failures"}]``,
    ``since`` a datetime (``None`` when unreadable)."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        return []
    out = []
    for part, f in sorted(value.items()):
        if not isinstance(f, dict):
            continue
        try:
            since: datetime | None = datetime.fromisoformat(str(f.get("since")))
        except ValueError:
            since = None
        out.append(
            {
                "part": part,
                "what": str(f.get("what") or part),
                "error": str(f.get("error") or ""),
                "since": since,
                "failures": f.get("failures"),
            }
        )
    return out


def named(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A job the panel names, with its ``name`` (its title, else its type's) and ``short_id``: jobs of one
    type read alike by their type alone, so a person could not tell which one was meant."""
    return {**row, "name": display.job_title(row, registry.get(row["type"])), "short_id": str(row["id"])[-8:]}


async def health(db: AsyncSession, settings: Any, chart_range: str = CHART_DEFAULT) -> dict[str, Any]:
    """The live figures of ``/admin``: ``{"workers": [row + "jobs"], "waiting": [{"type", "n", "capped"}],
    "running": {type: n}, "oldest": row | None, "failed_hour": int, "chart": throughput_chart(...)}``."""
    fresh = 2 * settings.heartbeat_secs + 30
    workers = [dict(r) for r in (await db.execute(LIVE_WORKERS, {"fresh": fresh})).mappings().all()]
    # a list cut short says so (the count reads "100+", the list "and more"), never looks complete
    workers_more = len(workers) > WORKERS_SHOWN
    workers = workers[:WORKERS_SHOWN]
    jobs_by_worker: dict[str, list[Any]] = {}
    jobs_more = False
    if workers:
        rows = (await db.execute(RUNNING_JOBS, {"ids": [w["id"] for w in workers]})).mappings().all()
        jobs_more = len(rows) > JOBS_SHOWN
        for r in rows[:JOBS_SHOWN]:
            jobs_by_worker.setdefault(r["locked_by"], []).append(r)
    for w in workers:
        w["jobs"] = [named(j) for j in jobs_by_worker.get(w["id"], [])]
        w["sweep_failing"] = sweep_failing(w["sweep_failing"])
    waiting = await waiting_by_type(db)
    running = {r["type"]: int(r["n"]) for r in (await db.execute(RUNNING_BY_TYPE)).mappings().all()}
    oldest_row = (await db.execute(OLDEST_WAITING)).mappings().first()
    oldest = named(oldest_row) if oldest_row is not None else None
    end = (await db.execute(DB_NOW)).scalar_one()
    if chart_range not in CHART_RANGES:
        chart_range = CHART_DEFAULT
    bars, step = CHART_RANGES[chart_range]
    origin = chart_origin(end, bars, step)
    samples = (await db.execute(THROUGHPUT, {"step": step, "origin": origin})).mappings().all()
    hour = {r["type"]: dict(r) for r in (await db.execute(TYPE_HOUR)).mappings().all()}
    hour_capped = any(h["capped"] for h in hour.values())
    failed_hour = sum(int(h["failed"]) for h in hour.values())
    if hour_capped:
        # past the sample, the workers' per-minute tallies: written with each heartbeat (100 s apart by
        # default) and without jobs failed outside a worker (a rejection), so they lag behind the jobs;
        # from the jobs themselves the figure agrees with the per-type table and with what just happened
        failed_hour = max(failed_hour, int((await db.execute(FAILED_LAST_HOUR)).scalar_one()))
    unserved = await queue.types_without_workers(await queue.conn_of(db), fresh_secs=fresh)
    return {
        "unserved": unserved,
        "workers": workers,
        "workers_more": workers_more,
        "workers_shown": WORKERS_SHOWN,
        "jobs_more": jobs_more,
        "jobs_shown": JOBS_SHOWN,
        "waiting": waiting,
        "running": running,
        "oldest": oldest,
        "failed_hour": failed_hour,
        "hour": hour,
        "hour_capped": hour_capped,
        "chart": throughput_chart(samples, end, bars, step),
        "chart_range": chart_range,
        "chart_ranges": list(CHART_RANGES),
        "poll": POLL,
        "waiting_kinds": await waiting_kinds(db),
    }


async def controls_context(db: AsyncSession, waiting: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The pause/limit state of every registered type plus ``*`` (all types), and recent changes; the
    pause question names how many jobs wait (``waiting`` as :func:`health` counts it, read when not given)."""
    rows = await controls.controls(db)
    if waiting is None:
        waiting = await waiting_by_type(db)
    by_type = {w["type"]: w for w in waiting}
    types = [controls.ALL_TYPES] + sorted(registry.names())
    items = []
    for t in types:
        row = rows.get(t)
        spec = registry.get(t)
        if t == controls.ALL_TYPES:
            n, capped = sum(w["n"] for w in waiting), any(w["capped"] for w in waiting)
        else:
            n, capped = by_type.get(t, {}).get("n", 0), by_type.get(t, {}).get("capped", False)
        items.append(
            {
                "pause_question": confirms.pause_type(t, n, capped=capped, all_types=t == controls.ALL_TYPES),
                "type": t,
                "title": "Every job type" if t == controls.ALL_TYPES else (spec.title if spec else t),
                "row": row,
                "paused": bool(row and row["paused"]),
                "paused_by_all": t != controls.ALL_TYPES
                and controls.pause_of(rows, t) is not None
                and not (row and row["paused"]),
            }
        )
    recent = (await db.execute(RECENT_CONTROLS, {"actions": list(CONTROL_ACTIONS)})).mappings().all()
    return {"control_items": items, "recent_controls": recent}


NOTICE = "_notice"
"""The error key of a limits form's field that has no place of its own (the hidden type)."""

LIMIT_FIELDS = ("max_running", "max_per_minute", "max_running_per_user")
"""The limits form's fields, each shown again as typed when the form comes back with an error."""


def _int_or_none(raw: Any, field: str, errors: dict[str, str]) -> int | None:
    """A limit typed in the form: ``None`` when empty; a field error when not a whole number in range."""
    value = str(raw or "").strip()
    if not value:
        return None
    number = whole_number(value)
    if number is None:
        errors.setdefault(field, "Enter a whole number, or leave it empty for no limit.")
        return None
    if not 1 <= number <= controls.MAX_LIMIT:
        errors.setdefault(
            field,
            f"Enter a whole number from 1 to {controls.MAX_LIMIT:,}, or leave it empty for no limit "
            "(to stop a type, pause it).",
        )
        return None
    return number


class HealthController(Controller):
    """``/admin``: health, pause/resume and limits (see the module docstring); admins only."""

    path = "/admin"
    guards = [auth.requires_admin]
    include_in_schema = False

    async def _index(
        self,
        request: Request[Any, Any, Any],
        db: AsyncSession,
        *,
        errors: dict[str, str] | None = None,
        notice: str | None = None,
        notice_ok: bool = True,
        status_code: int = 200,
        fragment: bool = False,
        typed: dict[str, str] | None = None,
        chart_range: str = CHART_DEFAULT,
    ) -> Template:
        live = await health(db, settings_of(request), chart_range)
        ctx = {
            "typed": typed or {},
            **live,
            **await controls_context(db, live["waiting"]),
            "errors": errors or {},
            "form_type": None,
            "notice": notice,
            "notice_ok": notice_ok,
            "user_max_running": settings_of(request).user_max_running_jobs,
        }
        if errors:
            ctx["form_type"] = errors.pop("_type", None)
        if fragment and is_htmx(request):
            return render(request, "admin/_controls.html", ctx, status_code=status_code)
        return render(request, "admin/index.html", ctx, status_code=status_code)

    async def _done(
        self, request: Request[Any, Any, Any], db: AsyncSession, message: str
    ) -> Template | Redirect:
        """htmx gets the controls again with the notice; a plain form post is redirected to ``/admin``."""
        if is_htmx(request):
            await db.flush()
            return await self._index(request, db, notice=message, fragment=True)
        return flash.redirect(request, "/admin", message)

    @get("/", name="admin.index")
    async def index(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        chart_range: Annotated[str | None, QueryParameter(name="range")] = None,
    ) -> Template:
        """Workers and queue health (the chart over ``range``: 1h, 24h or 7d), controls, recent changes."""
        return await self._index(request, db_session, chart_range=chart_range or CHART_DEFAULT)

    @get("/health", name="admin.health")
    async def health_fragment(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        chart_range: Annotated[str | None, QueryParameter(name="range")] = None,
    ) -> Template:
        """The live part of ``/admin`` (htmx polls it; a plain GET gets the whole page)."""
        ctx = await health(db_session, settings_of(request), chart_range or CHART_DEFAULT)
        return render(
            request,
            "admin/index.html",
            {**ctx, **await controls_context(db_session, ctx["waiting"]), "errors": {}},
            fragment="admin/_health.html",
        )

    @post(
        ["/controls/pause", "/controls/resume"],
        name="admin.controls.pause",
        status_code=200,
        opt={FORM_CHECKED: True},
    )
    async def pause(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Pause or resume one job type (``*``: all); a type that cannot be taken (a hidden field) is a
        422 with nothing changed, said above the table."""
        form = await request.form()
        problem = action_form_errors(request, form, (), ("type",))
        job_type = str(form.get("type") or "").strip()
        paused = request.url.path.rstrip("/").endswith("/pause")
        if problem:
            await trail.refused_form(
                db_session,
                actor_of(request),
                "job_type.pause" if paused else "job_type.resume",
                problem,
                target_type="job_type",
                target_ids=[cut_type(job_type)],
            )
            return await self._index(
                request,
                db_session,
                notice=not_taken(problem),
                notice_ok=False,
                status_code=422,
                fragment=True,
            )
        act = control_actions.pause if paused else control_actions.resume
        try:
            await act(db_session, request.user, job_type, ip=client_ip(request))
        except (NotFound, Conflict) as exc:
            return await self._index(
                request,
                db_session,
                notice=exc.detail,
                notice_ok=False,
                status_code=exc.status_code,
                fragment=True,
            )
        label = control_actions.type_label(job_type)
        return await self._done(request, db_session, f"Paused {label}." if paused else f"Resumed {label}.")

    @post("/controls/limits", name="admin.controls.limits", status_code=200, opt={FORM_CHECKED: True})
    async def limits(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Set (empty removes) ``max_running`` and ``max_per_minute`` of one type; errors next to the fields."""
        form = await request.form()
        job_type = str(form.get("type") or "").strip()
        # text that cannot be stored beside its field; in the type (a hidden field) above the table
        errors = form_errors(request, form, LIMIT_FIELDS, NOTICE, hidden=("type",), nothing="nothing changed")
        notice = errors.pop(NOTICE, None)
        max_running = _int_or_none(form.get("max_running"), "max_running", errors)
        max_per_minute = _int_or_none(form.get("max_per_minute"), "max_per_minute", errors)
        per_user = _int_or_none(form.get("max_running_per_user"), "max_running_per_user", errors)
        asked = not errors and notice is None
        if asked:
            try:
                await control_actions.set_limits(
                    db_session,
                    request.user,
                    job_type,
                    max_running=max_running,
                    max_per_minute=max_per_minute,
                    max_running_per_user=per_user,
                    ip=client_ip(request),
                )
            except BadInput as exc:
                errors = dict(exc.errors) or {"max_running": exc.detail}
            except (NotFound, Conflict) as exc:
                return await self._index(
                    request,
                    db_session,
                    notice=exc.detail,
                    notice_ok=False,
                    status_code=exc.status_code,
                    fragment=True,
                )
        if (errors or notice is not None) and not asked:
            # refused by the form's own checks before the action was asked: the action's refusal would
            # have left this entry
            await trail.refused_form(
                db_session,
                actor_of(request),
                "job_type.limits",
                {**errors, **({NOTICE: notice} if notice else {})},
                target_type="job_type",
                target_ids=[cut_type(job_type)],
            )
            errors["_type"] = job_type
            # the form comes back with what was typed next to its error, not the stored value
            typed = typed_values(form, LIMIT_FIELDS)
            return await self._index(
                request,
                db_session,
                errors=errors,
                typed=typed,
                status_code=422,
                fragment=True,
                notice=notice or "Nothing changed: check the limits.",
                notice_ok=False,
            )
        return await self._done(request, db_session, f"Limits of {job_type} saved.")
