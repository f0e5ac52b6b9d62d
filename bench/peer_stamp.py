"""The no-op job body shared by every library in ``bench/peers.py``: append the job's tag and the wall
clock at its start to the file named by ``BENCH_STAMP_FILE`` (one line per job, line-buffered so that
the harness sees it at once). Every library's job does exactly this, so the job itself costs the same
everywhere; nothing else of Jobdesk or the peers is imported here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_path = os.environ.get("BENCH_STAMP_FILE", "")
_out = open(_path, "a", buffering=1) if _path else None


def stamp(tag: object) -> None:
    """Record that the job tagged ``tag`` started now."""
    if _out is not None:
        _out.write(f"{tag} {time.time():.6f}\n")


def read(path: Path) -> dict[str, float]:
    """Tag → start time of every job recorded in ``path`` so far (a partial last line is skipped)."""
    starts: dict[str, float] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return starts
    for line in text.splitlines():
        tag, _, at = line.partition(" ")
        if at:
            try:
                starts[tag] = float(at)
            except ValueError:  # a line still being written
                continue
    return starts
