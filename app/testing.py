"""Testing your own processors without a database, a worker or a web server.

:class:`ProcessorTest` runs a registered job type inline, the way a worker would — its input checked
against the type's schema, ``{"$ref": …}`` values resolved from the parents' results you give, the
result stored as JSON, files saved, next jobs checked — and lets you assert what it returned and what
it asked to enqueue::

    from app.testing import ProcessorTest

    async def test_counts_words(tmp_path):
        t = ProcessorTest(tmp_path)
        run = await t.run("example.word_count", {"text": "a rose is a rose", "ignore": []})
        assert run.data["words"] == 5
        assert run.progress[-1] == (1.0, "Counted 5 words")

Files: :meth:`ProcessorTest.add_file` stores bytes (or a copy of a file) and returns the id to put in a
``FileId`` field; the processor can read only the files added this way (``ctx.files.path`` /
``ctx.input_path``), as in production it reads only its owner's. Files it saves are in
:attr:`ProcessorRun.files` with their bytes. CPU-bound processors run in the test's own process (no
child process), with the same :class:`~app.processors.CpuContext` they get in production.

Failures surface as they would in a worker: :class:`~app.processors.PermanentError` and every other
exception propagate (``pytest.raises``); invalid input raises :class:`~app.errors.BadInput` naming the
field; next jobs of unknown types or invalid inputs raise :class:`~app.errors.BadInput` (the worker
fails the job permanently for them).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from app.jobs.graph import plan_next_jobs, resolve_refs, validate_step_input
from app.jobs.payload import json_text
from app.processors import CpuContext, JobContext, NextJob, PermanentError, Result, registry
from app.settings import Settings, load_settings


@dataclass
class SavedFile:
    """A file the processor produced: its name, type and bytes."""

    file_id: str
    name: str
    content_type: str
    data: bytes


@dataclass
class ProcessorRun:
    """What one run produced: ``data`` (the job's ``result_data``, as stored: JSON, with ``files``
    listing saved files), ``files`` (by name), ``next_jobs``, ``progress`` reports and ``logs``."""

    data: dict[str, Any]
    files: dict[str, SavedFile] = field(default_factory=dict)
    next_jobs: list[NextJob] = field(default_factory=list)
    progress: list[tuple[float | None, str | None]] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)

    def enqueued(self, type_: str | None = None) -> list[NextJob]:
        """The next jobs it asked for, all or those of ``type_``."""
        return [j for j in self.next_jobs if type_ is None or j.type == type_]

    def assert_enqueued(self, type_: str, count: int | None = None, **input_fields: Any) -> list[NextJob]:
        """Assert that it asked for next jobs of ``type_`` (exactly ``count`` of them when given) whose
        ``input_data`` has every one of ``input_fields``; returns the matching jobs."""
        of_type = self.enqueued(type_)
        matching = [
            j for j in of_type if all(j.input_data.get(k, _MISSING) == v for k, v in input_fields.items())
        ]
        asked = ", ".join(f"{j.type} {j.input_data}" for j in self.next_jobs) or "none"
        if not matching:
            raise AssertionError(f"no next job of type {type_!r} with {input_fields}; next jobs: {asked}")
        if count is not None and len(matching) != count:
            raise AssertionError(
                f"expected {count} next jobs of type {type_!r}, got {len(matching)}: {asked}"
            )
        return matching

    def assert_nothing_enqueued(self) -> None:
        if self.next_jobs:
            raise AssertionError(f"expected no next jobs, got {[j.type for j in self.next_jobs]}")


_MISSING = object()


class _Files:
    """``ctx.files`` of an inline run: reads only the files added to the test, saves into it."""

    def __init__(self, test: ProcessorTest, run: ProcessorRun) -> None:
        self._test = test
        self._run = run

    def _known(self, file_id: Any) -> tuple[Path, dict[str, Any]]:
        key = str(file_id).lower()
        if key not in self._test.stored:
            raise PermanentError(
                f"File {str(file_id)[:100]} does not exist, is no longer stored, or is not yours."
            )
        return self._test.stored[key]

    async def info(self, file_id: Any) -> dict[str, Any]:
        return self._known(file_id)[1]

    async def path(self, file_id: Any) -> Path:
        return self._known(file_id)[0]

    async def save(
        self,
        name: str,
        data: bytes | None = None,
        *,
        source: Path | None = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        body = data if data is not None else await asyncio.to_thread(Path(source or "").read_bytes)
        return self._test.keep_output(self._run, name, body, content_type or "application/octet-stream")


class ProcessorTest:
    """Runs registered job types inline for a test; ``workdir`` (e.g. pytest's ``tmp_path``) holds the
    files. ``settings`` default to :func:`app.settings.load_settings`; ``user_id`` is the owner the
    job acts for."""

    def __init__(self, workdir: Path, *, settings: Settings | None = None, user_id: int = 1) -> None:
        self.workdir = Path(workdir)
        self.settings = settings or load_settings()
        self.user_id = user_id
        self.stored: dict[str, tuple[Path, dict[str, Any]]] = {}

    def add_file(self, name: str, data: bytes | Path, content_type: str = "application/octet-stream") -> str:
        """Store an input file (bytes, or a copy of a file) and return its id for a ``FileId`` field."""
        file_id = str(uuid.uuid4())
        folder = self.workdir / "files" / file_id
        folder.mkdir(parents=True)
        path = folder / Path(name).name
        if isinstance(data, Path):
            shutil.copyfile(data, path)
        else:
            path.write_bytes(data)
        info = {"id": file_id, "name": name, "size": path.stat().st_size, "content_type": content_type}
        self.stored[file_id] = (path, info)
        return file_id

    def keep_output(self, run: ProcessorRun, name: str, data: bytes, content_type: str) -> dict[str, Any]:
        """Record a file the processor produced; returns the reference a result lists."""
        file_id = self.add_file(name, data, content_type)
        run.files[name] = SavedFile(file_id, name, content_type, data)
        return {"file_id": file_id, "name": name, "size": len(data), "content_type": content_type}

    async def run(
        self,
        type_: str,
        input_data: Mapping[str, Any],
        *,
        parents: Mapping[str, Any] | None = None,
        attempt: int = 1,
        job: Mapping[str, Any] | None = None,
    ) -> ProcessorRun:
        """Run ``type_`` once with ``input_data`` (``$ref`` values read from ``parents``: ``{step key:
        result_data}``). ``job`` adds or overrides fields of ``ctx.job``.

        Raises:
            KeyError: no such job type is registered (import its module first).
            BadInput: invalid input, or invalid next jobs.
            PermanentError, or any exception: what the processor raised.
        """
        spec = registry.get(type_)
        if spec is None:
            raise KeyError(f"no job type {type_!r} is registered; import the module that defines it")
        parents = dict(parents or {})
        # As in a pipeline: fields that take a parent's result are checked once it is filled in.
        stored = validate_step_input(type_, dict(input_data), "input_data", self.settings)
        resolved = resolve_refs(stored, parents) if parents else stored
        model = spec.input_model.model_validate(spec.validate_input(resolved, field_prefix="input_data"))
        row = {
            "id": uuid.uuid4(),
            "type": type_,
            "attempts": attempt,
            "max_attempts": spec.max_attempts or self.settings.default_max_attempts,
            "user_id": self.user_id,
            "pipeline_id": None,
            "step_key": None,
            "title": None,
            "input_data": stored,
            **(job or {}),
        }
        run = ProcessorRun(data={})
        out = self.workdir / "out" / str(row["id"])
        out.mkdir(parents=True)
        if spec.cpu_bound:
            result = spec.func(self._cpu_context(row, model, out, parents))
        else:
            result = await spec.func(self._job_context(row, model, parents, run))
        return self._finish(row, result, run)

    def run_sync(self, type_: str, input_data: Mapping[str, Any], **kw: Any) -> ProcessorRun:
        """:meth:`run` for a test that is not ``async``."""
        return asyncio.run(self.run(type_, input_data, **kw))

    def _job_context(
        self, row: dict[str, Any], model: Any, parents: dict[str, Any], run: ProcessorRun
    ) -> JobContext[Any]:
        async def progress(fraction: float | None, message: str | None) -> None:
            run.progress.append((fraction, message))

        def capture(_logger: Any, level: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
            run.logs.append({"level": level, **event})
            raise structlog.DropEvent

        log = structlog.wrap_logger(None, processors=[capture]).bind(job_id=str(row["id"]))
        return JobContext(
            job=row,
            input=model,
            log=log,
            settings=self.settings,
            db=None,
            files=_Files(self, run),
            parents=parents,
            cancel_event=asyncio.Event(),
            progress=progress,
        )

    def _cpu_context(self, row: dict[str, Any], model: Any, out: Path, parents: dict[str, Any]) -> CpuContext:
        return CpuContext(
            job_id=str(row["id"]),
            attempt=row["attempts"],
            input=model,
            output_dir=out,
            parents=parents,
            file_names={k: info["name"] for k, (_, info) in self.stored.items()},
            files={k: path for k, (path, _) in self.stored.items()},
        )

    def _finish(self, row: dict[str, Any], result: Any, run: ProcessorRun) -> ProcessorRun:
        next_jobs: list[NextJob] = []
        if isinstance(result, Result):
            data = dict(result.data or {})
            if result.files:
                refs = [
                    self.keep_output(run, f.name, Path(f.path).read_bytes(), f.content_type)
                    for f in result.files
                ]
                data.setdefault("files", refs)
            next_jobs = list(result.next_jobs)
        else:
            data = result if result is not None else {}
        if not isinstance(data, dict):
            data = {"value": data}
        run.data = json.loads(json_text(data))  # what the database would keep
        if next_jobs:
            run.next_jobs = plan_next_jobs(row, next_jobs, self.settings)
        return run
