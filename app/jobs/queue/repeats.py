"""A job's idempotency key: the one reader of a key sent (:func:`check_key`, for jobs, pipelines and
batches alike), and the key sent again: the same request is answered with the job the key made, a
different one is refused (:class:`app.errors.KeyReused`, 422 on ``idempotency_key``).

What makes two requests with one key "the same request" is the job they ask for, compared with the
stored row, field by field:

* ``type``; ``input_data`` in its normalised form (after the type's schema filled in defaults), compared
  as ``jsonb`` (key order and ``1`` / ``1.0`` do not matter);
* ``priority``; ``max_attempts`` as it would be stored (left out: the type's default, so leaving it out
  twice is the same, and leaving it out once and giving the default the other time is too);
* ``title`` as it would be stored (a job submitted without one is named from its input, the same way
  both times); ``requires_approval``; ``pipeline_id`` and ``step_key``;
* ``run_at`` as it was asked for: left out both times, or the same moment (in any zone). The job's
  ``run_at`` column moves (a retry, a reschedule), so the moment asked for is kept in the job's
  ``enqueued`` event (``data.run_at``, ``null`` for "now"); a job enqueued before that was kept has no
  such entry and its ``run_at`` is not compared;
* the dependencies (``depends_on`` / ``dependent_on_jobs``) as a set — :func:`app.jobs.queue.enqueue`
  only; :func:`app.jobs.queue.enqueue_many` takes its edges apart and does not compare them.

Not compared: ``request_id`` and ``created_by_job`` (where a request came from, not what it asks for:
two parent jobs may well ask for one shared follow-up under one key), and what the job's state has
become since (a finished or cancelled job answers a repeat as a waiting one does). Tags and a callback
URL are the API's own and are compared by :func:`app.actions.submissions.submit`.

The comparison reads the stored row after ``INSERT … ON CONFLICT DO NOTHING`` found it, in the same
transaction: the conflict waits for a concurrent first insert to commit or roll back, so the row
compared with is the one that went in, and the compared fields never change after the insert.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db import write_rows
from app.errors import BadInput, KeyReused, differ_words
from app.jobs.input_words import value_shown
from app.jobs.payload import check_text
from app.jobs.queue.common import sql
from app.jobs.rows import JOB_FIELDS, JobRow, job_row

COMPARED = (
    ("type", "j.type = r.type"),
    ("input_data", "j.input_data = CAST(r.input AS jsonb)"),
    ("priority", "j.priority = r.priority"),
    ("max_attempts", "j.max_attempts = r.max_attempts"),
    ("title", "j.title IS NOT DISTINCT FROM r.title"),
    (
        "run_at",
        "NOT COALESCE(e.data ? 'run_at', false) "
        "OR CAST(e.data->>'run_at' AS timestamptz) IS NOT DISTINCT FROM r.run_at",
    ),
    ("requires_approval", "j.requires_approval = r.requires_approval"),
    ("pipeline_id", "j.pipeline_id IS NOT DISTINCT FROM r.pipeline_id"),
    ("step_key", "j.step_key IS NOT DISTINCT FROM r.step_key"),
)
"""Each compared field of the request (named as the API names it) and the SQL that is true when the
stored job ``j`` has what the repeat ``r`` asks for (``e``: the job's ``enqueued`` event)."""

COMPARE = sql(
    f"""
    SELECT r.i, {", ".join(f"j.{c}" for c in JOB_FIELDS)},
           {", ".join(f"({expr}) AS same_{name}" for name, expr in COMPARED)},
           ARRAY(SELECT d.depends_on FROM job_dependencies d WHERE d.job_id = j.id ORDER BY 1) AS stored_depends_on
    FROM unnest(
        CAST(:indexes AS int[]), CAST(:user_ids AS int[]), CAST(:keys AS text[]), CAST(:types AS text[]),
        CAST(:inputs AS text[]), CAST(:priorities AS int[]), CAST(:run_ats AS timestamptz[]),
        CAST(:max_attempts AS int[]), CAST(:titles AS text[]), CAST(:pipeline_ids AS uuid[]),
        CAST(:step_keys AS text[]), CAST(:approvals AS boolean[])
    ) AS r(i, user_id, key, type, input, priority, run_at, max_attempts, title, pipeline_id, step_key,
           requires_approval)
    JOIN jobs j ON j.user_id = r.user_id AND j.idempotency_key = r.key
    LEFT JOIN LATERAL (
        SELECT ev.data FROM job_events ev WHERE ev.job_id = j.id AND ev.kind = 'enqueued' ORDER BY ev.id LIMIT 1
    ) e ON true
    ORDER BY r.i
    """
)
_PARAMS = {
    "user_ids": "user_id",
    "keys": "idempotency_key",
    "types": "type",
    "inputs": "input",
    "priorities": "priority",
    "run_ats": "run_at",
    "max_attempts": "max_attempts",
    "titles": "title",
    "pipeline_ids": "pipeline_id",
    "step_keys": "step_key",
    "approvals": "requires_approval",
}
"""Array parameter of :data:`COMPARE` → key of :func:`app.jobs.queue.prepare`'s parameters."""


@dataclass(frozen=True)
class Repeat:
    """A keyed job's request compared with the job its key made: ``index`` of the request among those
    compared, the stored ``job``, and the fields that ``differ`` (empty: the same request)."""

    index: int
    job: JobRow
    differs: tuple[str, ...]


KEY_MAX = 200
"""A key's length at most (a job's, a pipeline's, a batch's)."""


def check_key(key: Any, field: str = "idempotency_key") -> str:
    """``key`` if it can be an idempotency key: text of 1 to :data:`KEY_MAX` characters, not only spaces
    (``"  "`` reads as no key at all, and a client trimming it would send another), that can be stored.
    Every route that takes a key reads it here.

    Raises:
        BadInput: on ``field``, saying which.
    """
    if not isinstance(key, str):
        raise BadInput.field(field, f"must be text, not {value_shown(key)}")
    if not 0 < len(key) <= KEY_MAX:
        raise BadInput.field(field, f"must be 1 to {KEY_MAX} characters (this one has {len(key):,})")
    if not key.strip():
        raise BadInput.field(
            field, "is only spaces; give a key with something besides spaces, or leave it out"
        )
    check_text(key, field)
    return key


def requested_run_at(params: Mapping[str, Any]) -> dict[str, Any]:
    """What a keyed job's ``enqueued`` event keeps of its request (``run_at`` as asked, ``None`` for
    now), so that a repeat can be compared with it; nothing for a job without a key."""
    if params.get("idempotency_key") is None:
        return {}
    run_at = params.get("run_at")
    return {"run_at": run_at.isoformat() if run_at is not None else None}


def _compare_params(prepared: Sequence[tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
    values: dict[str, Any] = {name: [p[key] for _, p in prepared] for name, key in _PARAMS.items()}
    values["indexes"] = [i for i, _ in prepared]
    return values


def _repeats(
    rows: Sequence[Mapping[Any, Any]], depends_on: Mapping[int, Sequence[uuid.UUID]] | None
) -> dict[int, Repeat]:
    found: dict[int, Repeat] = {}
    for row in rows:
        differs = [name for name, _ in COMPARED if not row[f"same_{name}"]]
        if depends_on is not None:
            wanted = sorted(set(depends_on.get(row["i"], ())), key=str)
            if wanted != sorted(row["stored_depends_on"] or [], key=str):
                differs.append("dependent_on_jobs")
        found[row["i"]] = Repeat(row["i"], job_row(row), tuple(differs))
    return found


async def compare(
    db: AsyncConnection | AsyncEngine,
    prepared: Sequence[tuple[int, Mapping[str, Any]]],
    depends_on: Mapping[int, Sequence[uuid.UUID]] | None = None,
) -> dict[int, Repeat]:
    """Compare keyed requests — ``(index, parameters from prepare())`` — with the jobs their keys made,
    in one statement; by index, those whose key has a job. ``depends_on`` (index → ids): compare the
    dependencies too. Given the engine: one autocommit read."""
    if not prepared:
        return {}
    params = _compare_params(prepared)
    if isinstance(db, AsyncEngine):
        rows: Sequence[Mapping[Any, Any]] = await write_rows(db, COMPARE, params)
    else:
        rows = (await db.execute(COMPARE, params)).mappings().all()
    return _repeats(rows, depends_on)


def refusal(repeat: Repeat, field: str = "idempotency_key") -> KeyReused:
    """The refusal of a key repeated with a different request, naming the job it made and what differs."""
    message = (
        f"this key was already used for a different request, which made job {repeat.job['id']}"
        f"{differ_words(repeat.differs)}; repeat that request exactly to get its job, or send this one with"
        " a new key"
    )
    return KeyReused(message, field=field, kind="job", existing_id=repeat.job["id"], differs=repeat.differs)


def refusals(repeats: Mapping[int, Repeat], prefix: str = "jobs") -> KeyReused | None:
    """One refusal for every differing repeat of a bulk enqueue, each on ``jobs[i].idempotency_key``;
    ``None`` when every repeat is the same request."""
    differing = [r for r in repeats.values() if r.differs]
    if not differing:
        return None
    first = refusal(differing[0], f"{prefix}[{differing[0].index}].idempotency_key")
    for r in differing[1:]:
        path = f"{prefix}[{r.index}].idempotency_key"
        first.errors[path] = refusal(r, path).errors[path]
    if len(differing) > 1:
        first.detail += f" (and {len(differing) - 1} more jobs whose key was used for a different request)"
        first.args = (first.detail,)
    return first
