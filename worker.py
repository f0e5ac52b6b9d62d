"""Standalone worker: ``python worker.py`` does the same as ``jobdesk worker`` (:mod:`app.worker.main`)."""

import sys

from app.cli import main

if __name__ == "__main__":
    main(["worker", *sys.argv[1:]], prog_name="worker.py")
