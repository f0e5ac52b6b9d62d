"""A person's actions on batches: start one (from a spreadsheet's rows, many files, or the JSON API) and
retry its failed rows.

Starting a batch is a submission like any other: the type must be one the person may submit
(:mod:`app.actions.access`), and the per-person limits apply the same way as to one job
(:mod:`app.actions.quotas`) — a batch counts once per minute, like a pipeline, and all its rows count
as waiting jobs; a batch that would go over the waiting limit is refused whole, before it is built.

"Retry failed rows" is for the batch's owner and admins, as a retry of one failed job is: each row goes
through the queue's own retry transition (and its rule of who may), with a fresh set of attempts
counted against the owner's waiting limit, whoever retries them (an admin too). The retry is audited, the owner's too (as a retry of one job is).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from app import batches, request_keys
from app.actions import access, quotas
from app.actions.jobs import retry_many_warning
from app.actions.trail import Actor, auditing_refusals, record_by_owner, record_done, record_refused
from app.errors import BadInput, Conflict, RateLimited
from app.jobs import queue
from app.jobs.error_text import retry_refusal
from app.jobs.input_words import value_shown
from app.jobs.payload import check_text
from app.jobs.permanence import permanent_among
from app.processors import ProcessorSpec


def spec_for(actor: Actor, type_name: Any) -> ProcessorSpec:
    """The job type a batch is of, if the person may submit it.

    Raises:
        BadInput: on ``type``: unknown, or a diagnostic/internal type for a non-admin.
    """
    return access.check_type(actor.user, type_name)


def check_name(name: Any) -> str:
    """A batch's name as given, stripped (``""`` for none: the batch is then named after its type).

    Raises:
        BadInput: on ``name``: not text, text that cannot be stored, or longer than
        :data:`app.batches.NAME_MAX` characters — refused like a pipeline's name, not dropped or cut.
    """
    if name is None:
        return ""
    if not isinstance(name, str):
        raise BadInput.field("name", f"must be text, not {value_shown(name)}")
    check_text(name, "name")
    name = name.strip()
    if len(name) > batches.NAME_MAX:
        raise BadInput.field(
            "name", f"must be at most {batches.NAME_MAX:,} characters (it has {len(name):,})"
        )
    return name


async def submit(
    db: AsyncSession,
    actor: Actor,
    type_name: Any,
    rows: Any,
    *,
    name: Any = None,
    source: str = "api",
    row_numbers: Sequence[int] | None = None,
    form_key: str | None = None,
    idempotency_key: str | None = None,
) -> tuple[RowMapping, bool]:
    """Start a batch of ``type_name`` with one job per row of ``rows`` (input objects); all rows are
    checked first and nothing is created unless all pass. ``(batch row, created)``: a repeated
    ``form_key`` asking for the same batch returns the earlier batch, over the limits or not; asking
    for another it is refused (:func:`app.batches.create`). So does ``POST /api/batches``'s
    ``idempotency_key`` (:mod:`app.request_keys`: the same request is ``type``, ``rows`` and ``name``
    as sent), looked up under the person's lock before the limits are counted, as a repeat adds nothing.

    Raises:
        BadInput: ``type``; ``name`` (:func:`check_name`); ``rows`` (empty, too many);
        ``rows[i].<field>`` for every bad row.
        RateLimited: over the person's per-minute limit, or the rows would take them above the
        waiting limit (the whole batch is refused).
        KeyReused: ``form_key`` started a batch with other rows, name, type or source; or
        ``idempotency_key`` one for a different request.
    """
    request = {"type": type_name, "rows": rows, "name": name}
    # Thousands of rows take a while to write out for the digest too: in a thread, as their checks.
    keyed = (
        await asyncio.to_thread(request_keys.keyed, idempotency_key, request)
        if idempotency_key is not None
        else None
    )
    try:
        spec = spec_for(actor, type_name)
        name = check_name(name)
    except BadInput as exc:
        raise batches.refused(exc) from None
    # Thousands of rows take a while to check: in a thread, so the server keeps answering meanwhile.
    inputs = await asyncio.to_thread(batches.check_rows, spec, rows, actor.settings)
    if keyed is not None:
        # Under the lock a concurrent first request with the key holds until it commits, so this one
        # waits for it and is answered with its batch.
        await quotas.lock_person(db, actor.user)
        existing = await request_keys.made_by(db, "batches", actor.user.id, keyed)
        if existing is not None:
            return existing, False
    try:
        await quotas.before_submit(db, actor.user, actor.settings)
        await quotas.before_adding(db, actor.user, actor.settings, len(inputs))
    except RateLimited:
        # A repeat of a form's key (a double click, the browser sending it again) answers with the batch
        # the key made, limit or not, as a repeated idempotency key of one job does: the limits counted
        # the first submission.
        existing = None
        if form_key is not None:
            existing = await batches.repeat_of(
                db,
                spec=spec,
                inputs=inputs,
                user_id=actor.user.id,
                name=name,
                source=source,
                form_key=form_key,
                row_numbers=row_numbers,
            )
        if existing is None:
            raise
        return existing, False
    row, created = await batches.create(
        db,
        spec=spec,
        inputs=inputs,
        user_id=actor.user.id,
        settings=actor.settings,
        name=name,
        source=source,
        row_numbers=row_numbers,
        request_id=actor.request_id,
        form_key=form_key,
        keyed=keyed,
    )
    if created:
        await quotas.after_submit(db, actor.user, actor.settings, len(inputs))
    return row, created


@dataclass
class RetryOutcome:
    """What "Retry failed rows" did: how many rows went back to the queue, and in plain words."""

    batch_id: Any
    retried: int
    skipped: int
    message: str
    status_code: int = 200


def _retry_message(retried: int, skipped: int, unfit: int = 0) -> str:
    rows_of = f"{unfit:,} failed row{'s' if unfit != 1 else ''}"
    why = (
        f"{rows_of} cannot be retried: their input does not fit the job type, so a retry would fail the"
        " same way; correct those rows in the spreadsheet and start a batch of them"
    )
    if not retried:
        return f"Nothing changed: {why}." if unfit else "Nothing changed: no row of this batch has failed."
    rows = f"{retried:,} failed row{'s' if retried != 1 else ''}"
    extra = f" ({skipped:,} had already moved on)" if skipped else ""
    return f"Retrying {rows} with a fresh set of attempts{extra}." + (
        f" {why[:1].upper()}{why[1:]}." if unfit else ""
    )


async def retry_question(db: AsyncSession, batch_id: Any) -> str:
    """The question before **Retry failed rows**, warning how many of the rows it would retry failed
    with a permanent error (:func:`app.actions.jobs.failed_for_good`'s rule), as one job's "Retry
    anyway" does."""
    retried = [r["id"] for r in await batches.failed_rows(db, batch_id) if retry_refusal(r) is None]
    warning = retry_many_warning(len(await permanent_among(db, retried)), of_rows=True)
    return "Retry every failed row with a fresh set of attempts?" + (f" {warning}" if warning else "")


async def retry_failed(db: AsyncSession, actor: Actor, batch_id: Any) -> RetryOutcome:
    """Put every failed row of the batch back in the queue with a fresh attempt budget (owner or admin),
    each through :func:`app.jobs.queue.retry` (its compare-and-set and event), within the person's
    waiting limit; 409 "Nothing changed" when no row has failed, or none a retry could help
    (:func:`app.jobs.error_text.retry_refusal`: those are named in the message).

    Raises:
        NotFound: unknown or another person's batch. RateLimited: the retried rows would take the
        person above their waiting limit (nothing is retried).
    """
    row = await batches.load(db, batch_id, actor.user)
    failed = await batches.failed_rows(db, row["id"])
    # Rows a retry could not help are left as they are and named (the queue's retry refuses them too),
    # and do not count against the waiting limit.
    ids = [r["id"] for r in failed if retry_refusal(r) is None]
    unfit = len(failed) - len(ids)
    # The rows go back to the owner's queue, whoever retries them: within the owner's limits; an admin's
    # retry refused by them is audited as refused.
    async with auditing_refusals(
        db, actor, "batch.retry_failed", target_type="batch", target_ids=[row["id"]]
    ):
        async with db.begin_nested():
            retried, skipped = await _retry_rows(db, actor, int(row["user_id"]), ids)
    message = _retry_message(retried, skipped, unfit)
    if not retried:
        await record_refused(
            db, actor, "batch.retry_failed", target_type="batch", target_ids=[row["id"]], reason=message
        )
    if retried:
        await record_done(
            db, actor, "batch.retry_failed", target_type="batch", target_ids=[row["id"]], count=retried
        )
        if not actor.is_admin:
            # An owner's retry is on record, as one job's is (app.actions.jobs.OWNER_AUDITED): it spends
            # worker time and attempts on rows that had already failed.
            await record_by_owner(
                db, actor, "batch.retry_failed", target_type="batch", target_ids=[row["id"]], count=retried
            )
    return RetryOutcome(row["id"], retried, skipped, message, 200 if retried else 409)


async def _retry_rows(db: AsyncSession, actor: Actor, owner_id: int, ids: list[Any]) -> tuple[int, int]:
    """Retry ``ids`` within their owner's limits; how many were retried and how many had moved on.

    Raises:
        RateLimited: the rows would take the owner above their waiting limit (nothing is retried).
    """
    owner = await quotas.owner_of(db, actor.user, owner_id)
    counted = await quotas.before_requeue(db, actor.user, owner, actor.settings)
    await quotas.before_adding(db, owner, actor.settings, len(ids))
    retried = skipped = 0
    for jid in ids:
        try:
            async with db.begin_nested():
                await queue.retry(db, jid, actor.user)
            retried += 1
        except Conflict:
            skipped += 1  # retried or deleted meanwhile by someone else
    await quotas.after_submit(db, owner, actor.settings, retried, counted)
    if retried:
        # One "Retry failed rows" is one submission, as a batch is, whatever its number of rows.
        await quotas.count_retry(db, actor.user, owner, actor.settings)
    return retried, skipped
