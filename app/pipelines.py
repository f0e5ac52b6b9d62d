"""Pipelines: DAGs of dependent jobs (issue 5; seed 000 §7).

Three ways to build one, checked the same way and created all-or-nothing in one transaction:

* a **template** registered in code (:func:`template`), started with ``{template, input_data}``; its input
  schema drives the web form, and each step's input is built from the pipeline's input;
* an **ad-hoc spec** ``{name, steps: [{key, type, input_data, depends_on: [keys], requires_approval?}]}``;
* **next jobs returned by a processor** (:class:`app.processors.NextJob`), which may depend on each other
  and on jobs already in the pipeline.

Checks (case C09): unique keys; every ``depends_on`` names a step of the same spec (or, for next jobs, an
existing job of the same pipeline and owner); no cycle — a step depending on itself included — reported
with its path (``a → b → a``); every step's type and input valid. New jobs only ever get edges to jobs
that already exist or are created with them, so no path can add a cycle to an existing graph.

A step's input may take a value from a parent's result at run time: ``{"$ref": "<parent key>.<field>"}``
anywhere in its ``input_data`` is replaced, just before the step runs, by that field of the parent's
``result_data`` (the worker resolves it; such fields are not schema-checked at creation).

Execution and failure propagation live in :mod:`app.jobs.queue` (the only status writer): a step is due
when all its parents completed; when a step fails or is cancelled every step downstream of it is
cancelled with the reason "upstream <type> <id> failed"; a manual retry of that step re-opens them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import BadInput, NotFound
from app.jobs import queue
from app.jobs.payload import check_input, json_text
from app.jobs.queue import NewJob, Principal, new_id
from app.processors import EmptyInput, Input, NextJob, registry, validation_error
from app.processors.inputs import file_refs
from app.settings import Settings

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_STEPS = 1000


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


@dataclass(frozen=True)
class Template:
    """A pipeline registered in code (issue 5 §2): ``name`` is its id in the API, ``title`` and
    ``description`` are for people, ``input_model`` is the form's schema, ``steps`` the DAG."""

    name: str
    title: str
    description: str
    steps: tuple[TemplateStep, ...]
    input_model: type[Input] = EmptyInput
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
            raise validation_error(exc, "input_data") from None
        values = model.model_dump(mode="json")
        steps = []
        for s in self.steps:
            step_input = s.input(values) if callable(s.input) else dict(s.input)
            steps.append(
                {
                    "key": s.key,
                    "type": s.type,
                    "input_data": step_input,
                    "depends_on": list(s.depends_on),
                    "requires_approval": s.requires_approval,
                    "title": s.title,
                }
            )
        return values, steps


TEMPLATES: dict[str, Template] = {}


def template(tpl: Template) -> Template:
    """Register a pipeline template (call at import time of a module in ``PROCESSOR_MODULES``).

    Raises:
        ValueError: the name is taken, or its steps do not form a valid DAG of registered types.
    """
    if tpl.name in TEMPLATES and TEMPLATES[tpl.name] is not tpl:
        raise ValueError(f"pipeline template {tpl.name!r} is registered twice")
    _check_graph([{"key": s.key, "depends_on": list(s.depends_on)} for s in tpl.steps], "steps")
    TEMPLATES[tpl.name] = tpl
    return tpl


def get_template(name: str) -> Template | None:
    registry.names()  # import processor modules, which register templates too
    return TEMPLATES.get(name)


def all_templates() -> list[Template]:
    registry.names()
    return list(TEMPLATES.values())


# --- validation ---------------------------------------------------------------------------------


def _find_cycle(nodes: Sequence[str], edges: dict[str, list[str]]) -> list[str] | None:
    """A cycle as a list of keys (first repeated at the end), or ``None``."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(nodes, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = grey
        stack.append(node)
        for dep in edges.get(node, []):
            if dep not in color:
                continue
            if color[dep] == grey:
                return [*stack[stack.index(dep) :], dep]
            if color[dep] == white:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        color[node] = black
        return None

    for n in nodes:
        if color[n] == white:
            found = visit(n)
            if found:
                return found
    return None


def _check_graph(steps: Sequence[dict[str, Any]], prefix: str, *, external: set[str] | None = None) -> None:
    """Keys unique and well-formed, dependencies known, no cycle.

    Raises:
        BadInput: naming the field path and, for a cycle, the path ``a → b → a`` (case C09).
    """
    if not steps:
        raise BadInput.field(prefix, "a pipeline needs at least one step")
    if len(steps) > MAX_STEPS:
        raise BadInput.field(prefix, f"a pipeline can have at most {MAX_STEPS} steps")
    keys: list[str] = []
    for i, step in enumerate(steps):
        key = step.get("key")
        if not isinstance(key, str) or not KEY_PATTERN.match(key):
            raise BadInput.field(
                f"{prefix}[{i}].key",
                "must be 1–64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            )
        if key in keys:
            raise BadInput.field(f"{prefix}[{i}].key", f"duplicate step key {key!r}")
        keys.append(key)
    known = set(keys) | (external or set())
    edges: dict[str, list[str]] = {}
    for i, step in enumerate(steps):
        deps = step.get("depends_on") or []
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            raise BadInput.field(f"{prefix}[{i}].depends_on", "must be a list of step keys")
        for d in deps:
            if d == step["key"]:
                raise BadInput.field(
                    f"{prefix}[{i}].depends_on",
                    f"dependency cycle: {d} → {d} (a step cannot depend on itself)",
                )
            if d not in known:
                raise BadInput.field(f"{prefix}[{i}].depends_on", f"unknown dependency {d!r}")
        edges[step["key"]] = list(dict.fromkeys(deps))
    cycle = _find_cycle(keys, edges)
    if cycle:
        raise BadInput.field(prefix, "dependency cycle: " + " → ".join(cycle))


def _refs(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"$ref"} or any(_refs(v) for v in value.values())
    if isinstance(value, list):
        return any(_refs(v) for v in value)
    return False


def validate_step_input(type_: str, input_data: Any, path: str, settings: Settings) -> dict[str, Any]:
    """Validate one step's input against its type; fields holding a ``{"$ref": …}`` are checked at run
    time instead. Returns the input to store.

    Raises:
        BadInput: unknown type, or a bad field (named by its full path).
        TooLarge: the input is above ``JOB_MAX_INPUT_BYTES``.
    """
    spec = registry.get(type_) if isinstance(type_, str) else None
    if spec is None:
        raise BadInput.field(path.rsplit(".", 1)[0] + ".type", f"unknown job type {str(type_)[:100]!r}")
    check_input(input_data, settings.job_max_input_bytes, field=path)
    ref_fields = {k for k, v in input_data.items() if _refs(v)}
    if not ref_fields:
        return spec.validate_input(input_data, field_prefix=path)
    try:
        spec.input_model.model_validate({k: v for k, v in input_data.items() if k not in ref_fields})
    except ValidationError as exc:
        errors = [
            e for e in exc.errors() if not (e["type"] == "missing" and e["loc"] and e["loc"][0] in ref_fields)
        ]
        if errors:
            raise validation_error(ValidationError.from_exception_data(exc.title, errors), path) from None
    return input_data


def resolve_refs(input_data: Any, parents: dict[str, Any]) -> Any:
    """Replace each ``{"$ref": "key.field.sub"}`` with that value of parent ``key``'s result_data.

    Raises:
        PermanentError: the parent or field does not exist (retrying cannot fix it).
    """
    from app.processors import PermanentError

    if isinstance(input_data, dict):
        if set(input_data) == {"$ref"} and isinstance(input_data["$ref"], str):
            key, *fields = input_data["$ref"].split(".")
            if key not in parents:
                raise PermanentError(
                    f"input refers to step {key!r}, which is not an upstream step of this one"
                )
            value: Any = parents[key]
            for f in fields:
                if isinstance(value, dict) and f in value:
                    value = value[f]
                elif isinstance(value, list) and f.isdigit() and int(f) < len(value):
                    value = value[int(f)]
                else:
                    raise PermanentError(
                        f"input refers to {input_data['$ref']!r}, but step {key!r} has no such result"
                    )
            return value
        return {k: resolve_refs(v, parents) for k, v in input_data.items()}
    if isinstance(input_data, list):
        return [resolve_refs(v, parents) for v in input_data]
    return input_data


def _topo_order(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps with every parent before its children (insertion order otherwise)."""
    by_key = {s["key"]: s for s in steps}
    seen: set[str] = set()
    order: list[dict[str, Any]] = []

    def add(s: dict[str, Any]) -> None:
        if s["key"] in seen:
            return
        seen.add(s["key"])
        for d in s.get("depends_on") or []:
            if d in by_key:
                add(by_key[d])
        order.append(s)

    for s in steps:
        add(s)
    return order


# --- creation ---------------------------------------------------------------------------------------

INSERT_PIPELINE = text(
    """
    INSERT INTO pipelines (id, name, template, user_id, input_data)
    VALUES (:id, :name, :template, :user_id, CAST(CAST(:input AS text) AS jsonb))
    RETURNING id, name, template, user_id, status, created_at
    """
)


async def create(
    db: AsyncConnection | AsyncSession,
    *,
    name: str,
    steps: list[dict[str, Any]],
    user_id: int,
    settings: Settings,
    template_name: str | None = None,
    input_data: dict[str, Any] | None = None,
    request_id: str | None = None,
    actor: str | None = None,
) -> RowMapping:
    """Validate a spec and create the pipeline and all its jobs in the caller's transaction (all or
    nothing). Returns the pipeline row.

    Raises:
        BadInput: bad name, keys, dependencies (unknown, self, cycle with its path), types or inputs —
            named by field path (``steps[2].input_data.seconds``).
        TooLarge: a step's input above ``JOB_MAX_INPUT_BYTES``.
    """
    conn = await queue._conn(db)
    name = (name or "").strip()
    if not name or len(name) > 200 or "\x00" in name:
        raise BadInput.field("name", "give the pipeline a name of 1 to 200 characters")
    if not isinstance(steps, list):
        raise BadInput.field("steps", "must be a list of steps")
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise BadInput.field(f"steps[{i}]", "must be an object with key, type and input_data")
    _check_graph(steps, "steps")
    stored_inputs = {}
    for i, step in enumerate(steps):
        if not isinstance(step.get("input_data", {}), dict):
            raise BadInput.field(f"steps[{i}].input_data", "must be a JSON object")
        stored_inputs[step["key"]] = validate_step_input(
            step.get("type"), step.get("input_data") or {}, f"steps[{i}].input_data", settings
        )
        if not isinstance(step.get("requires_approval", False), bool):
            raise BadInput.field(f"steps[{i}].requires_approval", "must be true or false")
    pipeline_id = new_id()
    row = (
        (
            await conn.execute(
                INSERT_PIPELINE,
                {
                    "id": pipeline_id,
                    "name": name,
                    "template": template_name,
                    "user_id": user_id,
                    "input": json_text(input_data) if input_data is not None else None,
                },
            )
        )
        .mappings()
        .one()
    )
    ids = {s["key"]: new_id() for s in _topo_order(steps)}
    jobs = []
    pending: dict[uuid.UUID, int] = {}
    edges: list[tuple[uuid.UUID, uuid.UUID]] = []
    for s in _topo_order(steps):
        jid = ids[s["key"]]
        deps = list(dict.fromkeys(s.get("depends_on") or []))
        pending[jid] = len(deps)
        edges.extend((jid, ids[d]) for d in deps)
        jobs.append(
            NewJob(
                id=jid,
                type=s["type"],
                input_data=stored_inputs[s["key"]],
                user_id=user_id,
                pipeline_id=pipeline_id,
                step_key=s["key"],
                requires_approval=bool(s.get("requires_approval", False)),
                title=s.get("title"),
                request_id=request_id,
                max_attempts=s.get("max_attempts"),
                priority=s.get("priority", 0),
            )
        )
    await _insert(conn, jobs, settings, pending, edges, actor or f"user:{user_id}", validated=True)
    return row


async def _insert(
    conn: AsyncConnection,
    jobs: list[NewJob],
    settings: Settings,
    pending: dict[uuid.UUID, int],
    edges: list[tuple[uuid.UUID, uuid.UUID]],
    actor: str,
    *,
    validated: bool,
) -> None:
    # Inputs were validated above (refs included), so skip the queue's own schema check for ref fields by
    # passing normalised inputs; queue.prepare re-validates those without refs.
    try:
        await queue.enqueue_many(
            conn, jobs, settings, actor=actor, pending=pending, edges=edges, skip_schema=validated
        )
    except BadInput as exc:
        raise BadInput(
            exc.detail.replace("jobs[", "steps["),
            errors={k.replace("jobs[", "steps["): v for k, v in exc.errors.items()},
        ) from None


async def create_from_template(
    db: AsyncConnection | AsyncSession,
    name: str,
    input_data: dict[str, Any],
    *,
    user_id: int,
    settings: Settings,
    request_id: str | None = None,
    title: str | None = None,
) -> RowMapping:
    """Start a registered template (``POST /api/pipelines {template, input_data}``). ``title`` names
    this run (the form's "Name this pipeline"); without it the pipeline is named after the template.

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
    conn = await queue._conn(db)
    await queue.check_file_owners(
        conn, [(user_id, path, fid) for path, fid in file_refs(tpl.input_model, values)]
    )
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
    )


# --- next jobs from processors ----------------------------------------------------------------------


def plan_next_jobs(creator: Any, next_jobs: Sequence[NextJob], settings: Settings) -> list[NextJob]:
    """Check the jobs a processor returned before its completion is recorded: types and inputs valid,
    keys unique, dependencies among them acyclic (case C09 (c)). Returns them unchanged.

    Raises:
        BadInput: the processor asked for something invalid (its job then fails permanently).
    """
    for i, nj in enumerate(next_jobs):
        if not isinstance(nj, NextJob):
            raise BadInput.field(f"next_jobs[{i}]", "must be a NextJob")
        validate_step_input(nj.type, nj.input_data, f"next_jobs[{i}].input_data", settings)
    new_keys = {nj.key or f"next-{i + 1}" for i, nj in enumerate(next_jobs)}
    specs = [
        {
            "key": nj.key or f"next-{i + 1}",
            "depends_on": [str(d) for d in nj.depends_on if str(d) in new_keys],
        }
        for i, nj in enumerate(next_jobs)
    ]
    _check_graph(specs, "next_jobs")  # only edges among the new jobs can form a cycle
    return list(next_jobs)


NEW_PIPELINE_FOR = text(
    """
    WITH p AS (
        INSERT INTO pipelines (id, name, user_id) VALUES (:pid, :name, :user_id) RETURNING id
    )
    UPDATE jobs SET pipeline_id = (SELECT id FROM p), step_key = COALESCE(step_key, 'start')
    WHERE id = :job_id
    RETURNING pipeline_id
    """
)
PIPELINE_KEYS = text("SELECT id, step_key, user_id FROM jobs WHERE pipeline_id = :pid")


async def insert_next_jobs(
    conn: AsyncConnection, creator: Any, next_jobs: Sequence[NextJob], settings: Settings
) -> uuid.UUID:
    """Create a processor's next jobs in the completion's transaction (issue 5 §2). They join the
    creator's pipeline (a new one is made if it had none) and belong to the creator's owner (case C20).
    A dependency is a key among the new jobs, or the id or step key of a job already in the pipeline.
    Returns the pipeline id.

    Raises:
        BadInput: a dependency that is not in the pipeline (case C09 (d)).
    """
    pipeline_id = creator["pipeline_id"]
    if pipeline_id is None:
        pipeline_id = (
            await conn.execute(
                NEW_PIPELINE_FOR,
                {
                    "pid": new_id(),
                    "name": creator["title"] or creator["type"],
                    "user_id": creator["user_id"],
                    "job_id": creator["id"],
                },
            )
        ).scalar_one()
    existing = (await conn.execute(PIPELINE_KEYS, {"pid": pipeline_id})).mappings().all()
    by_id = {str(r["id"]): r["id"] for r in existing}
    by_key = {r["step_key"]: r["id"] for r in existing if r["step_key"]}
    taken = set(by_key)
    keys: list[str] = []
    for i, nj in enumerate(next_jobs):
        key = nj.key or f"{creator['step_key'] or 'step'}-next-{i + 1}"
        while key in taken:
            key = f"{key}'"
        taken.add(key)
        keys.append(key)
    new_ids = {keys[i]: new_id() for i in range(len(next_jobs))}
    local = {(nj.key or keys[i]): new_ids[keys[i]] for i, nj in enumerate(next_jobs)}
    jobs: list[NewJob] = []
    edges: list[tuple[uuid.UUID, uuid.UUID]] = []
    outside: dict[uuid.UUID, set[uuid.UUID]] = {}
    for i, nj in enumerate(next_jobs):
        jid = new_ids[keys[i]]
        for dep in nj.depends_on:
            d = str(dep)
            target = local.get(d) or by_id.get(d) or by_key.get(d)
            if target is None:
                raise BadInput.field(f"next_jobs[{i}].depends_on", f"unknown dependency {d[:100]!r}")
            edges.append((jid, target))
            if target not in new_ids.values():
                outside.setdefault(jid, set()).add(target)
        jobs.append(
            NewJob(
                id=jid,
                type=nj.type,
                input_data=nj.input_data,
                user_id=creator["user_id"],
                pipeline_id=pipeline_id,
                step_key=keys[i],
                requires_approval=nj.requires_approval,
                title=nj.title,
                priority=nj.priority,
                created_by_job=creator["id"],
            )
        )
    # Parents already in the pipeline: lock them so none finishes unseen, and count the unfinished ones.
    pending: dict[uuid.UUID, int] = {}
    for j in jobs:
        internal = sum(1 for c, _ in edges if c == j.id) - len(outside.get(j.id, ()))
        external = (
            await queue._lock_parents(
                conn, creator["user_id"], sorted(outside.get(j.id, set()), key=str), owner_is_admin=False
            )
            if outside.get(j.id)
            else 0
        )
        pending[j.id] = internal + external
    await _insert(conn, jobs, settings, pending, edges, f"job:{creator['id']}", validated=True)
    return pipeline_id


# --- reading ----------------------------------------------------------------------------------------

GET_PIPELINE = text(
    "SELECT id, name, template, user_id, status, input_data, created_at, updated_at, finished_at FROM pipelines WHERE id = :id"
)
PIPELINE_STEPS = text(
    """
    SELECT j.id, j.step_key, j.type, j.title, j.status, j.is_active, j.pending_parents, j.run_at, j.attempts,
           j.max_attempts, j.progress, j.progress_message, j.started_at, j.completed_at, j.requires_approval,
           j.error_message IS NOT NULL AS has_error, j.created_at, j.created_by_job,
           COALESCE((SELECT array_agg(d.depends_on::text ORDER BY d.depends_on) FROM job_dependencies d WHERE d.job_id = j.id),
                    '{}') AS depends_on_ids
    FROM jobs j WHERE j.pipeline_id = :id ORDER BY j.id
    """
)


async def get(
    db: AsyncConnection | AsyncSession, pipeline_id: Any, principal: Principal | None = None
) -> dict[str, Any]:
    """The pipeline with its steps for the API and the step indicator (issue 5 §6): ``{id, name,
    template, status, progress (0–100), current: [step keys running], layers: [[step, …], …] (DAG
    order, parallel steps side by side), steps: [{job_id, key, type, title, status, depends_on, …}]}``.

    Raises:
        NotFound: unknown, malformed or another user's id (same answer, case C20).
    """
    conn = await queue._conn(db)
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
                "title": r["title"] or (spec.title if spec else r["type"]),
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
                "created_by": key_of.get(str(r["created_by_job"])) if r["created_by_job"] else None,
            }
        )
    done = sum(1 for s in steps if s["status"] == "completed")
    return {
        **dict(p),
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
    WHERE e.pipeline_id = :id ORDER BY e.id
    """
)


async def events(
    db: AsyncConnection | AsyncSession, pipeline_id: Any, principal: Principal | None = None
) -> list[RowMapping]:
    """The pipeline's event history, every step's events in order (checked like :func:`get`)."""
    conn = await queue._conn(db)
    p = await get(conn, pipeline_id, principal)
    return list((await conn.execute(PIPELINE_EVENTS, {"id": p["id"]})).mappings().all())


UNFINISHED_STEPS = text(
    "SELECT id FROM jobs WHERE pipeline_id = :id AND status IN ('queued', 'in_progress', 'waiting_approval') ORDER BY id"
)


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
    unfinished (cascades included).

    Raises:
        NotFound: unknown or another user's pipeline.
    """
    from app.errors import Conflict

    conn = await queue._conn(db)
    p = await get(conn, pipeline_id, principal)
    unfinished = list((await conn.execute(UNFINISHED_STEPS, {"id": p["id"]})).scalars())
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
