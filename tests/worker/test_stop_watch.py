"""A stop that cannot take its course: a processor blocks the worker's event loop (or holds the GIL), or
a second stop signal asks to skip the rest of the grace period. What each job becomes then, the exit
status, and that the process always ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.jobs import queue
from app.jobs.queue import NewJob
from app.worker.signals import ONE_REQUEST_SECS
from app.worker.stuck import EXIT_UNCLEAN
from tests.support import processors as support_processors  # registers the test job types
from tests.support.cli import free_port
from tests.support.workers import (
    ROOT,
    MakeRunProcess,
    ServeProcess,
    WorkerProcess,
    wait_status,
    wait_until,
    worker_env,
)


async def enqueue_all(engine: Any, settings: Any, owner: Any, *jobs: tuple[str, dict[str, Any]]) -> list[Any]:
    """Enqueue ``(type, input)`` jobs in one transaction, in this order (their claim order)."""
    ids = []
    async with engine.begin() as conn:
        for job_type, data in jobs:
            new = NewJob(type=job_type, input_data=data, user_id=owner.id, max_attempts=3)
            ids.append((await queue.enqueue(conn, new, settings)).job["id"])
    return ids


async def wait_output(worker: WorkerProcess, text: str, timeout: float = 30) -> None:
    async def seen() -> bool:
        return text in worker.output()

    try:
        await wait_until(seen, timeout=timeout, interval=0.05, what=f"the line {text!r}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the output ends:\n{worker.output()[-4000:]}") from None


async def stop_and_wait(
    worker: WorkerProcess, timeout: float, sig: int = signal.SIGTERM
) -> tuple[int | None, float, str]:
    """SIGTERM (or ``sig``), then wait up to ``timeout`` s: (exit status or None, seconds taken, output)."""
    worker.signal(sig)
    began = time.monotonic()
    try:
        code: int | None = await asyncio.to_thread(worker.wait, timeout)
    except Exception:
        code = None
    return code, time.monotonic() - began, worker.output()


async def last_event(pg: Any, job: Any) -> tuple[str, str]:
    row = await pg.fetchrow(
        "SELECT kind, to_status FROM job_events WHERE job_id = $1 ORDER BY id DESC LIMIT 1", job
    )
    return row["kind"], row["to_status"]


async def test_a_finished_jobs_outcome_is_recorded_when_the_stop_gives_up_on_a_blocked_loop(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """A job finished while its outcome waits for the completer (a slow database), then a processor blocks
    the loop and the worker is stopped: past the stop's budget the stop watch settles the jobs from its
    own thread. The finished job is recorded as it ended (completed, its result kept, its effect once);
    it was released with the others, and ran again."""
    settings = make_settings(worker_shutdown_grace_secs=1, job_cancel_grace_secs=0.5, max_concurrent_jobs=2)
    done, blocker = await enqueue_all(
        engine,
        settings,
        owner,
        ("test.effect", {"seconds": 0}),
        ("test.block_after", {"seconds": 3600, "after_effects": 1}),
    )
    worker = WorkerProcess(
        settings, tmp_path / "worker.log", **{support_processors.SLOW_COMPLETER_ENV: "120"}
    )
    try:
        await wait_output(worker, "event loop blocked")
        assert (await pg.fetchrow("SELECT status FROM jobs WHERE id = $1", done))["status"] == "in_progress"
        code, took, output = await stop_and_wait(worker, 20)
    finally:
        worker.close()
    assert code == EXIT_UNCLEAN, output[-3000:]
    row = await pg.fetchrow("SELECT status, attempts, result_data FROM jobs WHERE id = $1", done)
    assert (row["status"], row["attempts"]) == ("completed", 1), (dict(row), output[-3000:])
    assert row["result_data"] == '{"ok": true}'
    assert await last_event(pg, done) == ("completed", "completed")
    assert await pg.fetchval("SELECT count(*) FROM side_effects WHERE job_id = $1", done) == 1
    assert '"recorded":1' in output, output[-3000:]


async def test_the_job_that_blocks_the_loop_fails_its_attempt_and_a_buffered_job_is_released(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """SIGTERM while a processor blocks the loop (``time.sleep(3600)`` inside ``async def``), with a
    second job claimed ahead of the free slot: past the stop's budget, the blocking job's attempt fails
    ("the worker had to stop while this job blocked its event loop for N s"; retried with backoff, and
    failed for good after its attempts) and the buffered job is released, its attempt not counted. The
    blocking job was released too, its attempt not counted: claimed again, it blocked every worker that
    took it, for ever. The process exits with status 3 (it exited 0: a supervisor saw a clean stop)."""
    grace = 1.0
    settings = make_settings(
        worker_shutdown_grace_secs=grace, job_cancel_grace_secs=0.5, max_concurrent_jobs=1
    )
    blocker, buffered = await enqueue_all(
        engine, settings, owner, ("test.block", {"seconds": 3600}), ("test.effect", {"seconds": 0})
    )
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    try:
        await wait_output(worker, "event loop blocked")
        assert (await pg.fetchrow("SELECT status FROM jobs WHERE id = $1", buffered))[
            "status"
        ] == "in_progress"
        code, took, output = await stop_and_wait(worker, 20)
    finally:
        worker.close()
    assert code == EXIT_UNCLEAN, output[-3000:]
    # the grace, the cancel grace, the watch's margin, the hand-back, and margin for a loaded machine
    assert took < grace + 0.5 + 1 + 2 + 5, took
    row = await pg.fetchrow("SELECT status, attempts, error_message FROM jobs WHERE id = $1", blocker)
    assert (row["status"], row["attempts"]) == ("queued", 1), (dict(row), output[-3000:])
    assert "the worker had to stop while this job blocked its event loop for" in row["error_message"]
    assert await last_event(pg, blocker) == ("retry_scheduled", "queued")
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", buffered)
    assert (row["status"], row["attempts"]) == ("queued", 0)
    assert await last_event(pg, buffered) == ("released", "queued")
    assert await pg.fetchval("SELECT count(*) FROM side_effects") == 0


@pytest.mark.parametrize("loop", ["answering", "blocked"])
async def test_a_second_stop_signal_skips_the_rest_of_the_grace(
    make_settings, engine, owner, pg, tmp_path, loop
) -> None:
    """A second SIGTERM during a graceful stop (a person's, not the first passed on again) skips the rest
    of the grace period: the running job is stopped and released now (or, when it blocks the loop, its
    attempt failed at once), and the process exits with status 3. The second signal changed nothing: the
    stop waited out the whole grace period (here 60 s)."""
    settings = make_settings(worker_shutdown_grace_secs=60, job_cancel_grace_secs=0.5)
    if loop == "answering":
        job_type, data = "test.effect", {"seconds": 3600, "cooperative": False}
    else:
        job_type, data = "test.block", {"seconds": 3600}
    (job,) = await enqueue_all(engine, settings, owner, (job_type, data))
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=30)
        # started, not only claimed: a job still in the buffer when the stop comes is released unstarted
        await wait_output(worker, "event loop blocked" if loop == "blocked" else "job started")
        worker.terminate()
        await wait_output(worker, "stop watch started")
        if loop == "answering":
            await wait_output(worker, "waiting for running jobs to finish")
        await asyncio.sleep(ONE_REQUEST_SECS)  # sooner, a SIGTERM is the first passed on again
        code, took, output = await stop_and_wait(worker, 20)
    finally:
        worker.close()
    assert code == EXIT_UNCLEAN, output[-3000:]
    assert took < 12, took  # the cancel grace, a stall's length, the hand-back; margin
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    if loop == "answering":
        assert "asked to stop again" in output, output[-3000:]
        assert (row["status"], row["attempts"]) == ("queued", 0), output[-3000:]
        assert await last_event(pg, job) == ("released", "queued")
    else:
        assert '"reason":"a second stop signal"' in output, output[-3000:]
        assert (row["status"], row["attempts"]) == ("queued", 1), output[-3000:]
        assert await last_event(pg, job) == ("retry_scheduled", "queued")


async def test_a_processor_holding_the_gil_does_not_keep_the_stopped_process_alive(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """SIGTERM, then a processor holds the GIL in one C call (a regular expression that backtracks for
    minutes): no thread of Python runs, the stop watch's neither. The last resort (faulthandler's timer,
    armed when the stop began, no GIL needed) ends the process with status 1 and every thread's stack;
    the job's lease runs out and the rescue sweep takes it. The process stayed alive until the match
    ended."""
    settings = make_settings(worker_shutdown_grace_secs=0, job_cancel_grace_secs=0)
    (job,) = await enqueue_all(engine, settings, owner, ("test.gil_hold", {"length": 36}))
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=30)
        await wait_output(worker, "job started")
        # the budget (1 s), a stall, the hand-back's time, the margin: 13 s; and margin for a loaded machine
        code, took, output = await stop_and_wait(worker, 25)
    finally:
        worker.close()
    assert code == 1, (code, took, output[-3000:])
    assert "Timeout (0:00:1" in output, output[-3000:]  # faulthandler's line: 12-13 s
    assert "gil_hold" in output  # the stack names the processor that held it
    await wait_until(
        lambda: pg.fetchval("SELECT lease_expires_at < now() FROM jobs WHERE id = $1", job),
        timeout=10,
        what="the lease's end",
    )
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.rescue_expired(conn)] == [job]
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"]) == ("queued", 1)


@pytest.mark.parametrize("command", ["worker", "serve"])
async def test_the_lines_the_loop_wrote_before_the_last_resort_reach_the_output(
    make_settings, engine, owner, pg, tmp_path, command
) -> None:
    """SIGTERM, then a processor logs a line in the loop's thread and holds the GIL: the last resort ends
    the process from faulthandler's thread, where no Python runs. The line is in the output, with
    standard output unbuffered as in our container image. It was lost: a turn of the loop hands its lines
    over at its end, which never came. (The last resort fires 0.6 s after the budget here.)"""
    settings = make_settings(worker_shutdown_grace_secs=0, job_cancel_grace_secs=0)
    say = "about to hold the GIL: the stop cannot go on"
    (job,) = await enqueue_all(engine, settings, owner, ("test.gil_hold", {"length": 40, "say": say}))
    env = {support_processors.QUICK_LAST_RESORT_ENV: "1", "PYTHONUNBUFFERED": "1"}
    if command == "worker":
        worker = WorkerProcess(settings, tmp_path / "worker.log", **env)
    else:
        worker = ServeProcess(settings, tmp_path / "serve.log", free_port(), **env)
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=60)
        await wait_output(worker, "job started")
        code, took, output = await stop_and_wait(worker, 15)
    finally:
        worker.close()
    assert code == 1, f"exit status {code} after {took:.1f} s (None: still running)\n{output[-3000:]}"
    assert "Timeout (0:00:0" in output, output[-3000:]
    assert say in output, output[-3000:]
    assert output.index(say) < output.index("Timeout (0:00:0"), output[-3000:]


LAUNCH = """
import os, runpy, signal, sys

class SignalAtImport:
    '''SIGTERM to this process when the first heavy module ({module}) is imported.'''
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, SignalAtImport())
if {how!r} == "script":
    sys.argv = ["worker.py"]
    runpy.run_path("worker.py", run_name="__main__")
else:  # what the `jobdesk` console script does
    sys.argv = ["jobdesk", "worker"]
    from app.cli import main
    sys.exit(main())
"""


@pytest.mark.parametrize("how", ["script", "console"])
def test_a_stop_signal_before_the_commands_imports_is_a_clean_stop(settings, tmp_path, how) -> None:
    """SIGTERM as ``python worker.py`` or ``jobdesk worker`` imports its first heavy module (click, the
    command line's): the handlers are installed before it, so the worker stops before it starts, exit 0.
    It died of the signal (exit -15): the handlers came on the command's first line, after click and the
    command line were read (about 0.1-0.2 s after the start)."""
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH.format(module="click", how=how)],
        env=worker_env(settings),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=30,
    )
    output = done.stdout.decode(errors="replace")
    assert done.returncode == 0, (done.returncode, output[-3000:])
    assert "worker stopped before it started" in output, output[-3000:]


# --- jobdesk serve: its in-app worker stops as jobdesk worker does ------------------------------------


@contextlib.contextmanager
def request_in_flight(port: int) -> Iterator[socket.socket]:
    """A form post whose body has not all arrived (a slow upload): uvicorn's shutdown waits for it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nemail="
        )
        yield sock


@pytest.mark.parametrize(
    ("sig", "loop"),
    [(signal.SIGTERM, "answering"), (signal.SIGINT, "answering"), (signal.SIGTERM, "blocked")],
    ids=["SIGTERM-answering", "SIGINT-answering", "SIGTERM-blocked"],
)
async def test_serve_a_second_stop_signal_skips_the_rest_of_the_in_app_workers_grace(
    make_settings, engine, owner, pg, tmp_path, sig, loop
) -> None:
    """``jobdesk serve`` as ``jobdesk worker``: a second SIGTERM or SIGINT (Ctrl+C twice, here while a
    request is still uploading, so uvicorn is still waiting for its connections) skips the rest of the
    in-app worker's grace period: the running job is released now (or, when it blocks the loop, its
    attempt failed at once), and the process exits with status 3. A second SIGTERM changed nothing (the
    stop waited out the whole 60 s grace). With SIGINT, the worker's stop began only once uvicorn's
    forced quit (the second Ctrl+C) cancelled the app's shutdown, and then took its whole grace period."""
    settings = make_settings(worker_shutdown_grace_secs=60, job_cancel_grace_secs=0.5)
    if loop == "answering":
        job_type, data = "test.effect", {"seconds": 3600, "cooperative": False}
    else:
        job_type, data = "test.block", {"seconds": 3600}
    (job,) = await enqueue_all(engine, settings, owner, (job_type, data))
    port = free_port()
    serve = ServeProcess(settings, tmp_path / "serve.log", port)
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=60)
        # uvicorn logs this once its socket listens; "Application startup complete" comes before the
        # bind, and a connection right after it was refused on a loaded machine
        await wait_output(serve, "Uvicorn running on")
        await wait_output(serve, "event loop blocked" if loop == "blocked" else "job started")
        with request_in_flight(port) if sig == signal.SIGINT else contextlib.nullcontext():
            serve.signal(sig)
            await wait_output(serve, "Shutting down")
            if loop == "answering":
                await wait_output(serve, "waiting for running jobs to finish")
            if sig == signal.SIGTERM:  # sooner, it is the first passed on again; every Ctrl+C counts
                await asyncio.sleep(ONE_REQUEST_SECS)
            code, took, output = await stop_and_wait(serve, 20, sig)
    finally:
        serve.close()
    assert code == EXIT_UNCLEAN, (
        f"exit status {code} after {took:.1f} s (None: still running)\n{output[-3000:]}"
    )
    assert took < 12, took  # the cancel grace, a stall's length, the hand-back; margin
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    if loop == "answering":
        assert "asked to stop again" in output, output[-3000:]
        assert (row["status"], row["attempts"]) == ("queued", 0), output[-3000:]
        assert await last_event(pg, job) == ("released", "queued")
    else:
        assert '"reason":"a second stop signal"' in output, output[-3000:]
        assert (row["status"], row["attempts"]) == ("queued", 1), output[-3000:]
        assert await last_event(pg, job) == ("retry_scheduled", "queued")


async def test_serve_exits_3_after_giving_up_on_the_in_app_workers_blocked_loop(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """SIGTERM to ``jobdesk serve`` while a processor blocks the in-app worker's loop: past the stop's
    budget the stop watch hands the jobs back (the blocking job's attempt failed), and the process exits
    with status 3, as ``jobdesk worker`` does. It exited 143, as after a graceful stop: a supervisor saw
    nothing wrong."""
    grace = 1.0
    settings = make_settings(worker_shutdown_grace_secs=grace, job_cancel_grace_secs=0.5)
    (job,) = await enqueue_all(engine, settings, owner, ("test.block", {"seconds": 3600}))
    serve = ServeProcess(settings, tmp_path / "serve.log", free_port())
    try:
        await wait_output(serve, "event loop blocked", timeout=60)
        code, took, output = await stop_and_wait(serve, 20)
    finally:
        serve.close()
    assert code == EXIT_UNCLEAN, (
        f"exit status {code} after {took:.1f} s (None: still running)\n{output[-3000:]}"
    )
    # the grace, the cancel grace, the watch's margin, the hand-back, and margin for a loaded machine
    assert took < grace + 0.5 + 1 + 2 + 5, took
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"]) == ("queued", 1), (dict(row), output[-3000:])
    assert await last_event(pg, job) == ("retry_scheduled", "queued")


async def test_serve_a_processor_holding_the_gil_does_not_keep_the_stopped_process_alive(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """SIGTERM to ``jobdesk serve``, then an in-app processor holds the GIL in one C call: no thread of
    Python runs, neither the web's loop nor the stop watch. The last resort ends the process with status
    1 and every thread's stack, as in ``jobdesk worker``. Without it the process stayed alive until the
    match ended."""
    settings = make_settings(worker_shutdown_grace_secs=0, job_cancel_grace_secs=0)
    (job,) = await enqueue_all(engine, settings, owner, ("test.gil_hold", {"length": 36}))
    serve = ServeProcess(settings, tmp_path / "serve.log", free_port())
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=60)
        await wait_output(serve, "job started")
        # the budget (1 s), a stall, the hand-back's time, the margin: 13 s; and margin for a loaded machine
        code, took, output = await stop_and_wait(serve, 25)
    finally:
        serve.close()
    assert code == 1, f"exit status {code} after {took:.1f} s (None: still running)\n{output[-3000:]}"
    assert "Timeout (0:00:1" in output, output[-3000:]
    assert "gil_hold" in output


async def test_serve_with_web_processes_a_ctrl_c_lets_the_in_app_job_finish(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """``jobdesk serve --workers 2`` stopped as a terminal's Ctrl+C or a service manager stops it: every
    process of the group gets the signal, and each web process gets a SIGTERM from uvicorn's supervisor
    on top. That second signal is not a second request to stop: the in-app worker's running job
    finishes within the grace period, and the process exits cleanly. Counted as a second request, it
    released the job at once."""
    settings = make_settings(worker_shutdown_grace_secs=20)
    (job,) = await enqueue_all(engine, settings, owner, ("test.effect", {"seconds": 4}))
    serve = ServeProcess(settings, tmp_path / "serve.log", free_port(), web_processes=2, own_group=True)
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=90)
        await wait_output(serve, "job started")
        os.killpg(serve.pid, signal.SIGINT)
        code = await asyncio.to_thread(serve.wait, 30)
    finally:
        output = serve.output()
        serve.close()
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"]) == ("completed", 1), (dict(row), output[-3000:])
    assert "asked to stop again" not in output, output[-3000:]
    assert code == 0, f"exit status {code}\n{output[-3000:]}"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
async def test_make_run_stopped_by_a_sigterm_to_its_group_lets_the_in_app_job_finish(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """``make run`` stopped as a service manager (or a ``kill -TERM -- -<pgid>``) stops a process group:
    ``jobdesk serve`` gets the SIGTERM directly, and again, a moment later, from the recipe's shell,
    which passes a SIGTERM on to it (one sent to make alone would not reach it otherwise). That is one
    request to stop: the in-app worker's running job finishes within the grace period and make prints
    "Jobdesk stopped.". Counted as a second request, it released the job at once and the server exited
    with 3 ("make: *** [Makefile: run] Error 3") — in most runs: the two copies that both came before the
    server's main thread ran its handler were one call of it (the test below spaces them itself)."""
    settings = make_settings(worker_shutdown_grace_secs=20)
    (job,) = await enqueue_all(engine, settings, owner, ("test.effect", {"seconds": 3}))
    make = MakeRunProcess(settings, tmp_path / "make.log", free_port(), tmp_path / "venv")
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=60)
        # serving, and settled: its main thread takes in each of the two signals as it comes (two that
        # both came while it waited for the interpreter's lock were one call of its handler)
        await wait_output(make, "Uvicorn running on")
        await wait_output(make, "job started")
        await asyncio.sleep(0.5)
        os.killpg(make.pid, signal.SIGTERM)
        await asyncio.to_thread(make.wait, 30)
    finally:
        output = make.output()
        make.close()
    assert "asked to stop again" not in output, output[-3000:]
    assert "Jobdesk stopped." in output and "make: ***" not in output, output[-3000:]
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"]) == ("completed", 1), (dict(row), output[-3000:])


async def test_serve_takes_a_sigterm_passed_on_again_moments_later_as_one_request(
    make_settings, engine, owner, pg, tmp_path
) -> None:
    """The two copies of a group's SIGTERM as ``make run``'s shell spaces them on a loaded machine (here
    0.1 s apart, every time; the test above leaves the spacing to the shell): the in-app job finishes
    and ``serve`` exits 143, a graceful stop. The second copy hurried the stop: the job was released
    and the exit status was 3."""
    settings = make_settings(worker_shutdown_grace_secs=20)
    (job,) = await enqueue_all(engine, settings, owner, ("test.effect", {"seconds": 3}))
    serve = ServeProcess(settings, tmp_path / "serve.log", free_port())
    try:
        await wait_status(pg, job, {"in_progress"}, timeout=60)
        await wait_output(serve, "Uvicorn running on")
        await wait_output(serve, "job started")
        serve.terminate()
        await asyncio.sleep(0.1)
        code, _, output = await stop_and_wait(serve, 30)
    finally:
        serve.close()
    assert "asked to stop again" not in output, output[-3000:]
    assert code == 128 + signal.SIGTERM, f"exit status {code}\n{output[-3000:]}"
    row = await pg.fetchrow("SELECT status, attempts FROM jobs WHERE id = $1", job)
    assert (row["status"], row["attempts"]) == ("completed", 1), (dict(row), output[-3000:])
