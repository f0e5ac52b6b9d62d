"""Standalone worker: ``python worker.py`` does the same as ``jobdesk worker`` (issue 2 §6)."""

from __future__ import annotations

import sys

from app.settings import SettingsError, get_settings
from app.worker.runner import run_standalone

if __name__ == "__main__":
    try:
        settings = get_settings()
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
    sys.exit(run_standalone(settings))
