"""The admin console: one controller per page, each for admins only (403 for other users, the sign-in
page for visitors).

* :mod:`.health` — ``/admin``: workers and queue health, pause/resume and limits per job type;
* :mod:`.jobs` — ``/admin/jobs``: every user's jobs, filtered, with row and bulk actions;
* :mod:`.failed` — ``/admin/failed``: failed jobs grouped by type and error, "Retry all in this group";
* :mod:`.users` — ``/admin/users``: accounts and API tokens;
* :mod:`.schedules` — ``/admin/schedules``: periodic jobs and pipelines; :mod:`.schedule_form` — the
  create and edit form (the target's own generated form);
* :mod:`.alerts` — ``/admin/alerts``: alert channels, test sends and recent deliveries;
* :mod:`.audit` — ``/admin/audit``: the audit trail.

The pages read forms and render; every change goes through :mod:`app.actions`, which writes its audit
entry and admin notice in the same transaction. :data:`CONTROLLERS` is what the app mounts.
"""

from app.web.admin.alerts import AlertsAdminController
from app.web.admin.approvals import ApprovalsInboxController
from app.web.admin.audit import AuditController
from app.web.admin.failed import FailedJobsController
from app.web.admin.health import HEALTH_QUERIES, HealthController
from app.web.admin.held_jobs import HeldJobsController
from app.web.admin.jobs import AdminJobsController
from app.web.admin.schedule_form import ScheduleFormController
from app.web.admin.schedules import SchedulesController
from app.web.admin.users import UsersController

CONTROLLERS = [
    AlertsAdminController,
    HealthController,
    UsersController,
    HeldJobsController,
    SchedulesController,
    ScheduleFormController,
    AuditController,
    AdminJobsController,
    FailedJobsController,
    ApprovalsInboxController,
]

__all__ = [
    "CONTROLLERS",
    "ApprovalsInboxController",
    "HEALTH_QUERIES",
    "AdminJobsController",
    "AlertsAdminController",
    "AuditController",
    "FailedJobsController",
    "HealthController",
    "HeldJobsController",
    "ScheduleFormController",
    "SchedulesController",
    "UsersController",
]
