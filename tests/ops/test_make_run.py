"""``make run`` ends with 0 after a graceful stop by a signal: ``jobdesk serve`` then exits 128 + the
signal's number (143 after SIGTERM, 130 after SIGINT), which make printed as a failure
("make: *** [Makefile: run] Error 143"). Any other status stays make's error. The Makefile's recipe is
run as it is, with a stand-in ``jobdesk`` (in a virtualenv folder of its own) that stops as serve does."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STAND_IN = """#!{python}
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
signal.signal(signal.SIGINT, lambda *a: sys.exit(130))
with open(os.environ["STAND_IN_PID"], "w") as f:
    f.write(str(os.getpid()))
if os.environ.get("STAND_IN_STATUS"):
    sys.exit(int(os.environ["STAND_IN_STATUS"]))
time.sleep(60)
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_run(tmp_path: Path, stop: signal.Signals | None, status: int | None = None) -> tuple[int, str]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    jobdesk = venv / "bin" / "jobdesk"
    jobdesk.write_text(STAND_IN.format(python=sys.executable))
    jobdesk.chmod(0o755)
    (venv / ".installed-stamp").touch()  # newer than pyproject.toml: make installs nothing
    pid_file = tmp_path / "pid"
    env = {**os.environ, "STAND_IN_PID": str(pid_file)}
    if status is not None:
        env["STAND_IN_STATUS"] = str(status)
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(ROOT), "run", f"VENV={venv}", "PORT=1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        if stop is not None:
            deadline = time.monotonic() + 20
            while not (pid_file.exists() and pid_file.read_text()):
                assert time.monotonic() < deadline, "the stand-in did not start"
                time.sleep(0.05)
            os.kill(int(pid_file.read_text()), stop)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_graceful_stop_by_a_signal_ends_make_run_with_0(tmp_path: Path, stop: signal.Signals) -> None:
    code, out = make_run(tmp_path, stop)
    assert code == 0, out
    assert "Error" not in out and "Jobdesk stopped." in out


def test_a_stop_that_did_not_take_its_course_stays_a_failure(tmp_path: Path) -> None:
    code, out = make_run(tmp_path, None, status=3)
    assert code == 2 and "Error 3" in out, out
