"""The admin job console ``/admin/jobs`` (the failed-jobs groups ``/admin/failed`` are
:mod:`app.web.admin.failed`).

* ``GET /admin/jobs`` — every user's jobs, newest first, filtered by status, type, owner e-mail, pipeline
  and a created-from/to range, or searched by job id or idempotency key (:mod:`app.actions.selection`);
  keyset-paginated by id (UUIDv7, so id order is creation order). The counts strip at the top is
  rendered with the rows, from their snapshot (the list htmx fetches again brings it out of band);
  ``GET /admin/jobs/counts`` is the strip alone, which polls it. Live statuses are counted over their
  partial indexes and capped at :data:`COUNT_CAP` ("10,000+"), finished ones counted up to the same cap
  and estimated by the planner above it — never ``COUNT(*)`` over the table, and no summary row that
  every transition would update.
* ``POST /admin/jobs/{id}/<action>`` — cancel, retry, run again, approve, reject (with a reason), rerun,
  run now, carried out by :mod:`app.actions.jobs`; the answer is the table row with the outcome in it
  (409 "Nothing changed: …" when the job had moved on).
* ``POST /admin/jobs/bulk/confirm`` then ``POST /admin/jobs/bulk`` — bulk retry or cancel of the ticked
  rows or of every row matching the filter (:mod:`app.actions.bulk`): the first shows how many jobs will
  be affected, the second does it and writes one audit entry and one admin notice with the count.

Every list query is served by an index; the created-time range is turned into an id range, since ids
are UUIDv7 (the admin console's tests check the plans on 100,000 rows).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import uuid
from collections.abc import Iterable
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Template
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import controls
from app.actions import bulk
from app.actions.bulk import BULK_ACTIONS, BULK_MAX, BulkPlan
from app.actions.jobs import ACTIONS
from app.actions.selection import (
    FILTER_FIELDS,
    LIST_COLUMNS,
    LIVE_SQL,
    STATUS_OPTIONS,
    JobFilter,
    filter_where,
    list_sql,
    parse_filter,
)
from app.auth import requires_admin
from app.errors import BadInput, NotFound
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.processors import registry
from app.web import DbSession, display, is_htmx, render
from app.web.admin.job_rows import row_items
from app.web.deps import (
    ACTION_CONTROLS,
    FORM,
    action_form_errors,
    actor_of,
    nothing_changed,
    one_snapshot,
    perform_from_page,
    rows_of,
    sent_form,
    tell_unshown,
)
from app.web.form_values import count
from app.web.input_guard import FORM_CHECKED
from app.web.job_page import CONFIRM
from app.web.metrics import CAPPED_COUNT, EXACT_CAP, planner_estimate

PAGE_SIZE = 50
COUNT_CAP = EXACT_CAP
"""Statuses are counted exactly up to this many rows (shown as "10,000+" for live ones above it)."""
ROW = text(f"SELECT {LIST_COLUMNS} FROM jobs WHERE id = :id")


# --- counts ----------------------------------------------------------------------------------------------------

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
    above it. At most 7 small index scans and 3 EXPLAINs; nothing proportional to the table."""
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
        "label": label or display.STATUS_WORDS.get(status, status),
        "css": css,
        "n": n,
        "exact": exact,
        "words": count_words(n, exact=exact, capped=capped),
        "url": "/admin/jobs?" + urlencode({"status": status}),
    }


# --- the list -----------------------------------------------------------------------------------------------


def type_options() -> list[tuple[str, str]]:
    options = [("", "Any type")]
    for spec in sorted(registry.all(), key=lambda s: s.title.lower()):
        options.append((spec.type, f"{spec.title} ({spec.type})"))
    return options


async def list_context(db: AsyncSession, f: JobFilter, user: Any, after: str | None) -> dict[str, Any]:
    """The list page: :data:`PAGE_SIZE` rows newest first after the keyset ``after`` (a job id)."""
    try:
        after_id = read_cursor(after, Cursor.ID)
    except BadInput as exc:
        # beside the filter, as its other values are: read as none, it showed the first page as if it
        # were the one asked for
        f.errors["after"] = f"The list's position (after) {exc.errors['after']}."
        after_id = None
    rows: list[Any] = []
    if not f.errors:
        where, params = filter_where(f, after=after_id)
        params["limit"] = PAGE_SIZE + 1
        rows = await rows_of(db, list_sql(where), params)
    rows, older = page_of(rows, PAGE_SIZE, lambda r: str(r["id"]))
    return {
        "filter": f,
        "rows": await row_items(db, rows, user),
        "older_url": f.url(after=older) if older else None,
        "list_url": f.url(after=after) if after_id else f.url(),
        "newest_url": f.url() if after_id else None,
        "status_options": STATUS_OPTIONS,
        "type_options": type_options(),
        "confirms": CONFIRM,
        "bulk_max": BULK_MAX,
        "paged": bool(after_id),
    }


# --- the controller -----------------------------------------------------------------------------------------


def form_str(form: Any, name: str, limit: int = 500) -> str:
    """A form field as stripped text of at most ``limit`` characters."""
    return str(form.get(name) or "").strip()[:limit]


def uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


class AdminJobsController(Controller):
    """``/admin/jobs``; admins only (403 for others, sign-in page when signed out)."""

    path = "/admin/jobs"
    guards = [requires_admin]
    include_in_schema = False

    @get("/", name="admin.jobs")
    async def jobs_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        after: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The list (htmx: just ``admin/_jobs_list.html``, with the counts strip out of band). Its rows,
        what each row shows, the pauses and the counts per status above them are read from one snapshot,
        so they agree: loaded by a request of its own, the strip counted as failed a job the rows below
        showed running."""
        await one_snapshot(db_session)
        f = await parse_filter(db_session, request.query_params, request.user)
        ctx = await list_context(db_session, f, request.user, after)
        # "Paused by <admin> at …": for the filtered type, or every pause when unfiltered
        ctx["paused"] = await controls.paused_for(db_session, [f.type] if f.type else None)
        ctx["counts"], ctx["cap"] = await status_counts(db_session), COUNT_CAP
        ctx["counts_oob"] = is_htmx(request)
        # a filter that cannot be read lists nothing and says why beside it: a 422, as the API answers
        status_code = 422 if f.errors else 200
        return render(
            request, "admin/jobs.html", ctx, fragment="admin/_jobs_list.html", status_code=status_code
        )

    @get("/counts", name="admin.jobs.counts")
    async def counts(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """The counts strip (a fragment; polled every 30 s by the page, and fetched again after an action
        on a row; after a bulk action it comes with the list). Counted in one snapshot: read one by one,
        a job that moved between two counts (waiting, then running) was counted in both or in neither."""
        await one_snapshot(db_session)
        return Template(
            template_name="admin/_jobs_counts.html",
            context={"counts": await status_counts(db_session), "cap": COUNT_CAP, "user": request.user},
        )

    @post(
        [f"/{{job_id:str}}/{action}" for action in ACTIONS],
        name="admin.jobs.action",
        status_code=200,
        opt={FORM_CHECKED: True},
    )
    async def row_action(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """One job's action from its row; the answer is the row with the outcome in it (409 when nothing
        changed because the job had moved on; 422 for a reason missing or that cannot be taken, beside
        it as typed; 404 unknown id)."""
        action = request.url.path.rstrip("/").rsplit("/", 1)[1]
        form = await request.form()
        user = request.user
        # the reason whole: a cut one would pass the action's length check and be saved shortened
        reason = str(form.get("reason") or "")
        outcome, errors = await perform_from_page(
            db_session, request, action, job_id, reason=reason, controls=ACTION_CONTROLS.get(action, ())
        )
        await db_session.flush()
        row = (await db_session.execute(ROW, {"id": outcome.job_id})).mappings().first()
        if row is None:
            raise NotFound(f"No job with id {outcome.job_id}.")
        item = (await row_items(db_session, [row], user))[0]
        ctx = {
            "item": item,
            "notice": outcome.message,
            "notice_ok": outcome.ok,
            "new_job_id": outcome.new_job_id,
            "confirms": CONFIRM,
        }
        ctx["sent"] = sent_form(action, outcome.job_id, errors, reason=reason)
        tell_unshown(ctx, errors, bool(item["actions"].get(action)))
        if is_htmx(request):
            # the counts strip fetches itself again (it waited for its 30 s poll, showing a cancelled job
            # as still waiting); the list does not, which would wipe the outcome shown in this row
            changed = {"HX-Trigger": "job-changed"} if outcome.ok else None
            return render(
                request, "admin/_jobs_row.html", ctx, status_code=outcome.status_code, headers=changed
            )
        return render(
            request, "admin/jobs_result.html", {**ctx, "back": "/admin/jobs"}, status_code=outcome.status_code
        )

    @post("/bulk/confirm", name="admin.jobs.bulk_confirm", status_code=200, opt={FORM_CHECKED: True})
    async def bulk_confirm(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 1 of a bulk action: how many jobs it will affect, with Confirm / Back; a form that cannot
        be taken is a 422 that says why, in the panel."""
        form = await request.form()
        try:
            # a refusal here is an admin's refused bulk action, as at the next step
            async with bulk.refusals(db_session, actor_of(request), form.get("action")):
                plan, f = await self._plan(request, db_session, form, confirmed=False)
        except BadInput as exc:
            return bulk_refused(request, exc, "/admin/jobs")
        await bulk.count_permanent(db_session, plan)
        ctx = {
            "plan": plan,
            "filter": f,
            "spec": BULK_ACTIONS[plan.action],
            "bulk_max": BULK_MAX,
            "target_url": "/admin/jobs/bulk",
            "back": f.url() if f else "/admin/jobs",
        }
        return bulk_panel(request, ctx)

    @post("/bulk", name="admin.jobs.bulk", status_code=200, opt={FORM_CHECKED: True})
    async def bulk(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 2: do it; the outcome ("Retried 12 jobs; 1 skipped …") replaces the confirm panel, or
        (422, nothing done) why the form cannot be taken."""
        form = await request.form()
        try:
            async with bulk.refusals(db_session, actor_of(request), form.get("action")):
                plan, f = await self._plan(request, db_session, form, confirmed=True)
                expected = expected_count(form)
        except BadInput as exc:
            return bulk_refused(request, exc, "/admin/jobs")
        detail = {"filter": {k: v for k, v in f.raw.items() if v}} if f is not None else {}
        outcome = await bulk.run_bulk(db_session, actor_of(request), plan, expected=expected, detail=detail)
        ctx = {
            "outcome": outcome,
            "back": f.url() if f else "/admin/failed" if plan.scope == "group" else "/admin/jobs",
        }
        # the list on the page fetches its rows again, so the changed statuses show at once
        return bulk_panel(request, ctx, headers={"HX-Trigger": "jobs-changed"})

    async def _plan(
        self, request: Request[Any, Any, Any], db: AsyncSession, form: Any, *, confirmed: bool
    ) -> tuple[BulkPlan, JobFilter | None]:
        check_bulk_form(request, form, BULK_FORM_FIELDS, repeatable=("ids",))
        action = form_str(form, "action", 20)
        scope = form_str(form, "scope", 20)
        if action not in BULK_ACTIONS or scope not in ("selected", "filter"):
            raise BadInput("Choose Retry or Cancel, for the ticked rows or for every matching row.")
        f = await parse_filter(db, form, request.user)
        ids = form.getall("ids", []) if hasattr(form, "getall") else form.get("ids") or []
        if scope == "selected":
            # the filter fields beside ticked rows are the list's own view (the way back to it), which
            # every ticked-rows form carries: the scope says the rows are what it acts on
            if not ids:
                raise BadInput("Tick at least one row first.")
            return await bulk.plan_for(db, action, ids=ids), f
        upto = uuid_or_none(form_str(form, "upto", 64)) if confirmed else None
        # With no filter the confirm step says it is every job of every user, and its form carries
        # that confirmation; the action itself, posted without it, is refused.
        everything = not f.active and (not confirmed or form_str(form, "all", 10) == "yes")
        # ticked ids sent with a filter's form are refused by the bulk layer's rule, never dropped
        plan = await bulk.plan_for(
            db, action, ids=ids or None, job_filter=f, upto=upto, everything=everything, scope=scope
        )
        return plan, f


BULK_FORM_FIELDS = ("action", "scope", "ids", "expected", "upto", "all", *FILTER_FIELDS)
"""The fields the console's bulk forms and their confirm step send."""


def bulk_panel(
    request: Request[Any, Any, Any],
    ctx: dict[str, Any],
    headers: dict[str, str] | None = None,
    status_code: int = 200,
) -> Template:
    """A bulk action's confirm step or outcome: the panel for htmx, a page otherwise."""
    if is_htmx(request):
        return render(request, "admin/_jobs_bulk.html", ctx, headers=headers, status_code=status_code)
    return render(request, "admin/jobs_result.html", ctx, status_code=status_code)


def check_bulk_form(
    request: Request[Any, Any, Any], form: Any, fields: Iterable[str], repeatable: Iterable[str] = ()
) -> None:
    """A bulk form (``fields``: every name it sends, ``repeatable`` those sent more than once), checked
    before any of its values is read (:func:`app.web.form_shape.form_errors`). A misspelt condition
    (``stauts=failed``) left out would widen the action to jobs nobody meant.

    Raises:
    BadInput: text in the form that cannot be taken (its fields are hidden or buttons, so the panel says
    which); a field the form has not, or one sent twice.
    """
    # the panel says "Nothing changed: " before the problem (:func:`bulk_refused`)
    problem = action_form_errors(request, form, (), fields, repeatable).get(FORM)
    if problem:
        raise BadInput(problem)


def bulk_refused(request: Request[Any, Any, Any], exc: BadInput, back: str) -> Template:
    """A bulk form that cannot be taken: why, where its panel shows (422); nothing was done."""
    said = "; ".join(f"{v} (field {k!r})" for k, v in exc.errors.items()) or exc.detail
    refused = nothing_changed(said + ("" if said.endswith(".") else "."))
    return bulk_panel(request, {"refused": refused, "back": back}, status_code=422)


def expected_count(form: Any) -> int | None:
    """The count the confirmation showed (``expected``), which caps what a bulk action does; ``None``
    when the form carries none. Its range is the bulk layer's rule (:func:`app.actions.bulk.check_expected`).

    Raises:
        BadInput: on ``expected``, sent but not a whole number (read as none, it lifted the cap), or
        outside what a confirmation shows.
    """
    try:
        value = count(form.get("expected"))
    except ValueError:
        raise BadInput.field("expected", bulk.EXPECTED_WORDS) from None
    return bulk.check_expected(value)
