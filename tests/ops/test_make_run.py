"""``make run`` ends with 0 after a graceful stop by a signal: ``jobdesk serve`` then exits 128 + the
signal's number (143 after SIGTERM, 130 after SIGINT), which make printed as a failure
("make: *** [Makefile: run] Error 143"). Any other status stays make's error. The Makefile's recipe is
run as it is, with a stand-in ``jobdesk`` (in a virtualenv folder of its own) that stops as serve does.

Whoever gets the signal, the server stops, once: SIGTERM to make itself reached only the recipe's shell,
which died and left the server running without a parent (its page still answered); Ctrl+C signals the
whole group, and the shell must not pass a second signal on (a second one hurries the stop)."""

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
got = []
def stop(signum, frame):
    got.append(signum)
    with open(os.environ["STAND_IN_PID"] + ".signals", "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
with open(os.environ["STAND_IN_PID"], "w") as f:
    f.write(str(os.getpid()))
if os.environ.get("STAND_IN_STATUS"):
    sys.exit(int(os.environ["STAND_IN_STATUS"]))
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.5)  # a graceful stop takes a moment: a second signal meanwhile would show in the file
sys.exit(128 + got[0] if got else 1)
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_run(
    tmp_path: Path, stop: signal.Signals | None, status: int | None = None, to: str = "server"
) -> tuple[int, str]:
    """``make run`` with the stand-in; ``stop`` is sent to the server (``to``), to make, or to the group."""
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
            if to == "server":
                os.kill(int(pid_file.read_text()), stop)
            elif to == "make":
                os.kill(proc.pid, stop)
            else:
                os.killpg(proc.pid, stop)
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


def signals_received(tmp_path: Path) -> list[str]:
    path = tmp_path / "pid.signals"
    return path.read_text().split() if path.exists() else []


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited: only its parent (gone with make) had not collected it.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_to_make_stops_the_server_too(tmp_path: Path) -> None:
    _, out = make_run(tmp_path, signal.SIGTERM, to="make")
    server = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while running(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(server), f"the server outlived make: {out}"
    assert signals_received(tmp_path) == ["SIGTERM"], out
    assert "Jobdesk stopped." in out


def test_ctrl_c_reaches_the_server_once(tmp_path: Path) -> None:
    make_run(tmp_path, signal.SIGINT, to="group")
    assert signals_received(tmp_path) == ["SIGINT"]
