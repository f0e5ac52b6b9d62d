"""``GET /api/approvals``: the steps the caller may approve or reject now, oldest first; and
``POST /api/approvals/{job_id}/approve|reject`` with an optional ``comment`` (a rejection's reason).
``POST /api/jobs/{id}/approve|reject`` decide the same way (:mod:`app.web.api.jobs`).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from app.actions import approvals
from app.auth import requires_user
from app.errors import BadInput
from app.web import DbSession
from app.web.api.jobs import outcome_response, rejection_reason
from app.web.deps import actor_of
from app.web.openapi import errors


@dataclass
class DecisionBody:
    """An optional comment with an approval; the reason of a rejection (required), sent as ``comment``
    or as ``reason`` (the name ``/api/jobs/{id}/reject`` uses: either name on either route)."""

    comment: str | None = None
    reason: str | None = None


def step_json(row: dict[str, Any]) -> dict[str, Any]:
    """The API shape of a step waiting for a decision."""
    return {
        "job_id": row["id"],
        "type": row["type"],
        "title": row["title"],
        "step_key": row["step_key"],
        "pipeline_id": row["pipeline_id"],
        "pipeline_name": row["pipeline_name"],
        "owner": row["owner_email"],
        "waiting_since": row["waiting_since"],
        "approvers": row["approvers"],
        "approvals_needed": row["approvals_needed"],
        "approvals": row["approvals"],
        "result_data": row["result_data"],
    }


class ApprovalsApiController(Controller):
    """``/api/approvals``."""

    path = "/api/approvals"
    guards = [requires_user]
    tags = ["approvals"]

    @get("/", name="api.approvals.list", responses=errors(401, 422))
    async def list_approvals(
        self, request: Request[Any, Any, Any], db_session: DbSession, after: FromQuery[str | None] = None
    ) -> dict[str, Any]:
        """``{"items": [...], "next": cursor | null}``: the steps you may decide now (named as an
        approver, an admin where ``admins`` is listed, the submitter where ``owner`` is)."""
        page = await approvals.mine(db_session, request.user, after=after)
        return {"items": [step_json(r) for r in page.rows], "next": page.after}

    @post(
        ["/{job_id:str}/approve", "/{job_id:str}/reject"],
        name="api.approvals.decide",
        responses=errors(401, 403, 404, 409, 413, 415, 422),
        status_code=200,
    )
    async def decide(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        data: JSONBody[DecisionBody | None] = None,
    ) -> Response[dict[str, Any]]:
        """Approve (``comment`` optional) or reject (``comment`` or ``reason``: the reason, required). 403 for someone
        the step does not name who may see the job (its owner, an admin); 404 for anyone else, as for an
        unknown id; 409 once it was decided, or when you have already approved it."""
        decision = request.url.path.rstrip("/").rsplit("/", 1)[1]
        comment, sent_as = (
            rejection_reason(data.reason, data.comment, "comment") if data else (None, "comment")
        )
        try:
            outcome = await approvals.decide(db_session, actor_of(request), job_id, decision, comment)
        except BadInput as exc:
            if "reason" not in exc.errors or sent_as == "reason":
                raise
            # The core names a rejection's reason ``reason`` (the pages' and /api/jobs' field); here the
            # person sent it as ``comment``.
            message = exc.errors["reason"]
            raise BadInput.field("comment", message) from None
        if outcome.conflict is not None:
            raise outcome.conflict
        return await outcome_response(db_session, outcome, viewer=request.user)
