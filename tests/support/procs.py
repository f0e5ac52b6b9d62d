"""Helpers for the built-in processor tests: upload files, run one job through a real worker,
call an async processor with a real :class:`JobContext`, build a :class:`CpuContext`."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from app.files import FileStore
from app.job_files import JobFiles
from app.processors import CpuContext, JobContext, registry
from app.settings import Settings
from tests.support.factories import make_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


async def upload(
    engine: Any,
    settings: Settings,
    user_id: int,
    *,
    path: Path | None = None,
    data: bytes | None = None,
    name: str | None = None,
) -> str:
    """Store a file for ``user_id`` as an upload would; returns its id."""
    async with engine.begin() as conn:
        row = await FileStore(settings.files_dir).save(
            conn, user_id=user_id, name=name or (path.name if path else "upload.bin"), data=data, source=path
        )
    return str(row["id"])


async def enqueue(
    engine: Any, settings: Settings, user_id: int, type_: str, input_data: dict[str, Any]
) -> uuid.UUID:
    return (await make_job(engine, settings, user_id, type_, input_data))["id"]


def as_dict(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class Progress:
    """Records progress reports of a directly called processor."""

    def __init__(self) -> None:
        self.reports: list[tuple[float | None, str | None]] = []

    async def __call__(self, fraction: float | None, message: str | None) -> None:
        self.reports.append((fraction, message))


def job_context(
    type_: str,
    input_data: dict[str, Any],
    settings: Settings,
    *,
    engine: Any = None,
    user_id: int = 1,
    job_id: uuid.UUID | None = None,
    attempt: int = 1,
    parents: dict[str, Any] | None = None,
) -> tuple[JobContext[Any], Progress]:
    """A real JobContext for calling an async processor directly (input validated by its schema)."""
    spec = registry.get(type_)
    assert spec is not None
    job = {
        "id": job_id or uuid.uuid4(),
        "type": type_,
        "attempts": attempt,
        "max_attempts": 3,
        "user_id": user_id,
        "pipeline_id": None,
        "step_key": None,
        "input_data": input_data,
        "title": None,
    }
    progress = Progress()
    ctx = JobContext(
        job=job,
        input=spec.parse_input(input_data),
        log=structlog.get_logger("test"),
        settings=settings,
        db=engine,
        files=JobFiles(FileStore(settings.files_dir), engine, job),
        parents=parents or {},
        cancel_event=asyncio.Event(),
        progress=progress,
    )
    return ctx, progress


@contextmanager
def cpu_context(
    type_: str,
    input_data: dict[str, Any],
    files_dir: Path,
    parents: dict[str, Any] | None = None,
    file_names: dict[str, str] | None = None,
) -> Iterator[CpuContext]:
    """A CpuContext with a fresh output folder (removed afterwards); every file in ``files_dir`` (see
    :func:`put_file`) is one the job may read, as if the worker had resolved it for the job's owner."""
    spec = registry.get(type_)
    assert spec is not None
    out = Path(tempfile.mkdtemp(prefix="cpu-out-"))
    try:
        yield CpuContext(
            job_id=str(uuid.uuid4()),
            attempt=1,
            input=spec.parse_input(input_data),
            output_dir=out,
            parents=parents or {},
            file_names=file_names or {},
            files={p.name: p for p in files_dir.iterdir() if p.is_file()} if files_dir.is_dir() else {},
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)


def put_file(files_dir: Path, source: Path | None = None, data: bytes | None = None) -> str:
    """Place bytes in a files folder under a new id (for CPU processors called directly)."""
    files_dir.mkdir(parents=True, exist_ok=True)
    fid = str(uuid.uuid4())
    if source is not None:
        shutil.copyfile(source, files_dir / fid)
    else:
        (files_dir / fid).write_bytes(data or b"")
    return fid
