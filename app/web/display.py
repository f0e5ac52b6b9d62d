"""What the job and pipeline pages show, computed from rows: plain-word statuses, errors, event history
lines, and the fingerprints that let polls answer "nothing changed". A job's result and input as
readable items (values, tables, links, files) are :mod:`app.web.result_display`'s.

Pure functions over row mappings (no I/O), shared by :mod:`app.web.jobs` and :mod:`app.web.pipelines`,
so the full page, its htmx fragment and the list cells all say the same thing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from app.dbclock import db_time
from app.digits import whole
from app.formatting import local_moments, zone
from app.jobs import states
from app.jobs.error_text import error_text_for, upstream_of, viewer_is_admin
from app.jobs.states import Status
from app.web.forms import humanize

ERROR_SUMMARY_MAX = 300
"""Characters of an error's first line shown in plain words; the full text is folded."""


def now_utc() -> datetime:
    """Now on the database's clock (:func:`app.dbclock.db_time`), which wrote every time a page compares
    with it (``run_at``, a step's wait): on the web host's own, a host an hour fast showed a job due in
    half an hour as "Waiting" as if due, and one slow showed a due job as "Scheduled"."""
    return db_time()


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def fingerprint(*parts: Any) -> str:
    """A short hex digest of ``parts``: a poll sends it back (``?v=…``) and gets 204 while it matches."""
    return hashlib.blake2s(repr(parts).encode(), digest_size=6).hexdigest()


# --- jobs ---------------------------------------------------------------------------------------------

STATUS_WORDS = {str(k.value): v for k, v in states.LABELS.items()}
"""A stored status in plain words, without the derived labels (Scheduled, Cancelling, …)."""

STATUS_CLASS = {
    "Waiting": "waiting",
    "Scheduled": "waiting",
    "Waiting for earlier steps": "waiting",
    "Retrying": "approval",
    "Running": "running",
    "Cancelling": "running",
    "Done": "done",
    "Failed": "failed",
    "Cancelled": "cancelled",
    "Needs approval": "approval",
}


def job_state(row: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The derived state of a job row (any column subset with ``status``, ``is_active``,
    ``pending_parents``, ``run_at``, ``attempts``, ``max_attempts``, ``progress``):

    ``label`` (plain words: Waiting, Scheduled, Retrying, Running, Done, Failed, Cancelled, Cancelling,
    Needs approval, Waiting for earlier steps), ``css`` (badge class), ``terminal``, ``scheduled`` (waiting for
    its ``run_at``), ``retrying`` (a failed attempt; the next try is at ``run_at``),
    ``percent`` (0–100 or ``None``), ``cancelling``, ``version`` (poll fingerprint).
    """
    now = now or now_utc()
    status = row["status"]
    run_at = _aware(row.get("run_at"))
    due_later = status == Status.QUEUED and run_at is not None and run_at > now
    attempts = row.get("attempts") or 0
    pending = row.get("pending_parents") or 0
    retrying = bool(due_later and attempts > 0 and not pending)
    scheduled = bool(due_later and attempts == 0 and not pending)
    label = states.label(
        status,
        is_active=row.get("is_active", True),
        pending_parents=pending,
        scheduled=scheduled,
        retrying=status == Status.QUEUED and attempts > 0 and not pending,
    )
    progress = row.get("progress")
    percent = None if progress is None else max(0, min(100, round(float(progress) * 100)))
    return {
        "label": label,
        "css": STATUS_CLASS.get(label, "waiting"),
        "terminal": states.is_terminal(status),
        "scheduled": scheduled,
        "retrying": retrying,
        "cancelling": status == Status.IN_PROGRESS and not row.get("is_active", True),
        "percent": percent,
        "version": fingerprint(
            status,
            row.get("is_active"),
            pending,
            attempts,
            progress,
            row.get("progress_message"),
            str(row.get("updated_at")),
            due_later,
        ),
    }


def job_title(row: Mapping[str, Any], spec: Any) -> str:
    """The job's own title, else its type's title, else the type name."""
    return row.get("title") or (spec.title if spec is not None else None) or row["type"]


# --- errors -------------------------------------------------------------------------------------------


def job_for(job: Mapping[Any, Any], viewer: Any) -> dict[str, Any]:
    """A job's fields (the API's shape) with ``error_message`` as ``viewer`` may read it."""
    return {**job, "error_message": error_text_for(job.get("error_message"), viewer)}


def event_for(event: Mapping[Any, Any], viewer: Any) -> dict[str, Any]:
    """A ``job_events`` row with its ``message`` (and a retry's ``data.previous_error``) as ``viewer``
    may read them."""
    out = dict(event)
    out["message"] = error_text_for(out.get("message"), viewer)
    data = out.get("data")
    if isinstance(data, dict) and isinstance(data.get("previous_error"), str):
        out["data"] = {**data, "previous_error": error_text_for(data["previous_error"], viewer)}
    return out


def error_summary(
    row: Mapping[str, Any], message: str | None, viewer: Any = None, upstream: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The error in plain words: ``{"headline", "reason", "technical", "upstream"}`` (``technical`` is
    the text the reason does not already show — a traceback, the rest of a long text — shown folded, or
    ``None``), or ``None`` when there is nothing to say. ``viewer``: who reads it
    (:func:`error_text_for`; ``None`` reads what a job's owner reads). ``upstream``: the step whose
    failure cancelled this one (``{"job_id", "title"}``), named and linked instead of its id."""
    status = row["status"]
    text = (error_text_for(message, viewer) or "").strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > ERROR_SUMMARY_MAX:
        first = first[:ERROR_SUMMARY_MAX] + "…"
    attempts = row.get("attempts") or 0
    technical = text if text and text != first else None
    if status == Status.FAILED:
        if text.startswith("rejected: "):
            return {
                "headline": "An administrator rejected the result.",
                "reason": text.removeprefix("rejected: ")[:ERROR_SUMMARY_MAX],
                "technical": None,
            }
        if text.startswith("lease expired"):
            return {
                "headline": "The worker running this job stopped unexpectedly, and no attempts were left.",
                "reason": None,
                "technical": text,
            }
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
        return {
            "headline": f"It did not work {tries}.".replace("  ", " ").replace(" .", "."),
            "reason": first or None,
            "technical": technical,
        }
    if status == Status.CANCELLED:
        cause = upstream_of(message)
        if cause is not None or text.startswith(("upstream ", "an earlier step ")):
            failed = (cause[1] if cause else text).endswith("failed")
            return {
                "headline": "An earlier step "
                + ("failed" if failed else "did not finish")
                + ", so this one did not run.",
                "reason": None,
                "technical": text if viewer_is_admin(viewer) else None,
                "upstream": {**upstream, "failed": failed} if upstream else None,
            }
        who = "by an administrator" if text.startswith("cancelled by an admin") else ""
        reason = text.split(": ", 1)[1] if ": " in text and text.startswith("cancelled by") else None
        return {
            "headline": f"It was cancelled {who}.".replace(" .", "."),
            "reason": reason,
            "technical": None if text.startswith("cancelled by") else (text or None),
        }
    if text and status == Status.QUEUED and attempts:
        return {"headline": "The last attempt did not work.", "reason": first, "technical": technical}
    return None


# --- history ------------------------------------------------------------------------------------------

EVENT_WORDS = {
    "enqueued": "Submitted",
    "claimed": "Started",
    "completed": "Finished",
    "waiting_approval": "Finished; waiting for approval",
    "retry_scheduled": "An attempt did not work; it will try again",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "cancel_requested": "Asked to stop",
    "released": "Put back in the queue (a worker was shutting down)",
    "rescued": "Its worker was lost",
    "reopened": "Waiting again (an earlier step was retried)",
    "retried": "Retried with a fresh set of attempts",
    "run_again": "Run again as a new job",
    "approved": "Approved",
    "rejected": "Rejected",
    "rerun_requested": "Sent back to run again",
    "rescheduled": "Rescheduled",
}


def actor_words(actor: str, viewer: Any, emails: Mapping[int, str]) -> str:
    """``user:3`` → ``you`` / an email (admins) / ``an administrator``; ``worker:…`` → ``a worker``;
    ``job:…`` → ``an earlier step``; ``system:…`` → ``Jobdesk``."""
    kind, _, rest = (actor or "").partition(":")
    if kind == "user":
        try:
            uid = int(rest)
        except ValueError:
            return "someone"
        if viewer is not None and uid == viewer.id:
            return "you"
        if viewer is not None and viewer.is_admin:
            return emails.get(uid, f"user {uid}")
        return "an administrator"
    if kind == "worker":
        return "a worker"
    if kind == "job":
        return "an earlier step"
    return "Jobdesk"


def event_line(event: Mapping[str, Any], viewer: Any, emails: Mapping[int, str]) -> dict[str, Any]:
    """One history line: ``{"at", "what", "by", "note", "technical"}``."""
    kind = event["kind"]
    data = event.get("data") or {}
    what = EVENT_WORDS.get(kind, humanize(kind))
    if kind == "claimed" and isinstance(data, dict) and data.get("attempt"):
        what = f"Started (attempt {data['attempt']})"
    if kind == "rescued" and event.get("to_status"):
        after = {
            "queued": "it will try again",
            "failed": "no attempts were left",
            "cancelled": "it was cancelled",
        }
        what = f"Its worker was lost; {after.get(event['to_status'], event['to_status'])}"
    message = (error_text_for(event.get("message"), viewer) or "").strip()
    note, technical = message, None
    if len(message) > 200 or "\n" in message:
        note = message.splitlines()[0][:200] + "…"
        technical = message
    cause = upstream_of(event.get("message")) if kind == "cancelled" else None
    if cause is not None:
        # in words, as the job's own page says it: "upstream images.thumbnail 01a2… failed" meant
        # nothing to a non-engineer; an admin can still unfold the stored text
        note = "An earlier step " + ("failed" if cause[1] == "failed" else "did not finish") + "."
        technical = message if viewer_is_admin(viewer) else None
    if kind in ("enqueued", "claimed", "completed"):
        note = note or ""
    # a moment the queue wrote into the message ("run at 2027-11-07T01:30:00-04:00") in the viewer's zone
    note = local_moments(note, zone(getattr(viewer, "timezone", None)))
    return {
        "id": event.get("id"),
        "at": event["at"],
        "what": what,
        "by": actor_words(event.get("actor") or "", viewer, emails),
        "note": note,
        "technical": technical,
        "step": event.get("step_key"),
        "job_id": event.get("job_id"),
    }


def user_ids_in(events: Sequence[Mapping[str, Any]]) -> list[int]:
    ids = set()
    for e in events:
        kind, _, rest = (e.get("actor") or "").partition(":")
        if kind == "user" and (user_id := whole(rest)) is not None:
            ids.add(user_id)
    return sorted(ids)


# --- pipelines ----------------------------------------------------------------------------------------

PIPELINE_LABELS = {
    "running": "Running",
    "waiting_approval": "Needs approval",
    "completed": "Done",
    "failed": "Failed",
    "cancelled": "Cancelled",
}


def pipeline_state(p: Mapping[str, Any], steps: list[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """``{"label", "css", "finished", "started", "version"}`` of a pipeline row with its ``started``
    column (:func:`app.pipelines.started_column`) or of an :func:`app.pipelines.get` view.

    A ``running`` pipeline none of whose steps has started reads "Waiting", as each of its steps and a
    job in its place do: "Running" with 0% read as stuck while it waited for a worker. A pipeline is
    *finished* once no step is live (``finished_at`` set): a failed pipeline may still have independent
    steps running, and its page keeps polling until they end.
    """
    status = p["status"]
    started = status != "running" or bool(p["started"])
    label = PIPELINE_LABELS.get(status, humanize(status)) if started else "Waiting"
    finished = p.get("finished_at") is not None
    if status == "failed" and not finished:
        label = "Failed (other steps are still finishing)"
    css = STATUS_CLASS.get(label, STATUS_CLASS.get(PIPELINE_LABELS.get(status, ""), "waiting"))
    step_parts = tuple(
        (
            str(s.get("job_id")),
            s.get("status"),
            s.get("is_active"),
            s.get("pending_parents"),
            s.get("attempts"),
            s.get("progress"),
            s.get("progress_message"),
            str(s.get("run_at")),
        )
        for s in (steps or [])
    )
    return {
        "label": label,
        "css": css,
        "finished": finished,
        "started": started,
        # ``started`` turns when a worker claims the first step, which leaves the pipeline's row as it was
        "version": fingerprint(
            status, started, str(p.get("finished_at")), str(p.get("updated_at")), step_parts
        ),
    }
