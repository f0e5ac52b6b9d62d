"""Copy the headless-Chromium tests' screenshots from ``tests/artifacts/`` into this folder, reduced to
128 colours (``make screenshots`` runs the browser tests first).

The tests write only to ``tests/artifacts/``, which is not committed: a test run must leave the working
tree as it found it. These copies change only when someone means to refresh them.

    python docs/screenshots/refresh.py [--artifacts tests/artifacts]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: The committed file, and the artifact it is copied from.
SOURCES = {
    "account-dark.png": "account-dark.png",
    "account-desktop.png": "account-desktop.png",
    "account-phone.png": "account-phone.png",
    "admin-approvals.png": "approvals-inbox-desktop.png",
    "admin-approvals-phone.png": "approvals-inbox-phone.png",
    "admin-audit.png": "admin-audit.png",
    "admin-failed-desktop.png": "admin-failed-desktop.png",
    "admin-health.png": "admin-health.png",
    "admin-jobs-bulk-confirm.png": "admin-jobs-bulk-confirm.png",
    "admin-jobs-desktop.png": "admin-jobs-desktop.png",
    "admin-jobs-phone.png": "console-admin-jobs-phone.png",
    "admin-phone-admin.png": "admin-phone-admin.png",
    "admin-schedules-error.png": "admin-schedules-error.png",
    "admin-users.png": "admin-users.png",
    "admin.png": "console-admin.png",
    "batch-page.png": "batch-page-1280.png",
    "batch-row-problem.png": "batch-row-problem-1280.png",
    "catalogue.png": "results-catalogue.png",
    "catalogue-390.png": "results-catalogue-390.png",
    "csv-review.png": "results-csv-review.png",
    "csv-review-390.png": "results-csv-review-390.png",
    "form-error.png": "results-form-error.png",
    "form-error-390.png": "results-form-error-390.png",
    "job-done.png": "results-job-done.png",
    "job-done-390.png": "results-job-done-390.png",
    "job-running.png": "results-job-running.png",
    "my-jobs-search-390.png": "results-my-jobs-search-390.png",
    "photo-batch.png": "results-photo-batch.png",
    "photo-batch-390.png": "results-photo-batch-390.png",
    "schedule-form.png": "console-schedule-form.png",
    "ui-job-done.png": "ui-job-done.png",
    "ui-my-jobs-375.png": "ui-my-jobs-375.png",
    "ui-pipeline-running.png": "ui-pipeline-running.png",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", type=Path, default=ROOT / "tests" / "artifacts")
    args = parser.parse_args()
    missing = []
    for target, source in sorted(SOURCES.items()):
        path = args.artifacts / source
        if not path.is_file():
            missing.append(source)
            continue
        with Image.open(path) as image:
            image.convert("RGB").quantize(colors=128).save(HERE / target, optimize=True)
        print(f"{target} <- {path}")
    if missing:
        print(f"not refreshed (no such artifact; run the browser tests first): {', '.join(missing)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
