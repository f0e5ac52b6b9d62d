"""The per-person limits, enforced once for every path a person submits or uploads by (the rules and
their words are :mod:`app.quotas`).

A submission calls :func:`before_submit` first — it takes the person's advisory lock and checks the
per-minute limit — then creates its jobs, then calls :func:`after_submit` (or :func:`after_pipeline`),
which counts what is waiting now and refuses when it is above the limit. The refusal is an exception,
so the caller's transaction (or savepoint) rolls the new jobs back; the lock, held to the end of the
transaction, keeps two concurrent requests from both fitting into the last free places. One job
without an idempotency key is checked by :func:`submit_guard` instead, in its insert statement: the
same lock, the same counts and the same refusals, with the job inserted only when it fits. Uploads call
:func:`check_upload` under the same lock before the file's row is written.

Admins are exempt from the waiting and per-minute limits, not from the storage and pipeline-size ones.
A retry or a run again is held to the limits of the job's owner, whoever acts (:func:`before_requeue`):
an admin's retry of a person's job cannot take that person above their waiting limit.
The storage limit is held where a file is stored (:func:`app.storage_limit.check_room`): an upload over it is
refused and a job's output over it fails its job. A submission is not refused for it: a job that stores
nothing needs no room, and a check per submission would cost every one of them a query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app import quotas
from app.jobs.queue import Guard, pipeline_size_refusal
from app.settings import Settings

PIPELINE_SIZE = text(
    """
    SELECT (SELECT count(*) FROM jobs WHERE pipeline_id = :pid) AS steps,
           (SELECT count(*) FROM job_dependencies d JOIN jobs j ON j.id = d.job_id WHERE j.pipeline_id = :pid)
               AS edges
    """
)


def _exempt(person: Any) -> bool:
    return bool(person.is_admin)


def _whose(person: Any) -> str | None:
    """Whose jobs a waiting refusal counts, in words, when they are not the asker's own (an
    :class:`Owner` an admin acts for): the asker reads "bob@example.com has 8 waiting jobs", not "you"."""
    return person.email if isinstance(person, Owner) else None


def _limited(person: Any, settings: Settings) -> bool:
    """Whether a submission of ``person``'s is checked against the waiting or per-minute limit."""
    return not _exempt(person) and bool(settings.user_max_waiting_jobs or settings.user_max_jobs_per_minute)


@dataclass(frozen=True)
class Counted:
    """What :func:`before_submit` counted under the person's lock: their waiting jobs (``None`` when
    that limit is off). While the lock is held, no other checked submission of theirs adds any, so
    :func:`after_submit` can add its own to this count instead of counting again."""

    waiting: int | None


@dataclass(frozen=True)
class Owner:
    """The owner of a job or batch another person (an admin) acts on: whose limits the action is held to."""

    id: int
    is_admin: bool
    email: str = ""


OWNER = text("SELECT id, is_admin, email FROM users WHERE id = :id")
JOB_OWNERS = text("SELECT id, user_id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))")


async def owner_of(db: AsyncConnection | AsyncSession, actor_user: Any, user_id: int) -> Any:
    """The person whose limits an action on ``user_id``'s job or batch is held to: the actor when it is
    theirs, else the owner (whoever acts, a retry puts the owner's job back in the queue)."""
    if user_id == actor_user.id:
        return actor_user
    conn = await db.connection() if isinstance(db, AsyncSession) else db
    row = (await conn.execute(OWNER, {"id": user_id})).one()
    return Owner(int(row.id), bool(row.is_admin), str(row.email))


async def job_owners(db: AsyncConnection | AsyncSession, ids: Sequence[Any]) -> dict[Any, int]:
    """The owner's user id of each of these jobs (those that still exist)."""
    conn = await db.connection() if isinstance(db, AsyncSession) else db
    return {r.id: int(r.user_id) for r in await conn.execute(JOB_OWNERS, {"ids": list(ids)})}


async def before_requeue(
    db: AsyncConnection | AsyncSession, actor_user: Any, owner: Any, settings: Settings
) -> Counted | None:
    """:func:`before_submit` for a retry or a run again of ``owner``'s job, whoever acts: the owner's
    waiting limit holds (an admin's retry puts jobs in the owner's queue all the same);
    the per-minute limit only when the owner acts (an admin, exempt, did not submit as the owner, and the
    owner did not ask for it). Follow with :func:`after_requeue` or :func:`after_submit` for ``owner``.

    Raises:
        RateLimited: 429, the owner's limit and when to try again.
    """
    return await before_submit(db, owner, settings, per_minute=owner is actor_user)


async def before_submit(
    db: AsyncConnection | AsyncSession, person: Any, settings: Settings, *, per_minute: bool = True
) -> Counted | None:
    """Lock the person's limits for this transaction and check the per-minute limit; return the waiting
    count for :func:`after_submit` (``None`` for a person the limits do not apply to). One round trip:
    the lock and both counts (:func:`app.quotas.submission_state`, which counts once the lock is held,
    to see what a concurrent submission of theirs committed while this one waited for it).

    Raises:
        RateLimited: 429, the limit and when to try again (``Retry-After``).
    """
    if not _limited(person, settings) or not (per_minute or settings.user_max_waiting_jobs):
        return None
    waiting, refused = await quotas.submission_state(db, settings, person.id)
    if refused is not None and per_minute:
        raise refused
    return Counted(waiting)


def submit_guard(person: Any, settings: Settings) -> Guard | None:
    """The waiting and per-minute limits for one job of ``person``'s, as the guard of its insert
    (:class:`app.jobs.queue.Guard`): the statement takes the person's lock, counts under it (as
    :func:`before_submit` does) and inserts the job only when :func:`before_submit` and
    :func:`after_submit` would both let it through; otherwise the queue raises their refusal. ``None``
    for a person the limits do not apply to. Not for a job with an idempotency key: a repeat of one adds
    nothing, so it is not refused for the waiting limit (:func:`before_submit` and :func:`after_submit`).

    Raises (from the enqueue):
        RateLimited: 429, the limit and when to try again (``Retry-After``).
    """
    if not _limited(person, settings):
        return None
    return Guard(
        sql=quotas.GUARD,
        params=quotas.guard_params(settings, person.id),
        refusal=lambda row: quotas.guard_refusal(settings, row),
    )


async def count_retry(
    db: AsyncConnection | AsyncSession, actor_user: Any, owner: Any, settings: Settings
) -> None:
    """After a retry that put jobs back in the queue (one job, a batch's failed rows): the owner's own
    retry counts once against their per-minute limit, as a new submission does (it was checked by
    :func:`before_requeue`); an admin's retry of someone else's job counts against neither (the admin
    is exempt, the owner did not ask for it)."""
    if owner is not actor_user or _exempt(owner) or not settings.user_max_jobs_per_minute:
        return
    await quotas.count_retry(db, owner.id)


async def after_submit(
    db: AsyncConnection | AsyncSession,
    person: Any,
    settings: Settings,
    added: int,
    counted: Counted | None = None,
) -> None:
    """Refuse the submission that just added ``added`` waiting jobs if the person is now above the
    waiting limit (the caller's rollback removes them). ``counted``: what :func:`before_submit`
    returned in this transaction, so the count is not read again; without it, it is.

    Raises:
        RateLimited: 429, the limit and when to try again.
    """
    if _exempt(person) or not settings.user_max_waiting_jobs or added <= 0:
        return
    if counted is not None and counted.waiting is not None:
        now_waiting = counted.waiting + added
    else:
        now_waiting = await quotas.waiting(db, person.id)
    refused = quotas.waiting_refusal(settings, now_waiting, added, _whose(person))
    if refused is not None:
        raise refused


async def after_requeue(
    db: AsyncConnection | AsyncSession, person: Any, settings: Settings, counted: Counted | None
) -> None:
    """Refuse a retry that took the person above the waiting limit: the job it put back and the
    dependents that wait for it again (their number is known only afterwards, so the waiting jobs are
    counted again and compared with ``counted``, what :func:`before_submit` returned).

    Raises:
        RateLimited: 429, the limit and when to try again.
    """
    if counted is None or counted.waiting is None:
        return
    now_waiting = await quotas.waiting(db, person.id)
    refused = quotas.waiting_refusal(settings, now_waiting, now_waiting - counted.waiting, _whose(person))
    if refused is not None:
        raise refused


async def before_adding(
    db: AsyncConnection | AsyncSession, person: Any, settings: Settings, adding: int
) -> None:
    """Refuse, before they are built, ``adding`` jobs that would take the person above the waiting
    limit (a batch of thousands is refused whole without inserting it first); call after
    :func:`before_submit`, which holds the lock. :func:`after_submit` still checks what was added.

    Raises:
        RateLimited: 429, the limit, how many this would add, and when to try again.
    """
    if _exempt(person) or not settings.user_max_waiting_jobs or adding <= 0:
        return
    refused = quotas.waiting_refusal(
        settings, await quotas.waiting(db, person.id) + adding, adding, _whose(person)
    )
    if refused is not None:
        raise refused


def check_steps(settings: Settings, steps: Sequence[Any]) -> None:
    """An ad-hoc pipeline's size, from what was sent, before anything is validated or built.

    Raises:
        BadInput: 422 naming ``steps``: more steps or dependencies than a pipeline may have.
    """
    dicts = [s for s in steps if isinstance(s, dict)]
    edges = sum(len(s.get("depends_on") or ()) for s in dicts)
    # A step run for each item of a literal list is as many steps (a list from a parent's result is
    # counted when it is expanded).
    size = len(steps) + sum(len(s["for_each"]) - 1 for s in dicts if isinstance(s.get("for_each"), list))
    refused = pipeline_size_refusal(settings, size, edges)
    if refused is not None:
        raise refused


async def after_pipeline(
    db: AsyncConnection | AsyncSession, person: Any, settings: Settings, pipeline_id: Any
) -> None:
    """Check a just-created pipeline: its size (a template's steps are known only once it is built)
    and the person's waiting jobs.

    Raises:
        BadInput: 422 naming ``steps``. RateLimited: 429 over the waiting limit.
    """
    conn = await db.connection() if isinstance(db, AsyncSession) else db
    size = (await conn.execute(PIPELINE_SIZE, {"pid": pipeline_id})).mappings().one()
    refused = pipeline_size_refusal(settings, int(size["steps"]), int(size["edges"]))
    if refused is not None:
        raise refused
    await after_submit(db, person, settings, int(size["steps"]))


async def lock_person(db: AsyncConnection | AsyncSession, person: Any) -> None:
    """Serialise the person's checked submissions and uploads with this transaction until it ends."""
    await quotas.lock(db, person.id)


async def check_upload(
    db: AsyncConnection | AsyncSession, person: Any, settings: Settings, size: int
) -> None:
    """Lock the person's limits and refuse an upload of ``size`` bytes that would take their stored
    files above ``USER_MAX_UPLOAD_BYTES``.

    Raises:
        RateLimited: 429, how much is stored, the limit, and when their first file is deleted.
    """
    if not settings.user_max_upload_bytes:
        return
    await quotas.lock(db, person.id)
    refused = await quotas.stored_refusal(db, settings, person.id, size)
    if refused is not None:
        raise refused
