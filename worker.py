"""Standalone worker: ``python worker.py`` does the same as ``jobdesk worker`` (:mod:`app.worker.main`)."""

import sys

# First, before the command line's imports (a tenth of a second and more): a stop signal from now on is a
# clean stop before the worker starts, not a death (exit -15).
from app.worker.signals import STOP

STOP.install()

from app.cli import main  # noqa: E402

if __name__ == "__main__":
    main(["worker", *sys.argv[1:]], prog_name="worker.py")
