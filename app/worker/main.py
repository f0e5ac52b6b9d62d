"""The standalone worker process: ``jobdesk worker`` (and ``python worker.py``, which runs the same
command) calls :func:`run_standalone`.

It configures logging, refuses to start on an unreachable database or a schema that is not current,
serves metrics when ``WORKER_METRICS_ADDR`` is set, and runs one :class:`~app.worker.runner.Worker` until
SIGTERM or SIGINT asks it to stop gracefully (:mod:`app.worker.signals`: a signal while it starts stops
it before it runs; :mod:`app.worker.stuck`: a processor blocking its loop does not hold the stop).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog
from prometheus_client import start_http_server
from sqlalchemy.ext.asyncio import AsyncEngine

from app import logs
from app.db import DatabaseUnavailable, checked_schema
from app.embedded import resolve_database_url
from app.logs import configure_logging
from app.settings import Settings
from app.worker import stuck
from app.worker.runner import Worker
from app.worker.signals import STOP

log = structlog.get_logger("jobdesk.worker")

try:
    import uvloop

    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
except ImportError:  # pragma: no cover - uvloop comes with litestar[standard], except where it cannot build
    loop_factory = None


def run_standalone(settings: Settings) -> int:
    """Run one worker until SIGTERM/SIGINT; return the exit code: 0 after a graceful stop, 1 when the
    worker died or could not serve its metrics, :data:`~app.worker.stuck.EXIT_UNCLEAN` (3) after a stop
    that a second stop signal forced (the process also ends with 3 when the stop watch gives up on a
    blocked event loop, and with 1 when the last resort ends it: :mod:`app.worker.stuck`). An unreachable database or a schema that is not current
    raises :class:`~app.db.DatabaseUnavailable` (the command turns it into one ``Error:`` line).

    The event loop is uvloop's when it is installed: it roughly halves the worker's per-job overhead in socket I/O and task
    scheduling (measured with ``bench/throughput.py``); uvicorn uses it for the in-app worker too.
    """
    STOP.install()  # the command installed it already; run_standalone may be called without it
    configure_logging(settings)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        code = runner.run(_main(settings))
    # Past the loop's close, nothing is left that could hang: the last resort's timer (armed by a stop)
    # must not end a caller that goes on.
    stuck.LAST_RESORT.disarm()
    return code


async def _main(settings: Settings) -> int:
    if _stopped_before_start():
        return 0
    url = resolve_database_url(settings)
    worker = Worker(settings, url)
    # Checked on the worker's own engine: the check's connection stays in its pool for the registration
    # and the first claim, where a probe engine's connection, made and closed, cost each start 20-30 ms.
    ready = False
    try:
        problem = await _schema_problem(worker.engine)
        if problem is not None:
            raise DatabaseUnavailable(problem)
        ready = not _stopped_before_start() and _serve_metrics(settings)
    finally:
        if not ready:
            await asyncio.gather(worker.engine.dispose(), worker.app_engine.dispose())
    if not ready:
        return 0 if STOP.received is not None else 1
    _stop_on_signals(worker)
    # The loop's default executor (asyncio.to_thread) is one the worker can shut down without waiting
    # for its threads: see _threads_left.
    threads = ThreadPoolExecutor(thread_name_prefix="jobdesk-thread")
    asyncio.get_running_loop().set_default_executor(threads)
    code = 0
    try:
        await worker.run()
    except Exception as exc:
        log.error("worker crashed", error=repr(exc))
        code = 1
    if code == 0 and STOP.count > 1:
        # A supervisor must see that the stop did not take its course (jobs cut short, not finished).
        log.warning("the stop was forced by a second stop signal", exit_status=stuck.EXIT_UNCLEAN)
        code = stuck.EXIT_UNCLEAN
    tasks = await _tasks_left()
    left = await _threads_left(threads)
    if tasks or left:
        # Tasks that ignore cancellation (processors, or a side task the worker stopped without) would
        # hold the event loop's close for ever, and threads the interpreter's exit (it joins each); the
        # jobs' outcomes are recorded (or left to the sweep), so nothing is lost by ending here.
        log.warning("exiting with processor work that did not stop", tasks=tasks, threads=left)
        _exit_now(code)
    return code


LEFTOVERS_SECS = 1.0
"""How long the stopped worker waits for tasks left running once cancelled, and for threads still running
(a processor's ``asyncio.to_thread`` whose task was cancelled: the thread runs on), before it exits
without them."""


async def _tasks_left() -> list[str]:
    """Names of the tasks still running once the worker has stopped (each is cancelled, and given up to
    :data:`LEFTOVERS_SECS` to end): ``asyncio.Runner`` would wait for them."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=LEFTOVERS_SECS)
    return sorted(t.get_name() for t in tasks if not t.done())


async def _threads_left(threads: ThreadPoolExecutor) -> list[str]:
    """Names of the threads that would hold the process's exit (Python joins every non-daemon thread,
    the executors' among them), after up to :data:`LEFTOVERS_SECS` for them to end; idle executor
    threads end at once."""
    threads.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + LEFTOVERS_SECS
    while True:
        left = [
            t.name
            for t in threading.enumerate()
            if t is not threading.current_thread() and not t.daemon and t.is_alive()
        ]
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(0.05)


async def _schema_problem(engine: AsyncEngine) -> str | None:
    """Why the worker must not start on this database (unreachable, schema not current), else ``None``."""
    try:
        current, message = await checked_schema(engine)
    except DatabaseUnavailable as exc:
        return str(exc)
    return None if current else f"Refusing to start the worker: {message}"


def _serve_metrics(settings: Settings) -> bool:
    """Serve ``/metrics`` on ``WORKER_METRICS_ADDR`` when it is set (prometheus_client's own server, in a
    daemon thread); ``False`` when the address cannot be bound."""
    bind = settings.worker_metrics_bind
    if bind is None:
        return True
    try:
        start_http_server(bind[1], addr=bind[0])
    except OSError as exc:
        log.error(f"Cannot serve metrics on WORKER_METRICS_ADDR={settings.worker_metrics_addr}: {exc}")
        return False
    log.info("serving metrics", address=f"http://{settings.worker_metrics_addr}/metrics")
    return True


def _stopped_before_start() -> bool:
    """Whether a stop signal came while the worker was starting (then it says so, and does not start)."""
    if STOP.received is None:
        return False
    log.info("worker stopped before it started: asked to stop", signal=signal.Signals(STOP.received).name)
    return True


def _stop_on_signals(worker: Worker) -> None:
    """The first stop signal asks the worker to stop and starts the stop watch, which ends the process if
    a processor blocks the loop past the stop's budget (:mod:`app.worker.stuck`), and its last resort; a
    second one skips the rest of the grace period (the loop's :meth:`~Worker.hurry`, and the watch's
    budget ends at once). The handlers are Python's, not the loop's: these run even while a processor
    blocks the loop. They only post to the loop, set events and arm a timer: a handler interrupts the
    main thread anywhere, even inside a lock a log call or a thread's start holds."""
    loop = asyncio.get_running_loop()
    control = stuck.watch_in_thread(worker, loop, then=functools.partial(_exit_now, stuck.EXIT_UNCLEAN))
    STOP.forward(control.on_signal)


def _exit_now(code: int) -> None:
    """End the process without waiting for anything: tasks, threads, the loop's close."""
    logging.shutdown()
    logs.hold_for_exit()  # the lines the blocked loop's last turn wrote; no other thread's after them
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
