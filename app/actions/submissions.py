"""Submitting one job (``POST /api/jobs``, the job form): the type and priority a person may ask for,
their limits (:mod:`app.actions.quotas`), tags and a callback URL, a due time not in the past, a name
for a job sent without one, and a repeated idempotency key answered with the job it made.

The job itself is checked and written by :func:`app.jobs.queue.enqueue`; what a person may do to a job
once it exists is :mod:`app.actions.jobs`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app import callbacks
from app.actions import access, quotas
from app.actions.trail import Actor
from app.errors import BadInput, KeyReused, RateLimited
from app.jobs import naming, queue
from app.jobs.queue import Enqueued, NewJob
from app.jobs.queue.repeats import Repeat, refusal
from app.jobs.run_at import check_run_at as run_at_rule
from app.jobs.tags import add_tags, check_tags, tags_of
from app.processors import ProcessorSpec, registry

CALLBACK_OF = text("SELECT url FROM job_callbacks WHERE job_id = :id")
FILE_NAMES = text("SELECT id, name FROM files WHERE id = ANY(CAST(:ids AS uuid[])) AND user_id = :user_id")
RUN_AT_GRACE = timedelta(minutes=1)
"""How far in the past a ``run_at`` may be (a form filled in at 09:30 and sent at 09:30:40)."""
DB_NOW = text("SELECT now()")


async def check_run_at(db: AsyncSession, run_at: datetime | None) -> None:
    """Refuse a ``run_at`` more than :data:`RUN_AT_GRACE` in the past, on the database's clock (the one
    every due time is compared with; a web host's clock may be minutes off). The same rule for the job
    form, the reschedule form and the JSON API: a past moment is almost always a mistyped date, and
    leaving ``run_at`` out is how to say "now".

    Raises:
        BadInput: on ``run_at``, saying what the database's time is.
    """
    if run_at is None or run_at.utcoffset() is None:
        return  # run now, or no offset: the queue's own check names the problem
    # The years a due time may have, first: a moment before 1970 was told "already passed" and to choose
    # a later time, with no word of how far later would do, while one past 9000 was told the range.
    run_at_rule(run_at)
    now: datetime = (await db.execute(DB_NOW)).scalar_one()
    if run_at < now - RUN_AT_GRACE:
        raise BadInput.field(
            "run_at",
            f"That moment has already passed (it is {now.astimezone(run_at.tzinfo):%Y-%m-%d %H:%M %Z} now). "
            "Choose a later time, or leave it empty to start now.",
        )


async def submit(
    db: AsyncSession,
    actor: Actor,
    new: NewJob,
    *,
    tags: Sequence[str] | None = None,
    callback_url: str | None = None,
) -> Enqueued:
    """Enqueue a job for ``actor`` (``POST /api/jobs``): the type must be one they may submit. ``tags``
    label it (:mod:`app.jobs.tags`); ``callback_url`` is POSTed the job when it ends (:mod:`app.callbacks`).

    A repeated ``idempotency_key`` is answered with the job it made when the request is the same
    (:mod:`app.jobs.queue.repeats`; here also the same ``tags``, as a set, and ``callback_url``), over
    the person's limits or not; a different request is refused.

    Raises:
        BadInput: a diagnostic or internal type for a non-admin (``type``), bad ``tags`` or
            ``callback_url``, and every queue check.
        KeyReused: (a ``BadInput``, 422 on ``idempotency_key``) the key made a job for a different request.
        TooLarge: input above ``JOB_MAX_INPUT_BYTES``.
        RateLimited: over the person's waiting or per-minute limit (:mod:`app.actions.quotas`).
    """
    queue.check_dependencies(new, actor.settings)  # before anything looks the ids up
    access.check_type(actor.user, new.type)
    access.check_priority(actor.user, new.priority)
    checked_tags = check_tags(list(tags) if tags is not None else None)
    url = callbacks.check_url(callback_url, actor.settings) if callback_url is not None else None
    await check_run_at(db, new.run_at)
    if not new.title:
        new.title = await name_for(db, new)
    # One job without a key is checked against the limits in its own insert; a repeat of a key adds
    # nothing and is not refused for the waiting limit, so a keyed job is checked around its insert.
    guard = quotas.submit_guard(actor.user, actor.settings) if new.idempotency_key is None else None
    try:
        counted = None if guard is not None else await quotas.before_submit(db, actor.user, actor.settings)
    except RateLimited:
        # A repeat of a key answers with the job the key made, limit or not: a client that lost the first
        # answer retries with the same key, and a double click repeats a form's key.
        try:
            existing = await queue.repeat_of(db, new, actor.settings)
        except KeyReused as exc:
            raise await _naming_extras(db, exc, checked_tags, url) from None
        if existing is None:
            raise
        await _same_extras(db, existing, checked_tags, url)
        return Enqueued(job=existing, created=False)
    target = _alone(db, counted, checked_tags, url) or db
    try:
        result = await queue.enqueue(target, new, actor.settings, guard=guard)
    except KeyReused as exc:
        raise await _naming_extras(db, exc, checked_tags, url) from None
    if result.created:
        await add_tags(db, result.job["id"], checked_tags)
        if url is not None:
            await callbacks.add(db, result.job["id"], url)
    else:
        await _same_extras(db, result.job, checked_tags, url)
    if guard is None:
        await quotas.after_submit(db, actor.user, actor.settings, 1 if result.created else 0, counted)
    return result


async def _extras_differing(
    db: AsyncSession, job_id: Any, tags: list[str], url: str | None
) -> tuple[str, ...]:
    """Which of the API's own fields of a repeated key's request differ from the job's: its tags (as a
    set) and its callback URL (the queue compares the job's own fields)."""
    differs = []
    if set(tags) != set((await tags_of(db, [job_id])).get(job_id, [])):
        differs.append("tags")
    if url != (await db.execute(CALLBACK_OF, {"id": job_id})).scalar():
        differs.append("callback_url")
    return tuple(differs)


async def _same_extras(db: AsyncSession, job: Any, tags: list[str], url: str | None) -> None:
    """A repeated key's request that asks for the job's own fields must ask for its tags and callback URL
    too, or it is refused as a different request."""
    differs = await _extras_differing(db, job["id"], tags, url)
    if differs:
        raise refusal(Repeat(0, job, differs))


async def _naming_extras(db: AsyncSession, exc: KeyReused, tags: list[str], url: str | None) -> KeyReused:
    """The queue's refusal of a repeated key, naming the tags and callback URL too when they differ as
    well (the refusal names every field that differs)."""
    extra = await _extras_differing(db, exc.existing_id, tags, url)
    job = await queue.get_job(db, exc.existing_id) if extra else None
    if job is None:
        return exc
    return refusal(Repeat(0, job, exc.differs + extra))


def _alone(
    db: AsyncSession, counted: quotas.Counted | None, tags: list[str], url: str | None
) -> AsyncEngine | None:
    """The engine, when the job can be enqueued on its own, in one autocommit statement (one round trip
    instead of ``BEGIN``, the insert and ``COMMIT``, and with :func:`quotas.submit_guard` the lock and the
    counts too): nothing else is written with it (no tags, no callback), no limit is left to check after
    the insert (``counted`` is ``None``: then :func:`quotas.after_submit` has nothing to refuse, so there
    is nothing to roll back), and the session has not begun a transaction this job would have to be part
    of. ``None`` otherwise."""
    if counted is not None or tags or url is not None or db.in_transaction():
        return None
    return db.bind if isinstance(db.bind, AsyncEngine) else None


async def submit_form(
    db: AsyncSession,
    actor: Actor,
    spec: ProcessorSpec,
    data: dict[str, Any],
    *,
    run_at: datetime | None,
    form_key: str,
    title: str = "",
) -> Mapping[Any, Any]:
    """Enqueue a form's job. The form's one-time key is the job's idempotency key (``form:<key>``): the
    form sent twice as it was (a double click) creates one job and is answered with it; sent again with
    something changed (the browser's back button, then a change) it is refused
    (:class:`~app.errors.KeyReused`), for the page to say that this form started a job already.

    Raises:
        BadInput / KeyReused / TooLarge: as :func:`submit`.
    """
    new = NewJob(
        type=spec.type,
        input_data=data,
        user_id=actor.user.id,
        run_at=run_at,
        idempotency_key=f"form:{form_key}",
        request_id=actor.request_id,
        title=title or None,
    )
    return (await submit(db, actor, new)).job


async def name_for(db: AsyncSession, new: NewJob) -> str | None:
    """A name for a job submitted without one, from its input (:func:`app.jobs.naming.name_from_input`);
    a file is named only when it belongs to the job's owner (the queue refuses the job otherwise)."""
    spec = registry.get(new.type)
    model = spec.input_model if spec is not None else None
    ids = naming.file_ids(model, new.input_data)
    names: dict[str, str] = {}
    if ids:
        rows = await db.execute(FILE_NAMES, {"ids": ids, "user_id": new.user_id})
        names = {str(r["id"]): r["name"] for r in rows.mappings().all()}
    return naming.name_from_input(model, new.input_data, names)
