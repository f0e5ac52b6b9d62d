"""The questions asked before a single action whose reach has a count: what it touches, how many, and
what will happen — e.g. "Pause images.thumbnail? 37 jobs waiting will not start until you resume."

The counts are read when the page renders (the admin's pause controls, the users list, a pipeline's
page) and the words put in ``hx-confirm``/``data-confirm``; ``static/confirm.js`` shows them in an
in-page ``<dialog>``. Bulk actions count their selection on the server at confirm time instead
(:mod:`app.actions.selection`).
"""

from __future__ import annotations

from typing import Any


def count_of(n: int, word: str, *, capped: bool = False) -> str:
    """``1 job``, ``37 jobs``, ``10,000+ jobs`` (``capped``: at least ``n``)."""
    return f"{n:,}{'+' if capped else ''} {word}{'' if n == 1 and not capped else 's'}"


def pause_type(job_type: str, waiting: int, *, capped: bool = False, all_types: bool = False) -> str:
    """Pausing a job type (``all_types``: every type) with ``waiting`` jobs queued."""
    what = "every job type" if all_types else job_type
    if not waiting:
        return f"Pause {what}? No job is waiting now; new ones will not start until you resume."
    verb = "does" if waiting == 1 and not capped else "do"
    return (
        f"Pause {what}? {count_of(waiting, 'job', capped=capped)} waiting {verb} not start until you resume."
    )


def cancel_pipeline(steps: list[Any]) -> str:
    """Cancelling a pipeline: how many of its steps have not finished, and how many of those are running."""
    unfinished = [s for s in steps if s["status"] not in ("completed", "failed", "cancelled")]
    running = sum(1 for s in unfinished if s["status"] == "in_progress")
    question = f"Cancel this pipeline? {count_of(len(unfinished), 'step')} of {len(steps)} will not finish"
    if running:
        question += f" ({running:,} running now {'is' if running == 1 else 'are'} asked to stop)"
    return question + "."


def held_jobs(email: str, held: int, *, release: bool) -> str:
    """Releasing or cancelling a person's held jobs."""
    jobs, they = count_of(held, "held job"), "It" if held == 1 else "They"
    if release:
        return f"Let {email}'s {jobs} run? {they} {'starts' if held == 1 else 'start'} as workers and limits allow."
    return f"Cancel {email}'s {jobs}? {they} will not run."


def disable_user(email: str, sessions: int, tokens: int) -> str:
    """Disabling an account: its sessions end and its API tokens stop working."""
    return (
        f"Disable {email}? They are signed out of {count_of(sessions, 'session')} and their "
        f"{count_of(tokens, 'API token')} {'stops' if tokens == 1 else 'stop'} working, until enabled again."
    )
