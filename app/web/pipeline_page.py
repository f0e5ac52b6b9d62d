"""What a pipeline's page shows: the step indicator in DAG order (parallel steps side by side), each
step's state and buttons, the percentage done, and the history.

A poll reads one pipeline: its row by primary key and its steps through ``ix_jobs_pipeline_id``. Another
user's pipeline gets the same 404 as an unknown id.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import controls, pipelines
from app.actions.jobs import allowed, failed_for_good, requeues_refused, retry_offered
from app.actions.pipelines import may_cancel, startable_templates
from app.errors import NotFound
from app.jobs import naming, queue
from app.processors import registry
from app.web import confirms, display, result_display
from app.web.deps import parse_uuid
from app.web.job_page import CONFIRM, EVENTS_END, HISTORY_LIMIT, POLL, history_of
from app.web.notifications import bell_url, viewer_bell

PIPELINE_ROW = text(
    "SELECT id, name, template, user_id, status, created_at, updated_at, finished_at, "
    f"{pipelines.started_column('pipelines')} FROM pipelines WHERE id = :id"
)
PIPELINE_EVENTS = text(
    """
    SELECT e.id, e.job_id, j.title AS step_title, j.type AS step_type, j.step_key, e.at, e.kind, e.from_status,
           e.to_status, e.actor, e.message, e.data
    FROM job_events e LEFT JOIN jobs j ON j.id = e.job_id
    WHERE e.pipeline_id = :id AND e.id < :before ORDER BY e.id DESC LIMIT :limit
    """
)
STEP_OUTCOMES = text(
    "SELECT id, result_data, left(error_message, 4000) AS error_message FROM jobs "
    "WHERE id = ANY(CAST(:ids AS uuid[])) AND pipeline_id = :pipeline_id"
)
#: A pipeline's final outputs and, when it failed, why: the leaf steps' results and the first failed
#: step's error, loaded only once the pipeline has an outcome to show.
OUTPUTS_MAX = 12
"""Result files shown at the top of a pipeline's page; past them it says how many more its steps hold."""
PIPELINE_INPUT = text("SELECT user_id, template, input_data FROM pipelines WHERE id = :id")


async def load_pipeline_row(db: AsyncSession, pipeline_id: Any, user: Any) -> Mapping[Any, Any]:
    """The pipeline's row.

    Raises:
        NotFound: unknown, malformed or another user's id (one answer for all).
    """
    pid = parse_uuid(pipeline_id, "pipeline")
    row = (await db.execute(PIPELINE_ROW, {"id": pid})).mappings().first()
    if row is None or (not user.is_admin and row["user_id"] != user.id):
        raise NotFound(f"No pipeline with id {pid}.")
    return row


def step_view(
    step: Mapping[str, Any], owner_id: int, user: Any, refused: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """One box of the step indicator: the step, its derived state and the admin buttons it offers (none
    for an action in ``refused``: what the queue's owner rule would refuse,
    :func:`app.actions.jobs.requeues_refused`)."""
    state = display.job_state(step)
    status = step["status"]
    row = {**step, "user_id": owner_id}
    waiting = status == "waiting_approval"
    return {
        **step,
        "state": state,
        "actions": {
            "approve": waiting and allowed(user, "approve", row),
            "reject": waiting and allowed(user, "reject", row),
            "rerun": waiting and allowed(user, "rerun", row) and "rerun" not in refused,
            "retry": retry_offered(user, row) and "retry" not in refused,
        },
    }


def _timing(view: Mapping[str, Any]) -> dict[str, timedelta | None]:
    """``ran``: from the first step's start to the pipeline's end, what "took" says (a job's page counts
    a job's run, not its wait); ``waited``: from submission to that start, said apart when it is a
    second or more. Both ``None`` until the pipeline has finished, and when no step started."""
    starts = [s["started_at"] for s in view["steps"] if s.get("started_at") is not None]
    finished = view.get("finished_at")
    if finished is None or not starts:
        return {"ran": None, "waited": None}
    first = min(starts)
    waited = first - view["created_at"]
    return {
        "ran": max(finished - first, timedelta(0)),
        "waited": waited if waited >= timedelta(seconds=1) else None,
    }


async def _refused(db: AsyncSession, user: Any, step: Mapping[str, Any], owner_id: int) -> frozenset[str]:
    """The owner rule's refusals for a step whose buttons ``user`` would otherwise get (a failed step's
    Retry, a waiting step's rerun): asked only for those, so a page of steps costs no read per step."""
    row = {**step, "user_id": owner_id}
    if not (
        retry_offered(user, row) or (step["status"] == "waiting_approval" and allowed(user, "rerun", row))
    ):
        return frozenset()
    return await requeues_refused(db, user, await queue.get_job(db, step["job_id"]))


async def pipeline_status_context(
    db: AsyncSession,
    pipeline_id: Any,
    user: Any,
    *,
    notice: str | None = None,
    notice_ok: bool = True,
    new_job_id: Any = None,
    with_history: bool = False,
    with_outcome: bool = True,
) -> dict[str, Any]:
    """What ``pipelines/_status.html`` shows: overall state, percentage, the step indicator, and (unless
    ``with_outcome`` is false: a poll adds it only when something changed) outputs and why it failed."""
    view = await pipelines.get(db, pipeline_id, user)
    state = display.pipeline_state(view, view["steps"])
    unread = await viewer_bell(db, user)  # the poll carries it: the bell is refreshed with the page
    steps = {
        s["key"]: step_view(s, view["user_id"], user, await _refused(db, user, s, view["user_id"]))
        for s in view["steps"]
    }
    warned = await failed_for_good(db, [s for s in steps.values() if s["actions"]["retry"]])
    for s in steps.values():
        s["retry_warning"] = str(s["job_id"]) in warned
    layers = [[steps[s["key"]] for s in layer] for layer in view["layers"]]
    ctx: dict[str, Any] = {
        "pipeline": view,
        "state": state,
        "layers": layers,
        "step_count": len(view["steps"]),
        "done_count": sum(1 for s in view["steps"] if s["status"] == "completed"),
        "can_cancel": may_cancel(user, view) and not state["finished"],
        "notice": notice,
        "notice_ok": notice_ok,
        "new_job_id": new_job_id,
        "poll_url": None
        if state["finished"]
        else bell_url(f"/pipelines/{view['id']}/status?v={state['version']}", unread),
        "unread": unread,
        "poll": POLL,
        "history": None,
        "history_oob": False,
        "confirm_cancel": confirms.cancel_pipeline(view["steps"]),
        "confirms": CONFIRM,
        **_timing(view),
    }
    ctx["template"] = pipelines.get_template(view["template"]) if view["template"] else None
    ctx["summary_oob"] = True
    ctx.update({"outputs": [], "outputs_more": 0, "why": None})
    if with_outcome:
        ctx.update(await outcome_context(db, view, user))
    if with_history:
        ctx["history"] = await pipeline_history(db, view["id"], user)
        ctx["history_oob"] = True
    return ctx


def leaf_keys(steps: list[Mapping[str, Any]]) -> list[str]:
    """The steps nothing else waits for or was created by: their results are the pipeline's outputs."""
    before = {d for s in steps for d in s.get("depends_on") or ()}
    before |= {s["created_by"] for s in steps if s.get("created_by")}
    return [s["key"] for s in steps if s["key"] not in before]


async def outcome_context(db: AsyncSession, view: Mapping[str, Any], user: Any) -> dict[str, Any]:
    """``outputs`` (the completed leaf steps' result files, with previews; ``outputs_more``: how many past
    :data:`OUTPUTS_MAX` are not shown) and ``why`` (the first failed
    step: ``{step, error}`` with the error in plain words), for the top of the pipeline's page."""
    steps = view["steps"]
    leaves = [s for s in steps if s["key"] in set(leaf_keys(steps)) and s["status"] == "completed"]
    failed = [s for s in steps if s["status"] == "failed"][:1]
    wanted = [s["job_id"] for s in [*leaves, *failed]]
    if not wanted:
        return {"outputs": [], "outputs_more": 0, "why": None}
    rows = await db.execute(STEP_OUTCOMES, {"ids": wanted, "pipeline_id": view["id"]})
    by_id = {r["id"]: r for r in rows.mappings().all()}
    outputs: list[dict[str, Any]] = []
    for s in leaves:
        found = by_id.get(s["job_id"])
        for ref in result_display.output_files(found["result_data"] if found else None):
            outputs.append({**ref, "preview": result_display.preview_kind(ref), "step": s["title"]})
    why = None
    if failed and failed[0]["job_id"] in by_id:
        step = failed[0]
        error = display.error_summary(step, by_id[step["job_id"]]["error_message"], user)
        why = {"step": step, "error": error}
    # the files past the first OUTPUTS_MAX are counted, so that the top says there are more
    return {"outputs": outputs[:OUTPUTS_MAX], "outputs_more": max(0, len(outputs) - OUTPUTS_MAX), "why": why}


async def pipeline_history(
    db: AsyncSession, pipeline_id: uuid.UUID, user: Any, before: int | None = None
) -> dict[str, Any]:
    """The pipeline's events before the event id ``before`` (none: its newest), a page of them as a
    job's history pages (:func:`app.web.job_page.history_of`)."""
    params = {"id": pipeline_id, "before": before or EVENTS_END, "limit": HISTORY_LIMIT + 1}
    result = await db.execute(PIPELINE_EVENTS, params)
    rows: list[dict[str, Any]] = [dict(r) for r in result.mappings().all()]
    for r in rows:
        # named as the step's box above names it (its title, else its type's): the history said
        # "prepare" under a box saying "A step"
        spec = registry.get(r["step_type"]) if r["step_type"] else None
        type_title = spec.title if spec is not None else r["step_type"]
        r["step_key"] = (
            naming.step_name(r["step_title"], type_title, r["step_key"]) if type_title else r["step_key"]
        )
    return await history_of(db, rows, user, f"/pipelines/{pipeline_id}/history", paged=before is not None)


async def pipeline_page_context(db: AsyncSession, pipeline_id: Any, user: Any, **kw: Any) -> dict[str, Any]:
    ctx = await pipeline_status_context(db, pipeline_id, user, **kw)
    ctx["history"] = await pipeline_history(db, ctx["pipeline"]["id"], user)
    ctx["history_oob"] = False
    tpl = ctx["template"]
    ctx["summary_oob"] = False
    live_types = {s["type"] for s in ctx["pipeline"]["steps"] if s["status"] in ("queued", "in_progress")}
    ctx["paused"] = await controls.paused_for(db, live_types) if live_types else []
    ctx["can_resubmit"] = (
        tpl is not None
        and ctx["pipeline"]["user_id"] == user.id
        and ctx["pipeline"]["status"] in ("failed", "cancelled")
        and tpl in startable_templates(user)
    )
    return ctx
