"""The app each web process of ``jobdesk serve --workers N`` builds: uvicorn starts the processes fresh
(``spawn``), so each reads its settings from the environment the ``serve`` command prepared
(``DATABASE_URL`` resolved, the CSRF secret created) and configures its own logging.

Migrations were applied (or refused) by ``serve`` before the processes started, so none of them
migrates; each checks the schema at start-up like any app.
"""

from __future__ import annotations

from litestar import Litestar

from app.logs import configure_logging
from app.server import create_app
from app.settings import get_settings
from app.worker.signals import STOP


def create_app_from_environment() -> Litestar:
    settings = get_settings()
    configure_logging(settings)
    # uvicorn calls this with its signal handlers in place: the in-app worker's go ahead of them. Each
    # signal counts as the first: a Ctrl+C (or a service manager's stop) reaches this process and then
    # the supervisor's SIGTERM does, one request to stop as two signals.
    STOP.chain(repeats=False)
    return create_app(settings, auto_migrate=False)
