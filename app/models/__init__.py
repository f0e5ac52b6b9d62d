"""Every table of Jobdesk, as SQLAlchemy models; Alembic's ``target_metadata``.

Reading rows is open to any module; writing ``jobs.status`` is reserved to :mod:`app.jobs.queue`
(the state machine), so every status change is a compare-and-set recorded with its event. CHECK
constraints hold each row's shape for its status: a queued row has no lock, a running row has an owner
and a lease deadline, a terminal row has a finish time and no lock. Every time column is ``timestamptz``,
so times mean the same whatever the server's or the session's time zone.
"""

from __future__ import annotations

# Each module's tables join Base.metadata when it is imported: Alembic and the tests see every table.
from app.models import accounts, jobs, operations
from app.models.base import PIPELINE_STATUSES, STATUSES, Base
from app.models.jobs import JOB_EVENTS_STORAGE, JOBS_STORAGE

__all__ = [
    "JOBS_STORAGE",
    "JOB_EVENTS_STORAGE",
    "PIPELINE_STATUSES",
    "STATUSES",
    "Base",
    "accounts",
    "jobs",
    "operations",
]
