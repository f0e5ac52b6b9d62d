"""A person's actions on pipelines: start one from a registered template or from an ad-hoc spec, and
cancel one.

Starting checks which job types the person may submit (:mod:`app.actions.access`): every step of an
ad-hoc pipeline is a direct submission, so diagnostic and internal types are for admins there; a
template's steps are code, so a template may use internal types whoever starts it, and only templates
marked ``diagnostic`` are for admins. Cancel is for the owner or an admin; an admin's cancel is audited
and announced in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from app import pipelines, request_keys
from app.actions import access, quotas
from app.actions.jobs import parse_id
from app.actions.trail import Actor, record_done, record_refused
from app.errors import BadInput, KeyReused, KeyTaken, NotFound, differ_words
from app.request_keys import Keyed

PIPELINE_STATE = text("SELECT id, user_id, status, finished_at FROM pipelines WHERE id = :id")
ALREADY_FINISHED = "Nothing changed: the pipeline has already finished."


def _finished(row: RowMapping) -> bool:
    return row["finished_at"] is not None or row["status"] == "cancelled"


def startable_templates(person: Any) -> list[pipelines.Template]:
    """The templates this person may start."""
    return [t for t in pipelines.all_templates() if access.may_start_template(person, t)]


def page_template(person: Any, name: str) -> pipelines.Template:
    """The template behind a form page; one the person may not start is hidden like an unknown one.

    Raises:
        NotFound: unknown, or diagnostic for a non-admin.
    """
    tpl = pipelines.get_template(name)
    if tpl is None or not access.may_start_template(person, tpl):
        raise NotFound(f"There is no pipeline called {name[:100]!r}.")
    return tpl


def may_cancel(person: Any, pipeline: Mapping[str, Any]) -> bool:
    """The owner or an admin, while the pipeline has not finished (for the button)."""
    mine = bool(person.is_admin) or pipeline["user_id"] == person.id
    return mine and pipeline.get("finished_at") is None and pipeline["status"] != "cancelled"


async def started_with(db: AsyncSession, actor: Actor, form_key: str) -> RowMapping | None:
    """The pipeline the person started with the template form's key ``form_key``, if any: a form sent
    again as it was (a double click, the browser sending it again) is answered with it before it is
    counted against the person's limits. (Its uploads were not stored again: the form's key makes
    :func:`app.actions.files.store_upload` answer with the files the first sending stored.)

    Looked up under the person's lock (held until the transaction ends, as their uploads and
    submissions take it), so that a repeat sent while the first is still in flight waits for it and
    finds its pipeline."""
    await quotas.lock_person(db, actor.user)
    return await pipelines.by_form_key(db, actor.user.id, form_key)


async def submit_template(
    db: AsyncSession,
    actor: Actor,
    name: Any,
    input_data: Any,
    *,
    title: str | None = None,
    form_key: str | None = None,
    keyed: Keyed | None = None,
) -> RowMapping:
    """Start the registered template ``name`` with ``input_data`` for ``actor``. ``form_key``: the
    template form's one-time key. A repeat of it asking for the same pipeline (the same template,
    normalised input and title: :func:`app.pipelines.differences`) is answered with the pipeline it
    started (:func:`started_with`), so that a double click starts one pipeline; a repeat asking for
    another is refused (:class:`~app.errors.KeyReused` on ``form_key``), not answered with the first.

    Raises:
        BadInput: unknown template or one for admins only (``template``), bad input
        (``input_data.<field>``), a title over 200 characters, more steps than a pipeline may have
        (``steps``). TooLarge: a step's input too large. RateLimited: over the person's waiting or
        per-minute limit. KeyReused: ``form_key`` started a pipeline with other values. KeyTaken:
        ``keyed``'s key has made a pipeline already (:func:`submit_api` looks for it first).
    """
    tpl = pipelines.get_template(name) if isinstance(name, str) else None
    if tpl is not None and not access.may_start_template(actor.user, tpl):
        raise BadInput.field("template", f"only admins may start the pipeline {tpl.name!r}")
    if form_key is not None:
        earlier = await started_with(db, actor, form_key)
        if earlier is not None:
            differs = await pipelines.differences(db, earlier["id"], name, input_data, title)
            if differs:
                raise KeyReused(
                    f"this form was already sent and started pipeline {earlier['id']}"
                    f"{differ_words(differs)}; a new pipeline needs a new form",
                    field="form_key",
                    kind="pipeline",
                    existing_id=earlier["id"],
                    differs=differs,
                )
            return earlier
    await quotas.before_submit(db, actor.user, actor.settings)
    created = await pipelines.create_from_template(
        db,
        name,
        input_data,
        user_id=actor.user.id,
        settings=actor.settings,
        request_id=actor.request_id,
        title=title,
        form_key=form_key,
        idempotency_key=keyed.key if keyed else None,
        request_digest=keyed.stored if keyed else None,
    )
    await quotas.after_pipeline(db, actor.user, actor.settings, created["id"])
    return created


async def submit_steps(
    db: AsyncSession, actor: Actor, name: str, steps: Sequence[Any], *, keyed: Keyed | None = None
) -> RowMapping:
    """Start an ad-hoc pipeline: every step's type must be one ``actor`` may submit directly. ``keyed``:
    the API's idempotency key, stored with the pipeline (:func:`submit_api`).

    Raises:
        BadInput: ``steps[i].type`` for a diagnostic or internal type (non-admins); bad keys,
        dependencies, cycles, types or inputs, named by path; more steps or dependencies than
        ``PIPELINE_MAX_STEPS`` / ``PIPELINE_MAX_EDGES`` (``steps``). TooLarge: a step's input too large.
        RateLimited: over the person's waiting or per-minute limit. KeyTaken: ``keyed``'s key has made a
        pipeline already.
    """
    if isinstance(steps, list):
        quotas.check_steps(actor.settings, steps)
        for i, step in enumerate(steps):
            if isinstance(step, dict):
                access.check_type(actor.user, step.get("type"), f"steps[{i}].type")
                access.check_priority(actor.user, step.get("priority", 0), f"steps[{i}].priority")
    await quotas.before_submit(db, actor.user, actor.settings)
    created = await pipelines.create(
        db,
        name=name,
        steps=list(steps),
        user_id=actor.user.id,
        settings=actor.settings,
        request_id=actor.request_id,
        idempotency_key=keyed.key if keyed else None,
        request_digest=keyed.stored if keyed else None,
    )
    await quotas.after_pipeline(db, actor.user, actor.settings, created["id"])
    return created


async def submit_api(
    db: AsyncSession,
    actor: Actor,
    *,
    template: str | None,
    input_data: Any,
    name: str | None,
    steps: Sequence[Any] | None,
    idempotency_key: str | None = None,
) -> tuple[RowMapping, bool]:
    """``POST /api/pipelines``: start the ``template`` with ``input_data`` (``name`` names the run), or
    without a template the ad-hoc pipeline ``name`` of ``steps``; ``(pipeline row, created)``.

    With an ``idempotency_key`` (:mod:`app.request_keys`), a repeat of the request that made a pipeline
    with it is answered with that pipeline (``created`` false) before anything is checked or counted:
    it adds nothing, so the person's limits neither count nor refuse it. The key is looked up under
    the person's lock, held to the end of the transaction, so that a concurrent first request with it
    waits for this one and finds its pipeline; the unique index decides all the same (:class:`KeyTaken`
    is then answered as a repeat).

    Raises:
        BadInput: as :func:`submit_template` and :func:`submit_steps`; a bad ``idempotency_key``.
        KeyReused: the key made a pipeline for a different request. RateLimited: as those.
    """
    if template is not None:
        request: dict[str, Any] = {"template": template, "input_data": input_data, "name": name}
    else:
        request = {"name": name, "steps": list(steps or [])}
    keyed = request_keys.keyed(idempotency_key, request)
    if keyed is not None:
        await quotas.lock_person(db, actor.user)
        earlier = await request_keys.made_by(db, "pipelines", actor.user.id, keyed)
        if earlier is not None:
            return earlier, False
    try:
        if template is not None:
            row = await submit_template(db, actor, template, input_data, title=name, keyed=keyed)
        else:
            row = await submit_steps(db, actor, name or "", list(steps or []), keyed=keyed)
    except KeyTaken:
        earlier = await request_keys.made_by(db, "pipelines", actor.user.id, keyed) if keyed else None
        if earlier is None:
            raise
        return earlier, False
    return row, True


@dataclass
class CancelOutcome:
    """What a pipeline cancel did: ``ok``, ``message`` in plain words, ``status_code`` (200, or 409 when
    the pipeline had already finished), and how many steps were ``cancelled`` or are ``cancelling``."""

    id: uuid.UUID
    ok: bool
    message: str
    status_code: int
    cancelled: int = 0
    cancelling: int = 0


def _cancel_message(counts: Mapping[str, int]) -> str:
    parts = []
    if counts["cancelled"]:
        parts.append(f"{counts['cancelled']} step{'s' if counts['cancelled'] != 1 else ''} cancelled")
    if counts["cancelling"]:
        parts.append(
            f"{counts['cancelling']} running step{'s are' if counts['cancelling'] != 1 else ' is'} stopping"
        )
    return "Pipeline cancelled: " + ", ".join(parts) + "."


async def cancel(db: AsyncSession, actor: Actor, pipeline_id: Any) -> CancelOutcome:
    """Cancel a pipeline's unfinished steps (owner or admin) through :func:`app.pipelines.cancel`. An
    admin's cancel is audited and announced; an admin's refused cancel (already finished) is audited, and
    the answer's commit keeps that entry (``KEEP_REFUSAL``).

    Raises:
        NotFound: unknown, malformed or another user's pipeline (one answer for all).
    """
    pid = parse_id(pipeline_id, "pipeline")
    row = (await db.execute(PIPELINE_STATE, {"id": pid})).mappings().first()
    user = actor.user
    if row is None or (not user.is_admin and row["user_id"] != user.id):
        raise NotFound(f"No pipeline with id {pid}.")
    if _finished(row):
        await record_refused(
            db, actor, "pipeline.cancel", target_type="pipeline", target_ids=[pid], reason=ALREADY_FINISHED
        )
        return CancelOutcome(pid, False, ALREADY_FINISHED, 409)
    counts = await pipelines.cancel(db, pid, user)
    if not counts["cancelled"] and not counts["cancelling"]:
        # Nothing was written: every step left was already stopping (a second click while they stop), or
        # the pipeline ended since it was read above (its last step completed, another person's cancel
        # won). It is locked now, so a read sees which, and the answer says what happened.
        now = (await db.execute(PIPELINE_STATE, {"id": pid})).mappings().first()
        finished = now is None or _finished(now)
        message = (
            ALREADY_FINISHED
            if finished
            else "Nothing changed: the pipeline's running steps are already stopping."
        )
        await record_refused(
            db, actor, "pipeline.cancel", target_type="pipeline", target_ids=[pid], reason=message
        )
        return CancelOutcome(pid, False, message, 409)
    await record_done(
        db,
        actor,
        "pipeline.cancel",
        target_type="pipeline",
        target_ids=[pid],
        count=counts["cancelled"] + counts["cancelling"],
        detail={"pipeline_id": str(pid), **counts},
    )
    return CancelOutcome(pid, True, _cancel_message(counts), 200, counts["cancelled"], counts["cancelling"])
