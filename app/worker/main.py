"""The standalone worker process: ``jobdesk worker`` (and ``python worker.py``, which runs the same
command) calls :func:`run_standalone`.

It configures logging, refuses to start on an unreachable database or a schema that is not current,
serves metrics when ``WORKER_METRICS_ADDR`` is set, and runs one :class:`~app.worker.runner.Worker` until
SIGTERM or SIGINT asks it to stop gracefully.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable

import structlog
from prometheus_client import start_http_server
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import DatabaseUnavailable, checked_schema
from app.embedded import resolve_database_url
from app.logs import configure_logging
from app.settings import Settings
from app.worker.runner import Worker

log = structlog.get_logger("jobdesk.worker")

try:
    import uvloop

    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
except ImportError:  # pragma: no cover - uvloop comes with litestar[standard], except where it cannot build
    loop_factory = None


def run_standalone(settings: Settings) -> int:
    """Run one worker until SIGTERM/SIGINT; return the exit code: 0 after a graceful stop, 1 when the
    worker died or could not serve its metrics. An unreachable database or a schema that is not current
    raises :class:`~app.db.DatabaseUnavailable` (the command turns it into one ``Error:`` line).

    The event loop is uvloop's when it is installed: it roughly halves the worker's per-job overhead in socket I/O and task
    scheduling (measured with ``bench/throughput.py``); uvicorn uses it for the in-app worker too.
    """
    configure_logging(settings)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_main(settings))


async def _main(settings: Settings) -> int:
    url = resolve_database_url(settings)
    worker = Worker(settings, url)
    # Checked on the worker's own engine: the check's connection stays in its pool for the registration
    # and the first claim, where a probe engine's connection, made and closed, cost each start 20-30 ms.
    ready = False
    try:
        problem = await _schema_problem(worker.engine)
        if problem is not None:
            raise DatabaseUnavailable(problem)
        ready = _serve_metrics(settings)
    finally:
        if not ready:
            await asyncio.gather(worker.engine.dispose(), worker.app_engine.dispose())
    if not ready:
        return 1
    _stop_on_signals(worker.stop)
    code = 0
    try:
        await worker.run()
    except Exception as exc:
        log.error("worker crashed", error=repr(exc))
        code = 1
    if worker.executor.lingering:
        # Processors that ignore cancellation would hold the event loop's shutdown forever; their jobs'
        # outcomes are recorded, so nothing is lost by ending the process here.
        log.warning(
            "exiting with processor tasks that ignore cancellation", count=len(worker.executor.lingering)
        )
        sys.stdout.flush()
        os._exit(code)
    return code


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


def _stop_on_signals(stop: Callable[[], object]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
