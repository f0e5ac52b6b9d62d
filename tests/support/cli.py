"""Running the ``jobdesk`` command in a subprocess, as a person would, and checking how it fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBDESK = Path(sys.executable).parent / "jobdesk"


def cmd(*args: str) -> list[str]:
    if JOBDESK.exists():
        return [str(JOBDESK), *args]
    return [sys.executable, "-m", "app.cli", *args]


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "TEST_DATABASE_URL"}}
    env.update(
        SECRET_KEY="cli-test-secret-key-0123456789abcdef",
        JOBDESK_DATA_DIR=str(tmp_path / "data"),
        LOG_LEVEL="WARNING",
        WORKER_ENABLED="false",
    )
    env.update(extra)
    return env


def run(tmp_path: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd(*args),
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(tmp_path, **env),
        cwd=tmp_path,
        timeout=120,
    )


def assert_clean_failure(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Non-zero exit, exactly one ``Error: …`` line on stderr, no traceback; returns that line."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
