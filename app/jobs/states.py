"""The job state machine's rules: statuses, allowed transitions and who may cause each.

Pure data, no I/O. The queue package (:mod:`app.jobs.queue`) is the only code that applies these rules
to the database, and every SQL statement there is a compare-and-set on the ``from`` status listed here.
The UI also uses :func:`can` to decide which buttons to show.

The statuses are ``queued``, ``in_progress``, ``completed``, ``failed``, ``cancelled`` and
``waiting_approval`` (the names the API and the database use). A job waiting for earlier pipeline steps
or for its ``run_at`` stays ``queued``: a separate status would be one more transition to race on; the
UI words it "Waiting for earlier steps" / "Scheduled". A job held because its owner was disabled also
stays ``queued``, with ``is_active = false`` (the claim takes only active rows): see :data:`HOLDS`.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    QUEUED = "queued"  #: waiting to be claimed; enters by enqueue, retry, rescue, rerun, shutdown release
    IN_PROGRESS = "in_progress"  #: claimed by one worker holding a lease; leaves by that worker or the sweep
    COMPLETED = "completed"  #: terminal: the processor succeeded (or an admin approved its result)
    FAILED = "failed"  #: terminal: attempts exhausted, permanent error, or rejected; owner or admin may retry
    CANCELLED = "cancelled"  #: terminal: cancelled by a person, or because an upstream step cannot complete
    WAITING_APPROVAL = "waiting_approval"  #: ran; its result waits for an admin's decision


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})
LIVE = frozenset({Status.QUEUED, Status.IN_PROGRESS, Status.WAITING_APPROVAL})


class Actor(StrEnum):
    WORKER = "worker"  #: the worker holding the job's lease
    OWNER = "owner"  #: the user who enqueued the job
    ADMIN = "admin"  #: any admin
    SWEEP = "sweep"  #: the rescue sweep (expired leases)
    SYSTEM = "system"  #: pipeline propagation and other automatic consequences


# (from, to) -> actors allowed to cause it, and what the transition means.
TRANSITIONS: dict[tuple[Status, Status], tuple[frozenset[Actor], str]] = {
    (Status.QUEUED, Status.IN_PROGRESS): (frozenset({Actor.WORKER}), "claim"),
    (Status.QUEUED, Status.CANCELLED): (
        frozenset({Actor.OWNER, Actor.ADMIN, Actor.SYSTEM}),
        "cancel before it ran; or an upstream step failed",
    ),
    (Status.IN_PROGRESS, Status.COMPLETED): (frozenset({Actor.WORKER}), "finished successfully"),
    (Status.IN_PROGRESS, Status.WAITING_APPROVAL): (frozenset({Actor.WORKER}), "finished; needs approval"),
    (Status.IN_PROGRESS, Status.QUEUED): (
        frozenset({Actor.WORKER, Actor.SWEEP}),
        "failed attempt with attempts left; lease expired; released at shutdown",
    ),
    (Status.IN_PROGRESS, Status.FAILED): (
        frozenset({Actor.WORKER, Actor.SWEEP}),
        "attempts exhausted, permanent error, or lease expired on the last attempt",
    ),
    (Status.IN_PROGRESS, Status.CANCELLED): (
        frozenset({Actor.WORKER, Actor.SWEEP}),
        "the worker acknowledged a cancel request (or the sweep found a cancelled job's lease expired)",
    ),
    (Status.WAITING_APPROVAL, Status.COMPLETED): (frozenset({Actor.ADMIN}), "approved"),
    (Status.WAITING_APPROVAL, Status.FAILED): (frozenset({Actor.ADMIN}), "rejected"),
    (Status.WAITING_APPROVAL, Status.QUEUED): (frozenset({Actor.ADMIN}), "rerun requested"),
    (Status.WAITING_APPROVAL, Status.CANCELLED): (
        frozenset({Actor.OWNER, Actor.ADMIN, Actor.SYSTEM}),
        "cancelled while waiting for approval",
    ),
    (Status.FAILED, Status.QUEUED): (
        frozenset({Actor.OWNER, Actor.ADMIN}),
        "manual retry with a fresh attempt budget (owners fix their own failures)",
    ),
    (Status.CANCELLED, Status.QUEUED): (
        frozenset({Actor.SYSTEM}),
        "re-opened because the upstream job that cancelled it was retried",
    ),
}


# Holding is not a change of status: a ``queued`` job is held (``is_active`` false, not claimable) or
# released (``is_active`` true again), each with its event. A held job leaves by release, or by cancel
# (``queued`` → ``cancelled`` above, owner or admin). Event kind -> actors allowed, and what it means.
HOLDS: dict[str, tuple[frozenset[Actor], str]] = {
    "held": (frozenset({Actor.ADMIN, Actor.SYSTEM}), "its owner was disabled (or is, for a next job)"),
    "released": (frozenset({Actor.ADMIN}), "an admin let a held job run again"),
}


def can(from_status: str, to_status: str, actor: Actor) -> bool:
    """Whether ``actor`` may move a job from ``from_status`` to ``to_status``."""
    try:
        rule = TRANSITIONS.get((Status(from_status), Status(to_status)))
    except ValueError:
        return False
    return rule is not None and actor in rule[0]


def sources(to_status: Status, actor: Actor) -> tuple[Status, ...]:
    """The statuses from which ``actor`` may move a job to ``to_status``, in declaration order.

    :mod:`app.jobs.queue` builds its ``WHERE status IN (…)`` guards from this, so the table above is the
    single source of the rules.
    """
    return tuple(f for (f, t), (actors, _) in TRANSITIONS.items() if t == to_status and actor in actors)


def is_terminal(status: str) -> bool:
    return status in TERMINAL


# Plain words for people. ``Cancelling`` and ``Scheduled``/``Waiting for earlier steps``
# are derived from other columns; see :func:`label`.
LABELS = {
    Status.QUEUED: "Waiting",
    Status.IN_PROGRESS: "Running",
    Status.COMPLETED: "Done",
    Status.FAILED: "Failed",
    Status.CANCELLED: "Cancelled",
    Status.WAITING_APPROVAL: "Needs approval",
}


def not_in(status: str, wanted: str, *, is_active: bool = True) -> str:
    """Why an action that needs a job ``wanted`` ("failed", "waiting for approval") cannot act on one in
    ``status``, the status in the words its page shows: "it is Done, not failed". The queue's refusal
    says it after "Cannot retry job …: " (the API's 409) and a page after "Nothing changed: ", so the two
    give the same reason in the same words."""
    return f"it is {label(status, is_active=is_active)}, not {wanted}"


def not_cancellable(status: str, *, is_active: bool = True) -> str:
    """Why a cancel cannot act on a job in ``status`` (finished, or running with a cancel request already),
    the status in the words its page shows: "it has already finished (Done)", "it is already being
    stopped". As :func:`not_in`'s, the queue's refusal says it after "Cannot cancel job …: " (the API's
    409) and a page after "Nothing changed: "."""
    if status == Status.IN_PROGRESS and not is_active:
        return "it is already being stopped"
    return f"it has already finished ({label(status, is_active=is_active)})"


def label(
    status: str,
    *,
    is_active: bool = True,
    pending_parents: int = 0,
    scheduled: bool = False,
    retrying: bool = False,
) -> str:
    """The status in plain words: ``Cancelling`` for a running job with a cancel request,
    ``Waiting for earlier steps`` while dependencies are unfinished, ``Retrying`` after a failed attempt
    (so a job that keeps failing never looks like a harmless "Waiting"), ``Scheduled`` before ``run_at``,
    ``Held`` for a waiting job whose owner was disabled."""
    if status == Status.IN_PROGRESS and not is_active:
        return "Cancelling"
    if status == Status.QUEUED:
        if not is_active:
            return "Held"
        if pending_parents:
            return "Waiting for earlier steps"
        if retrying:
            return "Retrying"
        if scheduled:
            return "Scheduled"
    return LABELS.get(Status(status), status) if status in Status._value2member_map_ else status
