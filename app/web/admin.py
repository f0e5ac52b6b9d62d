"""The admin console (issue 7 §4–6; issue 11 §2–5): admins only (403 for others, sign-in for visitors).

* ``GET /admin`` — workers and queue health: live workers with their running jobs and last heartbeat,
  jobs waiting per type, the oldest waiting job's age, failures in the last hour, throughput over the
  last :data:`CHART_MINUTES` minutes as inline SVG bars; pause/resume and limits per job type; recent
  control changes. ``GET /admin/health`` is the live part, polled by htmx every 5 s.
* ``POST /admin/controls/{pause,resume,limits}`` — through :mod:`app.controls` (audited there).
* ``GET /admin/audit`` — the audit trail, keyset-paginated, filtered by action and admin.
* ``GET /admin/users`` and ``POST /admin/users…`` — create, make/revoke admin, disable/enable, issue and
  revoke API tokens. An admin cannot revoke their own admin flag or disable themselves.
* ``GET /admin/schedules`` and ``POST /admin/schedules…`` — list, create, enable/disable, delete.

Every change is audited (:func:`app.audit.record`) in the request's transaction. Polled queries read
small tables or partial indexes only (case C17): ``workers``; ``ix_jobs_running``; ``ix_jobs_live``
(waiting per type, counted up to :data:`WAITING_CAP` each); ``ix_jobs_queued_run_at`` (oldest waiting);
``throughput_samples`` (primary key range, a row per worker per minute written by the heartbeat) for the
chart and the failures of the last hour — so a poll never scans ``jobs`` or ``job_events``.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit, auth, controls, pipelines
from app.errors import BadInput, Conflict, NotFound
from app.processors import registry
from app.web import DbSession, is_htmx, render
from app.web.jobs import client_ip, settings_of, timezone_names

POLL = "every 5s"
"""How often the live part of ``/admin`` refreshes (paused while the tab is hidden, static/app.js)."""
CHART_MINUTES = 30
WAITING_CAP = 10_000
"""Waiting jobs of one type are counted exactly up to this many, then shown as "10,000+"."""
AUDIT_PAGE = 50
USERS_LIMIT = 500

# --- health queries ------------------------------------------------------------------------------------

LIVE_WORKERS = text(
    """
    SELECT id, hostname, pid, concurrency, running, started_at, last_seen_at, stopping, listener_connected,
           version
    FROM workers WHERE last_seen_at > now() - make_interval(secs => :fresh)
    ORDER BY started_at LIMIT 100
    """
)
#: Running jobs of the live workers, through the partial index ``ix_jobs_running``.
RUNNING_JOBS = text(
    """
    SELECT id, type, title, locked_by, started_at, progress FROM jobs
    WHERE status = 'in_progress' AND locked_by = ANY(CAST(:ids AS text[]))
    ORDER BY started_at LIMIT 300
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
    SELECT id, type, run_at, now() - run_at AS age FROM jobs
    WHERE status = 'queued' AND run_at <= now() AND is_active AND pending_parents = 0
    ORDER BY run_at LIMIT 1
    """
)
THROUGHPUT = text(
    """
    SELECT minute, sum(completed) AS completed, sum(failed) AS failed FROM throughput_samples
    WHERE minute >= date_trunc('minute', now()) - make_interval(mins => :minutes - 1)
    GROUP BY minute ORDER BY minute
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
}
"""Every query a poll of ``/admin/health`` runs, by name (the EXPLAIN test walks them, case C17)."""

CONTROL_ACTIONS = ("job_type.pause", "job_type.resume", "job_type.limits")
RECENT_CONTROLS = text(
    """
    SELECT id, at, user_email, action, target_ids, detail, outcome FROM audit_log
    WHERE action = ANY(CAST(:actions AS text[])) ORDER BY id DESC LIMIT 10
    """
)


def throughput_chart(
    rows: list[Mapping[str, Any]], end_minute: datetime, minutes: int = CHART_MINUTES
) -> dict:
    """Bars for the last ``minutes`` minutes ending at ``end_minute`` (missing minutes are 0):
    ``{"bars": [{"minute", "completed", "failed", "x", "h_ok", "h_failed", "label"}], "max", "total",
    "width", "height"}``; heights are in SVG units of a ``width`` × ``height`` view box (issue 7 §4)."""
    by_minute = {r["minute"]: (int(r["completed"] or 0), int(r["failed"] or 0)) for r in rows}
    start = end_minute - timedelta(minutes=minutes - 1)
    values = []
    for i in range(minutes):
        m = start + timedelta(minutes=i)
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
    }


async def health(db: AsyncSession, settings: Any) -> dict[str, Any]:
    """The live figures of ``/admin``: ``{"workers": [row + "jobs"], "waiting": [{"type", "n", "capped"}],
    "running": {type: n}, "oldest": row | None, "failed_hour": int, "chart": throughput_chart(...)}``."""
    fresh = 2 * settings.heartbeat_secs + 30
    workers = [dict(r) for r in (await db.execute(LIVE_WORKERS, {"fresh": fresh})).mappings().all()]
    jobs_by_worker: dict[str, list[Any]] = {}
    if workers:
        rows = (await db.execute(RUNNING_JOBS, {"ids": [w["id"] for w in workers]})).mappings().all()
        for r in rows:
            jobs_by_worker.setdefault(r["locked_by"], []).append(r)
    for w in workers:
        w["jobs"] = jobs_by_worker.get(w["id"], [])
    waiting = [
        {"type": r["type"], "n": min(int(r["n"]), WAITING_CAP), "capped": int(r["n"]) > WAITING_CAP}
        for r in (await db.execute(WAITING_BY_TYPE)).mappings().all()
    ]
    running = {r["type"]: int(r["n"]) for r in (await db.execute(RUNNING_BY_TYPE)).mappings().all()}
    oldest = (await db.execute(OLDEST_WAITING)).mappings().first()
    end = (await db.execute(DB_NOW)).scalar_one()
    samples = (await db.execute(THROUGHPUT, {"minutes": CHART_MINUTES})).mappings().all()
    failed_hour = int((await db.execute(FAILED_LAST_HOUR)).scalar_one())
    return {
        "workers": workers,
        "waiting": waiting,
        "running": running,
        "oldest": oldest,
        "failed_hour": failed_hour,
        "chart": throughput_chart(list(samples), end),
        "poll": POLL,
    }


async def controls_context(db: AsyncSession) -> dict[str, Any]:
    """The pause/limit state of every registered type plus ``*`` (all types), and recent changes."""
    rows = await controls.controls(db)
    types = [controls.ALL_TYPES] + sorted(registry.names())
    items = []
    for t in types:
        row = rows.get(t)
        spec = registry.get(t)
        items.append(
            {
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


def _int_or_none(raw: Any, field: str, errors: dict[str, str]) -> int | None:
    value = str(raw or "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        errors[field] = "Enter a whole number, or leave it empty for no limit."
        return None
    if not 1 <= number <= controls.MAX_LIMIT:
        errors[field] = (
            f"Enter a whole number from 1 to {controls.MAX_LIMIT:,}, or leave it empty for no limit "
            "(to stop a type, pause it)."
        )
        return None
    return number


# --- users -----------------------------------------------------------------------------------------------

USERS = text(
    f"""
    SELECT u.id, u.email, u.is_admin, u.is_active, u.created_at,
           (SELECT count(*) FROM web_sessions s WHERE s.user_id = u.id AND s.expires_at > now()) AS sessions
    FROM users u ORDER BY u.email LIMIT {USERS_LIMIT}
    """
)
TOKENS = text(
    """
    SELECT id, user_id, name, prefix, created_at, last_used_at FROM api_tokens
    WHERE revoked_at IS NULL AND user_id = ANY(CAST(:ids AS int[])) ORDER BY id
    """
)
USER_BY_ID = text("SELECT id, email, is_admin, is_active FROM users WHERE id = :id")
SET_ADMIN = text("UPDATE users SET is_admin = :v WHERE id = :id")
SET_ACTIVE = text("UPDATE users SET is_active = :v WHERE id = :id")
END_SESSIONS = text("DELETE FROM web_sessions WHERE user_id = :id")
TOKEN_OWNER = text("SELECT user_id FROM api_tokens WHERE id = :id AND revoked_at IS NULL")

USER_ACTIONS = {
    "make-admin": "user.make_admin",
    "revoke-admin": "user.revoke_admin",
    "disable": "user.disable",
    "enable": "user.enable",
}


async def users_context(db: AsyncSession) -> dict[str, Any]:
    users = [dict(r) for r in (await db.execute(USERS)).mappings().all()]
    tokens: dict[int, list[Any]] = {}
    if users:
        for t in (await db.execute(TOKENS, {"ids": [u["id"] for u in users]})).mappings().all():
            tokens.setdefault(t["user_id"], []).append(t)
    for u in users:
        u["tokens"] = tokens.get(u["id"], [])
    return {
        "users": users,
        "more_users": len(users) >= USERS_LIMIT,
        "errors": {},
        "values": {"email": "", "is_admin": False},
        "notice": None,
        "notice_ok": True,
        "secret": None,
        "min_password": auth.MIN_PASSWORD_LENGTH,
    }


async def _user(db: AsyncSession, user_id: int) -> Mapping[str, Any]:
    row = (await db.execute(USER_BY_ID, {"id": user_id})).mappings().first()
    if row is None:
        raise NotFound(f"No user with id {user_id}.")
    return row


# --- schedules -------------------------------------------------------------------------------------------

SCHEDULE_OWNERS = text("SELECT id, email FROM users WHERE id = ANY(CAST(:ids AS int[]))")


def target_options() -> list[tuple[str, str]]:
    """``(value, label)`` for the schedule form's target: ``type:<name>`` and ``template:<name>``."""
    options = [
        (f"type:{s.type}", f"{s.title} ({s.type})") for s in sorted(registry.all(), key=lambda s: s.type)
    ]
    options += [
        (f"template:{t.name}", f"{t.title} (pipeline {t.name})")
        for t in sorted(pipelines.all_templates(), key=lambda t: t.name)
    ]
    return options


async def schedules_context(db: AsyncSession, user: Any) -> dict[str, Any]:
    rows = await controls.list_schedules(db)
    owner_ids = sorted({r["user_id"] for r in rows})
    owners = {}
    if owner_ids:
        owners = {
            r["id"]: r["email"] for r in (await db.execute(SCHEDULE_OWNERS, {"ids": owner_ids})).mappings()
        }
    return {
        "schedules": rows,
        "owners": owners,
        "errors": {},
        "values": {
            "name": "",
            "cron": "",
            "timezone": user.timezone or "UTC",
            "target": "",
            "input_data": "{}",
            "owner": user.email,
            "enabled": True,
            "catch_up": False,
        },
        "targets": target_options(),
        "timezones": timezone_names(),
        "notice": None,
        "notice_ok": True,
    }


SCHEDULE_FIELD = {"type": "target", "template": "target", "job_type": "target", "input_data": "input_data"}


def _schedule_errors(exc: BadInput) -> dict[str, str]:
    """A :class:`BadInput` from :mod:`app.controls` as form errors keyed by the form's field names; errors
    of the target's own input fields go under ``input_data`` naming the field."""
    known = {"cron", "timezone", "name", "owner", "target", "input_data"}
    errors: dict[str, str] = {}
    for key, message in (exc.errors or {}).items():
        field = SCHEDULE_FIELD.get(key, key)
        if field in known:
            errors.setdefault(field, message)
        else:
            errors.setdefault("input_data", f"{key}: {message}")
    if not errors:
        errors["input_data"] = exc.detail
    return errors


# --- the controller ---------------------------------------------------------------------------------------


def _notice_redirect(path: str, notice: str) -> Redirect:
    return Redirect(f"{path}?{urlencode({'done': notice[:200]})}", status_code=303)


class AdminController(Controller):
    """The admin console pages (see the module docstring); admins only."""

    path = "/admin"
    guards = [auth.requires_admin]
    include_in_schema = False

    # --- health and controls ---

    async def _index(
        self,
        request: Request[Any, Any, Any],
        db: AsyncSession,
        *,
        errors: dict | None = None,
        notice: str | None = None,
        notice_ok: bool = True,
        status_code: int = 200,
        fragment: bool = False,
    ) -> Template:
        ctx = {
            **await health(db, settings_of(request)),
            **await controls_context(db),
            "errors": errors or {},
            "form_type": None,
            "notice": notice,
            "notice_ok": notice_ok,
        }
        if errors:
            ctx["form_type"] = errors.pop("_type", None)
        if fragment and is_htmx(request):
            return render(request, "admin/_controls.html", ctx, status_code=status_code)
        return render(request, "admin/index.html", ctx, status_code=status_code)

    @get("/", name="admin.index")
    async def index(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        done: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """Workers and queue health, controls, recent control changes."""
        return await self._index(request, db_session, notice=(done or "")[:200] or None)

    @get("/health", name="admin.health")
    async def health_fragment(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """The live part of ``/admin`` (htmx polls it; a plain GET gets the whole page)."""
        ctx = await health(db_session, settings_of(request))
        return render(
            request,
            "admin/index.html",
            {**ctx, **await controls_context(db_session), "errors": {}},
            fragment="admin/_health.html",
        )

    @post(["/controls/pause", "/controls/resume"], name="admin.controls.pause", status_code=200)
    async def pause(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Pause or resume one job type (``*``: all); audited by :func:`app.controls.set_paused`."""
        form = await request.form()
        job_type = str(form.get("type") or "").strip()
        paused = request.url.path.rstrip("/").endswith("/pause")
        try:
            await controls.set_paused(db_session, job_type, paused, request.user, ip=client_ip(request))
        except NotFound as exc:
            return await self._index(
                request, db_session, notice=exc.detail, notice_ok=False, status_code=404, fragment=True
            )
        label = "every job type" if job_type == controls.ALL_TYPES else job_type
        message = f"Paused {label}." if paused else f"Resumed {label}."
        if is_htmx(request):
            await db_session.flush()
            return await self._index(request, db_session, notice=message, fragment=True)
        return _notice_redirect("/admin", message)

    @post("/controls/limits", name="admin.controls.limits", status_code=200)
    async def limits(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Set (empty removes) ``max_running`` and ``max_per_minute`` of one type; errors next to the fields."""
        form = await request.form()
        job_type = str(form.get("type") or "").strip()
        errors: dict[str, str] = {}
        max_running = _int_or_none(form.get("max_running"), "max_running", errors)
        max_per_minute = _int_or_none(form.get("max_per_minute"), "max_per_minute", errors)
        if not errors:
            try:
                await controls.set_limits(
                    db_session,
                    job_type,
                    max_running=max_running,
                    max_per_minute=max_per_minute,
                    admin=request.user,
                    ip=client_ip(request),
                )
            except BadInput as exc:
                errors = {k: v for k, v in exc.errors.items()} or {"max_running": exc.detail}
            except NotFound as exc:
                return await self._index(
                    request, db_session, notice=exc.detail, notice_ok=False, status_code=404, fragment=True
                )
        if errors:
            errors["_type"] = job_type
            return await self._index(
                request,
                db_session,
                errors=errors,
                status_code=422,
                fragment=True,
                notice="Nothing changed: check the limits.",
                notice_ok=False,
            )
        message = f"Limits of {job_type} saved."
        if is_htmx(request):
            await db_session.flush()
            return await self._index(request, db_session, notice=message, fragment=True)
        return _notice_redirect("/admin", message)

    # --- audit ---

    @get("/audit", name="admin.audit")
    async def audit_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        action: Annotated[str | None, QueryParameter()] = None,
        user_filter: Annotated[str | None, QueryParameter(name="user")] = None,
        before: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The audit trail, newest first, :data:`AUDIT_PAGE` per page ("Older" keeps the filters)."""
        action = (action or "").strip()[:100] or None
        email = (user_filter or "").strip().lower()[:254] or None
        try:
            before_id = int(before) if before else None
            if before_id is not None and not 0 < before_id < 2**63:
                before_id = None  # not an entry id (bigint): start from the newest
        except ValueError:
            before_id = None
        rows = await audit.entries(
            db_session, before=before_id, limit=AUDIT_PAGE + 1, action=action, user_email=email
        )
        more = len(rows) > AUDIT_PAGE
        rows = rows[:AUDIT_PAGE]
        query = {k: v for k, v in {"action": action, "user": email}.items() if v}
        older = None
        if more and rows:
            older = "/admin/audit?" + urlencode({**query, "before": rows[-1]["id"]})
        actions = sorted(
            {
                *jobs_actions(),
                *CONTROL_ACTIONS,
                *USER_ACTIONS.values(),
                "user.create",
                "token.create",
                "token.revoke",
                "schedule.create",
                "schedule.enable",
                "schedule.disable",
                "schedule.delete",
                "alerts.test",
                "jobs.bulk_retry",
                "jobs.bulk_cancel",
            }
        )
        return render(
            request,
            "admin/audit.html",
            {
                "entries": [_audit_line(r) for r in rows],
                "older_url": older,
                "newest_url": ("/admin/audit?" + urlencode(query)) if before_id else None,
                "action": action or "",
                "user_filter": email or "",
                "actions": actions,
            },
        )

    # --- users ---

    @get("/users", name="admin.users")
    async def users_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        done: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """Users with their admin flag, state, sessions and live API tokens, and the create form."""
        ctx = await users_context(db_session)
        ctx["notice"] = (done or "")[:200] or None
        return render(request, "admin/users.html", ctx)

    @post("/users", name="admin.users.create", status_code=200)
    async def create_user(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Create a user; a blank password is generated and shown once. Errors next to the fields (422)."""
        form = await request.form()
        email = str(form.get("email") or "")
        password = str(form.get("password") or "")
        make_admin = form.get("is_admin") in ("on", "true", "1")
        generated = not password
        if generated:
            password = auth.generate_password()
        errors: dict[str, str] = {}
        try:
            async with db_session.begin_nested():
                new = await auth.create_user(db_session, email, password, is_admin=make_admin)
                await audit.record(
                    db_session,
                    user=request.user,
                    action="user.create",
                    target_type="user",
                    target_ids=[new.id],
                    detail={"email": new.email, "admin": make_admin},
                    ip=client_ip(request),
                )
        except BadInput as exc:
            errors = dict(exc.errors) or {"email": exc.detail}
        except Conflict as exc:
            errors = {"email": exc.detail}
        ctx = await users_context(db_session)
        if errors:
            ctx.update(errors=errors, values={"email": email[:254], "is_admin": make_admin})
            return render(request, "admin/users.html", ctx, status_code=422)
        ctx["notice"] = f"Created {new.email}" + (" (admin)." if make_admin else ".")
        if generated:
            ctx["secret"] = {"label": f"Password for {new.email}", "value": password}
        return render(request, "admin/users.html", ctx)

    @post([f"/users/{{user_id:int}}/{a}" for a in USER_ACTIONS], name="admin.users.action", status_code=200)
    async def user_action(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> Template | Redirect:
        """Make/revoke admin, disable (ends their sessions; tokens stop working) or enable a user. Your own
        admin flag and account are refused with 409 (recorded as refused)."""
        action = request.url.path.rstrip("/").rsplit("/", 1)[1]
        me = request.user
        target = await _user(db_session, user_id)
        audit_action = USER_ACTIONS[action]
        if target["id"] == me.id and action in ("revoke-admin", "disable"):
            what = "revoke your own admin rights" if action == "revoke-admin" else "disable your own account"
            message = f"Nothing changed: you cannot {what}. Ask another admin."
            await audit.record(
                db_session,
                user=me,
                action=audit_action,
                target_type="user",
                target_ids=[target["id"]],
                outcome="refused: it is your own account",
                ip=client_ip(request),
            )
            await db_session.commit()
            ctx = await users_context(db_session)
            ctx.update(notice=message, notice_ok=False)
            return render(request, "admin/users.html", ctx, status_code=409)
        if action in ("make-admin", "revoke-admin"):
            await db_session.execute(SET_ADMIN, {"v": action == "make-admin", "id": target["id"]})
        else:
            await db_session.execute(SET_ACTIVE, {"v": action == "enable", "id": target["id"]})
        ended = 0
        if action == "disable":
            ended = (await db_session.execute(END_SESSIONS, {"id": target["id"]})).rowcount or 0
        await audit.record(
            db_session,
            user=me,
            action=audit_action,
            target_type="user",
            target_ids=[target["id"]],
            detail={"email": target["email"], **({"sessions_ended": ended} if action == "disable" else {})},
            ip=client_ip(request),
        )
        words = {
            "make-admin": f"{target['email']} is now an admin.",
            "revoke-admin": f"{target['email']} is no longer an admin.",
            "disable": f"{target['email']} is disabled: signed out everywhere; sign-in and API tokens refused.",
            "enable": f"{target['email']} can sign in again.",
        }
        return _notice_redirect("/admin/users", words[action])

    @post("/users/{user_id:int}/tokens", name="admin.users.token", status_code=200)
    async def issue_token(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> Template:
        """Issue an API token for the user; the plaintext is shown once on the page that answers."""
        form = await request.form()
        target = await _user(db_session, user_id)
        name = " ".join(str(form.get("name") or "").split())[:100]
        token, token_id = await auth.create_token(db_session, target["id"], name)
        await audit.record(
            db_session,
            user=request.user,
            action="token.create",
            target_type="user",
            target_ids=[target["id"]],
            detail={"token_id": token_id, "name": name},
            ip=client_ip(request),
        )
        ctx = await users_context(db_session)
        ctx["notice"] = f"API token issued for {target['email']}."
        ctx["secret"] = {"label": f"API token for {target['email']}", "value": token}
        return render(request, "admin/users.html", ctx)

    @post("/tokens/{token_id:int}/revoke", name="admin.tokens.revoke", status_code=200)
    async def revoke_token(
        self, request: Request[Any, Any, Any], db_session: DbSession, token_id: FromPath[int]
    ) -> Redirect:
        """Revoke an API token (any user's)."""
        owner = (await db_session.execute(TOKEN_OWNER, {"id": token_id})).scalar()
        await auth.revoke_token(db_session, token_id)
        await audit.record(
            db_session,
            user=request.user,
            action="token.revoke",
            target_type="user",
            target_ids=[owner] if owner else [],
            detail={"token_id": token_id},
            ip=client_ip(request),
        )
        return _notice_redirect("/admin/users", "API token revoked.")

    # --- schedules ---

    @get("/schedules", name="admin.schedules")
    async def schedules_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        done: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """Schedules (code and UI) with next and last runs, and the create form."""
        ctx = await schedules_context(db_session, request.user)
        ctx["notice"] = (done or "")[:200] or None
        return render(request, "admin/schedules.html", ctx)

    @post("/schedules", name="admin.schedules.create", status_code=303)
    async def create_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession
    ) -> Template | Redirect:
        """Create a schedule; invalid cron, time zone, target, input JSON or owner → errors next to the
        fields (422)."""
        form = await request.form()
        values = {
            "name": str(form.get("name") or "")[:300],
            "cron": str(form.get("cron") or "")[:300],
            "timezone": str(form.get("timezone") or "").strip()[:100],
            "target": str(form.get("target") or ""),
            "input_data": str(form.get("input_data") or "").strip()[:100_000],
            "owner": str(form.get("owner") or "").strip()[:254],
            "enabled": form.get("enabled") in ("on", "true", "1"),
            "catch_up": form.get("catch_up") in ("on", "true", "1"),
        }
        errors: dict[str, str] = {}
        kind, _, target = values["target"].partition(":")
        if kind not in ("type", "template") or not target:
            errors["target"] = "Choose a job type or a pipeline template."
        input_data: Any = {}
        try:
            input_data = json.loads(values["input_data"] or "{}")
            if not isinstance(input_data, dict):
                errors["input_data"] = 'Enter a JSON object, e.g. {"url": "https://example.com"}.'
        except ValueError as exc:
            errors["input_data"] = f"Not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})."
        owner = request.user
        if values["owner"] and values["owner"].lower() != request.user.email:
            try:
                owner = await auth.get_user_by_email(db_session, values["owner"])
            except NotFound as exc:
                errors["owner"] = exc.detail
        if not values["timezone"]:
            errors["timezone"] = "Choose a time zone."
        if not errors:
            try:
                async with db_session.begin_nested():
                    row = await controls.create_schedule(
                        db_session,
                        cron=values["cron"],
                        timezone=values["timezone"],
                        job_type=target if kind == "type" else None,
                        template=target if kind == "template" else None,
                        input_data=input_data,
                        enabled=values["enabled"],
                        catch_up=values["catch_up"],
                        name=values["name"],
                        owner=owner,
                        admin=request.user,
                        settings=settings_of(request),
                        ip=client_ip(request),
                    )
            except BadInput as exc:
                errors = _schedule_errors(exc)
        if errors:
            ctx = await schedules_context(db_session, request.user)
            ctx.update(errors=errors, values=values)
            return render(request, "admin/schedules.html", ctx, status_code=422)
        return _notice_redirect("/admin/schedules", f"Schedule {row['name']!r} created.")

    @post(
        ["/schedules/{schedule_id:str}/enable", "/schedules/{schedule_id:str}/disable"],
        name="admin.schedules.enable",
        status_code=303,
    )
    async def enable_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Redirect:
        """Enable (next run computed from now, no back-fill) or disable a schedule."""
        enabled = request.url.path.rstrip("/").endswith("/enable")
        row = await controls.set_schedule_enabled(
            db_session, schedule_id, enabled, request.user, ip=client_ip(request)
        )
        return _notice_redirect(
            "/admin/schedules", f"Schedule {row['name']!r} {'enabled' if enabled else 'disabled'}."
        )

    @post("/schedules/{schedule_id:str}/delete", name="admin.schedules.delete", status_code=303)
    async def delete_schedule(
        self, request: Request[Any, Any, Any], db_session: DbSession, schedule_id: FromPath[str]
    ) -> Template | Redirect:
        """Delete a UI schedule; a code-defined one answers 409 with the rule (disable it instead)."""
        try:
            row = await controls.get_schedule(db_session, schedule_id)
            await controls.delete_schedule(db_session, schedule_id, request.user, ip=client_ip(request))
        except Conflict as exc:
            ctx = await schedules_context(db_session, request.user)
            ctx.update(notice="Nothing changed: " + exc.detail, notice_ok=False)
            return render(request, "admin/schedules.html", ctx, status_code=409)
        return _notice_redirect("/admin/schedules", f"Schedule {row['name']!r} deleted.")


def jobs_actions() -> list[str]:
    """The audit action names of the job actions (``job.cancel``, …, ``job.reschedule``)."""
    from app.web.jobs import ACTIONS

    return ["job." + a.replace("-", "_") for a in ACTIONS] + ["job.reschedule"]


ACTION_WORDS = {
    "job.cancel": "Cancelled a job",
    "job.retry": "Retried a job",
    "job.run_again": "Ran a job again",
    "job.approve": "Approved a step",
    "job.reject": "Rejected a step",
    "job.rerun": "Sent a step back to run again",
    "job.run_now": "Started a scheduled job now",
    "job.reschedule": "Rescheduled a job",
    "jobs.bulk_retry": "Retried jobs in bulk",
    "jobs.bulk_cancel": "Cancelled jobs in bulk",
    "job_type.pause": "Paused a job type",
    "job_type.resume": "Resumed a job type",
    "job_type.limits": "Changed limits",
    "user.create": "Created a user",
    "user.make_admin": "Made an admin",
    "user.revoke_admin": "Revoked admin rights",
    "user.disable": "Disabled a user",
    "user.enable": "Enabled a user",
    "token.create": "Issued an API token",
    "token.revoke": "Revoked an API token",
    "schedule.create": "Created a schedule",
    "schedule.enable": "Enabled a schedule",
    "schedule.disable": "Disabled a schedule",
    "schedule.delete": "Deleted a schedule",
    "alerts.test": "Sent a test alert",
}


def _target_links(row: Mapping[str, Any]) -> list[dict[str, str | None]]:
    """Links to what an entry acted on: job pages, users, schedules; job types as plain words."""
    links = []
    for tid in (row["target_ids"] or [])[:20]:
        tid = str(tid)
        href = None
        if row["target_type"] == "job":
            try:
                href = f"/jobs/{uuid.UUID(tid)}"
            except ValueError:
                href = None
        elif row["target_type"] == "user" and tid.isdigit():
            href = f"/admin/users#user-{tid}"
        elif row["target_type"] == "schedule":
            href = "/admin/schedules#schedule-" + tid if _is_uuid(tid) else None
        links.append({"text": tid, "href": href})
    return links


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
        return True
    except ValueError:
        return False


def _audit_line(row: Mapping[str, Any]) -> dict[str, Any]:
    detail = row["detail"]
    return {
        "id": row["id"],
        "at": row["at"],
        "who": row["user_email"],
        "what": ACTION_WORDS.get(row["action"], row["action"]),
        "action": row["action"],
        "targets": _target_links(row),
        "more_targets": max(0, int(row["count"] or 0) - min(20, len(row["target_ids"] or []))),
        "count": row["count"],
        "outcome": row["outcome"],
        "ok": row["outcome"] == "ok",
        "detail": json.dumps(detail, ensure_ascii=False, sort_keys=True)[:2000] if detail else "",
    }
