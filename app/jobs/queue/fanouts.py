"""``for_each`` steps whose list is in a parent's result: stored when the pipeline is created, expanded
into their instances in the transaction that completes the last of their parents.

Until then each job that depends on such a step holds one extra pending parent (its "gate") and has
edges to the step's parents instead, so that a parent's failure cancels it as usual. Expansion removes
the gate and adds an edge to every instance; an empty list removes the gate alone (the step is
skipped). A list that cannot be read, is too long or gives an invalid input fails the step: one failed
job with the step's own key records why, and its dependents are cancelled naming it.

The rules without the database are in :mod:`app.jobs.fanout`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.errors import AppError, BadInput, TooLarge, is_refusal
from app.jobs import approvals, naming
from app.jobs.fanout import empty_refs, instance_key, instance_number, substitute
from app.jobs.graph import resolve_refs, validate_step_input
from app.jobs.payload import cap_text, json_text
from app.jobs.queue.common import fetch_rows, new_id, notify_jobs, sql
from app.jobs.queue.holds import hold_if_owner_disabled
from app.jobs.queue.many_jobs import enqueue_many, renamed
from app.jobs.queue.new_jobs import NewJob, insert_edges
from app.jobs.queue.waiting import refusal_from_result
from app.jobs.types import PermanentError, registry
from app.settings import Settings, get_settings

STORE = sql(
    """
    INSERT INTO pipeline_fanouts (pipeline_id, step_key, spec, parents, pending, dependents)
    VALUES (:pipeline_id, :step_key, CAST(CAST(:spec AS text) AS jsonb), CAST(:parents AS uuid[]),
            :pending, CAST(:dependents AS uuid[]))
    """
)

# Row locks on the fanout rows serialise concurrent completions of its parents: exactly one of them
# sees ``pending`` reach 0 and expands the step.
COUNT_DOWN = sql(
    """
    UPDATE pipeline_fanouts f
    SET pending = f.pending - (SELECT count(*) FROM unnest(f.parents) p WHERE p = ANY(CAST(:ids AS uuid[])))
    WHERE f.expanded_at IS NULL AND f.pending > 0 AND f.parents && CAST(:ids AS uuid[])
    RETURNING f.pipeline_id, f.step_key, f.spec, f.parents, f.pending, f.dependents
    """
)
PARENT_RESULTS = sql(
    "SELECT id, step_key, result_data FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'completed'"
)
PIPELINE_SIZE = sql(
    """
    SELECT p.user_id, (SELECT count(*) FROM jobs j WHERE j.pipeline_id = p.id) AS steps
    FROM pipelines p WHERE p.id = :id
    """
)
MARK_EXPANDED = sql(
    """
    UPDATE pipeline_fanouts SET expanded_at = now(), instances = :n
    WHERE pipeline_id = :pipeline_id AND step_key = :step_key
    """
)
OPEN_GATES = sql(
    """
    UPDATE jobs SET pending_parents = pending_parents - 1 + :n, updated_at = now()
    WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'queued' AND pending_parents > 0
    RETURNING id, input_data, pending_parents, run_at <= now() AS due
    """
)
SET_INPUT = sql("UPDATE jobs SET input_data = CAST(CAST(:input AS text) AS jsonb) WHERE id = :id")
INSERT_FAILED_STEP = sql(
    """
    WITH ins AS (
        INSERT INTO jobs (id, type, user_id, input_data, max_attempts, title, pipeline_id, step_key, status,
                          error_message, completed_at)
        VALUES (:id, :type, :user_id, CAST(CAST(:input AS text) AS jsonb), :max_attempts, :title, :pipeline_id,
                :step_key, 'failed', :message, now())
        RETURNING id, pipeline_id
    )
    INSERT INTO job_events (job_id, pipeline_id, kind, to_status, actor, message)
    SELECT id, pipeline_id, 'failed', 'failed', 'system:pipeline', :message FROM ins
    """
)

GATES_OF = """(SELECT count(*) FROM pipeline_fanouts f
               WHERE f.expanded_at IS NULL AND {job}.id = ANY(f.dependents))"""
"""SQL for the gates a job still holds (re-added when a cancelled dependent is reopened)."""


@dataclass
class Expansion:
    """What expanding the ready ``for_each`` steps did: whether a NOTIFY went out, the pipelines touched
    and the failed steps (whose dependents the caller cancels)."""

    notified: bool = False
    pipelines: set[uuid.UUID] = field(default_factory=set)
    failed: list[uuid.UUID] = field(default_factory=list)


def address_settings(settings: Any) -> dict[str, Any]:
    """The settings a type's check at submission reads besides the limits (``http.request``: where jobs
    may connect, :class:`~app.processors.addresses.AddressPolicy`). Kept with the step, so that its items
    from a result are checked as a literal list's were when the pipeline was made; without them the
    check read the defaults (Jobdesk at 127.0.0.1:8000) and refused Jobdesk's own API as a private
    address."""
    return {
        "jobdesk_base_url": str(settings.jobdesk_base_url),
        "http_request_allowed_hosts": [str(h) for h in settings.http_request_allowed_hosts],
        "http_request_allow_private": bool(settings.http_request_allow_private),
    }


def spec_of(
    step: dict[str, Any],
    settings: Settings,
    rule: tuple[approvals.ApprovalSpec, approvals.Rule] | None = None,
) -> dict[str, Any]:
    """What expansion needs of a step, with the limits in force when the pipeline was made and its
    approval rule as resolved then (every instance gets it, as a literal list's instances do)."""
    return {
        "type": step["type"],
        "input_data": step.get("input_data") or {},
        "for_each": step["for_each"]["$ref"],
        "title": step.get("title"),
        "requires_approval": bool(step.get("requires_approval", False)),
        "max_attempts": step.get("max_attempts"),
        "priority": step.get("priority", 0),
        "limits": {
            "pipeline_max_steps": settings.pipeline_max_steps,
            "job_max_input_bytes": settings.job_max_input_bytes,
            "default_max_attempts": settings.default_max_attempts,
            "user_max_waiting_jobs": settings.user_max_waiting_jobs,
            **address_settings(settings),
        },
        "approval": approvals.stored_form(*rule) if rule is not None else None,
    }


async def store(
    conn: AsyncConnection,
    pipeline_id: uuid.UUID,
    step: dict[str, Any],
    parents: Sequence[uuid.UUID],
    dependents: Sequence[uuid.UUID],
    settings: Settings,
    rule: tuple[approvals.ApprovalSpec, approvals.Rule] | None = None,
) -> None:
    """Keep a ``$ref`` ``for_each`` step (and its approval ``rule``) until its parents have completed."""
    await conn.execute(
        STORE,
        {
            "pipeline_id": pipeline_id,
            "step_key": step["key"],
            "spec": json_text(spec_of(step, settings, rule)),
            "parents": list(parents),
            "pending": len(parents),
            "dependents": list(dependents),
        },
    )


async def expand_ready(conn: AsyncConnection, completed: list[uuid.UUID]) -> Expansion:
    """Count down the ``for_each`` steps waiting for ``completed`` jobs and expand those with no parent
    left."""
    out = Expansion()
    for row in await fetch_rows(conn, COUNT_DOWN, {"ids": completed}):
        if row["pending"] == 0:
            await _expand(conn, row, out)
    return out


class _Unusable(Exception):
    """The step's list or an instance's input cannot be used; the message says why, in plain words."""


async def _expand(conn: AsyncConnection, row: dict[str, Any], out: Expansion) -> None:
    spec = row["spec"]
    limits = spec["limits"]
    if "jobdesk_base_url" not in limits:  # a step stored before these were kept: today's settings
        limits = {**address_settings(get_settings()), **limits}
    settings = Settings.model_construct(**limits)
    pipeline = (await conn.execute(PIPELINE_SIZE, {"id": row["pipeline_id"]})).mappings().one()
    out.pipelines.add(row["pipeline_id"])
    try:
        items = await _items(conn, row, spec)
        limit = settings.pipeline_max_steps
        if limit and pipeline["steps"] + len(items) > limit:
            raise _Unusable(
                f"its list has {len(items):,} items, and a pipeline may have at most {limit:,} steps"
            )
        refused = await refusal_from_result(
            conn, pipeline["user_id"], len(items), settings, f"its list has {len(items):,} items"
        )
        if refused is not None:
            raise _Unusable(refused)
        jobs = [_instance(row, spec, n, item, pipeline["user_id"], settings) for n, item in enumerate(items)]
        await name_instances(conn, pipeline["user_id"], jobs)
        if jobs:
            edges = [(j.id, p) for j in jobs for p in row["parents"]]
            try:
                await enqueue_many(
                    conn, jobs, settings, actor="system:pipeline", edges=edges, skip_schema=True
                )
            except (BadInput, TooLarge) as exc:
                raise renamed(exc, [f"for_each[{n}]" for n in range(len(jobs))]) from None
            if spec.get("approval"):
                rule = approvals.from_stored(spec["approval"])
                await approvals.store_rules(conn, [(j.id, *rule) for j in jobs])
    except (_Unusable, AppError) as exc:
        # Any refusal of the app's own (an instance's input over JOB_MAX_INPUT_BYTES as well as a bad
        # field) is the step's failure in words; raised, it failed the parent whose completion expands
        # the list, as an outcome that could not be recorded.
        if not isinstance(exc, _Unusable) and not is_refusal(exc):
            raise
        message = f"step {row['step_key']!r} could not run once per item: {_reason(exc)}"
        out.failed.append(await _fail(conn, row, spec, pipeline["user_id"], message))
        await conn.execute(
            MARK_EXPANDED, {"pipeline_id": row["pipeline_id"], "step_key": row["step_key"], "n": 0}
        )
        return
    await hold_if_owner_disabled(conn, pipeline["user_id"], [j.id for j in jobs])
    await conn.execute(
        MARK_EXPANDED, {"pipeline_id": row["pipeline_id"], "step_key": row["step_key"], "n": len(jobs)}
    )
    if jobs:
        out.notified = True  # the instances' insert sent its own NOTIFY
    if await _open_gates(conn, row, [j.id for j in jobs]):
        await notify_jobs(conn)
        out.notified = True


def _reason(exc: Exception) -> str:
    if isinstance(exc, BadInput):
        return "; ".join(f"{k}: {v}" for k, v in exc.errors.items()) or exc.detail
    return str(exc)


async def _items(conn: AsyncConnection, row: dict[str, Any], spec: dict[str, Any]) -> list[Any]:
    parents = {
        r["step_key"] or str(r["id"]): r["result_data"]
        for r in await fetch_rows(conn, PARENT_RESULTS, {"ids": row["parents"]})
    }
    try:
        items = resolve_refs({"$ref": spec["for_each"]}, parents)
    except PermanentError as exc:
        raise _Unusable(str(exc)) from None
    if not isinstance(items, list):
        raise _Unusable(f"{spec['for_each']!r} is not a list but {_json_kind(items)}")
    return items


def _json_kind(value: object) -> str:
    """What a JSON value is, in the words the step's page shows its owner: Python's type names
    ("dict", "str", "NoneType") meant nothing to someone who wrote a pipeline in JSON."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else "a value of another kind"


FILE_NAMES = sql("SELECT id, name FROM files WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[]))")


async def name_instances(conn: AsyncConnection, user_id: int, jobs: Sequence[NewJob]) -> None:
    """Name each instance of a titled step run once per item after its item: the step's title and the
    name of the first file its input names ("Thumbnails: rocket.jpg"), else its number ("Thumbnails
    (2)"). Every instance had its step's title, and a pipeline page listed five alike. One query for
    the whole list; only the owner's files are named."""
    found: list[tuple[NewJob, int, uuid.UUID | None]] = []
    for job in jobs:
        n = instance_number(job.step_key)
        if n is None or not job.title:
            continue
        spec = registry.get(job.type)
        ids = naming.file_ids(spec.input_model if spec is not None else None, job.input_data)
        found.append((job, n, ids[0] if ids else None))
    wanted = sorted({fid for _, _, fid in found if fid is not None}, key=str)
    names: dict[Any, str] = {}
    if wanted:
        rows = await fetch_rows(conn, FILE_NAMES, {"user_id": user_id, "ids": wanted})
        names = {r["id"]: r["name"] for r in rows}
    for job, n, fid in found:
        name = names.get(fid) if fid is not None else None
        job.title = f"{job.title}: {name}"[:200] if name else f"{job.title} ({n + 1})"


def _instance(
    row: dict[str, Any], spec: dict[str, Any], n: int, item: Any, user_id: int, settings: Settings
) -> NewJob:
    # Named as every other problem of an item is (``for_each[1].image`` from the insert's checks).
    path = f"for_each[{n}]"
    data = substitute(spec["input_data"], item, path)
    stored = validate_step_input(spec["type"], data, path, settings, item=n)
    return NewJob(
        type=spec["type"],
        input_data=stored,
        user_id=user_id,
        pipeline_id=row["pipeline_id"],
        step_key=instance_key(row["step_key"], n),
        title=spec.get("title"),
        requires_approval=spec["requires_approval"],
        max_attempts=spec["max_attempts"],
        priority=spec["priority"],
    )


async def _open_gates(conn: AsyncConnection, row: dict[str, Any], instances: list[uuid.UUID]) -> bool:
    """Dependents wait for each instance instead of the gate. Returns whether one became claimable."""
    dependents = list(row["dependents"])
    if not dependents:
        return False
    if instances:
        await insert_edges(conn, [(d, i) for d in dependents for i in instances])
    opened = await fetch_rows(conn, OPEN_GATES, {"ids": dependents, "n": len(instances)})
    if not instances:
        for r in opened:
            data = empty_refs(r["input_data"], {row["step_key"]})
            if data != r["input_data"]:
                await conn.execute(SET_INPUT, {"id": r["id"], "input": json_text(data)})
    return any(r["pending_parents"] == 0 and r["due"] for r in opened)


async def _fail(
    conn: AsyncConnection, row: dict[str, Any], spec: dict[str, Any], user_id: int, message: str
) -> uuid.UUID:
    """Record the step as one failed job, with dependents linked to it so that they are cancelled."""
    job_id = new_id()
    await conn.execute(
        INSERT_FAILED_STEP,
        {
            "id": job_id,
            "type": spec["type"],
            "user_id": user_id,
            "input": json_text(spec["input_data"]),
            "max_attempts": spec["max_attempts"] or 1,
            "title": spec.get("title"),
            "pipeline_id": row["pipeline_id"],
            "step_key": row["step_key"],
            "message": cap_text(message, 2000),
        },
    )
    await insert_edges(conn, [(d, job_id) for d in row["dependents"]])
    return job_id
