"""``/admin/failed``: the newest failed jobs grouped by type and normalised error, newest group first,
each with "Retry all in this group" — first the count to confirm, then the bulk retry
(:mod:`app.actions.bulk`), which writes one audit entry and one admin notice with the count.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, get, post
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import bulk
from app.actions.bulk import BULK_ACTIONS, BULK_MAX, BulkPlan
from app.auth import requires_admin
from app.errors import BadInput
from app.web import DbSession, render
from app.web.admin.jobs import (
    bulk_panel,
    bulk_refused,
    check_bulk_form,
    expected_count,
    form_str,
    uuid_or_none,
)
from app.web.deps import actor_of
from app.web.input_guard import FORM_CHECKED

GROUP_FIELDS = ("type", "signature", "upto")
"""What "Retry all in this group" sends: the group (:func:`group_plan` reads them)."""
GROUP_CONFIRMED_FIELDS = (*GROUP_FIELDS, "action", "scope", "expected")
"""What its confirm step sends (``admin/_jobs_bulk.html``): the group and the count it showed."""


def asked(form: Any, name: str, default: str) -> str:
    """The ``action`` or ``scope`` a form sends (its confirm step sends the plan's own), ``default`` when
    it sends none: the address says it (a retry of a failed group)."""
    value = form.get(name)
    return default if value is None else str(value).strip()[:40]


async def group_plan(db: AsyncSession, form: Any) -> BulkPlan:
    """The failed group a "Retry all" form names (type, error signature, newest id shown), planned by
    the bulk layer's one rule for every bulk form and the API (:func:`app.actions.bulk.plan_for`): the
    ``action`` and ``scope`` the confirm step sends are held to it, so a cancel or another scope is
    refused, never taken as this group's retry."""
    return await bulk.plan_for(
        db,
        asked(form, "action", "retry"),
        group={"type": form_str(form, "type", 200), "signature": form_str(form, "signature")},
        upto=uuid_or_none(form_str(form, "upto", 64)),
        scope=asked(form, "scope", "group"),
    )


class FailedJobsController(Controller):
    """``/admin/failed``; admins only (403 for others, sign-in page when signed out)."""

    path = "/admin/failed"
    guards = [requires_admin]
    include_in_schema = False

    @get("/", name="admin.failed")
    async def failed_page(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Failed jobs grouped by type and error, newest group first."""
        return render(request, "admin/failed.html", await bulk.failed_groups(db_session))

    @post("/retry/confirm", name="admin.failed.confirm", status_code=200, opt={FORM_CHECKED: True})
    async def group_confirm(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 1 of "Retry all in this group": the count (a form that cannot be taken: why, 422)."""
        form = await request.form()
        try:
            # a refusal here is an admin's refused bulk action, as at the next step
            async with bulk.refusals(db_session, actor_of(request), "retry"):
                check_bulk_form(request, form, GROUP_FIELDS)
                plan = await group_plan(db_session, form)
        except BadInput as exc:
            return bulk_refused(request, exc, "/admin/failed")
        await bulk.count_permanent(db_session, plan)
        ctx = {
            "plan": plan,
            "filter": None,
            "spec": BULK_ACTIONS["retry"],
            "bulk_max": BULK_MAX,
            "target_url": "/admin/failed/retry",
            "back": "/admin/failed",
        }
        return bulk_panel(request, ctx)

    @post("/retry", name="admin.failed.retry", status_code=200, opt={FORM_CHECKED: True})
    async def group_retry(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Step 2: retry the group's jobs (one audit entry ``jobs.bulk_retry``)."""
        form = await request.form()
        try:
            async with bulk.refusals(db_session, actor_of(request), asked(form, "action", "retry")):
                check_bulk_form(request, form, GROUP_CONFIRMED_FIELDS)
                plan = await group_plan(db_session, form)
                expected = expected_count(form)
        except BadInput as exc:
            return bulk_refused(request, exc, "/admin/failed")
        outcome = await bulk.run_bulk(db_session, actor_of(request), plan, expected=expected)
        return bulk_panel(request, {"outcome": outcome, "back": "/admin/failed"})
