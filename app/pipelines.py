"""Pipelines: DAGs of dependent jobs — the templates API, reading a pipeline, and cancelling one.

Three ways to build one, checked the same way and created all-or-nothing in one transaction:

* a **template** registered in code (:func:`template`), started with ``{template, input_data}``; its input
  schema drives the web form, and each step's input is built from the pipeline's input;
* an **ad-hoc spec** ``{name, steps: [{key, type, input_data, depends_on: [keys], requires_approval?}]}``
  (:func:`create`);
* **next jobs returned by a processor** (:class:`app.processors.NextJob`), which may depend on each other
  and on jobs already in the pipeline.

The graph checks, step-input validation and ``$ref`` resolution are in :mod:`app.jobs.graph`; creating
the jobs, adding next jobs and deriving a pipeline's status are in the queue
(:mod:`app.jobs.queue.pipelines`), the only status writer: a step is due when all its parents
completed; when a step fails or is cancelled every step downstream of it is cancelled with the reason
"upstream <type> <id> failed"; a manual retry of that step re-opens them. All are re-exported here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError
from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import BadInput, Conflict, NotFound
from app.jobs import naming, queue
from app.jobs.decisions import decided_by
from app.jobs.error_text import input_unfit, never_created
from app.jobs.file_inputs import file_refs
from app.jobs.graph import (
    KEY_PATTERN,
    MAX_STEPS,
    check_graph,
    check_ref_sources,
    find_cycle,
    input_unfit_words,
    plan_next_jobs,
    resolve_refs,
    topo_order,
    validate_step_input,
)
from app.jobs.payload import json_text
from app.jobs.queue import Principal
from app.jobs.queue.pipelines import create_pipeline as create
from app.jobs.queue.pipelines import insert_next_jobs
from app.jobs.types import EmptyInput, InputModel, registry, validation_error
from app.settings import Settings

log = structlog.get_logger("jobdesk.pipelines")

__all__ = [
    "KEY_PATTERN",
    "MAX_STEPS",
    "TEMPLATES",
    "Template",
    "TemplateStep",
    "all_templates",
    "by_form_key",
    "cancel",
    "check_graph",
    "create",
    "create_from_template",
    "describe_model",
    "events",
    "find_cycle",
    "get",
    "get_template",
    "input_unfit_words",
    "insert_next_jobs",
    "layers",
    "plan_next_jobs",
    "resolve_refs",
    "started_column",
    "template",
    "topo_order",
    "validate_step_input",
]


# --- templates ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TemplateStep:
    """One step of a template. ``input`` builds the step's ``input_data`` from the pipeline's validated
    input (a dict), or is a fixed dict."""

    key: str
    type: str
    input: Callable[[dict[str, Any]], dict[str, Any]] | dict[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    requires_approval: bool = False
    title: str | None = None
    for_each: Callable[[dict[str, Any]], Any] | None = None
    """The step's ``for_each`` list (or ``{"$ref": …}``) from the pipeline's input: the step then runs
    once per item (see :mod:`app.jobs.fanout`)."""
    approvers: tuple[str, ...] = ()
    """Who may decide the step (``ann@example.com``, ``admins``, ``owner``); empty: any admin."""
    approvals_needed: int | None = None
    approval_timeout: int | None = None
    on_approval_timeout: str | None = None


@dataclass(frozen=True)
class Template:
    """A pipeline registered in code: ``name`` is its id in the API, ``title`` and
    ``description`` are for people, ``input_model`` is the form's schema, ``steps`` the DAG."""

    name: str
    title: str
    description: str
    steps: tuple[TemplateStep, ...]
    input_model: InputModel = EmptyInput
    group: str = "Pipelines"
    diagnostic: bool = False
    steps_note: str | None = None
    """Shown instead of "N steps" where the steps are not known up front (a step creates more)."""

    def build(self, input_data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Validate the pipeline input and return it normalised with the step specs.

        Raises:
            BadInput: the input does not match ``input_model`` (paths ``input_data.<field>``).
        """
        try:
            model = self.input_model.model_validate(input_data)
        except ValidationError as exc:
            raise validation_error(exc, "input_data", self.input_model) from None
        values = model.model_dump(mode="json")
        steps = []
        for s in self.steps:
            step_input = self._made(s, s.input, values) if callable(s.input) else dict(s.input)
            step = {
                "key": s.key,
                "type": s.type,
                "input_data": step_input,
                "depends_on": list(s.depends_on),
                "requires_approval": s.requires_approval,
                "title": s.title,
                "approvers": list(s.approvers) or None,
                "approvals_needed": s.approvals_needed,
                "approval_timeout": s.approval_timeout,
                "on_approval_timeout": s.on_approval_timeout,
            }
            if s.for_each is not None:
                step["for_each"] = self._made(s, s.for_each, values)
            steps.append(step)
        return values, steps

    def _made(self, step: TemplateStep, make: Callable[[dict[str, Any]], Any], values: dict[str, Any]) -> Any:
        """What the template's own code makes of the validated input for ``step``. That code is an
        engineer's: an error in it (a key it did not expect, a value it cannot handle) is a refusal of
        this start naming the template and the step, logged with its traceback, never an error out of
        the path that started it (a 500 for the API, a stop of the worker's sweep for a schedule).

        Raises:
            BadInput: on ``input_data``, the template's code raised.
        """
        try:
            return make(values)
        except Exception as exc:
            log.error(
                "a pipeline template failed to make a step", template=self.name, step=step.key, exc_info=exc
            )
            said = " ".join(str(exc).split())[:200]
            raise BadInput.field(
                "input_data",
                f"the pipeline {self.name!r} could not make its step {step.key!r} from this input "
                f"({type(exc).__name__}{': ' + said if said else ''}); this is a fault in the pipeline's "
                "code, which its maintainers can find in the log",
            ) from None


TEMPLATES: dict[str, Template] = {}


def template(tpl: Template) -> Template:
    """Register a pipeline template (call at import time of a module in ``PROCESSOR_MODULES``).

    Raises:
        ValueError: the name is taken, or its steps do not form a valid DAG of registered types.
    """
    if tpl.name in TEMPLATES and TEMPLATES[tpl.name] is not tpl:
        raise ValueError(f"pipeline template {tpl.name!r} is registered twice")
    check_graph([{"key": s.key, "depends_on": list(s.depends_on)} for s in tpl.steps], "steps")
    for i, s in enumerate(tpl.steps):
        if isinstance(s.input, dict):
            # a fixed input's $refs are known now: one that cannot be read is the template's own mistake
            try:
                check_ref_sources(
                    {"depends_on": list(s.depends_on), "input_data": s.input}, f"steps[{i}].input_data"
                )
            except BadInput as exc:
                raise ValueError(f"pipeline template {tpl.name!r}: {exc.detail}") from None
    TEMPLATES[tpl.name] = tpl
    return tpl


def get_template(name: str) -> Template | None:
    registry.names()  # import processor modules, which register templates too
    return TEMPLATES.get(name)


def all_templates() -> list[Template]:
    registry.names()
    return list(TEMPLATES.values())


# --- starting a template ---------------------------------------------------------------------------


async def create_from_template(
    db: AsyncConnection | AsyncSession,
    name: str,
    input_data: dict[str, Any],
    *,
    user_id: int,
    settings: Settings,
    request_id: str | None = None,
    title: str | None = None,
    form_key: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> RowMapping:
    """Start a registered template (``POST /api/pipelines {template, input_data}``). ``title`` names
    this run (the form's "Name this pipeline"); without it the pipeline is named after the template.
    ``form_key``: the template form's key; ``idempotency_key`` and ``request_digest``: the API's (see
    :func:`app.jobs.queue.create_pipeline`).

    Raises:
        BadInput: unknown template (``template``), bad input (``input_data.<field>``), or a ``title``
        over 200 characters.
    """
    tpl = get_template(name) if isinstance(name, str) else None
    if tpl is None:
        known = ", ".join(sorted(TEMPLATES)) or "none"
        raise BadInput.field(
            "template", f"unknown pipeline template {str(name)[:100]!r}; known templates: {known}"
        )
    if not isinstance(input_data, dict):
        raise BadInput.field("input_data", "must be a JSON object")
    values, steps = tpl.build(input_data)
    conn = await queue.conn_of(db)
    await queue.check_file_owners(conn, [(user_id, *ref) for ref in file_refs(tpl.input_model, values)])
    title = (title or "").strip()
    if len(title) > 200:
        raise BadInput.field("title", f"must be at most 200 characters (it has {len(title)})")
    return await create(
        db,
        name=title or tpl.title,
        steps=steps,
        user_id=user_id,
        settings=settings,
        template_name=tpl.name,
        input_data=values,
        request_id=request_id,
        form_key=form_key,
        idempotency_key=idempotency_key,
        request_digest=request_digest,
    )


BY_FORM_KEY = text(
    """
    SELECT id, name, template, user_id, status, created_at, input_data FROM pipelines
    WHERE user_id = :user_id AND form_key = :form_key
    """
)


async def by_form_key(db: AsyncConnection | AsyncSession, user_id: int, form_key: str) -> RowMapping | None:
    """The pipeline ``user_id`` started with the form key ``form_key``, if any."""
    conn = await queue.conn_of(db)
    return (await conn.execute(BY_FORM_KEY, {"user_id": user_id, "form_key": form_key})).mappings().first()


# --- reading ----------------------------------------------------------------------------------------

STEP_STARTED = "({s}.attempts > 0 OR {s}.status NOT IN ('queued', 'cancelled'))"
"""Whether a step (a ``jobs`` row named ``{s}``) has started: a worker claimed it and it is running, waiting
for a decision, finished, or waiting to try again after an attempt. A step handed back unstarted (a
worker's stop gives the attempt back) or re-opened by a retry has not, until a worker claims it again;
a step cancelled before any attempt never did."""


def started_column(pipeline: str) -> str:
    """The select-list item ``started`` for the pipeline row named ``pipeline``: whether any of its steps
    has started (:data:`STEP_STARTED`). Only a ``running`` pipeline asks (a finished one, or one whose step
    waits for a decision, has started): one probe of ``ix_jobs_pipeline_id`` that stops at the first
    started step, so a list pays at most one bounded probe per pipeline it shows. A pipeline that is
    ``running`` but has no started step is waiting for a worker, and is shown so
    (:func:`app.web.display.pipeline_state`)."""
    step = STEP_STARTED.format(s="s")
    return (
        f"CASE WHEN {pipeline}.status <> 'running' THEN true ELSE EXISTS ("
        f"SELECT 1 FROM jobs s WHERE s.pipeline_id = {pipeline}.id AND {step}) END AS started"
    )


GET_PIPELINE = text(
    """
    SELECT p.id, p.name, p.template, p.user_id, p.status, p.input_data, p.created_at, p.updated_at,
           p.finished_at, p.cancelled_at, p.cancelled_by AS cancelled_by_actor, u.email AS cancelled_by_email
    FROM pipelines p
    LEFT JOIN users u ON u.id = CASE WHEN p.cancelled_by ~ '^user:[0-9]{1,9}$' THEN substr(p.cancelled_by, 6)::int END
    WHERE p.id = :id
    """
)
PIPELINE_STEPS = text(
    """
    SELECT j.id, j.step_key, j.type, j.title, j.status, j.is_active, j.pending_parents, j.run_at, j.attempts,
           j.max_attempts, j.progress, j.progress_message, j.started_at, j.completed_at, j.requires_approval,
           j.error_message IS NOT NULL AS has_error, left(j.error_message, 64) AS error_head,
           j.created_at, j.created_by_job, STEP_STARTED AS started,
           COALESCE((SELECT array_agg(d.depends_on::text ORDER BY d.depends_on) FROM job_dependencies d WHERE d.job_id = j.id),
                    '{}') AS depends_on_ids
    FROM jobs j WHERE j.pipeline_id = :id ORDER BY j.id
    """.replace("STEP_STARTED", STEP_STARTED.format(s="j"))
)


async def get(
    db: AsyncConnection | AsyncSession, pipeline_id: Any, principal: Principal | None = None
) -> dict[str, Any]:
    """The pipeline with its steps for the API and the step indicator: ``{id, name,
    template, status, progress (0–100), current: [step keys running], layers: [[step, …], …] (DAG
    order, parallel steps side by side), steps: [{job_id, key, type, title, status, depends_on, …}],
    cancelled_at, cancelled_by}`` (the last two set once a person cancelled it: when, and who in words).

    Raises:
        NotFound: unknown, malformed or another user's id (the same answer, so ids cannot be probed).
    """
    conn = await queue.conn_of(db)
    try:
        pid = uuid.UUID(str(pipeline_id))
    except ValueError:
        raise NotFound("No such pipeline.") from None
    p = (await conn.execute(GET_PIPELINE, {"id": pid})).mappings().first()
    if p is None or (principal is not None and not principal.is_admin and p["user_id"] != principal.id):
        raise NotFound(f"No pipeline with id {pid}.")
    rows = (await conn.execute(PIPELINE_STEPS, {"id": pid})).mappings().all()
    key_of = {str(r["id"]): (r["step_key"] or str(r["id"])) for r in rows}
    steps = []
    for r in rows:
        spec = registry.get(r["type"])
        steps.append(
            {
                "job_id": r["id"],
                "key": r["step_key"] or str(r["id"]),
                "type": r["type"],
                "title": naming.step_name(r["title"], spec.title if spec else r["type"], r["step_key"]),
                "status": r["status"],
                "is_active": r["is_active"],
                "pending_parents": r["pending_parents"],
                "depends_on": [key_of.get(d, d) for d in r["depends_on_ids"]],
                "attempts": r["attempts"],
                "max_attempts": r["max_attempts"],
                "progress": r["progress"],
                "progress_message": r["progress_message"],
                "run_at": r["run_at"],
                "started_at": r["started_at"],
                "completed_at": r["completed_at"],
                "requires_approval": r["requires_approval"],
                "has_error": r["has_error"],
                # failed because its input does not fit its type: a retry would fail the same way
                "input_unfit": input_unfit(r["error_head"]),
                "never_created": never_created(r["error_head"]),
                "created_by": key_of.get(str(r["created_by_job"])) if r["created_by_job"] else None,
            }
        )
    done = sum(1 for s in steps if s["status"] == "completed")
    pipeline = dict(p)
    actor, email = pipeline.pop("cancelled_by_actor"), pipeline.pop("cancelled_by_email")
    return {
        **pipeline,
        # who cancelled it, by e-mail while the account exists (as a decision on a step is named)
        "cancelled_by": decided_by(actor, email) if actor else None,
        "started": p["status"] != "running" or any(r["started"] for r in rows),
        "progress": round(100 * done / len(steps)) if steps else 0,
        "current": [s["key"] for s in steps if s["status"] == "in_progress"],
        "layers": layers(steps),
        "steps": steps,
    }


def layers(steps: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Steps grouped by depth (longest path from a root): each layer's steps can run side by side. A step
    a processor created counts as coming after the step that created it (it could not start before)."""
    by_key = {s["key"]: s for s in steps}
    depth: dict[str, int] = {}

    def d(key: str, seen: frozenset[str] = frozenset()) -> int:
        if key in depth:
            return depth[key]
        before = [
            *by_key[key]["depends_on"],
            *([by_key[key]["created_by"]] if by_key[key].get("created_by") else []),
        ]
        parents = [p for p in before if p in by_key and p not in seen]
        depth[key] = 0 if not parents else 1 + max(d(p, seen | {key}) for p in parents)
        return depth[key]

    for k in by_key:
        d(k)
    grouped: dict[int, list[dict[str, Any]]] = {}
    for s in steps:
        grouped.setdefault(depth[s["key"]], []).append(s)
    return [grouped[i] for i in sorted(grouped)]


PIPELINE_EVENTS = text(
    """
    SELECT e.id, e.job_id, j.step_key, e.at, e.kind, e.from_status, e.to_status, e.actor, e.message, e.data
    FROM job_events e LEFT JOIN jobs j ON j.id = e.job_id
    WHERE e.pipeline_id = :id AND e.id < :before ORDER BY e.id DESC LIMIT :limit
    """
)
EVENTS_LIMIT = 1000
"""Events :func:`events` reads at most by default."""


async def events(
    db: AsyncConnection | AsyncSession,
    pipeline_id: Any,
    principal: Principal | None = None,
    *,
    before: int = 2**63 - 1,
    limit: int = EVENTS_LIMIT,
) -> list[RowMapping]:
    """The pipeline's event history, every step's events (checked like :func:`get`): the newest ``limit``
    of those before the event id ``before``, newest first — never the whole of a history that may be
    very long."""
    conn = await queue.conn_of(db)
    p = await get(conn, pipeline_id, principal)
    params = {"id": p["id"], "before": before, "limit": limit}
    return list((await conn.execute(PIPELINE_EVENTS, params)).mappings().all())


UNFINISHED_STEPS = text(
    """
    SELECT id FROM jobs
    WHERE pipeline_id = :id
      AND (status IN ('queued', 'waiting_approval') OR (status = 'in_progress' AND is_active))
    ORDER BY id
    """
)
"""The steps a cancel can still stop: waiting ones, and running ones not already asked to stop (a running
step that is ``NOT is_active`` is "Cancelling…": counting it again made a second cancel look like one
that stopped a step)."""


COUNT_STOPPED = text(
    """
    SELECT count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE status = 'in_progress' AND NOT is_active) AS cancelling
    FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))
    """
)


async def cancel(
    db: AsyncConnection | AsyncSession, pipeline_id: Any, principal: Principal
) -> dict[str, int]:
    """Cancel every unfinished step (``POST /api/pipelines/{id}/cancel``): waiting steps at once, running
    steps by cancel request. Returns ``{"cancelled": n, "cancelling": n}`` over the steps that were
    unfinished (cascades included). A cancel that stops a step marks the pipeline cancelled by
    ``principal`` (:mod:`app.jobs.queue.cancelled`): none of its steps may be retried or rerun since.

    Raises:
        NotFound: unknown or another user's pipeline.
    """
    conn = await queue.conn_of(db)
    p = await get(conn, pipeline_id, principal)
    # Locked before its steps are listed: a step that completed after the list was read added the steps
    # it released (a list's instances, a processor's next jobs), which the cancel then missed, and the
    # pipeline ran on. A completion locks the pipeline too, so it comes before the list or after the
    # cancel, which it then loses.
    await queue.lock_pipelines(conn, [p["id"]])
    unfinished = list((await conn.execute(UNFINISHED_STEPS, {"id": p["id"]})).scalars())
    if unfinished:
        # Marked before its steps stop, so that the status each stop derives again sees it: a pipeline
        # whose step had failed reads "cancelled" once they have stopped, and stays so.
        await queue.mark_cancelled(conn, p["id"], queue.actor_of(principal))
    for job_id in unfinished:
        try:
            await queue.cancel(conn, job_id, principal, reason="the whole pipeline was cancelled")
        except Conflict:
            continue  # finished meanwhile, already cancelled by a cascade, or already being cancelled
    counts = (await conn.execute(COUNT_STOPPED, {"ids": unfinished})).mappings().one()
    return {"cancelled": counts["cancelled"], "cancelling": counts["cancelling"]}


def describe_model(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a template's or type's input (for the API and forms)."""
    return model.model_json_schema()


SAME_RUN = text(
    """
    SELECT template IS NOT DISTINCT FROM :template AS same_template,
           input_data IS NOT DISTINCT FROM CAST(CAST(:input AS text) AS jsonb) AS same_input_data,
           name = :name AS same_title
    FROM pipelines WHERE id = :id
    """
)


async def differences(
    db: AsyncConnection | AsyncSession, pipeline_id: Any, name: str, input_data: Any, title: str | None
) -> tuple[str, ...]:
    """What a start of template ``name`` with ``input_data`` and ``title`` asks for that the pipeline
    ``pipeline_id`` (which the same form key started) does not have: ``template``, ``input_data`` (in its
    normalised form, defaults filled in, compared as ``jsonb``) and ``title`` (the pipeline's name, the
    template's title when none is given). Empty: the same request.

    Raises:
        BadInput: as :func:`create_from_template` for an unknown template or bad input.
    """
    tpl = get_template(name) if isinstance(name, str) else None
    if tpl is None or not isinstance(input_data, dict):
        raise BadInput.field("template", f"unknown pipeline template {str(name)[:100]!r}")
    values, _ = tpl.build(input_data)
    params = {
        "id": pipeline_id,
        "template": tpl.name,
        "input": json_text(values),
        "name": (title or "").strip() or tpl.title,
    }
    row = (await (await queue.conn_of(db)).execute(SAME_RUN, params)).mappings().one()
    return tuple(field for field in ("template", "input_data", "title") if not row[f"same_{field}"])
