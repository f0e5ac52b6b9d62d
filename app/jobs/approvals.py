"""Who may decide a step that requires approval: the one rule every path uses (the job page, the
approver's page, the one-click link, the admin inbox, the API and the timeout sweep).

A step names its approvers in its spec (ad hoc or in a template)::

    {"key": "review", "type": "…", "requires_approval": true,
     "approvers": ["ann@example.com", "admins", "owner"], "approvals_needed": 2,
     "approval_timeout": 86400, "on_approval_timeout": "reject"}

* an e-mail address names one person (an account that must exist when the pipeline is made);
* ``admins`` is any admin; ``owner`` is the person who submitted the pipeline — without it the
  submitter may not approve their own step, even as an admin or a named approver;
* ``approvals_needed`` distinct people must approve (default 1); one rejection by anybody eligible
  rejects the step;
* after ``approval_timeout`` seconds without a decision the step is rejected (``reject``, the default)
  or the approvers are reminded (``remind``: at least :data:`MIN_REMIND_TIMEOUT` seconds; each later
  reminder waits as long as the step had waited at the one before, so reminders come after T, 2T, 4T…).

A step without ``approvers`` keeps the rule from before approvers could be named: any admin decides, the
submitter included. The rule is stored per step in ``job_approval_rules``, with the e-mail addresses
resolved to user ids when the pipeline is created (:func:`resolve`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.dbclock import db_time
from app.digits import whole
from app.emails import folded
from app.errors import BadInput
from app.jobs.payload import json_text

ADMINS = "admins"
OWNER = "owner"
ON_TIMEOUT = ("reject", "remind")
MAX_APPROVERS = 50
MAX_TIMEOUT = 365 * 86400
MIN_REMIND_TIMEOUT = 3600
"""A reminder writes an alert, an event and a notice (and an e-mail) to every approver: more often than
hourly it is noise, and any submitter could make the sweep write without end. A rejection happens once
per step, so ``reject`` keeps a one-second minimum."""
LINK_TTL_SECONDS = 7 * 86400
"""A one-click link opens its confirm page for a week; after that the approver's list still does."""
FIELDS = ("approvers", "approvals_needed", "approval_timeout", "on_approval_timeout")
"""A step's keys that describe its approval (the API's names)."""


@dataclass(frozen=True)
class ApprovalSpec:
    """A step's approval as written, shape-checked (:func:`parse_step`): ``approvers`` lower-cased
    e-mails and the groups ``admins``/``owner``, in their order, without repeats."""

    approvers: tuple[str, ...] = (ADMINS,)
    approvals_needed: int = 1
    timeout: int | None = None
    on_timeout: str | None = None


@dataclass(frozen=True)
class Rule:
    """Who may decide one step: the named people, any admin, the submitter; how many approvals it needs."""

    user_ids: frozenset[int]
    admins: bool
    owner: bool
    approvals_needed: int = 1


LEGACY = Rule(frozenset(), admins=True, owner=True)
"""A step without named approvers: any admin, the submitter included when they are an admin."""


def refusal(rule: Rule | None, *, user_id: int, is_admin: bool, owner_id: int) -> str | None:
    """Why this person may not approve or reject the step, or ``None`` when they may. The only place
    the rule is written; everything that offers or makes a decision asks here."""
    rule = rule or LEGACY
    if user_id == owner_id and not rule.owner:
        return "You submitted this job, and its approvers do not include its owner: someone else must decide."
    if user_id in rule.user_ids or (rule.admins and is_admin) or (rule.owner and user_id == owner_id):
        if rule is LEGACY and not is_admin:
            return "Only an admin can approve or reject this step."
        return None
    if rule is LEGACY:
        return "Only an admin can approve or reject this step."
    return "You are not one of the approvers of this step."


def may_decide(rule: Rule | None, *, user_id: int, is_admin: bool, owner_id: int) -> bool:
    return refusal(rule, user_id=user_id, is_admin=is_admin, owner_id=owner_id) is None


# --- a step's spec ---------------------------------------------------------------------------------


def _approvers(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise BadInput.field(path, 'must be a list of e-mail addresses, "admins" or "owner"')
    if len(value) > MAX_APPROVERS:
        raise BadInput.field(path, f"at most {MAX_APPROVERS:,} approvers")
    names: list[str] = []
    for i, v in enumerate(value):
        name = folded(v)  # the accounts' rule (app.emails), so a look-alike names the same person
        if name not in (ADMINS, OWNER) and (
            "@" not in name or len(name) > 254 or any(c.isspace() or ord(c) < 32 for c in name)
        ):
            raise BadInput.field(f"{path}[{i}]", f'{v[:100]!r} is not an e-mail address, "admins" or "owner"')
        if name not in names:
            names.append(name)
    return tuple(names)


def _int(value: Any, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadInput.field(path, f"must be a whole number from {low:,} to {high:,}")
    return value


def parse_step(step: dict[str, Any], path: str) -> ApprovalSpec | None:
    """A step's approval fields, checked for shape (``path`` is the step's, e.g. ``steps[2]``); ``None``
    when the step names none of them.

    Raises:
        BadInput: named by field path (``steps[2].approvals_needed``).
    """
    if not any(step.get(f) is not None for f in FIELDS):
        return None
    if step.get("requires_approval") is not True:
        first = next(f for f in FIELDS if step.get(f) is not None)
        raise BadInput.field(f"{path}.{first}", 'only a step with "requires_approval": true has approvers')
    approvers: tuple[str, ...] = (ADMINS,)
    if step.get("approvers") is not None:
        approvers = _approvers(step["approvers"], f"{path}.approvers")
    needed = 1
    if step.get("approvals_needed") is not None:
        needed = _int(step["approvals_needed"], f"{path}.approvals_needed", 1, MAX_APPROVERS)
    timeout = None
    if step.get("approval_timeout") is not None:
        timeout = _int(step["approval_timeout"], f"{path}.approval_timeout", 1, MAX_TIMEOUT)
    on_timeout = step.get("on_approval_timeout")
    if on_timeout is not None:
        if on_timeout not in ON_TIMEOUT:
            raise BadInput.field(f"{path}.on_approval_timeout", 'must be "reject" or "remind"')
        if timeout is None:
            raise BadInput.field(f"{path}.on_approval_timeout", "needs an approval_timeout in seconds")
    elif timeout is not None:
        on_timeout = "reject"
    if on_timeout == "remind" and timeout is not None and timeout < MIN_REMIND_TIMEOUT:
        raise BadInput.field(
            f"{path}.approval_timeout",
            f'must be at least {MIN_REMIND_TIMEOUT:,} seconds (1 hour) with "on_approval_timeout": "remind"',
        )
    return ApprovalSpec(approvers, needed, timeout, on_timeout)


USERS_BY_EMAIL = text("SELECT id, email, is_active FROM users WHERE email = ANY(CAST(:emails AS text[]))")
OTHER_ADMINS = text(
    "SELECT count(*) FROM users WHERE is_admin AND is_active AND id <> ALL(CAST(:not_ids AS int[]))"
)


async def resolve(conn: AsyncConnection, spec: ApprovalSpec, owner_id: int, path: str) -> Rule:
    """The rule of a step for the pipeline of ``owner_id``: e-mails become user ids.

    Raises:
        BadInput: an e-mail with no account, or a disabled one (``steps[1].approvers[0]``);
            ``approvals_needed`` above the number of distinct people who could approve (the submitter
            counts only with ``owner``).
    """
    emails = [a for a in spec.approvers if a not in (ADMINS, OWNER)]
    rows = (await conn.execute(USERS_BY_EMAIL, {"emails": emails})).mappings().all()
    found = {r["email"]: r["id"] for r in rows}
    disabled = {r["email"] for r in rows if not r["is_active"]}
    for i, a in enumerate(spec.approvers):
        if a not in (ADMINS, OWNER) and a not in found:
            raise BadInput.field(f"{path}.approvers[{i}]", f"no account with the e-mail address {a!r}")
        # A disabled account can neither sign in nor decide (as a disabled admin does not count for
        # "admins"): a step only it could decide would wait for ever.
        if a in disabled:
            raise BadInput.field(
                f"{path}.approvers[{i}]", f"the account {a} is disabled, so it cannot approve"
            )
    rule = Rule(
        frozenset(found.values()), ADMINS in spec.approvers, OWNER in spec.approvers, spec.approvals_needed
    )
    people = set(rule.user_ids) - {owner_id}
    possible = len(people) + (1 if rule.owner else 0)
    if rule.admins:
        not_ids = sorted(people | {owner_id})
        possible += int((await conn.execute(OTHER_ADMINS, {"not_ids": not_ids})).scalar_one())
    if spec.approvals_needed > possible:
        raise BadInput.field(
            f"{path}.approvals_needed",
            f"needs {spec.approvals_needed} approval{'' if spec.approvals_needed == 1 else 's'}, but only "
            f"{possible} "
            f"{'person' if possible == 1 else 'people'} could approve this step",
        )
    return rule


INSERT_RULE = text(
    """
    INSERT INTO job_approval_rules (job_id, approvers, user_ids, admins, owner, approvals_needed,
                                    timeout_seconds, on_timeout)
    VALUES (:id, CAST(CAST(:approvers AS text) AS jsonb), CAST(:user_ids AS int[]), :admins, :owner,
            :needed, :timeout, :on_timeout)
    """
)


async def store_rules(conn: AsyncConnection, rules: Sequence[tuple[uuid.UUID, ApprovalSpec, Rule]]) -> None:
    """Keep each step's rule with its job (in the transaction that creates the jobs)."""
    params = [
        {
            "id": job_id,
            "approvers": json_text(list(spec.approvers)),
            "user_ids": sorted(rule.user_ids),
            "admins": rule.admins,
            "owner": rule.owner,
            "needed": rule.approvals_needed,
            "timeout": spec.timeout,
            "on_timeout": spec.on_timeout,
        }
        for job_id, spec, rule in rules
    ]
    if params:
        await conn.execute(INSERT_RULE, params)


def stored_form(spec: ApprovalSpec, rule: Rule) -> dict[str, Any]:
    """A step's resolved rule as JSON, kept with a ``for_each`` step whose list comes at run time so
    that its instances get the rule resolved when the pipeline was made (:func:`from_stored`)."""
    return {
        "approvers": list(spec.approvers),
        "approvals_needed": spec.approvals_needed,
        "timeout": spec.timeout,
        "on_timeout": spec.on_timeout,
        "user_ids": sorted(rule.user_ids),
        "admins": rule.admins,
        "owner": rule.owner,
    }


def from_stored(data: dict[str, Any]) -> tuple[ApprovalSpec, Rule]:
    """The ``(spec, rule)`` of :func:`stored_form`, for :func:`store_rules`."""
    needed = int(data["approvals_needed"])
    spec = ApprovalSpec(tuple(data["approvers"]), needed, data.get("timeout"), data.get("on_timeout"))
    return spec, Rule(frozenset(data["user_ids"]), bool(data["admins"]), bool(data["owner"]), needed)


RULE_OF = text("SELECT user_ids, admins, owner, approvals_needed FROM job_approval_rules WHERE job_id = :id")


def rule_from(row: Any) -> Rule | None:
    """A :class:`Rule` from a row with ``user_ids``, ``admins``, ``owner``, ``approvals_needed`` (all
    ``NULL`` when a step has no rule row: ``None``)."""
    if row is None or row["approvals_needed"] is None:
        return None
    return Rule(
        frozenset(row["user_ids"] or ()), bool(row["admins"]), bool(row["owner"]), row["approvals_needed"]
    )


async def rule_of(conn: AsyncConnection, job_id: Any) -> Rule | None:
    """The step's rule, or ``None`` (any admin decides)."""
    return rule_from((await conn.execute(RULE_OF, {"id": job_id})).mappings().first())


APPROVERS_OF = text(
    """
    SELECT r.approvers, r.approvals_needed, r.timeout_seconds, r.on_timeout
    FROM job_approval_rules r WHERE r.job_id = :id
    """
)


async def described(conn: AsyncConnection, job_id: Any) -> dict[str, Any] | None:
    """A step's approval as written (``approvers``, ``approvals_needed``, ``approval_timeout``,
    ``on_approval_timeout``), for the pages and the API; ``None`` for a step without named approvers."""
    row = (await conn.execute(APPROVERS_OF, {"id": job_id})).mappings().first()
    if row is None:
        return None
    return {
        "approvers": list(row["approvers"]),
        "approvals_needed": row["approvals_needed"],
        "approval_timeout": row["timeout_seconds"],
        "on_approval_timeout": row["on_timeout"],
    }


# --- the one-click link ----------------------------------------------------------------------------------


def _signature(secret: str, job_id: str, expires: int) -> str:
    mac = hmac.new(secret.encode(), f"approval:{job_id}:{expires}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _now() -> float:
    """Now, by the database's clock (:mod:`app.dbclock`), in seconds. A link signed on one web host is
    checked on another: on their own clocks, minutes apart, one host accepted a link another refused as
    expired, and a host whose clock was slow kept links alive past their expiry."""
    return db_time().timestamp()


def link_token(secret: str, job_id: Any, *, ttl: int = LINK_TTL_SECONDS, now: float | None = None) -> str:
    """``<expires>.<signature>``: the HMAC-SHA256 of the job id and the expiry (a Unix time on the
    database's clock), keyed by the server's secret, so a link cannot be made for another step nor kept
    alive past its expiry."""
    expires = int((now if now is not None else _now()) + ttl)
    return f"{expires}.{_signature(secret, str(job_id), expires)}"


def link_problem(secret: str, job_id: Any, token: str, *, now: float | None = None) -> str | None:
    """Why the link's token does not open this step (altered, for another step, expired), or ``None``."""
    expires_text, _, signature = (token or "").partition(".")
    expires = whole(expires_text)
    # The expiry as it was signed (no leading zeros), and the signature compared as bytes: compare_digest
    # refuses text that is not ASCII with a TypeError, which a link's query string may well hold.
    if expires is None or str(expires) != expires_text or not signature:
        return "This approval link is not valid."
    signed = _signature(secret, str(job_id), expires).encode()
    if not hmac.compare_digest(signed, signature.encode("utf-8", "surrogatepass")):
        return "This approval link is not valid."
    if expires < (now if now is not None else _now()):
        return "This approval link has expired. Open the step from your approvals list instead."
    return None


def link(base_url: str, secret: str, job_id: Any) -> str:
    """The one-click link for an alert or e-mail: the step's confirm page (sign-in required; a GET
    never decides)."""
    return f"{base_url.rstrip('/')}/approvals/{job_id}?token={link_token(secret, job_id)}"
