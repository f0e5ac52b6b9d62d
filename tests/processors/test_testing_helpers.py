"""``app.testing``: built-in processors run inline as a worker would run them — files only those added,
outputs kept with their bytes, CPU-bound types in-process, next jobs checked and assertable — and the
example tests in ``examples/`` pass."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from app.errors import BadInput
from app.processors import NextJob, PermanentError, Result, processor
from app.processors.builtin import AnyInput
from app.testing import ProcessorTest

ROOT = Path(__file__).resolve().parents[2]


def _png(size: tuple[int, int] = (80, 40)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buf, "PNG")
    return buf.getvalue()


async def test_a_cpu_bound_processor_reads_added_files_and_its_outputs_are_kept(tmp_path) -> None:
    t = ProcessorTest(tmp_path)
    fid = t.add_file("red.png", _png(), "image/png")
    run = await t.run("images.thumbnail", {"image": fid, "sizes": [20], "format": "PNG", "name": "red.png"})
    assert set(run.files) == {"red-20.png"}
    assert Image.open(io.BytesIO(run.files["red-20.png"].data)).size == (20, 10)
    assert run.data["files"][0]["name"] == "red-20.png"  # the result lists them as the worker stores them
    assert run.data["source"]["name"] == "red.png"


async def test_a_file_that_was_not_added_is_not_readable(tmp_path) -> None:
    with pytest.raises(PermanentError, match="not available to this job"):
        await ProcessorTest(tmp_path).run(
            "images.thumbnail", {"image": "7d4f8e56-0000-4000-8000-000000000000", "sizes": [20]}
        )


@processor(
    "testing.fan", title="Fan", description="Asks for one noop per name.", input=AnyInput, diagnostic=True
)
async def _fan(ctx):  # type: ignore[no-untyped-def]
    names = ctx.job["input_data"].get("names", [])
    await ctx.report_progress(0.5, "half")
    ctx.log.info("fanning out", n=len(names))
    return Result(
        data={"n": len(names)}, next_jobs=[NextJob(type="noop", input_data={"name": n}) for n in names]
    )


async def test_next_jobs_can_be_asserted_and_bad_ones_are_refused(tmp_path) -> None:
    t = ProcessorTest(tmp_path)
    run = await t.run("testing.fan", {"names": ["a", "b"]})
    assert run.data == {"n": 2}
    assert [j.input_data for j in run.assert_enqueued("noop", count=2)] == [{"name": "a"}, {"name": "b"}]
    run.assert_enqueued("noop", name="b")
    with pytest.raises(AssertionError, match="no next job of type 'sleep'"):
        run.assert_enqueued("sleep")
    with pytest.raises(AssertionError, match="expected 3 next jobs"):
        run.assert_enqueued("noop", count=3)
    assert run.progress == [(0.5, "half")]
    assert run.logs[0]["event"] == "fanning out" and run.logs[0]["level"] == "info"


@processor("testing.bad_next", title="Bad next", description="Asks for an unknown type.", diagnostic=True)
async def _bad_next(ctx):  # type: ignore[no-untyped-def]
    return Result(next_jobs=[NextJob(type="no.such.type", input_data={})])


async def test_a_next_job_of_an_unknown_type_is_refused_as_the_worker_would(tmp_path) -> None:
    with pytest.raises(BadInput, match="unknown job type"):
        await ProcessorTest(tmp_path).run("testing.bad_next", {})


def test_run_sync_for_tests_that_are_not_async(tmp_path) -> None:
    assert ProcessorTest(tmp_path).run_sync("noop", {"x": 1}).data == {"x": 1}


def _pytest(cwd: Path, extra_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a process of its own, in ``cwd``, importing the project and ``extra_path``."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env={"PYTHONPATH": f"{ROOT}:{extra_path}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_example_tests_pass() -> None:
    done = _pytest(ROOT, ROOT / "examples", "examples/test_my_processor.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout


def _python_blocks(section: str) -> list[str]:
    """The ```python blocks of the README section that starts with the heading ``section``."""
    text = (ROOT / "README.md").read_text()
    body = text.split(section + "\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("\n```", 1)[0] for block in body.split("```python\n")[1:]]


def test_the_readme_snippets_work_when_copied(tmp_path: Path) -> None:
    # a reader who copied the README's processor and its test got two failures: the test passed a field
    # ("ignore") and read a result ("top") that only examples/my_processor.py has, and opened a
    # "red.png" that is nowhere
    processor_code = _python_blocks("## Your own processor")[0]
    test_code = _python_blocks("### Testing your processor")[0]
    (tmp_path / "my_processor.py").write_text(processor_code)
    (tmp_path / "test_copied.py").write_text(test_code)
    done = _pytest(tmp_path, tmp_path, "-o", "asyncio_mode=auto", "test_copied.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
