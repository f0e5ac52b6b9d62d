"""Bulk actions: retry or cancel many jobs at once — the ticked rows, every row matching a filter, or a
group of failed jobs with the same error — for admins.

A bulk action is planned first (:func:`plan_selected`, :func:`plan_filter`, :func:`plan_group`: which
ids, how many are eligible now) and then run (:func:`run_bulk`): at most :data:`BULK_MAX` jobs, in
batches of :data:`BULK_BATCH`, each through :mod:`app.jobs.queue` in its own savepoint, with one audit
entry and one admin notice carrying the count, in the caller's transaction. A retry is held to each
job's owner's limits, as a retry of one job is: a job its owner has no room for is skipped, and the
message says why.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.actions import quotas
from app.actions.jobs import retry_many_warning
from app.actions.selection import LIVE_SQL, JobFilter, filter_where, ids_sql, unknown_type
from app.actions.trail import Actor, Db, auditing_refusals, record_done, refused_once
from app.errors import AppError, BadInput, Conflict, Forbidden, NotFound, RateLimited
from app.jobs import queue
from app.jobs.permanence import permanent_among
from app.jobs.states import LIVE, Status
from app.processors import registry

BULK_MAX = 2_000
"""At most this many jobs per bulk action; the confirm step says so when more match."""
BULK_BATCH = 100
"""Jobs acted on per batch inside a bulk action (each job in its own savepoint)."""
FAILED_WINDOW = 2_000
"""Failed groups are formed from only the newest this many failed jobs (one index range scan)."""
SCOPES = {"ids": "selected", "filter": "filter", "group": "group"}
"""The scope (as forms name it) of each way of naming jobs: ticked ids, a filter, a failed group."""
SELECTOR_WORDS = "send one of ids, filter or group"
"""Why a bulk request naming no jobs, or naming them two ways at once, is refused."""
GROUP_KEYS = ("type", "signature")
"""The fields that name a failed group in a bulk retry."""
ERROR_SIGNATURE_MAX = 160
BULK_ACTIONS = {
    "retry": {
        "verb": "Retry",
        "done": "Retried",
        "eligible": f"status = 'failed' AND NOT {queue.IN_CANCELLED_PIPELINE}",
        "what": "failed (a cancelled pipeline's steps are not retried)",
    },
    "cancel": {
        "verb": "Cancel",
        "done": "Cancelled",
        "eligible": f"{LIVE_SQL} AND is_active",
        "what": "waiting, running or needing approval (not held, and not already being stopped)",
    },
}
AUDIT_ACTIONS = {"retry": "jobs.bulk_retry", "cancel": "jobs.bulk_cancel"}
"""The audit trail's name of each bulk action (each has words in :data:`app.audit.ACTIONS`)."""
UNKNOWN_ACTION = "jobs.bulk"
"""The audit trail's name of a bulk request refused whose action is neither retry nor cancel, or could
not be read: an admin's refused request all the same."""
NOT_READ_WORDS = "not known: the request was refused before it was read"
"""What a refused bulk request's entry says of its action when its body (where a page's form and the API
both name it) was never read: over the size limit, a form that cannot be parsed."""
ROWS_BY_ID = text(
    f"SELECT id, status, is_active, {queue.IN_CANCELLED_PIPELINE} AS pipeline_cancelled FROM jobs"
    " WHERE id = ANY(CAST(:ids AS uuid[]))"
)


def _key(*parts: Any) -> str:
    return hashlib.blake2s(repr(parts).encode(), digest_size=6).hexdigest()


@dataclass
class BulkPlan:
    """What a bulk action will do: ``action`` (retry/cancel), ``scope`` (selected/filter/group), the ids
    it will try (``ids``), how many of them are eligible now (``count``), how many ticked rows are not
    (``ineligible``), whether more than :data:`BULK_MAX` matched (``truncated``) and the ``upto`` id bound
    that keeps rows created after the confirm step out."""

    action: str
    scope: str
    ids: list[uuid.UUID]
    count: int
    ineligible: int = 0
    truncated: bool = False
    upto: uuid.UUID | None = None
    extra: dict[str, str] = field(default_factory=dict)
    unknown: list[uuid.UUID] = field(default_factory=list)
    """Ticked ids no job has: reported apart from the jobs that had moved on, never tried."""
    permanent: int = 0
    """Of a retry's jobs, how many failed with a permanent error (:func:`count_permanent`): its confirm
    step says so, as one job's "Retry anyway" does."""

    @property
    def permanent_warning(self) -> str:
        """The confirm step's words for :attr:`permanent` (empty when none)."""
        return retry_many_warning(self.permanent)


async def plan_selected(db: AsyncSession, action: str, raw_ids: Sequence[str]) -> BulkPlan:
    """Ticked rows: every id is tried; ``count`` is how many are eligible for ``action`` now, and ids no
    job has are set apart in ``unknown``.

    Raises:
        BadInput: on ``ids``, a value that is not a job id, or more than :data:`BULK_MAX` ids as sent
            (those past the limit were dropped unreported, in neither ``done`` nor ``skipped``).
    """
    # counted as sent, repeats included, before any is read: the limit is on the list a client sends
    if len(raw_ids) > BULK_MAX:
        raise BadInput.field(
            "ids",
            f"at most {BULK_MAX:,} ids per bulk action; {len(raw_ids):,} were sent (repeats count), "
            "so send them in parts",
        )
    ids: list[uuid.UUID] = []
    seen: set[uuid.UUID] = set()
    for value in raw_ids:
        try:
            jid = uuid.UUID(str(value))
        except ValueError:
            raise BadInput.field("ids", f"{str(value)[:60]!r} is not a job id") from None
        if jid not in seen:
            seen.add(jid)
            ids.append(jid)
    rows = (await db.execute(ROWS_BY_ID, {"ids": ids})).mappings().all() if ids else []
    found = {r["id"] for r in rows}
    unknown = [j for j in ids if j not in found]
    eligible = len([r for r in rows if _eligible(action, r)])
    known = [j for j in ids if j in found]
    return BulkPlan(action, "selected", known, eligible, ineligible=len(known) - eligible, unknown=unknown)


FAILED_AMONG = text("SELECT id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'failed'")


async def count_permanent(db: AsyncSession, plan: BulkPlan) -> BulkPlan:
    """``plan`` with ``permanent`` set: how many of the failed jobs a retry plan would retry failed with
    a permanent error (:func:`app.actions.jobs.failed_for_good`'s rule), so that its confirm step warns
    that they will most likely fail the same way. Asked by the confirm steps only."""
    if plan.action == "retry" and plan.ids:
        ids = [str(i) for i in plan.ids]
        failed = (await db.execute(FAILED_AMONG, {"ids": ids})).scalars().all()
        plan.permanent = len(await permanent_among(db, failed))
    return plan


def _eligible(action: str, row: Mapping[Any, Any]) -> bool:
    if action == "retry":  # a cancelled pipeline's step is refused by the retry: not counted as one
        return row["status"] == Status.FAILED and not row["pipeline_cancelled"]
    return row["status"] in LIVE and bool(row["is_active"])


async def plan_filter(db: AsyncSession, action: str, f: JobFilter, upto: uuid.UUID | None) -> BulkPlan:
    """Every row matching ``f`` that ``action`` applies to (newest :data:`BULK_MAX`), up to id ``upto``
    (default: the newest matching id now)."""
    where, params = filter_where(f, eligible=BULK_ACTIONS[action]["eligible"], upto=upto)
    params["limit"] = BULK_MAX + 1
    ids = [r[0] for r in (await db.execute(ids_sql(where), params)).all()]
    truncated = len(ids) > BULK_MAX
    ids = ids[:BULK_MAX]
    return BulkPlan(
        action, "filter", ids, len(ids), truncated=truncated, upto=upto or (ids[0] if ids else None)
    )


EXPECTED_WORDS = (
    f"must be the number of jobs the confirmation showed, a whole number from 1 to {BULK_MAX:,}; "
    "go back and confirm again"
)


def check_expected(value: Any) -> int | None:
    """The count a confirm step showed (``expected``), which caps a bulk action on a filter or a group;
    ``None`` when none was sent. A confirm step shows a count only when there is something to do and
    never more than :data:`BULK_MAX`, so anything else was not sent by one.

    Raises:
        BadInput: on ``expected``, not a whole number from 1 to :data:`BULK_MAX`.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BULK_MAX:
        raise BadInput.field("expected", EXPECTED_WORDS)
    return value


@dataclass
class BulkOutcome:
    """``done`` and ``skipped`` job ids of a bulk action, the ``unknown`` ids no job has, and the
    sentence shown in place."""

    action: str
    done: list[uuid.UUID]
    skipped: list[uuid.UUID]
    message: str
    unknown: list[uuid.UUID] = field(default_factory=list)
    permanent: int = 0
    """Of the jobs a retry put back (``done``), how many had failed with a permanent error: retried
    anyway, as its confirm step warned (:attr:`BulkPlan.permanent`); the API's ``failed_permanently``."""


async def run_bulk(
    db: AsyncSession,
    actor: Actor,
    plan: BulkPlan,
    *,
    expected: int | None = None,
    detail: dict[str, Any] | None = None,
) -> BulkOutcome:
    """Retry or cancel ``plan.ids`` through :func:`app.jobs.queue.retry` / :func:`app.jobs.queue.cancel`,
    :data:`BULK_BATCH` at a time, each job in its own savepoint so one that moved on ("already
    finished", "not failed") is skipped without undoing the others. Writes one audit entry
    (``jobs.bulk_retry`` / ``jobs.bulk_cancel``, ``count`` = done, outcome ``"N done, M skipped"``) and
    one admin notice, in the caller's transaction.

    ``expected`` is the count shown at the confirm step (:func:`check_expected`): the action never goes
    past it. It is what the form says, not what the database holds, so it counts nothing itself:
    ``skipped`` are only jobs of the plan that were tried and had moved on (or their owner's limits
    held back), never more than the plan matched.

    Raises:
        Forbidden: the actor is not an admin. BadInput: ``expected`` refused by :func:`check_expected`.
    """
    if not actor.is_admin:
        raise Forbidden("Only an admin can act on many jobs at once.")
    expected = check_expected(expected)
    if expected is not None and plan.scope != "selected":
        plan.ids = plan.ids[:expected]  # never more than the admin confirmed
    done, skipped, unfit, limited, vanished, barred, stopped = await _apply(db, actor, plan)
    # the retried jobs' last failures are still theirs: a retry records no failure of its own
    permanent = len(await permanent_among(db, done)) if plan.action == "retry" else 0
    unknown = [*plan.unknown, *vanished]
    n_skipped = len(skipped)
    full_detail = {
        **(detail or {}),
        **plan.extra,
        "scope": plan.scope,
        "skipped": n_skipped,
        "skipped_ids": [str(j) for j in skipped[:20]],
    }
    if unknown:
        full_detail["unknown"] = len(unknown)
        full_detail["unknown_ids"] = [str(j) for j in unknown[:20]]
    if unfit:
        full_detail["input_unfit"] = unfit
    if limited:
        full_detail["owner_limits"] = len(limited)
    if barred:
        full_detail["owner_not_allowed"] = len(barred)
    if stopped:
        full_detail["pipeline_cancelled"] = stopped
    await record_done(
        db,
        actor,
        AUDIT_ACTIONS[plan.action],
        target_type="job",
        target_ids=done,
        count=len(done),
        outcome=f"{len(done)} done, {n_skipped} skipped",
        detail=full_detail,
    )
    verb = BULK_ACTIONS[plan.action]["done"]
    message = f"{verb} {len(done):,} job{'s' if len(done) != 1 else ''}"
    if plan.action == "cancel":
        message += " (running ones stop shortly)"
    moved = n_skipped - unfit - len(limited) - len(barred) - stopped
    if not unfit and not limited and not barred and not stopped:
        message += f"; {n_skipped:,} skipped" + (" because they had moved on." if n_skipped else ".")
    else:
        reasons = [f"{moved:,} because they had moved on"] if moved else []
        if unfit:
            reasons.append(
                f"{unfit:,} because their input does not fit their type: a retry would fail the same way,"
                " so start them again with corrected input"
            )
        if limited:
            reasons.append(f"{len(limited):,} because of their owner's limits ({limited[0]})")
        if barred:
            reasons.append(f"{len(barred):,} because {barred[0]}")
        if stopped:
            reasons.append(
                f"{stopped:,} because their pipeline was cancelled, so its steps cannot run again;"
                " start the pipeline again instead"
            )
        message += f"; {n_skipped:,} skipped: " + "; ".join(reasons) + "."
    if plan.truncated:  # said at the confirmation too; the answer must not read as if that were all
        message += f" More jobs match: this acted on the newest {BULK_MAX:,}; run it again for the rest."
    if unknown:
        message += (
            f" {len(unknown):,} id{'s' if len(unknown) != 1 else ''} named no job"
            f" ({', '.join(str(j) for j in unknown[:3])}{', …' if len(unknown) > 3 else ''})."
        )
    return BulkOutcome(plan.action, done, skipped, message, unknown=unknown, permanent=permanent)


async def _apply(
    db: AsyncSession, actor: Actor, plan: BulkPlan
) -> tuple[list[uuid.UUID], list[uuid.UUID], int, list[str], list[uuid.UUID], list[str], int]:
    """The ids done, the ids skipped, how many of those the queue's retry refused because a retry could
    not succeed (:func:`app.jobs.error_text.retry_refusal`), the refusals of those their owner's
    limits kept back (:func:`_retry_within_limits`), the ids whose job was gone (deleted since the
    plan) — never counted as having moved on — and the refusals of those whose owner may not have
    their type in the queue now (:mod:`app.jobs.queue.owner_rule`: an admins-only type, and the owner
    is not an admin any more), and how many were steps of a pipeline a person cancelled
    (:mod:`app.jobs.queue.cancelled`)."""
    done: list[uuid.UUID] = []
    skipped: list[uuid.UUID] = []
    vanished: list[uuid.UUID] = []
    unfit = 0
    stopped = 0
    limited: list[str] = []
    barred: list[str] = []
    retrying = plan.action == "retry"
    await queue.lock_pipelines_of(db, plan.ids)  # in one order, as a worker's outcomes take them
    for start in range(0, len(plan.ids), BULK_BATCH):
        chunk = plan.ids[start : start + BULK_BATCH]
        owners = await quotas.job_owners(db, chunk) if retrying else {}
        for jid in chunk:
            try:
                async with db.begin_nested():
                    if retrying:
                        await _retry_within_limits(db, actor, jid, owners.get(jid))
                    else:
                        await queue.cancel(db, jid, actor.user)
            except Conflict as exc:
                skipped.append(jid)
                refused = (exc.extra or {}).get("retry_refused")
                unfit += refused == "input_unfit"
                stopped += refused == queue.cancelled.REFUSED_KIND
                if refused == "never_created":
                    limited.append("refused by the waiting limit when they were asked for, they never ran")
            except RateLimited as exc:
                skipped.append(jid)
                limited.append(exc.detail)
            except NotFound:
                vanished.append(jid)
            except Forbidden as exc:
                skipped.append(jid)
                extra = exc.extra or {}
                rule = str(extra.get("rule") or exc.detail)
                barred.append(
                    f"a retry would re-open {extra['reopens']}, which their owner may not have now ({rule})"
                    if "reopens" in extra
                    else f"their owner may not have their type now ({rule})"
                )
            else:
                done.append(jid)
    return done, skipped, unfit, limited, vanished, barred, stopped


async def _retry_within_limits(db: AsyncSession, actor: Actor, jid: uuid.UUID, owner_id: int | None) -> None:
    """Retry one job within its owner's limits (:func:`app.actions.quotas.before_requeue`), as a retry
    of one job is: a bulk retry cannot put more jobs in a person's queue than they may have waiting."""
    if owner_id is None:
        raise NotFound(f"No job with id {jid}.")
    owner = await quotas.owner_of(db, actor.user, owner_id)
    counted = await quotas.before_requeue(db, actor.user, owner, actor.settings)
    await queue.retry(db, jid, actor.user)
    await quotas.after_requeue(db, owner, actor.settings, counted)


# --- failed jobs grouped by type and error --------------------------------------------------------------

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_HEX_RE = re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.IGNORECASE)
_NUM_RE = re.compile(r"\d+")
FAILED_LATEST = text(
    f"SELECT id, type, user_id, left(error_message, 1000) AS error, completed_at, "
    f"{queue.IN_CANCELLED_PIPELINE} AS pipeline_cancelled FROM jobs "
    f"WHERE status = 'failed' ORDER BY id DESC LIMIT {FAILED_WINDOW}"
)
FAILED_UPTO = text(
    f"SELECT id, type, user_id, left(error_message, 1000) AS error, completed_at, "
    f"{queue.IN_CANCELLED_PIPELINE} AS pipeline_cancelled FROM jobs "
    f"WHERE status = 'failed' AND id <= :upto ORDER BY id DESC LIMIT {FAILED_WINDOW}"
)


def error_signature(message: str | None) -> str:
    """A failed job's error reduced to what repeats: the first non-empty line, ids, long hex strings and
    numbers masked (``<id>``, ``<hex>``, ``N``), cut to :data:`ERROR_SIGNATURE_MAX` characters."""
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    first = lines[0] if lines else "(no error message)"
    first = _UUID_RE.sub("<id>", first)
    first = _HEX_RE.sub("<hex>", first)
    first = _NUM_RE.sub("N", first)
    first = re.sub(r"\s+", " ", first)
    return first[:ERROR_SIGNATURE_MAX] + ("…" if len(first) > ERROR_SIGNATURE_MAX else "")


async def failed_groups(db: AsyncSession, upto: uuid.UUID | None = None) -> dict[str, Any]:
    """The newest :data:`FAILED_WINDOW` failed jobs (``ix_jobs_status_id``, one bounded range scan),
    grouped by ``(type, error_signature)``, the group with the newest failure first.

    Returns ``{"groups": [{key, type, type_title, signature, count, newest, newest_id, ids}], "scanned":
    n, "window_full": bool, "upto": newest id}``."""
    rows = (
        (await db.execute(FAILED_UPTO if upto else FAILED_LATEST, {"upto": upto} if upto else {}))
        .mappings()
        .all()
    )
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        sig = error_signature(r["error"])
        g = groups.get((r["type"], sig))
        if g is None:
            spec = registry.get(r["type"])
            g = groups[(r["type"], sig)] = {
                "key": _key(r["type"], sig),
                "type": r["type"],
                "type_title": spec.title if spec is not None else r["type"],
                "signature": sig,
                "count": 0,
                "newest": r["completed_at"],
                "newest_id": r["id"],
                "ids": [],
            }
        g["count"] += 1
        if not r["pipeline_cancelled"]:  # a cancelled pipeline's step is shown, never retried
            g["ids"].append(r["id"])
    return {
        "groups": list(groups.values()),
        "scanned": len(rows),
        "window_full": len(rows) >= FAILED_WINDOW,
        "upto": rows[0]["id"] if rows else None,
        "window": FAILED_WINDOW,
    }


async def plan_group(db: AsyncSession, type_: str, signature: str, upto: uuid.UUID | None) -> BulkPlan:
    """The failed jobs of one group, within the same window the page showed (bounded by ``upto``)."""
    data = await failed_groups(db, upto)
    ids: list[uuid.UUID] = []
    for g in data["groups"]:
        if g["type"] == type_ and g["signature"] == signature:
            ids = g["ids"][:BULK_MAX]
    return BulkPlan(
        "retry", "group", ids, len(ids), upto=data["upto"], extra={"type": type_, "signature": signature}
    )


def _scope_words(scope: str, meant: str) -> str:
    shown = scope[:40]
    if scope not in SCOPES.values():
        return f"{shown!r} is not a scope; the scopes are {', '.join(SCOPES.values())}"
    return f"this form acts on the {meant!r} scope, not {shown!r}; go back and confirm again"


def refusals(db: AsyncSession, actor: Actor, action: Any) -> AbstractAsyncContextManager[None]:
    """The audited block around planning a bulk ``action`` from a request (the page's form and its
    confirm step, the API's body): a refused request — an empty filter, no ids, a filter with errors, an
    action that is neither retry nor cancel — leaves one ``refused: …`` entry like every admin action's
    refusal (:data:`UNKNOWN_ACTION` when the action asked for is not one)."""
    return auditing_refusals(
        db,
        actor,
        AUDIT_ACTIONS[action] if isinstance(action, str) and action in AUDIT_ACTIONS else UNKNOWN_ACTION,
        target_type="job",
        target_ids=[],
    )


async def refused(db: Db, actor: Actor, action: Any, exc: AppError, *, read: bool = True) -> None:
    """A request for a bulk ``action`` refused before :func:`refusals` could be entered (its body could not
    be read), or after it (the database's refusal): audited once, as that block would have. An action that
    is not one (:data:`UNKNOWN_ACTION`) is named in the entry's detail as it was asked — or, when the body
    was not ``read``, as not known (:data:`NOT_READ_WORDS`), so that the entry does not read as an
    action the admin asked for and Jobdesk does not know."""
    known = isinstance(action, str) and action in AUDIT_ACTIONS
    asked = "none given" if action is None or action == "" else str(action)[:40]
    await refused_once(
        db,
        actor,
        AUDIT_ACTIONS[action] if known else UNKNOWN_ACTION,
        exc,
        target_type="job",
        target_ids=[],
        detail=None if known else {"action": asked if read else NOT_READ_WORDS},
    )


async def plan_for(
    db: AsyncSession,
    action: str,
    *,
    ids: Sequence[Any] | None = None,
    job_filter: JobFilter | None = None,
    group: Mapping[str, Any] | None = None,
    upto: uuid.UUID | None = None,
    everything: bool = False,
    scope: str | None = None,
) -> BulkPlan:
    """The plan for exactly one of ``ids`` (ticked rows), ``job_filter`` (every matching row) or
    ``group`` (``{type, signature}`` of failed jobs; retry only).

    ``scope`` is the scope a form names beside what it sends (``selected``, ``filter``, ``group``; its
    confirm step carries the plan's own): when given it must be the scope of what was sent, since
    a form whose scope says one thing and whose fields another cannot be read either way.

    A filter with no condition selects every job of every user: it is taken only with ``everything``
    (the API's ``"all": true``, the console's confirm step), so a filter left empty by mistake — or one
    whose conditions were all lost on the way — acts on nothing.

    Raises:
        BadInput: an unknown action, none or several scopes, an empty id list, more ids than
            :data:`BULK_MAX`, a filter with errors, an empty filter without ``everything``, ``everything``
            with ticked ids, a group or a filter that has conditions; a ``scope`` that is not the one
            of what was sent.
    """
    if action not in BULK_ACTIONS:
        raise BadInput.field("action", "choose retry or cancel")
    if everything and job_filter is None and ids is None and group is None:
        job_filter = JobFilter()  # "all" alone: the empty filter it confirms
    given = [name for name, v in (("ids", ids), ("filter", job_filter), ("group", group)) if v is not None]
    if not given:
        raise BadInput.field("ids", SELECTOR_WORDS)
    if len(given) > 1:
        # acting on one and dropping the other would do what nobody asked: the form's scope, when it
        # names one, is the one meant, and the field named is the one sent beside it
        meant = next((name for name in given if SCOPES[name] == scope), given[0])
        extra = next(name for name in given if name != meant)
        raise BadInput.field(extra, f"{SELECTOR_WORDS}, not {' and '.join(given)} together")
    if scope is not None and scope != SCOPES[given[0]]:
        raise BadInput.field("scope", _scope_words(scope, SCOPES[given[0]]))
    if ids is not None:
        if not ids:
            raise BadInput.field("ids", "tick at least one job first")
        return await plan_selected(db, action, [str(i) for i in ids])
    if everything and (job_filter is None or job_filter.active):
        raise BadInput.field(
            "all", "all means every job of every user: send it with an empty filter, or leave it out"
        )
    if job_filter is not None:
        if job_filter.errors:
            raise BadInput(
                "Fix the filter first: " + " ".join(job_filter.errors.values()),
                errors={f"filter.{k}": v for k, v in job_filter.errors.items()},
            )
        if not job_filter.active and not everything:
            raise BadInput.field(
                "filter",
                "choose at least one filter, or confirm that you mean every job of every user"
                f' (up to {BULK_MAX:,}): "all": true in the API, the confirm step on /admin/jobs',
            )
        return await plan_filter(db, action, job_filter, upto)
    assert group is not None
    if action != "retry":
        raise BadInput.field("action", "a failed group can only be retried")
    _check_group(group)
    unknown = await unknown_type(db, group["type"])
    if unknown is not None:  # it names no group: "Retried 0 jobs" would hide the typo
        raise BadInput.field("group.type", unknown)
    return await plan_group(db, group["type"][:200], group["signature"][:500], upto)


def _check_group(group: Mapping[str, Any]) -> None:
    """Raises:
    BadInput: a group's field left out, misspelt or extra — it named no group at all, and "Retried 0
    jobs" read as success — or not text, or no type.
    """
    for key in group:
        if key not in GROUP_KEYS:
            raise BadInput.field(f"group.{str(key)[:100]}", "unknown field; a group is {type, signature}")
    for key in GROUP_KEYS:
        if not isinstance(group.get(key), str):
            raise BadInput.field(f"group.{key}", "must be text (as /admin/failed shows the group)")
    if not group["type"]:
        raise BadInput.field("group.type", "name the job type of the failed group")
