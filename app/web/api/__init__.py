"""The JSON API, documented at ``/schema``: one module per resource.

* :mod:`.me` — ``/api/me``;
* :mod:`.approvals` — ``/api/approvals`` (the steps you may decide, and deciding them);
* :mod:`.jobs` — ``/api/jobs`` (enqueue, read, list, history, every action, bulk);
* :mod:`.pipelines` — ``/api/pipelines``;
* :mod:`.batches` — ``/api/batches``;
* :mod:`.job_types` — ``/api/job-types``, ``/api/pipeline-templates`` and the job types' controls;
* :mod:`.schedules` — ``/api/schedules``;
* :mod:`.users` — ``/api/users/{id}/unlock``;
* :mod:`.held_jobs` — ``/api/users/{id}/usage``, ``/release-jobs``, ``/cancel-jobs``.

(Files are served by :mod:`app.web.files`.) API routes authenticate with ``Authorization: Bearer
<token>`` only — never the session cookie — and are therefore exempt from CSRF. Owners see and act on
their own jobs and pipelines; another user's id gets the same 404 as an unknown id; admins see and act
on all. Errors are ``{"detail": …}`` (plus ``errors`` per field for 422) with a 4xx status, never a 500
for bad input. Every change goes through :mod:`app.actions`, as the pages' changes do.
"""

from litestar import Router

from app.web.api.approvals import ApprovalsApiController
from app.web.api.batches import BatchesApiController
from app.web.api.held_jobs import HeldJobsApiController
from app.web.api.job_types import JobTypeControlsApiController, JobTypesApiController
from app.web.api.jobs import JobsApiController
from app.web.api.me import AccountApiController
from app.web.api.pipelines import PipelinesApiController
from app.web.api.schedules import SchedulesApiController
from app.web.api.users import UsersApiController

ControlsApiController = Router(
    path="/", route_handlers=[JobTypeControlsApiController, SchedulesApiController, HeldJobsApiController]
)
"""The operator controls (job types' pause, resume and limits; schedules; a person's limits and held
jobs), registered as one unit."""

ROUTE_HANDLERS = [
    AccountApiController,
    ApprovalsApiController,
    JobsApiController,
    PipelinesApiController,
    BatchesApiController,
    JobTypesApiController,
    JobTypeControlsApiController,
    SchedulesApiController,
    HeldJobsApiController,
    UsersApiController,
]
"""Every API controller, for an app that registers them one by one."""

__all__ = [
    "ROUTE_HANDLERS",
    "AccountApiController",
    "ApprovalsApiController",
    "BatchesApiController",
    "ControlsApiController",
    "HeldJobsApiController",
    "JobTypeControlsApiController",
    "JobTypesApiController",
    "JobsApiController",
    "PipelinesApiController",
    "SchedulesApiController",
    "UsersApiController",
]
