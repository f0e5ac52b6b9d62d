"""Scratch directories: where a CPU-bound processor writes its outputs (``ctx.output_dir``), one per
claim of a job, under ``<DATA_DIR>/scratch``.

The executor makes one for a claim (:func:`make`) and removes it when the attempt ends, whatever its
outcome (:func:`remove`), once the outputs worth keeping are stored. A process that died meanwhile (killed,
out of memory, the host restarted) leaves its directories behind: :func:`leftovers` lists those older than
a bound, named ``job-<job id>-c<claim>-…``, and retention removes each whose claim is not running now
on any worker sharing the folder (the database says which is), so a long job's outputs are kept
however old their directory is.

A directory is named by the claim (``jobs.claims``), not the attempt: a retry, a rerun or a hand-back sets
the attempt back, so an earlier claim's directory and the running claim's could both say ``a1``, and the
dead claim's was kept as long as the new one ran.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"^job-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-(?:c(\d+)-|a\d+-)?")
"""A scratch directory's name. Directories made before the claim was in it name the job alone, or the job
and its attempt (``a<n>``), which does not tell one claim from another."""


@dataclass(frozen=True)
class Leftover:
    """A scratch directory old enough to be looked at: the job and claim it was made for (``None``: its
    name does not say)."""

    path: Path
    job_id: uuid.UUID
    claim: int | None


def root(data_dir: Path) -> Path:
    return data_dir / "scratch"


def make(data_dir: Path, job_id: uuid.UUID, claim: int) -> Path:
    """A new, empty scratch directory for this claim of the job (its ``claims``)."""
    folder = root(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"job-{job_id}-c{claim}-", dir=folder))


def remove(path: Path) -> None:
    """Remove a scratch directory and everything in it (blocking: call it in a thread from a loop)."""
    shutil.rmtree(path, ignore_errors=True)


def leftovers(data_dir: Path, before: float) -> list[Leftover]:
    """The scratch directories last changed before ``before`` (seconds since the epoch). A directory's
    time changes when an entry is added or removed in it, so one a running job writes in stays recent;
    one a long job wrote early may not, which is why the database decides what is removed."""
    folder = root(data_dir)
    found: list[Leftover] = []
    if not folder.is_dir():
        return found
    with os.scandir(folder) as entries:
        for entry in entries:
            named = _NAME.match(entry.name)
            if named is None:
                continue
            try:
                if (
                    not entry.is_dir(follow_symlinks=False)
                    or entry.stat(follow_symlinks=False).st_mtime >= before
                ):
                    continue
            except OSError:
                continue  # removed meanwhile
            claim = int(named.group(2)) if named.group(2) else None
            found.append(Leftover(Path(entry.path), uuid.UUID(named.group(1)), claim))
    return found
