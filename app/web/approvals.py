"""An approver's pages: ``GET /approvals`` (the steps you may decide now, oldest first), ``GET
/approvals/{id}`` (one step: what to look at, the decisions so far, Approve and Reject) — also where a
one-click link from an alert or e-mail lands (``?token=…``, signed and expiring) — and ``POST
/approvals/{id}/approve|reject`` (a form with CSRF; from a list row through htmx, the row goes away).

A GET never decides; every page needs a signed-in person, and the decision is checked against the
step's own approvers (:mod:`app.actions.approvals`) whichever way the person came.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any
from urllib.parse import urlencode, urlsplit

from litestar import Controller, Request, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import approvals
from app.actions.jobs import ActionOutcome, parse_id
from app.auth import requires_user
from app.errors import BadInput, Forbidden
from app.processors import registry
from app.web import DbSession, display, is_htmx, render, result_display
from app.web.deps import action_form_errors, actor_of, not_taken, refuse_form, settings_of, tell_unshown
from app.web.input_guard import FORM_CHECKED


def sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def with_result(row: dict[str, Any]) -> dict[str, Any]:
    """A waiting step with its result as the job page shows it (:func:`app.web.result_display.result_items`)."""
    result = row.get("result_data")
    # a step without a name of its own is shown by its type's title, not the bare type name
    spec = registry.get(row["type"])
    row["type_title"] = spec.title if spec is not None else row["type"]
    row["result_items"] = result_display.result_items(result)
    # an object's fields are all in the items; one with nothing to show is "no result", not its "{}"
    shown = row["result_items"] or isinstance(result, dict) or result_display.is_blank(result)
    row["result_json"] = None if shown else result_display.pretty_json(result)
    # past the first fields the items stop: said as the job page says it, the rest in Details beside them
    # (an approver may not read the job's own page)
    row["result_cut"] = result_display.fields_left_out(result)
    row["result_details"], row["result_details_cut"] = (
        result_display.shown_json(result) if row["result_cut"] else (None, 0)
    )
    row["waited"] = display.now_utc() - row["waiting_since"]
    return row


def page_links(path: str, after: str | None, after_next: str | None) -> dict[str, Any]:
    """A list of waiting steps' pager (``_pager.html``), oldest first: "First page" back whenever the
    page shown is a later one (``after`` sent), "Next page" on whenever one follows (``after_next``)."""
    return {
        "paged": bool(after),
        "first_url": path if after else None,
        "next_url": f"{path}?{urlencode({'after': after_next})}" if after_next else None,
    }


def check_token(request: Request[Any, Any, Any], job_id: Any, token: str | None) -> None:
    """A one-click link's token, when there is one, must be this step's and unexpired.

    Raises:
        Forbidden: the token was altered, is for another step, or has expired.
    """
    if token is None:
        return
    problem = approvals.link_problem(settings_of(request).resolved_secret_key(), job_id, token)
    if problem:
        raise Forbidden(problem)


def inbox_path(url: str) -> bool:
    """Whether ``url`` (htmx's ``HX-Current-URL``) is the admins' inbox, whose count a decision changes."""
    return urlsplit(url).path.rstrip("/") == "/admin/approvals"


DECISION_CONTROLS = {"approve": ("comment",), "reject": ("reason",)}
"""The text field of each decision's form (a one-click link's ``token`` is hidden)."""
DECISION_HIDDEN = ("token", "view")
"""The hidden fields a decision's form may send: a one-click link's token, which part answers it."""


async def decide_from_form(
    db: AsyncSession, request: Request[Any, Any, Any], job_id: str, decision: str
) -> tuple[ActionOutcome, dict[str, str]]:
    """The decision a form asks for, and the errors to show on the form by field: text it cannot take
    or a field the form has not or sent twice (:func:`app.web.form_shape.form_errors`; audited as the
    decision's refusal, as on the job page: :func:`app.web.deps.refuse_form`) or a missing reason is a
    422 with nothing decided; a bad token is a 403."""
    form = await request.form()
    controls = DECISION_CONTROLS[decision]
    errors = action_form_errors(request, form, controls, DECISION_HIDDEN)
    if errors:
        return await refuse_form(request, db, decision, job_id, errors)
    token = form.get("token")
    check_token(request, job_id, str(token) if token else None)
    comment = str(form.get("reason") or form.get("comment") or "")
    try:
        outcome = await approvals.decide(db, actor_of(request), job_id, decision, comment)
    except BadInput as exc:
        errors = {k: sentence(exc.errors[k]) for k in controls if k in exc.errors}
        message = not_taken(errors) if errors else sentence(exc.detail)
        return ActionOutcome(decision, False, message, 422, parse_id(job_id)), errors
    return outcome, {}


class ApprovalsController(Controller):
    """``/approvals``: anyone signed in; each step shows only to the people it names, its owner and admins
    (404 otherwise, as for an unknown id)."""

    path = "/approvals"
    guards = [requires_user]
    include_in_schema = False

    @get("/", name="approvals.list")
    async def approvals_list(
        self, request: Request[Any, Any, Any], db_session: DbSession, after: FromQuery[str | None] = None
    ) -> Template:
        """The steps waiting for your decision, oldest first."""
        page = await approvals.mine(db_session, request.user, after=after)
        rows = [with_result(r) for r in page.rows]
        return render(
            request, "approvals/list.html", {"rows": rows, **page_links("/approvals", after, page.after)}
        )

    @get("/{job_id:str}", name="approvals.step")
    async def step_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        token: FromQuery[str | None] = None,
    ) -> Template:
        """One step and its Approve / Reject forms (a one-click link's landing page)."""
        check_token(request, job_id, token)
        step = with_result(await approvals.step_for(db_session, request.user, job_id))
        return render(request, "approvals/step.html", {"step": step, "token": token})

    @post(
        ["/{job_id:str}/approve", "/{job_id:str}/reject"],
        name="approvals.decide",
        status_code=200,
        opt={FORM_CHECKED: True},
    )
    async def decide(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Template:
        """Approve or reject. From a list row (htmx): the row disappears, or shows why not; from the
        step's page: the page again, with the outcome."""
        decision = request.url.path.rstrip("/").rsplit("/", 1)[1]
        outcome, errors = await decide_from_form(db_session, request, job_id, decision)
        form = await request.form()
        # the form comes back as typed, with the error beside its field
        answer = {
            "notice": outcome.message,
            "notice_ok": outcome.ok,
            "errors": errors,
            "typed": {k: str(form.get(k) or "") for c in DECISION_CONTROLS.values() for k in c},
        }
        if is_htmx(request) and request.headers.get("hx-target", "").startswith("approval-"):
            if outcome.ok:
                # the admins' inbox says how many steps wait: counted again, or it kept the first count
                inbox = request.user.is_admin and inbox_path(request.headers.get("hx-current-url", ""))
                total = await approvals.waiting_count(db_session) if inbox else None
                return render(request, "approvals/_gone.html", {"outcome": outcome, "total": total})
            step = with_result(await approvals.step_for(db_session, request.user, job_id))
            # a row's Approve has no comment field: such an error goes in its notice
            tell_unshown(answer, errors, step["may_decide"] and "comment" not in errors)
            return render(
                request, "approvals/_row.html", {"r": step, **answer}, status_code=outcome.status_code
            )
        step = with_result(await approvals.step_for(db_session, request.user, job_id))
        tell_unshown(answer, errors, step["may_decide"])
        ctx = {"step": step, "token": form.get("token"), **answer}
        return render(request, "approvals/step.html", ctx, status_code=outcome.status_code)
