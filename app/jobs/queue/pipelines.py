"""Pipelines in the queue: creating one with all its jobs, adding a processor's next jobs to one, and
deriving a pipeline's status from its jobs'.

The graph and input checks are in :mod:`app.jobs.graph`; templates, reading and cancelling are in
:mod:`app.pipelines`.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import BadInput, KeyTaken, TooLarge
from app.jobs import approvals, outbox
from app.jobs.error_text import NEVER_CREATED
from app.jobs.fanout import base_key, check_for_each, expand_literal
from app.jobs.graph import (
    check_graph,
    check_key,
    check_next_job_submission,
    check_ref_sources,
    check_step_submission,
    rename_refs,
    topo_order,
    validate_step_input,
)
from app.jobs.payload import json_text, text_problem
from app.jobs.queue.common import conn_of, new_id, sql
from app.jobs.queue.fanouts import name_instances
from app.jobs.queue.fanouts import store as store_fanout
from app.jobs.queue.holds import hold_if_owner_disabled
from app.jobs.queue.many_jobs import enqueue_many, renamed
from app.jobs.queue.new_jobs import NewJob, check_dependency_list, lock_parents, pipeline_size_refusal
from app.jobs.queue.waiting import insert_refused_jobs, refusal_from_result
from app.jobs.rows import Fetched
from app.jobs.types import NextJob, may_create_next, priority_refusal, refusal, registry
from app.settings import Settings

# --- status ---------------------------------------------------------------------------------------

PIPELINE_COUNTS = sql(
    """
    SELECT p.id, p.status AS old_status, p.removed_unfinished, p.removed_failed,
           p.cancelled_at IS NOT NULL AS cancelled_by_person,
           count(*) FILTER (WHERE j.status = 'completed') AS completed,
           count(*) FILTER (WHERE j.status = 'failed') AS failed,
           count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE j.status = 'waiting_approval') AS waiting_approval,
           count(*) FILTER (WHERE j.status IN ('queued', 'in_progress')) AS active,
           count(j.id) AS total
    FROM pipelines p LEFT JOIN jobs j ON j.pipeline_id = p.id
    WHERE p.id = ANY(CAST(:ids AS uuid[]))
    GROUP BY p.id
    """
)
SET_PIPELINE_STATUS = sql(
    """
    UPDATE pipelines SET status = :status, updated_at = now(),
        finished_at = CASE WHEN :finished THEN COALESCE(finished_at, now()) ELSE NULL END
    WHERE id = :id
    RETURNING id, name, template, user_id, status
    """
)


MARK_REMOVED = sql(
    """
    UPDATE pipelines SET removed_unfinished = removed_unfinished OR :unfinished,
        removed_failed = removed_failed OR :failed
    WHERE id = :id
    """
)


async def mark_removed(conn: AsyncConnection, pipeline_id: uuid.UUID, step_status: str) -> None:
    """Record what a step of this pipeline (locked by ``lock_pipelines``) that is being deleted leaves
    behind: its status is derived from the steps it still has, and the deleted one's events go with it.
    A step deleted before it completed (``removed_unfinished``) keeps the remaining completed steps from
    making it ``completed``; a failed one (``removed_failed``) keeps it ``failed``, as a pipeline with a
    failed step is, however the others end."""
    if step_status == "completed":
        return
    params = {"id": pipeline_id, "unfinished": True, "failed": step_status == "failed"}
    await conn.execute(MARK_REMOVED, params)


def derive_pipeline_status(counts: Fetched) -> tuple[str, bool]:
    """``(status, finished)`` of a pipeline from its jobs' status counts.

    ``failed`` as soon as any step failed (the pipeline can no longer complete; independent steps may
    still be finishing), also when that step was deleted since (``removed_failed``), whether the others
    still run, end or go too; ``finished`` once no step is live. ``completed`` only when every step it still
    has completed and no step was deleted before it completed (``removed_unfinished``): a pipeline that
    lost a step (an admin's delete) did not run it, so once nothing is live it keeps the finished status
    it had (``old_status``: a pipeline whose steps were all deleted, one by one), or is ``cancelled`` —
    the deleted steps will never run now. A pipeline a person cancelled (``cancelled_by_person``,
    :mod:`app.jobs.queue.cancelled`) is ``cancelled`` once nothing is live, a failed step or not: that
    is what happened to it, and none of its steps may come back.
    """
    live = counts["active"] + counts["waiting_approval"]
    old = counts["old_status"]
    if live == 0 and counts.get("cancelled_by_person"):
        return "cancelled", True
    if counts["failed"] or counts["removed_failed"]:
        return "failed", live == 0
    if not counts["total"]:
        return (old if old in ("failed", "cancelled", "completed") else "cancelled"), True
    if live == 0:
        if counts["removed_unfinished"]:
            return (old if old in ("failed", "cancelled") else "cancelled"), True
        if counts["completed"] == counts["total"]:
            return "completed", True
        return "cancelled", True
    if counts["waiting_approval"]:
        return "waiting_approval", False
    return "running", False


async def refresh_pipelines(conn: AsyncConnection, pipeline_ids: Iterable[uuid.UUID]) -> None:
    """Re-derive the status of each pipeline (rows must already be locked by ``lock_pipelines`` or be
    new); record one ``pipeline_failed`` alert when a pipeline turns failed."""
    ids = sorted(set(pipeline_ids), key=str)
    if not ids:
        return
    rows = (await conn.execute(PIPELINE_COUNTS, {"ids": ids})).mappings().all()
    for r in rows:
        status, finished = derive_pipeline_status(r)
        updated = (
            (await conn.execute(SET_PIPELINE_STATUS, {"id": r["id"], "status": status, "finished": finished}))
            .mappings()
            .first()
        )
        if updated and status == "failed" and r["old_status"] != "failed":
            await outbox.record_pipeline_failure(conn, updated)


# --- creation ---------------------------------------------------------------------------------------

INSERT_PIPELINE = sql(
    """
    INSERT INTO pipelines (id, name, template, user_id, input_data, form_key, idempotency_key, request_digest)
    VALUES (:id, :name, :template, :user_id, CAST(CAST(:input AS text) AS jsonb), :form_key, :idempotency_key,
            :request_digest)
    ON CONFLICT DO NOTHING
    RETURNING id, name, template, user_id, status, created_at
    """
)


def check_spec(
    name: Any, steps: Any, settings: Settings
) -> tuple[str, list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, str]]:
    """The pipeline's name, stripped; the steps with each literal ``for_each`` expanded
    (:func:`app.jobs.fanout.expand_literal`); each step's input to store, by step key; and where the
    person wrote each step's input, by step key (``steps[2].input_data``, ``steps[2].for_each[1]``).

    Raises:
        BadInput: see :func:`create_pipeline`.
    """
    name = (name or "").strip()
    if not name or len(name) > 200 or text_problem(name):
        raise BadInput.field("name", "give the pipeline a name of 1 to 200 characters")
    if not isinstance(steps, list):
        raise BadInput.field("steps", "must be a list of steps")
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            raise BadInput.field(f"steps[{i}]", "must be an object with key, type and input_data")
        check_dependency_list(step.get("depends_on"), settings, f"steps[{i}].depends_on")
    steps = [dict(s) for s in steps]
    check_for_each(steps, "steps", settings.pipeline_max_steps)
    check_graph(steps, "steps")
    paths: dict[str, str] = {}
    for i, step in enumerate(steps):
        if not isinstance(step.get("input_data", {}), dict):
            raise BadInput.field(f"steps[{i}].input_data", "must be a JSON object")
        if not isinstance(step.get("requires_approval", False), bool):
            raise BadInput.field(f"steps[{i}].requires_approval", "must be true or false")
        approvals.parse_step(step, f"steps[{i}]")
        items = step.get("for_each")
        if isinstance(items, list):
            paths.update({f"{step['key']}[{n}]": f"steps[{i}].for_each[{n}]" for n in range(len(items))})
        else:
            paths[step["key"]] = f"steps[{i}].input_data"
    expanded = expand_literal(steps)
    if not expanded:
        # Every step had an empty ``for_each`` list: a pipeline without a job would never finish.
        raise BadInput.field(
            "steps", "a pipeline needs at least one step to run; every step's for_each list is empty"
        )
    # The pipeline's size as it will start (a template's known only now that it is built): the same rule
    # an ad-hoc pipeline meets as sent, so that a schedule is refused when it is made, not when it fires.
    refused = pipeline_size_refusal(
        settings, len(expanded), sum(len(s.get("depends_on") or ()) for s in expanded)
    )
    if refused is not None:
        raise refused
    _check_deferred(expanded)
    for s in expanded:
        check_ref_sources(s, paths[s["key"]])
    stored_inputs = {
        s["key"]: validate_step_input(s.get("type"), s.get("input_data") or {}, paths[s["key"]], settings)
        for s in expanded
    }
    for s in expanded:
        check_step_submission(s, stored_inputs[s["key"]], paths[s["key"]], settings)
    return name, expanded, stored_inputs, paths


def _check_deferred(steps: list[dict[str, Any]]) -> None:
    """A step whose list comes from a parent's result cannot wait for another such step: its parents
    must be steps that exist when the pipeline is created.

    Raises:
        BadInput: naming the step's ``depends_on``.
    """
    deferred = {s["key"] for s in steps if "for_each" in s}
    for i, s in enumerate(steps):
        if s["key"] in deferred:
            bad = [d for d in s.get("depends_on") or [] if d in deferred]
            if bad:
                raise BadInput.field(
                    f"steps[{i}].depends_on",
                    f"a step run for each item of a parent's result cannot depend on another such step "
                    f"({bad[0]!r}); give it a literal list, or let a step in between collect the items",
                )


def _gated(
    steps: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, int]]:
    """``(steps to insert, for_each steps expanded later by key, gates)``: a step that depends on a
    later-expanded step waits for that step's parents instead, plus one gate per such step."""
    deferred = {s["key"]: s for s in steps if "for_each" in s}
    gates: dict[str, int] = {}
    regular = []
    for s in steps:
        if s["key"] in deferred:
            continue
        deps = list(dict.fromkeys(s.get("depends_on") or []))
        if any(d in deferred for d in deps):
            gates[s["key"]] = sum(1 for d in deps if d in deferred)
            stand_ins: list[str] = []
            for d in deps:
                stand_ins.extend(deferred[d].get("depends_on") or [] if d in deferred else [d])
            s = {**s, "depends_on": list(dict.fromkeys(stand_ins))}
        regular.append(s)
    return regular, deferred, gates


def _step_jobs(
    steps: list[dict[str, Any]],
    stored_inputs: dict[str, dict[str, Any]],
    user_id: int,
    pipeline_id: uuid.UUID,
    request_id: str | None,
    ids: dict[str, uuid.UUID],
    gates: dict[str, int],
) -> tuple[list[NewJob], dict[uuid.UUID, int], list[tuple[uuid.UUID, uuid.UUID]]]:
    """The jobs of a checked spec, parents first; how many parents each waits for (plus its gates);
    the ``(child, parent)`` edges."""
    ordered = topo_order(steps)
    jobs = []
    pending: dict[uuid.UUID, int] = {}
    edges: list[tuple[uuid.UUID, uuid.UUID]] = []
    for s in ordered:
        jid = ids[s["key"]]
        deps = list(dict.fromkeys(s.get("depends_on") or []))
        pending[jid] = len(deps) + gates.get(s["key"], 0)
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
    return jobs, pending, edges


async def create_pipeline(
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
    form_key: str | None = None,
    idempotency_key: str | None = None,
    request_digest: str | None = None,
) -> RowMapping:
    """Validate a spec and create the pipeline and all its jobs in the caller's transaction (all or
    nothing). Returns the pipeline row. ``form_key``: the key of the form that started it, one pipeline
    per owner and key — the caller looks for the owner's earlier pipeline with it first, under the
    owner's lock (:func:`app.actions.pipelines.submit_template`). ``idempotency_key``: the API's key,
    also one per owner, stored with ``request_digest`` (:mod:`app.request_keys`).

    Raises:
        BadInput: bad name, keys, dependencies (unknown, self, cycle with its path), types or inputs —
            named by field path (``steps[2].input_data.seconds``).
        TooLarge: a step's input above ``JOB_MAX_INPUT_BYTES``.
        KeyTaken: the owner has a pipeline with ``form_key`` or ``idempotency_key`` already (nothing
            is created).
    """
    conn = await conn_of(db)
    name, expanded, stored_inputs, paths = check_spec(name, steps, settings)
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
                    "form_key": form_key,
                    "idempotency_key": idempotency_key,
                    "request_digest": request_digest,
                },
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise KeyTaken("This key has started a pipeline already; it was not started again.")
    rules = await _approval_rules(conn, steps, user_id)
    regular, deferred, gates = _gated(expanded)
    ids = {s["key"]: new_id() for s in regular}
    jobs, pending, edges = _step_jobs(regular, stored_inputs, user_id, pipeline_id, request_id, ids, gates)
    await name_instances(conn, user_id, jobs)
    inputs = [paths[j.step_key or ""] for j in jobs]
    await insert_steps(conn, jobs, settings, pending, edges, actor or f"user:{user_id}", inputs)
    # A step run once per item has its step's approval rule on every instance.
    await approvals.store_rules(
        conn,
        [(j.id, *rules[base]) for j in jobs if (base := base_key(j.step_key or "") or j.step_key) in rules],
    )
    for key, step in deferred.items():
        parents = [ids[d] for d in step.get("depends_on") or []]
        dependents = [
            ids[s["key"]] for s in expanded if s["key"] in ids and key in (s.get("depends_on") or [])
        ]
        await store_fanout(
            conn,
            pipeline_id,
            {**step, "input_data": stored_inputs[key]},
            parents,
            dependents,
            settings,
            rules.get(key),
        )
    return row


async def _approval_rules(
    conn: AsyncConnection, steps: list[dict[str, Any]], user_id: int
) -> dict[str, tuple[approvals.ApprovalSpec, approvals.Rule]]:
    """Each step's named approvers, resolved for the pipeline's owner, by step key.

    Raises:
        BadInput: see :func:`app.jobs.approvals.resolve`.
    """
    rules = {}
    for i, step in enumerate(steps):
        spec = approvals.parse_step(step, f"steps[{i}]")
        if spec is not None:
            rules[step["key"]] = (spec, await approvals.resolve(conn, spec, user_id, f"steps[{i}]"))
    return rules


async def insert_steps(
    conn: AsyncConnection,
    jobs: list[NewJob],
    settings: Settings,
    pending: dict[uuid.UUID, int],
    edges: list[tuple[uuid.UUID, uuid.UUID]],
    actor: str,
    inputs: Sequence[str],
) -> None:
    """Insert a pipeline's jobs whose inputs were validated already (``$ref`` fields included, which the
    queue's own schema check would refuse). ``inputs``: where the person wrote each job's input
    (``steps[2].input_data``, ``steps[2].for_each[1]``, a processor's ``next_jobs[0].input_data``), to
    name a bad one by (:func:`~app.jobs.queue.many_jobs.renamed`)."""
    try:
        await enqueue_many(conn, jobs, settings, actor=actor, pending=pending, edges=edges, skip_schema=True)
    except (BadInput, TooLarge) as exc:
        raise renamed(exc, inputs) from None


# --- next jobs from processors ----------------------------------------------------------------------

NEW_PIPELINE_FOR = sql(
    """
    WITH p AS (
        INSERT INTO pipelines (id, name, user_id) VALUES (:pid, :name, :user_id) RETURNING id
    )
    UPDATE jobs SET pipeline_id = (SELECT id FROM p), step_key = COALESCE(step_key, 'start')
    WHERE id = :job_id
    RETURNING pipeline_id
    """
)
PIPELINE_KEYS = sql("SELECT id, step_key, user_id FROM jobs WHERE pipeline_id = :pid")
OWNER_IS_ADMIN = sql("SELECT is_admin FROM users WHERE id = :id")


async def check_next_types(
    conn: AsyncConnection, creator: Mapping[str, Any], next_jobs: Sequence[NextJob]
) -> None:
    """Refuse next jobs of types the creator may not create for its owner
    (:func:`app.jobs.types.may_create_next`), or with a priority its owner may not give a job
    (:func:`app.jobs.types.priority_refusal`); the owner's admin flag is read only when one of them is
    admins-only or above that priority.

    Raises:
        BadInput: naming the refused next job's ``type`` or ``priority``.
    """
    creator_spec = registry.get(creator["type"])
    is_admin: bool | None = None
    for i, nj in enumerate(next_jobs):
        spec = registry.get(nj.type)
        typed = spec is None or may_create_next(False, creator_spec, spec)
        # an unknown type is refused by the input check, with the list of known types
        if typed and priority_refusal(False, nj.priority) is None:
            continue
        if is_admin is None:
            is_admin = bool((await conn.execute(OWNER_IS_ADMIN, {"id": creator["user_id"]})).scalar())
        if is_admin:
            continue
        if spec is not None and not typed:
            raise BadInput.field(
                f"next_jobs[{i}].type",
                f"{refusal(spec)}, and {creator['type']!r} does not declare it among its next types",
            )
        raise BadInput.field(f"next_jobs[{i}].priority", str(priority_refusal(False, nj.priority)))


async def _pipeline_of(conn: AsyncConnection, creator: Mapping[str, Any]) -> uuid.UUID:
    """The creator's pipeline; a new one (named after the creator) if it had none."""
    if creator["pipeline_id"] is not None:
        return uuid.UUID(str(creator["pipeline_id"]))
    params = {
        "pid": new_id(),
        "name": creator["title"] or creator["type"],
        "user_id": creator["user_id"],
        "job_id": creator["id"],
    }
    return uuid.UUID(str((await conn.execute(NEW_PIPELINE_FOR, params)).scalar_one()))


def _new_keys(creator: Mapping[str, Any], next_jobs: Sequence[NextJob], taken: set[str]) -> list[str]:
    """A step key for each next job: its own ``key`` (checked like a pipeline's, :func:`check_key`), else
    ``<creator's key>-next-<n>`` (a dot in a creator's key from before dots were refused becomes ``-``:
    a ``$ref`` ends the key at its first dot); primed until it is not taken in the pipeline.

    Raises:
        BadInput: a next job's own key that is not a step key (``next_jobs[1].key``).
    """
    keys: list[str] = []
    for i, nj in enumerate(next_jobs):
        if nj.key:
            check_key(nj.key, f"next_jobs[{i}].key")
        key = nj.key or f"{creator['step_key'] or 'step'}-next-{i + 1}".replace(".", "-")
        while key in taken:
            key = f"{key}'"
        taken.add(key)
        keys.append(key)
    return keys


async def insert_next_jobs(
    conn: AsyncConnection, creator: Mapping[str, Any], next_jobs: Sequence[NextJob], settings: Settings
) -> uuid.UUID:
    """Create a processor's next jobs in the completion's transaction. They join the creator's
    pipeline (a new one is made if it had none) and belong to the creator's owner. A dependency is a
    key among the new jobs, or the id or step key of a job already in the pipeline. A ``{"$ref": …}``
    in a next job's input names one of its dependencies as the job will read its result
    (:func:`~app.jobs.graph.resolve_refs`): by its step key (the key it is stored under — a creator
    without one is ``start``), or by its id when it has no key — the rule of a pipeline's steps
    (:func:`~app.jobs.graph.check_ref_sources`). Returns the pipeline id.

    Raises:
        BadInput: a dependency list longer than a job's may be (``next_jobs[1].depends_on``,
        :func:`~app.jobs.queue.new_jobs.check_dependency_list`); a dependency that is not in the pipeline; a ``$ref`` to a job it does not depend on
        (``next_jobs[1].input_data.url``); a type the creator may not create for its owner
        (:func:`check_next_types`).
        TooLarge: a next job's input above ``JOB_MAX_INPUT_BYTES`` as written (``next_jobs[1].input_data``):
        a ``$ref`` to a sibling stored under a primed key is longer than the processor wrote it.
    """
    for i, nj in enumerate(next_jobs):
        check_dependency_list(nj.depends_on, settings, f"next_jobs[{i}].depends_on")
    await check_next_types(conn, creator, next_jobs)
    pipeline_id = await _pipeline_of(conn, creator)
    existing = (await conn.execute(PIPELINE_KEYS, {"pid": pipeline_id})).mappings().all()
    # PIPELINE_MAX_STEPS holds for the steps a pipeline gains as it runs, as for a for_each list read from
    # a result: a processor (or its retry, whose next jobs join the pipeline again) could grow it past any size.
    limit = settings.pipeline_max_steps
    if limit and len(existing) + len(next_jobs) > limit:
        raise BadInput.field(
            "next_jobs",
            f"{len(next_jobs):,} next jobs would give their pipeline {len(existing) + len(next_jobs):,} "
            f"steps; a pipeline may have at most {limit:,} steps",
        )
    by_id = {str(r["id"]): r["id"] for r in existing}
    by_key = {r["step_key"]: r["id"] for r in existing if r["step_key"]}
    keys = _new_keys(creator, next_jobs, set(by_key))
    # A sibling stored under a primed key (its own was taken) is read under that key when its dependents
    # run: their $refs to it are rewritten to match.
    renames = {nj.key: keys[i] for i, nj in enumerate(next_jobs) if nj.key and nj.key != keys[i]}
    new_ids = {key: new_id() for key in keys}
    # The name each parent's result is read under when its child runs (the claim's ``parents``).
    read_as = {r["id"]: r["step_key"] or str(r["id"]) for r in existing} | {v: k for k, v in new_ids.items()}
    local = {(nj.key or keys[i]): new_ids[keys[i]] for i, nj in enumerate(next_jobs)}
    jobs: list[NewJob] = []
    edges: list[tuple[uuid.UUID, uuid.UUID]] = []
    outside: dict[uuid.UUID, set[uuid.UUID]] = {}
    for i, nj in enumerate(next_jobs):
        jid = new_ids[keys[i]]
        read_names: list[str] = []
        mine: set[uuid.UUID] = set()
        for dep in nj.depends_on:
            d = str(dep)
            target = local.get(d) or by_id.get(d) or by_key.get(d)
            if target is None:
                raise BadInput.field(f"next_jobs[{i}].depends_on", f"unknown dependency {d[:100]!r}")
            if target in mine:
                continue  # one job named twice (by key and by id): one edge, counted once
            mine.add(target)
            edges.append((jid, target))
            read_names.append(read_as[target])
            if target not in new_ids.values():
                outside.setdefault(jid, set()).add(target)
        input_data = rename_refs(nj.input_data, renames)
        check_ref_sources({"depends_on": read_names, "input_data": input_data}, f"next_jobs[{i}].input_data")
        check_next_job_submission(i, nj.type, nj.key, input_data, settings, has_parents=bool(mine))
        jobs.append(
            NewJob(
                id=jid,
                type=nj.type,
                input_data=input_data,
                user_id=creator["user_id"],
                pipeline_id=pipeline_id,
                step_key=keys[i],
                requires_approval=nj.requires_approval,
                title=nj.title,
                priority=nj.priority,
                created_by_job=creator["id"],
            )
        )
    # Over the owner's waiting limit the next jobs are recorded failed, saying why, as the instances of a
    # list from a result are: the creator's own work stands, and nothing it asked for is lost unseen.
    asked = f"job {creator['id']} asked for {len(jobs):,} next jobs"
    refused = await refusal_from_result(conn, creator["user_id"], len(jobs), settings, asked)
    if refused is not None:
        await insert_refused_jobs(conn, jobs, f"{NEVER_CREATED}{refused}", settings)
        return pipeline_id
    # Parents already in the pipeline: lock them so none finishes unseen, and count the unfinished ones.
    # The creator counts as unfinished: its completion, written in this transaction, releases its
    # dependents after this (or its approval does), so a next job waiting for it is released then.
    pending: dict[uuid.UUID, int] = {}
    edges_of = Counter(c for c, _ in edges)
    for j in jobs:
        parents = sorted(outside.get(j.id, set()) - {creator["id"]}, key=str)
        internal = edges_of[j.id] - len(parents)
        external = (
            await lock_parents(conn, creator["user_id"], parents, owner_is_admin=False) if parents else 0
        )
        pending[j.id] = internal + external
    inputs = [f"next_jobs[{i}].input_data" for i in range(len(jobs))]
    await insert_steps(conn, jobs, settings, pending, edges, f"job:{creator['id']}", inputs)
    await hold_if_owner_disabled(conn, creator["user_id"], [j.id for j in jobs])
    return pipeline_id
