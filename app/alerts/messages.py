"""What an alert says, independent of the channel: :func:`describe` turns an outbox row into a
:class:`Message` that :mod:`app.alerts.rendering` writes out for Slack, Telegram or a webhook.

A message says what happened in plain words, with the job type's title, ids, owner, attempts and time,
the error (cut to the channel's limit when rendered), and a link under ``JOBDESK_BASE_URL``. Facts
that come from users or processors (labels, names, e-mails, errors) are marked ``literal`` so that every
channel shows them as code, where they cannot format, mention or link.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from app.formatting import isolated, plural
from app.jobs.approvals import LINK_TTL_SECONDS
from app.jobs.approvals import link as approval_link
from app.jobs.payload import json_text
from app.processors import registry

FACT_LIMIT = 300
"""Characters of one user-supplied value (label, name, e-mail) in a message."""


@dataclass(frozen=True)
class Fact:
    """One ``label: value`` line. ``style``: ``words`` (our own text), ``literal`` (user or processor
    text, shown as code), ``link`` (``value`` is the link text of ``url``)."""

    label: str
    value: str
    style: str = "words"
    url: str | None = None


@dataclass(frozen=True)
class Message:
    """A channel-neutral alert, rendered by :func:`app.alerts.rendering.render`."""

    kind: str
    icon: str
    headline: str
    """Plain words: our text, with job type titles and names set apart in their own direction."""
    facts: tuple[Fact, ...]
    error: str | None = None
    error_size: int | None = None
    """Bytes of the full error when ``error`` is already a cut-down copy."""
    note: str | None = None
    url: str | None = None
    """The page to open (job or pipeline)."""

    def summary(self) -> str:
        """One line for the deliveries list: the headline and the first fact."""
        first = f" — {self.facts[0].label}: {self.facts[0].value}" if self.facts else ""
        return one_line(f"{self.headline}{first}", 200)


def one_line(value: Any, limit: int = FACT_LIMIT) -> str:
    """``value`` as one line of at most ``limit`` characters (whitespace runs become one space, a longer
    text ends in ``…``)."""
    words = " ".join(str(value).split())
    return words if len(words) <= limit else words[: limit - 1] + "…"


# --- the parts of a message -------------------------------------------------------------------------

_VERBS = {
    "cancel": "cancelled",
    "retry": "retried",
    "approve": "approved",
    "reject": "rejected",
    "delete": "deleted",
    "purge": "purged",
    "run_again": "ran again",
    "rerun": "re-ran",
    "run_now": "started now",
    "reschedule": "rescheduled",
    "run_at": "rescheduled",
    "pause": "paused",
    "resume": "resumed",
    "create": "created",
    "enable": "enabled",
    "disable": "disabled",
}


def _verb(action: str) -> str:
    last = action.rsplit(".", 1)[-1].removeprefix("bulk_")
    return _VERBS.get(last, last.replace("_", " "))


def _when(at: datetime | None) -> str:
    if at is None:
        return "unknown"
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _type_title(type_: str | None) -> str:
    if not type_:
        return "Unknown job type"
    spec = registry.get(type_)
    return spec.title if spec is not None and spec.title else type_


def _titled(type_: str | None) -> str:
    """A job type's title for a headline, set apart in its own direction (:func:`isolated`): a title, or
    the type name of a type this process does not know, is text beside our words, and one holding U+202E
    would reverse the rest of the headline."""
    return isolated(_type_title(type_))


def _attempts(p: dict[str, Any]) -> str | None:
    if p.get("attempts") is None:
        return None
    if p.get("max_attempts"):
        return f"{p['attempts']} of {p['max_attempts']}"
    return str(p["attempts"])


def _span(secs: Any) -> str:
    try:
        value = float(secs)
    except (TypeError, ValueError):
        return "few minutes"
    if value < 120:
        return f"{value:g} s"
    return f"{value / 60:.4g} min" if value < 7200 else f"{value / 3600:.4g} h"


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value)
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class _Row:
    """What every kind's message is made from: the payload (always a dict) and the common facts."""

    p: dict[str, Any]
    base: str
    """``JOBDESK_BASE_URL`` without a trailing slash."""
    when: Fact
    owner: Fact
    owner_email: str | None
    link_secret: str | None = None
    """The server's secret, to sign a step's one-click approval link (none: the job page instead)."""

    def job_link(self, job_id: Any) -> str:
        return f"{self.base}/jobs/{quote(str(job_id))}"

    def pipeline_link(self, pipeline_id: Any) -> str:
        return f"{self.base}/pipelines/{quote(str(pipeline_id))}"

    def job_facts(self) -> list[Fact]:
        p = self.p
        facts = []
        if p.get("job_id"):
            facts.append(Fact("Job", str(p["job_id"]), "link", self.job_link(p["job_id"])))
        if p.get("title"):
            facts.append(Fact("Label", one_line(p["title"]), "literal"))
        if p.get("type"):
            facts.append(Fact("Type", str(p["type"]), "literal"))
        return facts


def _first_url(facts: list[Fact]) -> str | None:
    return facts[0].url if facts and facts[0].url else None


# --- one builder per kind ---------------------------------------------------------------------------


def _failed(kind: str, row: _Row) -> Message:
    p = row.p
    facts = [*row.job_facts(), row.owner]
    if _attempts(p):
        facts.append(Fact("Attempts", _attempts(p) or ""))
    facts.append(row.when)
    note = None
    if p.get("worker_lost"):
        note = "Its worker was lost (it crashed or was killed) during the last attempt."
    elif p.get("attempts") and p.get("max_attempts") and p["attempts"] < p["max_attempts"]:
        note = "Not retried: the error was marked permanent."
    return Message(
        kind,
        "❌",
        f"Job failed: {_titled(p.get('type'))}",
        tuple(facts),
        error=p.get("error"),
        error_size=p.get("error_size"),
        note=note,
        url=_first_url(facts),
    )


def _pipeline_failed(kind: str, row: _Row) -> Message:
    p = row.p
    step = _dict(p.get("step"))
    url = row.pipeline_link(p["pipeline_id"]) if p.get("pipeline_id") else None
    facts = []
    if p.get("pipeline_id"):
        facts.append(Fact("Pipeline", str(p["pipeline_id"]), "link", url))
    if p.get("name"):
        facts.append(Fact("Name", one_line(p["name"]), "literal"))
    if p.get("template"):
        facts.append(Fact("Template", str(p["template"]), "literal"))
    if step.get("key"):
        facts.append(Fact("Failed step", one_line(step["key"]), "literal"))
    if step.get("job_id"):
        facts.append(Fact("Step job", str(step["job_id"]), "link", row.job_link(step["job_id"])))
    if step.get("type"):
        facts.append(Fact("Step type", f"{_type_title(step['type'])} ({step['type']})", "literal"))
    facts.append(row.owner)
    if _attempts(step):
        facts.append(Fact("Attempts", _attempts(step) or ""))
    facts.append(row.when)
    return Message(
        kind,
        "❌",
        "Pipeline failed" + (f": {_titled(step['type'])} step failed" if step.get("type") else ""),
        tuple(facts),
        error=step.get("error"),
        error_size=step.get("error_size"),
        note="Its remaining steps were cancelled." if step else None,
        url=url,
    )


def _approval_needed(kind: str, row: _Row) -> Message:
    p = row.p
    facts = row.job_facts()
    if p.get("pipeline_id"):
        facts.append(Fact("Pipeline", str(p["pipeline_id"]), "link", row.pipeline_link(p["pipeline_id"])))
    if p.get("step_key"):
        facts.append(Fact("Step", one_line(p["step_key"]), "literal"))
    facts += [row.owner, row.when]
    url = _first_url(facts)
    note = "An admin can approve or reject it on the job's page."
    if row.link_secret and p.get("job_id"):
        url = approval_link(row.base, row.link_secret, p["job_id"])
        facts.append(Fact("Decide", "Approve or reject", "link", url))
        days = LINK_TTL_SECONDS // 86400
        note = f"Its approvers can decide through the link (sign-in needed; it works for {days} days)."
    waiting = "Still waiting for approval" if p.get("reminder") else "Waiting for approval"
    return Message(kind, "✋", f"{waiting}: {_titled(p.get('type'))}", tuple(facts), note=note, url=url)


_TARGET_NOUNS = {"job_type": "job type", "user": "user", "schedule": "schedule", "pipeline": "pipeline"}
"""How an admin notice names what was acted on, by the audit's ``target_type``."""
_TARGET_LABELS = {"user": "email", "schedule": "name"}
"""The detail that names a single target in words (shown with its id)."""
_ACTION_PHRASES = {
    "job_type.limits": "limits of {what} changed",
    "user.create": "user account created",
    "user.enable": "user account enabled",
    "user.disable": "user account disabled",
    "user.release_jobs": "held jobs of a user released",
    "user.cancel_jobs": "held jobs of a user cancelled",
    "schedule.skip": "schedule firing skipped",
    "schedule.invalid": "schedule defined in code refused",
    "user.make_admin": "admin rights granted to a user",
    "user.revoke_admin": "admin rights of a user revoked",
    "token.create": "API token issued for a user",
    "token.revoke": "API token of a user revoked",
}
"""Headlines that do not read as "<target> <verb>" (``{what}`` names the targets, e.g. "job type
noop")."""


def _admin_action(kind: str, row: _Row) -> Message:
    p = row.p
    target_type = str(p.get("target_type") or "job")
    if target_type == "job":
        return _admin_job_action(kind, row)
    return _admin_other_action(kind, row, target_type)


def _admin_facts(p: dict[str, Any]) -> list[Fact]:
    return [
        Fact("Admin", one_line(p.get("admin") or "unknown"), "literal"),
        Fact("Action", one_line(p.get("action") or "unknown"), "literal"),
    ]


def _admin_tail(p: dict[str, Any], row: _Row) -> list[Fact]:
    facts = []
    if p.get("outcome") and p["outcome"] != "ok":
        facts.append(Fact("Outcome", one_line(p["outcome"]), "literal"))
    if p.get("detail"):
        facts.append(Fact("Details", one_line(json_text(p["detail"])), "literal"))
    facts.append(row.when)
    return facts


def _admin_job_action(kind: str, row: _Row) -> Message:
    """An action on jobs: how many, and which (linked when it is one)."""
    p = row.p
    count = int(p.get("count") or 0)
    ids = [str(i) for i in p.get("job_ids") or []]
    facts = [*_admin_facts(p), Fact("Jobs", str(count))]
    url = None
    if count == 1 and len(ids) == 1:
        url = row.job_link(ids[0])
        facts.append(Fact("Job", ids[0], "link", url))
    elif ids:
        shown = ", ".join(ids[:5]) + (f" and {count - 5} more" if count > 5 else "")
        facts.append(Fact("Job ids", one_line(shown), "literal"))
    facts += _admin_tail(p, row)
    return Message(
        kind,
        "🛠",
        f"Admin action: {plural(count, 'job')} {_verb(str(p.get('action') or ''))}",
        tuple(facts),
        url=url,
    )


def _admin_other_action(kind: str, row: _Row, target_type: str) -> Message:
    """An action on job types, users, schedules or a pipeline: the headline names the kind of target
    (and a job type by name, which is code, not user text); the targets are facts shown as code."""
    p = row.p
    action = str(p.get("action") or "")
    targets = [str(t) for t in p.get("targets") or []]
    noun = _TARGET_NOUNS.get(target_type, target_type.replace("_", " "))
    if target_type == "job_type" and targets == ["*"]:
        what = "every job type"
    elif target_type == "job_type" and len(targets) == 1:
        what = f"job type {isolated(one_line(targets[0], 100))}"
    elif len(targets) == 1:
        what = noun
    else:
        what = plural(len(targets), noun)
    phrase = _ACTION_PHRASES.get(action, "{what} " + _verb(action)).format(what=what)
    detail = _dict(p.get("detail"))
    facts = _admin_facts(p)
    url = None
    if target_type == "pipeline" and len(targets) == 1:
        url = row.pipeline_link(targets[0])
        facts.append(Fact("Pipeline", targets[0], "link", url))
        if p.get("count"):
            facts.append(Fact("Jobs", str(int(p.get("count") or 0))))
    elif targets:
        label = detail.get(_TARGET_LABELS.get(target_type, "")) if len(targets) == 1 else None
        shown = f"{label} ({targets[0]})" if label else ", ".join(targets[:5])
        facts.append(Fact(noun.capitalize() + ("s" if len(targets) > 1 else ""), one_line(shown), "literal"))
    facts += _admin_tail(p, row)
    return Message(kind, "🛠", one_line(f"Admin action: {phrase}"), tuple(facts), url=url)


_SUMMARY_FACTS = ("Type", "Step type", "Admin", "Action", "Template")
"""Facts of the grouped alerts' sample that a summary repeats (what they all have in common)."""


def _summary(kind: str, row: _Row) -> Message:
    """A grouping window's "…and N more like this" message, described through a sample of its alerts."""
    p = row.p
    of_kind = str(p.get("of_kind") or "failed")
    sample = describe(
        of_kind, p.get("sample") or {}, created_at=None, owner_email=row.owner_email, base_url=row.base
    )
    count = int(p.get("count") or 0)
    between = f"{_when(_parse_time(p.get('first_at')))} and {_when(_parse_time(p.get('last_at')))}"
    facts = [Fact("Between", between)]
    if of_kind == "admin_action" and (p.get("sample") or {}).get("target_type", "job") == "job":
        facts.append(Fact("Jobs", str(int(p.get("jobs") or 0))))
    facts += [f for f in sample.facts if f.label in _SUMMARY_FACTS]
    examples = [str(i) for i in p.get("examples") or []]
    url = None
    if examples and of_kind in ("failed", "approval_needed"):
        url = row.job_link(examples[-1])
        facts.append(Fact("Latest", examples[-1], "link", url))
    elif examples and of_kind == "pipeline_failed":
        url = row.pipeline_link(examples[-1])
        facts.append(Fact("Latest", examples[-1], "link", url))
    first_line = (sample.error or "").strip().splitlines()[0] if (sample.error or "").strip() else None
    return Message(
        kind,
        "🔁",
        f"…and {count} more like this: {sample.headline}",
        tuple(facts),
        error=first_line,
        note=f"Alerts like this are grouped: at most one message every {_span(p.get('window_secs'))}.",
        url=url,
    )


def _test(kind: str, row: _Row) -> Message:
    return Message(
        kind,
        "🔔",
        "Test alert from Jobdesk",
        (Fact("Sent by", one_line(row.p.get("admin") or "an admin"), "literal"), row.when),
        note="If you can read this, Jobdesk's alerts reach this channel.",
        url=f"{row.base}/admin/alerts",
    )


_BUILDERS: dict[str, Callable[[str, _Row], Message]] = {
    "failed": _failed,
    "pipeline_failed": _pipeline_failed,
    "approval_needed": _approval_needed,
    "admin_action": _admin_action,
    "summary": _summary,
    "test": _test,
}


def describe(
    kind: str,
    payload: dict[str, Any],
    *,
    created_at: datetime | None,
    owner_email: str | None,
    base_url: str,
    link_secret: str | None = None,
) -> Message:
    """The message for one outbox row (any kind, including ``summary`` and ``test``). Never raises on a
    payload with missing or odd fields: what is missing is left out."""
    p = _dict(payload)
    row = _Row(
        p,
        base_url.rstrip("/"),
        when=Fact("When", _when(created_at)),
        owner=Fact("Owner", owner_email or f"user {p.get('user_id', '?')}", "literal"),
        owner_email=owner_email,
        link_secret=link_secret,
    )
    build = _BUILDERS.get(kind)
    if build is None:
        return Message(kind, "ℹ️", f"Jobdesk alert ({kind})", (row.when,), error=one_line(json_text(p), 1000))
    return build(kind, row)
