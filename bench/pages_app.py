"""The app under test for ``bench/pages.py``: Jobdesk exactly as ``jobdesk serve`` builds it (settings from
the environment, in-app worker off) plus one extra route, ``GET /bench/fixed``, a Litestar handler that
returns a fixed string — the baseline measured in the same process and the same run, so the figures
compare Jobdesk with the framework's own floor on the same machine.

    uvicorn --factory pages_app:make_app   (with bench/ on PYTHONPATH)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from litestar import Litestar, MediaType, get

from app.logs import configure_logging
from app.server import create_app
from app.settings import get_settings


@get("/bench/fixed", media_type=MediaType.TEXT, include_in_schema=False, sync_to_thread=False)
def fixed() -> str:
    """The baseline: no database, no template, no session lookup."""
    return "ok"


def make_app() -> Litestar:
    settings = get_settings()
    configure_logging(settings)
    app = create_app(settings)
    app.register(fixed)
    return app
