"""The queue's data and rules: :mod:`~app.jobs.states` (the state machine's table),
:mod:`~app.jobs.queue` (the only writer of ``jobs.status``), :mod:`~app.jobs.backoff` (retry delays) and
:mod:`~app.jobs.payload` (what job data may be stored)."""

from app.jobs.states import LIVE, TERMINAL, Actor, Status

__all__ = ["LIVE", "TERMINAL", "Actor", "Status"]
