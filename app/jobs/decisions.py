"""Who decided an approval step, and when: the words both the page and the API use when a second admin
comes too late ("already approved by ann@example.com at …").

The decision is read from the job's events (:func:`app.jobs.queue.transitions.approve` and its siblings
write one naming the admin); :func:`decision_words` is the one place the sentence is built, with the
time in ISO 8601 (the API) or in a person's time zone as the pages show times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from app.formatting import format_localtime, zone

DONE_WORDS = {"approved": "approved", "rejected": "rejected", "rerun_requested": "sent back to run again"}
"""An approval event's kind as a past participle."""


@dataclass(frozen=True)
class Decision:
    """An earlier decision on a step: ``kind`` (``approved``, ``rejected``, ``rerun_requested``), ``by``
    (the admin's e-mail address; ``user 3`` once the account is gone) and ``at`` (the event's time)."""

    kind: str
    by: str
    at: datetime


def decided_by(actor: str, email: str | None) -> str:
    """The person behind an event's ``actor`` (``user:3``), by e-mail when the account still exists."""
    if email:
        return email
    kind, _, rest = actor.partition(":")
    return f"user {rest}" if kind == "user" and rest else "Jobdesk"


def decision_words(decision: Decision, timezone: str | None = None) -> str:
    """``already approved by ann@example.com at 2026-11-29T19:25:04+00:00`` — with ``timezone`` (an
    IANA name, a person's setting) the time reads as on the pages: ``29 Nov 2026, 20:25 CET``."""
    done = DONE_WORDS.get(decision.kind, decision.kind.replace("_", " "))
    if timezone is None:
        at = decision.at.astimezone(UTC).isoformat(timespec="seconds")
    else:
        at = format_localtime(decision.at, zone(timezone))
    return f"already {done} by {decision.by} at {at}"
